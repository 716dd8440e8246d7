//! A template's steps as `task status` shows them: 003's dashboard marks
//! (✓ completed, ◐ in progress, ○ pending) with each step's evidence, and
//! the `--json` shape.

use serde::Serialize;

use crate::store::StepStatus;

use super::{clean, time};

/// Longest evidence the text view shows of a step (`--json` has it all).
const SHOWN_EVIDENCE: usize = 200;

/// One step as `task status ID --json` prints it (in `template_steps`).
#[derive(Debug, Serialize)]
pub(crate) struct StepView {
    pub name: String,
    pub description: String,
    pub done_when: Option<saheeli_protocol::template::DoneWhen>,
    /// `completed`, `in_progress` (the first step not done) or `pending`.
    pub state: &'static str,
    /// What the model gave as evidence when it marked the step done.
    pub evidence: Option<String>,
    /// When it was (last) marked done.
    pub at: Option<String>,
    /// When the model (first) began it (`step_start`).
    pub started_at: Option<String>,
    /// It starts only on a person's approval (`approve: true`).
    pub approve: bool,
    /// The breakpoints that hold on it: `before`, `after`.
    pub breakpoints: Vec<&'static str>,
    /// A person marked it done or skipped (`task step-override`).
    #[serde(rename = "override", skip_serializing_if = "Option::is_none")]
    pub overridden: Option<StepOverrideView>,
}

/// `task step-override`, as `--json` shows it on the step.
#[derive(Debug, Serialize)]
pub(crate) struct StepOverrideView {
    /// `done` or `skipped`.
    pub state: String,
    pub reason: String,
    pub by: String,
    pub at: String,
}

impl StepView {
    pub fn new(s: &StepStatus) -> StepView {
        StepView {
            name: s.step.name.clone(),
            description: s.step.description.clone(),
            done_when: s.step.done_when.clone(),
            state: s.state.as_str(),
            evidence: s.done.as_ref().map(|d| d.evidence.clone()),
            at: s.done.as_ref().map(|d| time(d.at)),
            started_at: None,
            approve: s.step.approve.required,
            breakpoints: Vec::new(),
            overridden: s.overridden.as_ref().map(|o| StepOverrideView {
                state: o.state.clone(),
                reason: o.reason.clone(),
                by: o.by.clone(),
                at: time(o.at),
            }),
        }
    }

    /// Adds when it started and its breakpoints.
    pub fn with_controls(
        mut self,
        starts: &[(String, i64)],
        breakpoints: &[(String, saheeli_protocol::template::Position)],
    ) -> StepView {
        self.started_at = starts
            .iter()
            .find(|(n, _)| *n == self.name)
            .map(|(_, at)| time(*at));
        self.breakpoints = breakpoints
            .iter()
            .filter(|(n, _)| *n == self.name)
            .map(|(_, p)| p.as_str())
            .collect();
        self
    }
}

/// The steps as lines for people: a count, then one line per step with
/// its mark and its evidence (or, until done, what makes it done).
pub(crate) fn steps_text(steps: &[StepStatus]) -> String {
    use std::fmt::Write;
    let done = steps.iter().filter(|s| s.done.is_some()).count();
    let mut out = format!("{done} of {} template steps done\n", steps.len());
    let width = steps
        .iter()
        .map(|s| clean(&s.step.name).chars().count())
        .max()
        .unwrap_or(0);
    for s in steps {
        let what = match (&s.overridden, &s.done) {
            (Some(o), _) if o.state == "skipped" => {
                format!("skipped by {}: {}", clean(&o.by), one_line(&o.reason))
            }
            (_, Some(d)) => format!("evidence: {}", one_line(&d.evidence)),
            (_, None) => match &s.step.done_when {
                Some(w) => format!("done when: {}", one_line(&w.to_string())),
                None => one_line(&s.step.description),
            },
        };
        let _ = writeln!(
            out,
            "  {} {:<width$}  {what}",
            s.state.mark(),
            clean(&s.step.name)
        );
    }
    out
}

/// `text` on one line, safe for a terminal and cut to [`SHOWN_EVIDENCE`].
fn one_line(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut shown: String = clean(&flat).chars().take(SHOWN_EVIDENCE).collect();
    if shown.chars().count() < clean(&flat).chars().count() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StepRow, step_status};
    use saheeli_protocol::template::Step;

    #[test]
    fn each_step_has_its_mark_and_evidence_or_condition() {
        let declared: Vec<Step> = ["reproduce", "fix", "confirm"]
            .iter()
            .map(|n| Step {
                name: n.to_string(),
                description: format!("{n} it"),
                done_when: (*n != "confirm")
                    .then(|| saheeli_protocol::template::DoneWhen::Text(format!("{n} holds"))),
                ..Step::default()
            })
            .collect();
        let rows = [StepRow {
            name: "reproduce".into(),
            evidence: "ran it:\n1 failed\x1b[2J".into(),
            at: 0,
        }];
        let text = steps_text(&step_status(&declared, &rows));
        assert_eq!(
            text,
            "1 of 3 template steps done\n\
             \x20 ✓ reproduce  evidence: ran it: 1 failed\\u{1b}[2J\n\
             \x20 ◐ fix        done when: fix holds\n\
             \x20 ○ confirm    confirm it\n"
        );
    }
}
