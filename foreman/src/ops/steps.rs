//! A person's step-level controls (issue 29): `task breakpoint`, `task
//! step` and `task step-override`, through [`super::steer`] (the CLI, `task attach` and the HTTP API
//! share them). The step's name is checked against the task's template
//! here, so a typo is an error naming the steps, not a breakpoint that
//! never holds.

use saheeli_protocol::template::Position;

use crate::state::TaskState;
use crate::store::{Store, TaskRow};

use super::error::Error;

/// The name of one of the task's steps, or an error listing them.
fn known_step<'a>(t: &'a TaskRow, name: &str) -> Result<&'a str, Error> {
    let names: Vec<&str> = t.spec.steps.iter().map(|s| s.name.as_str()).collect();
    if names.is_empty() {
        return Err(Error::Refused(anyhow::anyhow!(
            "task `{}` has no template steps (its prompt declares no `steps:`)",
            t.id
        )));
    }
    names
        .iter()
        .find(|n| **n == name.trim())
        .copied()
        .ok_or_else(|| {
            Error::Refused(anyhow::anyhow!(
                "task `{}` has no step `{}`; its steps are: {}",
                t.id,
                crate::output::clean(name),
                names.join(", ")
            ))
        })
}

pub(crate) fn breakpoint(
    store: &mut Store,
    t: &TaskRow,
    step: &str,
    position: Position,
    active: bool,
    by: &str,
) -> Result<String, Error> {
    let name = known_step(t, step)?;
    store.set_breakpoint(t.id, name, position, active, by)?;
    let pos = position.as_str();
    Ok(if active {
        format!(
            "breakpoint set {pos} step `{name}` of {}: it pauses there",
            t.id
        )
    } else {
        format!("breakpoint {pos} step `{name}` of {} cleared", t.id)
    })
}

pub(crate) fn step_override(
    store: &mut Store,
    t: &TaskRow,
    step: &str,
    state: super::steer::StepOverrideState,
    reason: &str,
    by: &str,
) -> Result<String, Error> {
    let name = known_step(t, step)?;
    let reason = super::steer::joined(&[reason.to_string()])
        .map_err(|_| Error::Refused(anyhow::anyhow!("`--reason` is empty; say why")))?;
    let was = store.step_override(t.id, name, state.as_str(), &reason, by)?;
    let told = if was == TaskState::Blocked {
        "the task is unblocked with it"
    } else {
        "the model reads it before its next LLM call"
    };
    Ok(format!(
        "step `{name}` of {} marked {} by {by}: {told}",
        t.id,
        state.as_str()
    ))
}

pub(crate) fn step(store: &mut Store, t: &TaskRow, by: &str) -> Result<String, Error> {
    if t.spec.steps.is_empty() {
        return Err(Error::Refused(anyhow::anyhow!(
            "task `{}` has no template steps to step through; use `saheeli task resume {}`",
            t.id,
            t.id
        )));
    }
    Ok(match store.step_through(t.id, by)? {
        TaskState::Paused => format!(
            "stepping {}: it resumes and pauses again once its next step ends",
            t.id
        ),
        _ => format!(
            "stepping {}: it pauses once its current (or next) step ends",
            t.id
        ),
    })
}
