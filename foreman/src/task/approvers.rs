//! Named approvers (issue 52): which step or gated tool a waiting
//! approval is for, and who may decide it (a step's `approve: { from,
//! message }`, or the gates' `approve: { tools, from, message }`).

use saheeli_protocol::human::Waiting;
use saheeli_protocol::template::{Step, StepApproval};

/// What an approval waits on (`step `ship``, `the `execute_shell` call`)
/// and its approval, when that names approvers or a message: a gated
/// step's (`step_start` or `step_done` naming it), else the tool gates'
/// (`gates`).
pub(crate) fn approval_for<'a>(
    steps: &'a [Step],
    gates: &'a StepApproval,
    waiting: &Waiting,
) -> Option<(String, &'a StepApproval)> {
    let Waiting::Approval { tool, arguments } = waiting else {
        return None;
    };
    let named = |a: &StepApproval| a.required && (!a.from.is_empty() || a.message.is_some());
    if tool == "step_start" || tool == "step_done" {
        let args: serde_json::Value = serde_json::from_str(arguments).ok()?;
        let name = args.get("name")?.as_str()?;
        return steps
            .iter()
            .find(|s| s.name == name && s.approve.required)
            .filter(|s| named(&s.approve))
            .map(|s| (format!("step `{}`", s.name), &s.approve));
    }
    named(gates).then(|| (format!("the `{tool}` call"), gates))
}

/// `step `ship`: only alice, ops may approve or deny: Check the plan`,
/// for people asked.
pub(crate) fn asked_line(what: &str, a: &StepApproval) -> String {
    let who = match a.from.as_slice() {
        [] => format!("{what} needs an approval"),
        from => format!("{what}: only {} may approve or deny", from.join(", ")),
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
    fn the_step_or_gate_an_approval_is_for_names_who_decides() {
        let (steps, none) = (steps(), StepApproval::default());
        let (what, a) = approval_for(&steps, &none, &asking("step_start", "ship")).unwrap();
        assert_eq!(what, "step `ship`");
        assert!(a.allows("alice") && a.allows("ops") && !a.allows("bob"));
        assert_eq!(
            asked_line(&what, a),
            "step `ship`: only alice, ops may approve or deny: Check the diff"
        );
        assert!(approval_for(&steps, &none, &asking("step_done", "ship")).is_some());
        let (what, a) = approval_for(&steps, &none, &asking("step_done", "note")).unwrap();
        assert!(a.allows("anyone"));
        assert_eq!(
            asked_line(&what, a),
            "step `note` needs an approval: Read me"
        );
        // Anyone decides a plain gate, a step that is not one, or an
        // unknown step; a tool's gate follows `gates`.
        assert!(approval_for(&steps, &none, &asking("step_start", "plan")).is_none());
        assert!(approval_for(&steps, &none, &asking("step_start", "nope")).is_none());
        assert!(approval_for(&steps, &none, &asking("execute_shell", "x")).is_none());
        let gates = StepApproval {
            required: true,
            from: vec!["ops".into()],
            message: None,
        };
        let (what, a) = approval_for(&steps, &gates, &asking("execute_shell", "x")).unwrap();
        assert_eq!(
            asked_line(&what, a),
            "the `execute_shell` call: only ops may approve or deny"
        );
        // A step's own `approve` wins over the gates'.
        assert!(approval_for(&steps, &gates, &asking("step_start", "plan")).is_none());
    }
}
