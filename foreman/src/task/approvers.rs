//! Named approvers (issue 52): which step a waiting approval is for, and
//! who may decide it (`approve: { from: [...], message: ... }`).

use saheeli_protocol::human::Waiting;
use saheeli_protocol::template::{Step, StepApproval};

/// The step an approval waits on (`step_start` or `step_done` naming a
/// gated step) with its `approve:`, if it names approvers or a message.
pub(crate) fn step_approval<'a>(
    steps: &'a [Step],
    waiting: &Waiting,
) -> Option<(&'a str, &'a StepApproval)> {
    let Waiting::Approval { tool, arguments } = waiting else {
        return None;
    };
    if tool != "step_start" && tool != "step_done" {
        return None;
    }
    let args: serde_json::Value = serde_json::from_str(arguments).ok()?;
    let name = args.get("name")?.as_str()?;
    steps
        .iter()
        .find(|s| s.name == name && s.approve.required)
        .filter(|s| !s.approve.from.is_empty() || s.approve.message.is_some())
        .map(|s| (s.name.as_str(), &s.approve))
}

/// Whether a waiting approval is a step's (worth reading the spec for).
pub(crate) fn is_step_gate(waiting: &Waiting) -> bool {
    matches!(waiting, Waiting::Approval { tool, .. } if tool == "step_start" || tool == "step_done")
}

/// `only alice, ops may approve: "Check the plan"`, for people asked.
pub(crate) fn asked_line(step: &str, a: &StepApproval) -> String {
    let who = match a.from.as_slice() {
        [] => format!("step `{step}` needs an approval"),
        from => format!(
            "step `{step}`: only {} may approve or deny",
            from.join(", ")
        ),
    };
    match &a.message {
        Some(m) => format!("{who}: {m}"),
        None => who,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps() -> Vec<Step> {
        serde_yaml::from_str(
            "- { name: plan, approve: true }\n\
             - { name: ship, approve: { from: [alice, ops], message: Check the diff } }\n\
             - { name: note, approve: { message: Read me } }\n",
        )
        .unwrap()
    }

    fn asking(tool: &str, name: &str) -> Waiting {
        Waiting::Approval {
            tool: tool.into(),
            arguments: serde_json::json!({ "name": name }).to_string(),
        }
    }

    #[test]
    fn the_step_an_approval_is_for_names_who_decides() {
        let steps = steps();
        let (step, a) = step_approval(&steps, &asking("step_start", "ship")).unwrap();
        assert_eq!(step, "ship");
        assert!(a.allows("alice") && a.allows("ops") && !a.allows("bob"));
        assert_eq!(
            asked_line(step, a),
            "step `ship`: only alice, ops may approve or deny: Check the diff"
        );
        assert!(step_approval(&steps, &asking("step_done", "ship")).is_some());
        let (step, a) = step_approval(&steps, &asking("step_done", "note")).unwrap();
        assert!(a.allows("anyone"));
        assert_eq!(
            asked_line(step, a),
            "step `note` needs an approval: Read me"
        );
        // Anyone decides a plain gate; other tools are not steps.
        assert!(step_approval(&steps, &asking("step_start", "plan")).is_none());
        assert!(step_approval(&steps, &asking("execute_shell", "ship")).is_none());
        assert!(step_approval(&steps, &asking("step_start", "nope")).is_none());
        assert!(is_step_gate(&asking("step_done", "x")));
        assert!(!is_step_gate(&asking("execute_shell", "x")));
    }
}
