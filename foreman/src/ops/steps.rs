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

/// `task breakpoint ID --clear` with no step: every breakpoint that holds
/// (set by people or by the template) cleared.
pub(crate) fn clear_breakpoints(store: &mut Store, t: &TaskRow, by: &str) -> Result<String, Error> {
    let held = store.breakpoints(t.id, &t.spec.steps)?;
    let on_subtask = store.subtask_breakpoint(t.id, t.spec.break_on_subtask)?;
    if held.is_empty() && !on_subtask {
        return Ok(format!("task {} has no breakpoints to clear", t.id));
    }
    for (name, position) in &held {
        store.set_breakpoint(t.id, name, *position, false, by)?;
    }
    let mut names: Vec<String> = held
        .iter()
        .map(|(n, p)| format!("{} `{n}`", p.as_str()))
        .collect();
    if on_subtask {
        store.set_subtask_breakpoint(t.id, false, by)?;
        names.push("on_subtask".into());
    }
    Ok(format!(
        "cleared {} breakpoint(s) of {}: {}",
        names.len(),
        t.id,
        names.join(", ")
    ))
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

/// `task step ID --dry-run`: the step the task takes next (its name, what
/// it is, what makes it done, what holds it), and about how many tokens
/// its next call sends; nothing is changed.
pub(crate) fn next_step_plan(store: &Store, t: &TaskRow) -> Result<String, Error> {
    use std::fmt::Write;
    if t.spec.steps.is_empty() {
        return Err(Error::Refused(anyhow::anyhow!(
            "task `{}` has no template steps (its prompt declares no `steps:`)",
            t.id
        )));
    }
    let steps = crate::store::step_status_with(
        &t.spec.steps,
        &store.steps_done(t.id)?,
        &store.step_overrides(t.id)?,
    );
    let clean = crate::output::clean;
    let mut out = String::new();
    let total = steps.len();
    let Some((i, next)) = steps
        .iter()
        .enumerate()
        .find(|(_, s)| s.state == crate::store::StepState::InProgress)
    else {
        let _ = writeln!(
            out,
            "task {} ({}): every step is done or skipped; its next call ends it",
            t.id, t.state
        );
        return Ok(out);
    };
    let started = store
        .step_starts(t.id)?
        .iter()
        .any(|(n, _)| *n == next.step.name);
    let _ = writeln!(
        out,
        "task {} ({}): next step {} of {total}, `{}`{}",
        t.id,
        t.state,
        i + 1,
        clean(&next.step.name),
        if started { " (started)" } else { "" }
    );
    if !next.step.description.trim().is_empty() {
        let _ = writeln!(out, "  what:      {}", clean(next.step.description.trim()));
    }
    match &next.step.done_when {
        Some(w) => match w.command() {
            Some(cmd) => {
                let _ = writeln!(
                    out,
                    "  done when: `{}` passes (run in its container when the model marks it done)",
                    clean(cmd)
                );
            }
            None => {
                let _ = writeln!(out, "  done when: {}", clean(&w.to_string()));
            }
        },
        None => {
            let _ = writeln!(out, "  done when: the model marks it done");
        }
    }
    if next.step.approve.required && !started {
        let _ = writeln!(out, "  holds:     it starts only once a person approves it");
    }
    let breakpoints: Vec<&str> = store
        .breakpoints(t.id, &t.spec.steps)?
        .into_iter()
        .filter(|(n, _)| *n == next.step.name)
        .map(|(_, p)| p.as_str())
        .collect();
    if !breakpoints.is_empty() {
        let _ = writeln!(out, "  pauses:    {}", breakpoints.join(" and "));
    }
    let _ = match store.last_call_tokens(t.id)? {
        Some((input, output)) => writeln!(
            out,
            "  estimate:  its next call sends at least {} input tokens (the last call's {input} in and \
             {output} out, before what comes next); step budget left: {} of {}",
            input + output,
            t.spec.max_steps.saturating_sub(t.steps.max(0) as u32),
            t.spec.max_steps
        ),
        None => writeln!(
            out,
            "  estimate:  no call answered yet; step budget left: {} of {}",
            t.spec.max_steps.saturating_sub(t.steps.max(0) as u32),
            t.spec.max_steps
        ),
    };
    let _ = writeln!(
        out,
        "  (dry run: nothing was changed; `saheeli task step {}` runs it)",
        t.id.short()
    );
    Ok(out)
}
