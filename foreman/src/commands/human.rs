//! Humans in the loop from the command line: answer, approve, deny, inject,
//! pause, resume. Each is a row in SQLite, delivered by whichever foreman
//! serves the task (now, or once one runs); each is an event with who did it.
//!
//! [`steer`] is the one implementation: the CLI, `task attach` and the
//! HTTP API all call it, so each says and does the same.

use std::process::ExitCode;

use crate::cli::{ApproveArgs, DenyArgs, IdArgs, TextArgs};
use crate::config::Config;
use crate::store::HumanAct;

use crate::ops::Steer;
use crate::ops::joined;
use crate::ops::open_existing_store;
use crate::ops::steer;
use crate::ops::who;

/// Runs `steer` for a CLI command and prints what happens next.
fn steer_cli(cfg: &Config, id: &str, s: Steer) -> anyhow::Result<ExitCode> {
    steer_as(cfg, id, s, None)
}

/// [`steer_cli`] as `--as NAME` (issue 52), else as this user.
fn steer_as(cfg: &Config, id: &str, s: Steer, name: Option<&str>) -> anyhow::Result<ExitCode> {
    let by = match name.map(str::trim) {
        Some("") => anyhow::bail!("`--as` is empty; give the name to decide as"),
        Some(n) => n.to_string(),
        None => who(),
    };
    let mut store = open_existing_store(cfg)?;
    outln!("{}", steer(cfg, &mut store, id, s, &by)?);
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn answer(cfg: &Config, args: TextArgs) -> anyhow::Result<ExitCode> {
    let text = joined(&args.text)?;
    steer_cli(cfg, &args.id, Steer::Reply(HumanAct::Answer(text)))
}

pub(crate) async fn approve(cfg: &Config, args: ApproveArgs) -> anyhow::Result<ExitCode> {
    let act = Steer::Reply(HumanAct::Approve(args.note));
    steer_as(cfg, &args.id, act, args.as_name.as_deref())
}

pub(crate) async fn deny(cfg: &Config, args: DenyArgs) -> anyhow::Result<ExitCode> {
    let act = Steer::Reply(HumanAct::Deny(args.reason));
    steer_as(cfg, &args.id, act, args.as_name.as_deref())
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
    let position = match (args.before, args.after) {
        (true, _) => Some(Position::Before),
        (_, true) => Some(Position::After),
        _ => None,
    };
    let s = match (args.step, position) {
        _ if args.on_subtask => Steer::SubtaskBreakpoint {
            active: !args.clear,
        },
        (Some(step), Some(position)) => Steer::Breakpoint {
            step,
            position,
            active: !args.clear,
        },
        (None, None) if args.clear => Steer::ClearBreakpoints,
        (Some(_), None) => anyhow::bail!(
            "say where it holds: `--before` (once the step has started) or `--after` (once it is done)"
        ),
        (None, _) => anyhow::bail!(
            "name the step with `--step NAME` (with `--before` or `--after`), or give `--clear` alone to clear every breakpoint"
        ),
    };
    steer_cli(cfg, &args.id, s)
}

pub(crate) async fn step(cfg: &Config, args: crate::cli::StepArgs) -> anyhow::Result<ExitCode> {
    if args.dry_run {
        let store = open_existing_store(cfg)?;
        let t = store.require(&args.id)?;
        out!("{}", crate::ops::next_step_plan(&store, &t)?);
        return Ok(ExitCode::SUCCESS);
    }
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
