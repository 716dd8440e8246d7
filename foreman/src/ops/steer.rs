//! What a person does to a task (answer, approve, deny, inject, pause,
//! resume, cancel, breakpoints, step overrides), one implementation for the
//! CLI, `task attach` and the HTTP API: [`steer`].

use super::error::Error;
use crate::config::Config;
use crate::inputs;
use crate::state::TaskState;
use crate::store::HumanAct;
use crate::store::Store;
use anyhow::bail;
use saheeli_protocol::human::Waiting;

/// Who is acting: the OS user (as `task override` records it).
pub(crate) fn who() -> String {
    os_user()
}

pub(crate) fn joined(text: &[String]) -> anyhow::Result<String> {
    let t = text.join(" ");
    if t.trim().is_empty() {
        bail!("the text is empty; say something");
    }
    if t.len() > 64 * 1024 {
        bail!("the text is {} bytes; keep it under 64 KiB", t.len());
    }
    Ok(t)
}

/// What a person can do to a running (or waiting, or queued) task.
#[derive(Debug, PartialEq)]
pub(crate) enum Steer {
    /// Answer, approve or deny what the task waits on.
    Reply(HumanAct),
    /// A message the model reads before its next LLM call.
    Inject(String),
    Pause,
    Resume,
    Cancel,
    /// Set (true) or clear a breakpoint of a template step.
    Breakpoint {
        step: String,
        position: saheeli_protocol::template::Position,
        active: bool,
    },
    /// Clear every breakpoint that holds (the template's too).
    ClearBreakpoints,
    /// Set (true) or clear `breakpoint: on_subtask`.
    SubtaskBreakpoint {
        active: bool,
    },
    /// Go on until the next template step ends, then pause.
    Step,
    /// Mark a template step done or skipped, with a reason.
    StepOverride {
        step: String,
        state: super::steer::StepOverrideState,
        reason: String,
    },
}

/// Carries out `steer` on the task `id_or_prefix` as `by`; returns what
/// happens next, for people. Blocking (SQLite).
pub(crate) fn steer(
    cfg: &Config,
    store: &mut Store,
    id_or_prefix: &str,
    steer: Steer,
    by: &str,
) -> Result<String, Error> {
    let t = store.require(id_or_prefix)?;
    let id = t.id;
    Ok(match steer {
        Steer::Reply(act) => {
            if let HumanAct::Answer(text) | HumanAct::Deny(text) = &act {
                joined(std::slice::from_ref(text)).map_err(Error::Refused)?;
            }
            let waiting = store.reply(id, &act, by)?;
            let what = match (&waiting, &act) {
                (Waiting::Answer { .. }, _) => "answer recorded",
                (Waiting::Approval { .. }, HumanAct::Approve(_)) => "approved: the call runs",
                (Waiting::Approval { .. }, _) => {
                    "denied: the call is skipped and the model told why"
                }
                (Waiting::Plan { .. }, HumanAct::Approve(_)) => {
                    "plan approved: the agent carries it out"
                }
                (Waiting::Plan { .. }, _) => "plan rejected: the agent replans with your feedback",
                (Waiting::Egress { host, port, .. }, HumanAct::Approve(_)) => {
                    return Ok(format!(
                        "approved: {id} may reach {host}:{port} for the rest of the task"
                    ));
                }
                (Waiting::Egress { host, port, .. }, _) => {
                    return Ok(format!(
                        "denied: {host}:{port} stays refused for {id}; its client reads a 403"
                    ));
                }
                (Waiting::Blocked { .. }, _) => {
                    "unblocked: the model reads your answer and goes on"
                }
            };
            format!("{what} for {id}")
        }
        Steer::Inject(text) => {
            let text = joined(&[text]).map_err(Error::Refused)?;
            match store.inject(id, &text, by)? {
                // A third-party agent keeps its own conversation: its servo
                // adds the message to the agent's next call (HOSTILE.md N33).
                Some(_) if !t.spec.agent.is_builtin() => format!(
                    "message queued for {id}: the servo adds it as a user message to the \
                     agent's next LLM call, and to its later calls at that place"
                ),
                Some(_) => {
                    format!("message queued for {id}: the model reads it before its next LLM call")
                }
                None => format!("unblocked {id}: the model reads your message and goes on"),
            }
        }
        Steer::Pause => match store.request_pause(id, by)? {
            TaskState::Paused => format!("{id} is already paused"),
            _ => format!(
                "pause requested for {id}: it stops before its next LLM call (resume with `saheeli task resume {}`)",
                id.short()
            ),
        },
        Steer::Resume => match store.resume(id, by)? {
            TaskState::Blocked => {
                format!("unblocked {id}: the model is told to go on without an answer")
            }
            _ => format!("resumed {id}"),
        },
        Steer::Cancel => cancel(cfg, store, id)?,
        Steer::Breakpoint {
            step,
            position,
            active,
        } => super::steps::breakpoint(store, &t, &step, position, active, by)?,
        Steer::ClearBreakpoints => super::steps::clear_breakpoints(store, &t, by)?,
        Steer::SubtaskBreakpoint { active } => {
            store.set_subtask_breakpoint(t.id, active, by)?;
            if active {
                format!("{} pauses each time its model spawns a child task", t.id)
            } else {
                format!("breakpoint on_subtask of {} cleared", t.id)
            }
        }
        Steer::Step => super::steps::step(store, &t, by)?,
        Steer::StepOverride {
            step,
            state,
            reason,
        } => super::steps::step_override(store, &t, &step, state, &reason, by)?,
    })
}

fn cancel(cfg: &Config, store: &mut Store, id: saheeli_protocol::TaskId) -> Result<String, Error> {
    Ok(match store.request_cancel(id)? {
        TaskState::Queued => {
            // It never starts: its submitted workspace is not needed.
            inputs::discard_workspace(&cfg.state_dir(), id);
            format!("cancelled {id} (it had not started)")
        }
        TaskState::WaitingHuman | TaskState::Paused | TaskState::Blocked => format!(
            "cancel requested for {id}; it ends `cancelled` with its workspace collected once a foreman serves it"
        ),
        TaskState::Starting | TaskState::Running => format!(
            "cancel requested for {id}; the serving foreman stops it and collects its workspace"
        ),
        done => {
            return Err(Error::WrongState(format!(
                "task `{id}` already ended ({done}); nothing to cancel"
            )));
        }
    })
}
/// What `task step-override` may mark a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StepOverrideState {
    Done,
    Skipped,
}

impl StepOverrideState {
    pub fn as_str(self) -> &'static str {
        match self {
            StepOverrideState::Done => "done",
            StepOverrideState::Skipped => "skipped",
        }
    }
}

/// Who is overriding: the name of the real user id (`getpwuid_r`, not
/// `$USER`, which any caller can set), with the invoking user when root
/// runs it through sudo (`SUDO_USER`: only root can be lying there).
pub(crate) fn os_user() -> String {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let name = user_name(uid).unwrap_or_else(|| format!("uid {uid}"));
    match std::env::var("SUDO_USER") {
        Ok(sudoer) if uid == 0 && !sudoer.is_empty() && sudoer != name => {
            format!("{name} (sudo by {sudoer})")
        }
        _ => name,
    }
}

/// The passwd name of `uid`, if it has one.
pub(crate) fn user_name(uid: libc::uid_t) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: a zeroed passwd is a valid out-parameter (plain data and
    // null pointers); getpwuid_r writes only into it and into `buf`, whose
    // length it is given, and `result` points into them only on success.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        );
        if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(pwd.pw_name).to_string_lossy();
        Some(name.into_owned()).filter(|n| !n.is_empty())
    }
}
