//! The tools the model is offered for a task.

use saheeli_protocol::tools::{Offered, allowed_by, names};

use super::TaskSpec;

/// The tool names the model gets for `spec` (what `--dry-run` lists),
/// from the one tool table: the toolbox as `tools:` narrows it,
/// `ask_user`, `step_done` for a template with `steps:`, and
/// `propose_plan` behind a plan gate (or in a plan-only run). Gated tools
/// are marked `(approval: …)`.
pub(crate) fn tools_for(spec: &TaskSpec) -> Vec<String> {
    let plan_gate = spec
        .gates
        .iter()
        .any(|g| g.tool == saheeli_protocol::human::PLAN);
    let toolbox = names(|t| t.offered == Offered::Toolbox);
    let mut tools: Vec<String> = toolbox
        .iter()
        .filter(|t| allowed_by(spec.tools.as_deref(), t))
        .map(|t| match spec.gates.iter().find(|g| g.tool == *t) {
            Some(g) => match &g.pattern {
                Some(p) => format!("{t} (approval when it matches `{p}`)"),
                None => format!("{t} (approval on every call)"),
            },
            None => t.to_string(),
        })
        .collect();
    tools.push("ask_user".into());
    if !spec.steps.is_empty() {
        tools.push(format!("step_done (steps: {})", step_names(spec)));
    }
    if let Some(d) = &spec.delegate {
        for t in names(|t| t.offered == Offered::Delegate) {
            tools.push(format!(
                "{t} (delegate: {} children, {} deep)",
                d.max_children, d.max_depth
            ));
        }
    }
    if plan_gate || spec.plan_only {
        tools.push("propose_plan (a plan is approved before acting)".into());
    }
    tools
}

fn step_names(spec: &TaskSpec) -> String {
    spec.steps
        .iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
