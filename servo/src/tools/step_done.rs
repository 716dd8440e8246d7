//! `step_done`: the model marks one of the template's steps done, with its
//! evidence. A checked step (`done_when: { verify: COMMAND }`) is recorded
//! only once the foreman ran its command and it passed; a failure's output
//! is the tool's result, and the step stays open. The foreman records it (the gateway's step route, a row in its
//! database), so `saheeli task status` shows it while the task runs. Only
//! a task with `steps:` offers the tool. Marking a step again replaces its
//! evidence.

use saheeli_protocol::chat::ToolSpec;
use saheeli_protocol::template::{Step, StepDone, StepHeld};
use serde::Deserialize;
use serde_json::json;

use super::{ToolOutput, Toolbox, spec};

/// Longest evidence sent; the rest is cut (the foreman caps it too).
const MAX_EVIDENCE: usize = 8 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StepDoneArgs {
    name: String,
    evidence: String,
}

/// The tool's schema, naming the steps; None when the task has none.
pub(crate) fn spec_for(steps: &[Step]) -> Option<ToolSpec> {
    if steps.is_empty() {
        return None;
    }
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    let row = saheeli_protocol::tools::built_in("step_done").expect("step_done is built in");
    Some(spec(
        row.name,
        row.description,
        json!({"type": "object", "properties": {
            "name": {"type": "string", "enum": names, "description": "The step's name, exactly."},
            "evidence": {"type": "string", "description": "What shows the step is done: a command and its result, a file, a test run."}
        }, "required": ["name", "evidence"], "additionalProperties": false}),
    ))
}

/// The steps as the system prompt lists them.
pub(crate) fn instructions(steps: &[Step]) -> Option<String> {
    if steps.is_empty() {
        return None;
    }
    let mut s = String::from(
        "This task has steps. Work through them in order. Before you begin a step, call \
         step_start with its name (a step marked `approval needed` waits there for a person); \
         when it is done (its done-when condition holds), call step_done with its name and your \
         evidence before you go on. The steps:\n",
    );
    for (i, step) in steps.iter().enumerate() {
        s.push_str(&format!("{}. `{}`", i + 1, step.name));
        if !step.description.trim().is_empty() {
            s.push_str(&format!(": {}", step.description.trim()));
        }
        if let Some(w) = &step.done_when {
            s.push_str(&format!(" (done when: {w})"));
        }
        if step.approve.required {
            s.push_str(" (approval needed)");
        }
        s.push('\n');
    }
    Some(s)
}

/// Whether a `step_done` call with `arguments` waits for a person's
/// approval first: it names a step with `approve: true` that this servo
/// has not heard start (the call that reaches a step first is its start;
/// the foreman refuses it without the approval whatever this says).
pub(crate) fn needs_approval(tb: &Toolbox, arguments: &str) -> bool {
    let Ok(a) = serde_json::from_str::<StepDoneArgs>(arguments) else {
        return false;
    };
    let name = a.name.trim();
    tb.steps
        .iter()
        .any(|s| s.name == name && s.approve.required)
        && !tb.started(name)
}

pub(crate) async fn run(tb: &Toolbox, a: StepDoneArgs) -> ToolOutput {
    let names: Vec<&str> = tb.steps.iter().map(|s| s.name.as_str()).collect();
    let Some(step) = tb.steps.iter().find(|s| s.name == a.name.trim()) else {
        return ToolOutput::error(format!(
            "unknown step `{}`; the steps are: {}",
            a.name,
            names.join(", ")
        ));
    };
    if a.evidence.trim().is_empty() {
        return ToolOutput::error("`evidence` is empty; say what shows the step is done");
    }
    let Some(desk) = &tb.desk else {
        return ToolOutput::error("steps cannot be recorded: this servo has no foreman");
    };
    let evidence = cut(a.evidence.trim(), MAX_EVIDENCE);
    let done = match desk
        .step_done(&StepDone {
            name: step.name.clone(),
            evidence,
        })
        .await
    {
        Ok(d) => {
            // Reached: the foreman started the step, unless it waits for
            // an approval.
            if d.held != Some(StepHeld::NeedsApproval) {
                tb.mark_started(&step.name);
            }
            match (d.held, d.check_failed) {
                (Some(held), _) => return ToolOutput::error(held.told(&step.name)),
                (None, Some(why)) => return ToolOutput::error(why),
                (None, None) => d.done,
            }
        }
        Err(e) => return ToolOutput::error(format!("the step was not recorded: {}", e.0)),
    };
    ToolOutput::ok(progress(&tb.steps, &step.name, &done))
}

/// What the model is told after a step is recorded: how far it is, and
/// the next step not done.
fn progress(steps: &[Step], name: &str, done: &[String]) -> String {
    let count = steps.iter().filter(|s| done.contains(&s.name)).count();
    let mut s = format!(
        "Step `{name}` recorded as done ({count} of {} steps done).",
        steps.len()
    );
    match steps.iter().find(|s| !done.contains(&s.name)) {
        Some(next) => {
            s.push_str(&format!(" Next: `{}`", next.name));
            if !next.description.trim().is_empty() {
                s.push_str(&format!(": {}", next.description.trim()));
            }
            if let Some(w) = &next.done_when {
                s.push_str(&format!(" (done when: {w})"));
            }
            s.push('.');
        }
        None => s.push_str(" All steps are done: check your work and call task_complete."),
    }
    s
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::toolbox;

    fn steps() -> Vec<Step> {
        ["reproduce", "fix"]
            .iter()
            .map(|n| Step {
                name: n.to_string(),
                description: format!("{n} it"),
                done_when: Some(saheeli_protocol::template::DoneWhen::Text(
                    "it is so".into(),
                )),
                ..Step::default()
            })
            .collect()
    }

    #[tokio::test]
    async fn an_unknown_step_or_empty_evidence_is_an_error_for_the_model() {
        let (_d, mut tb) = toolbox();
        tb.steps = steps();
        let out = tb
            .dispatch("step_done", r#"{"name": "deploy", "evidence": "x"}"#)
            .await;
        assert!(!out.ok);
        assert!(
            out.text
                .contains("unknown step `deploy`; the steps are: reproduce, fix"),
            "{}",
            out.text
        );
        let out = tb
            .dispatch("step_done", r#"{"name": "fix", "evidence": " "}"#)
            .await;
        assert!(!out.ok && out.text.contains("`evidence` is empty"));
        let out = tb.dispatch("step_done", r#"{"name": "fix"}"#).await;
        assert!(!out.ok && out.text.contains("missing field `evidence`"));
    }

    #[test]
    fn progress_names_the_next_step_or_says_all_are_done() {
        let s = steps();
        let p = progress(&s, "reproduce", &["reproduce".into()]);
        assert!(p.contains("(1 of 2 steps done)"), "{p}");
        assert!(
            p.contains("Next: `fix`: fix it (done when: it is so)."),
            "{p}"
        );
        let p = progress(&s, "fix", &["fix".into(), "reproduce".into()]);
        assert!(p.contains("All steps are done"), "{p}");
    }

    #[test]
    fn only_a_task_with_steps_offers_the_tool() {
        assert!(spec_for(&[]).is_none());
        assert!(instructions(&[]).is_none());
        let spec = spec_for(&steps()).unwrap();
        assert_eq!(
            spec.function.parameters["properties"]["name"]["enum"],
            json!(["reproduce", "fix"])
        );
        let text = instructions(&steps()).unwrap();
        assert!(
            text.contains("2. `fix`: fix it (done when: it is so)"),
            "{text}"
        );
    }
}
