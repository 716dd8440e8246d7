//! A template's steps as `task status` shows them: 003's dashboard marks
//! (✓ completed, ◐ in progress, ○ pending) with each step's evidence, and
//! the `--json` shape.

use serde::Serialize;

use crate::store::StepStatus;

use super::*;

/// Longest evidence the text view shows of a step (`--json` has it all).
const SHOWN_EVIDENCE: usize = 200;

/// One step as `task status ID --json` prints it (in `template_steps`).
#[derive(Debug, Serialize)]
pub(crate) struct StepView {
    pub name: String,
    pub description: String,
    pub done_when: Option<String>,
    /// `completed`, `in_progress` (the first step not done) or `pending`.
    pub state: &'static str,
    /// What the model gave as evidence when it marked the step done.
    pub evidence: Option<String>,
    /// When it was (last) marked done.
    pub at: Option<String>,
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
        }
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
        let what = match &s.done {
            Some(d) => format!("evidence: {}", one_line(&d.evidence)),
            None => match &s.step.done_when {
                Some(w) => format!("done when: {}", one_line(w)),
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
                done_when: (*n != "confirm").then(|| format!("{n} holds")),
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
