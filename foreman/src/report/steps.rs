//! The report's section on a template's steps: each with its mark (✓
//! completed, ◐ in progress, ○ pending), its evidence and when it was
//! marked done, as `task status` shows them.

use std::fmt::Write;

use super::markdown::cell;
use crate::store::StepStatus;

/// Longest evidence the report quotes of a step.
const MAX_EVIDENCE: usize = 500;

/// The section's Markdown.
pub(super) fn steps_section(steps: &[StepStatus]) -> String {
    let done = steps.iter().filter(|s| s.done.is_some()).count();
    let mut s = format!("{done} of {} steps done.\n\n", steps.len());
    s.push_str("| | step | evidence | done at |\n|---|---|---|---|\n");
    for st in steps {
        let (evidence, at) = match (&st.overridden, &st.done) {
            (Some(o), _) if o.state == "skipped" => (
                format!("skipped by {}: {}", cell(&o.by), cell(&cut(&o.reason))),
                super::markdown::when(Some(o.at)),
            ),
            (_, Some(d)) => (cell(&cut(&d.evidence)), super::markdown::when(Some(d.at))),
            (_, None) => {
                let until = st
                    .step
                    .done_when
                    .as_ref()
                    .map(|w| w.to_string())
                    .unwrap_or_default();
                let shown = if until.is_empty() {
                    String::new()
                } else {
                    format!("(done when: {})", cell(&cut(&until)))
                };
                (shown, "-".to_string())
            }
        };
        let _ = writeln!(
            s,
            "| {} {} | {} | {evidence} | {at} |",
            st.state.mark(),
            st.state.as_str().replace('_', " "),
            cell(&st.step.name)
        );
    }
    s
}

fn cut(text: &str) -> String {
    let mut s: String = text.trim().chars().take(MAX_EVIDENCE).collect();
    if s.len() < text.trim().len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StepRow, step_status};
    use saheeli_protocol::template::Step;

    #[test]
    fn steps_show_their_mark_evidence_and_condition() {
        let declared: Vec<Step> = ["reproduce", "fix|it", "confirm"]
            .iter()
            .map(|n| Step {
                name: n.to_string(),
                description: String::new(),
                done_when: Some(saheeli_protocol::template::DoneWhen::Text(format!(
                    "{n} holds"
                ))),
                ..Step::default()
            })
            .collect();
        let rows = [StepRow {
            name: "reproduce".into(),
            evidence: "1 test failed".into(),
            at: 0,
        }];
        let md = steps_section(&step_status(&declared, &rows));
        for part in [
            "1 of 3 steps done.",
            "| ✓ completed | `reproduce` | `1 test failed` | 1970-01-01T00:00:00Z |",
            "| ◐ in progress | `fix\\|it` | (done when: `fix\\|it holds`) | - |",
            "| ○ pending | `confirm` |",
        ] {
            assert!(md.contains(part), "missing {part:?} in\n{md}");
        }
    }
}
