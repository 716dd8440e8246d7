//! `step_start`: the model says it begins one of the template's steps. The
//! foreman records it (an event, the `step.started` webhook) and pauses the
//! task there when the step has a breakpoint; a step with `approve: true`
//! starts only once a person approved the call (the agent's gate, as for a
//! gated tool). The answer tells the model which step it is in.

use saheeli_protocol::chat::ToolSpec;
use saheeli_protocol::template::{Step, StepStart};
use serde::Deserialize;
use serde_json::json;

use super::{ToolOutput, Toolbox, spec};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StepStartArgs {
    name: String,
}

/// The tool's schema, naming the steps; None when the task has none.
pub(crate) fn spec_for(steps: &[Step]) -> Option<ToolSpec> {
    if steps.is_empty() {
        return None;
    }
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    Some(spec(
        "step_start",
        "Say that you begin one of the task's steps, before doing its work. A step that needs \
         approval waits for a person here; if they deny it, do not do the step.",
        json!({"type": "object", "properties": {
            "name": {"type": "string", "enum": names, "description": "The step's name, exactly."}
        }, "required": ["name"], "additionalProperties": false}),
    ))
}

/// Which step a call of `step_start` names (for the approval gate).
pub(crate) fn named(steps: &[Step], arguments: &str) -> Option<Step> {
    let a: StepStartArgs = serde_json::from_str(arguments).ok()?;
    steps.iter().find(|s| s.name == a.name.trim()).cloned()
}

pub(crate) async fn run(tb: &Toolbox, a: StepStartArgs) -> ToolOutput {
    let Some((i, step)) = tb
        .steps
        .iter()
        .enumerate()
        .find(|(_, s)| s.name == a.name.trim())
    else {
        let names: Vec<&str> = tb.steps.iter().map(|s| s.name.as_str()).collect();
        return ToolOutput::error(format!(
            "unknown step `{}`; the steps are: {}",
            a.name,
            names.join(", ")
        ));
    };
    let Some(desk) = &tb.desk else {
        return ToolOutput::error("steps cannot be recorded: this servo has no foreman");
    };
    let start = StepStart {
        name: step.name.clone(),
    };
    if let Err(e) = desk.step_start(&start).await {
        return ToolOutput::error(format!("the step was not recorded: {}", e.0));
    }
    tb.mark_started(&step.name);
    ToolOutput::ok(told(step, i, tb.steps.len()))
}

/// What the model is told when a step starts: which step it is in.
fn told(step: &Step, i: usize, n: usize) -> String {
    let mut s = format!("You are in step `{}` ({} of {n})", step.name, i + 1);
    if !step.description.trim().is_empty() {
        s.push_str(&format!(": {}", step.description.trim()));
    }
    if let Some(w) = &step.done_when {
        s.push_str(&format!(" (done when: {w})"));
    }
    s.push_str(". Do its work, then call step_done with its name and your evidence.");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use saheeli_protocol::template::DoneWhen;

    #[test]
    fn the_model_is_told_which_step_it_is_in() {
        let step = Step {
            name: "fix".into(),
            description: "Fix the bug".into(),
            done_when: Some(DoneWhen::Text("the test passes".into())),
            ..Step::default()
        };
        assert_eq!(
            told(&step, 1, 3),
            "You are in step `fix` (2 of 3): Fix the bug (done when: the test passes). \
             Do its work, then call step_done with its name and your evidence."
        );
        assert_eq!(
            named(std::slice::from_ref(&step), r#"{"name": " fix "}"#),
            Some(step)
        );
        assert_eq!(named(&[], r#"{"name": "fix"}"#), None);
    }
}
