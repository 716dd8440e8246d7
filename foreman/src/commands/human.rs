//! Humans in the loop from the command line: answer, approve, deny, inject,
//! pause, resume. Each is a row in SQLite, delivered by whichever foreman
//! serves the task (now, or once one runs); each is an event with who did it.
//!
//! [`steer`] is the one implementation: the CLI, `task attach` and the
//! HTTP API all call it, so each says and does the same.

use std::process::ExitCode;

use anyhow::bail;
use saheeli_protocol::human::Waiting;

use crate::cli::{ApproveArgs, DenyArgs, IdArgs, TextArgs};
use crate::config::Config;
use crate::inputs;
use crate::state::TaskState;
use crate::store::{HumanAct, Store};

use super::{CommandError, open_existing_store};

/// Who is acting: the OS user (as `task override` records it).
pub(crate) fn who() -> String {
    super::overrides::os_user()
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
    /// Go on until the next template step ends, then pause.
    Step,
    /// Mark a template step done or skipped, with a reason.
    StepOverride {
        step: String,
        state: crate::cli::StepOverrideState,
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
) -> Result<String, CommandError> {
    let t = store.require(id_or_prefix)?;
    let id = t.id;
    Ok(match steer {
        Steer::Reply(act) => {
            if let HumanAct::Answer(text) | HumanAct::Deny(text) = &act {
                joined(std::slice::from_ref(text)).map_err(CommandError::Refused)?;
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
                (Waiting::Blocked { .. }, _) => {
                    "unblocked: the model reads your answer and goes on"
                }
            };
            format!("{what} for {id}")
        }
        Steer::Inject(text) => {
            let text = joined(&[text]).map_err(CommandError::Refused)?;
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
        Steer::Step => super::steps::step(store, &t, by)?,
        Steer::StepOverride {
            step,
            state,
            reason,
        } => super::steps::step_override(store, &t, &step, state, &reason, by)?,
    })
}

fn cancel(
    cfg: &Config,
    store: &mut Store,
    id: saheeli_protocol::TaskId,
) -> Result<String, CommandError> {
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
            return Err(CommandError::WrongState(format!(
                "task `{id}` already ended ({done}); nothing to cancel"
            )));
        }
    })
}

/// Runs `steer` for a CLI command and prints what happens next.
fn steer_cli(cfg: &Config, id: &str, s: Steer) -> anyhow::Result<ExitCode> {
    let mut store = open_existing_store(cfg)?;
    outln!("{}", steer(cfg, &mut store, id, s, &who())?);
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn answer(cfg: &Config, args: TextArgs) -> anyhow::Result<ExitCode> {
    let text = joined(&args.text)?;
    steer_cli(cfg, &args.id, Steer::Reply(HumanAct::Answer(text)))
}

pub(crate) async fn approve(cfg: &Config, args: ApproveArgs) -> anyhow::Result<ExitCode> {
    steer_cli(cfg, &args.id, Steer::Reply(HumanAct::Approve(args.note)))
}

pub(crate) async fn deny(cfg: &Config, args: DenyArgs) -> anyhow::Result<ExitCode> {
    steer_cli(cfg, &args.id, Steer::Reply(HumanAct::Deny(args.reason)))
}

pub(crate) async fn inject(cfg: &Config, args: TextArgs) -> anyhow::Result<ExitCode> {
    let text = joined(&args.text)?;
    steer_cli(cfg, &args.id, Steer::Inject(text))
}

pub(crate) async fn pause(cfg: &Config, args: IdArgs) -> anyhow::Result<ExitCode> {
    steer_cli(cfg, &args.id, Steer::Pause)
}

pub(crate) async fn resume(cfg: &Config, args: IdArgs) -> anyhow::Result<ExitCode> {
    steer_cli(cfg, &args.id, Steer::Resume)
}

pub(crate) async fn breakpoint(
    cfg: &Config,
    args: crate::cli::BreakpointArgs,
) -> anyhow::Result<ExitCode> {
    use saheeli_protocol::template::Position;
    let position = if args.before {
        Position::Before
    } else {
        Position::After
    };
    let s = Steer::Breakpoint {
        step: args.step,
        position,
        active: !args.clear,
    };
    steer_cli(cfg, &args.id, s)
}

pub(crate) async fn step(cfg: &Config, args: IdArgs) -> anyhow::Result<ExitCode> {
    steer_cli(cfg, &args.id, Steer::Step)
}

pub(crate) async fn step_override(
    cfg: &Config,
    args: crate::cli::StepOverrideArgs,
) -> anyhow::Result<ExitCode> {
    let s = Steer::StepOverride {
        step: args.step,
        state: args.state,
        reason: args.reason,
    };
    steer_cli(cfg, &args.id, s)
}

pub(crate) async fn cancel_cli(cfg: &Config, args: IdArgs) -> anyhow::Result<ExitCode> {
    steer_cli(cfg, &args.id, Steer::Cancel)
}
