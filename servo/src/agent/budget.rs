//! The task's budgets as the loop sees them: working time (waits for
//! humans excluded), the servo's own deadline and the task's `deadline:`,
//! and the note telling the model what remains.

use std::time::Duration;

use super::Agent;

impl Agent {
    /// The servo's own deadline: a little before the foreman's hard one, so
    /// it can still flush its files.
    pub(super) fn budget(&self) -> Duration {
        let total = Duration::from_secs(self.task.timeout_s.max(1));
        let margin = (total / 20).min(Duration::from_secs(10));
        total - margin
    }

    /// How long until the task's `deadline:`, less a margin to flush its
    /// files (None: it has none). A time of day: waits do not move it.
    pub(super) fn until_deadline(&self) -> Option<Duration> {
        let at = self.task.deadline_ms?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let left = Duration::from_millis((at - now).max(0) as u64);
        let margin = (left / 20).min(Duration::from_secs(10));
        Some(left - margin)
    }

    /// Tells the model, on the last message it will read, how much of its
    /// budget remains, and asks it to wrap up when little does.
    pub(super) fn note_budget(&mut self) {
        let steps_left = self.task.max_steps.saturating_sub(self.steps);
        let budget = self.budget();
        let time_left = budget.saturating_sub(self.active());
        let mut note = format!(
            "[saheeli] Remaining: {steps_left} of {} steps, {}s of {}s",
            self.task.max_steps,
            time_left.as_secs(),
            budget.as_secs()
        );
        let mut low = steps_left <= 2 || time_left < budget / 5;
        if let Some(max) = self.task.max_tokens {
            let left = max.saturating_sub(self.usage.total());
            note.push_str(&format!(", {left} of {max} tokens"));
            low |= left < max / 5;
        }
        note.push('.');
        if low {
            note.push_str(" Little remains: finish now, check your work and call task_complete.");
        }
        if let Some(last) = self.messages.last_mut() {
            let text = last.content.get_or_insert_with(String::new);
            text.push_str("\n\n");
            text.push_str(&note);
        }
    }

    /// Time spent working, over every start: waits for humans excluded.
    pub(super) fn active(&self) -> Duration {
        self.active_before + self.started.elapsed().saturating_sub(self.human.waited)
    }
}
