//! Humans in the loop from the command line: answer, approve, deny, inject,
//! pause, resume. Each is a row in SQLite, delivered by whichever foreman
//! serves the task (now, or once one runs); each is an event with who did it.

use std::process::ExitCode;

use anyhow::bail;
use saheeli_protocol::human::Waiting;

use crate::cli::{ApproveArgs, DenyArgs, IdArgs, TextArgs};
use crate::config::Config;
use crate::state::TaskState;
use crate::store::{HumanAct, Store};

use super::*;

/// Who is acting: the OS user (as `task override` records it).
pub(super) fn who() -> String {
    super::overrides::os_user()
}

pub(super) fn joined(text: &[String]) -> anyhow::Result<String> {
    let t = text.join(" ");
    if t.trim().is_empty() {
        bail!("the text is empty; say something");
    }
    if t.len() > 64 * 1024 {
        bail!("the text is {} bytes; keep it under 64 KiB", t.len());
    }
    Ok(t)
}

/// Records a reply and says what happens next.
pub(super) fn reply(
    store: &mut Store,
    id_or_prefix: &str,
    act: HumanAct,
) -> anyhow::Result<String> {
    let t = store.require(id_or_prefix)?;
    let waiting = store.reply(t.id, &act, &who())?;
    let what = match (&waiting, &act) {
        (Waiting::Answer { .. }, _) => "answer recorded",
        (Waiting::Approval { .. }, HumanAct::Approve(_)) => "approved: the call runs",
        (Waiting::Approval { .. }, _) => "denied: the call is skipped and the model told why",
        (Waiting::Plan { .. }, HumanAct::Approve(_)) => "plan approved: the agent carries it out",
        (Waiting::Plan { .. }, _) => "plan rejected: the agent replans with your feedback",
    };
    Ok(format!("{what} for {}", t.id))
}

pub(crate) async fn answer(cfg: &Config, args: TextArgs) -> anyhow::Result<ExitCode> {
    let mut store = open_existing_store(cfg)?;
    let text = joined(&args.text)?;
    println!("{}", reply(&mut store, &args.id, HumanAct::Answer(text))?);
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn approve(cfg: &Config, args: ApproveArgs) -> anyhow::Result<ExitCode> {
    let mut store = open_existing_store(cfg)?;
    println!(
        "{}",
        reply(&mut store, &args.id, HumanAct::Approve(args.note))?
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn deny(cfg: &Config, args: DenyArgs) -> anyhow::Result<ExitCode> {
    let mut store = open_existing_store(cfg)?;
    let reason = joined(&[args.reason])?;
    println!("{}", reply(&mut store, &args.id, HumanAct::Deny(reason))?);
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn inject(cfg: &Config, args: TextArgs) -> anyhow::Result<ExitCode> {
    let mut store = open_existing_store(cfg)?;
    let t = store.require(&args.id)?;
    let text = joined(&args.text)?;
    store.inject(t.id, &text, &who())?;
    println!(
        "message queued for {}: the model reads it before its next LLM call",
        t.id
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn pause(cfg: &Config, args: IdArgs) -> anyhow::Result<ExitCode> {
    let mut store = open_existing_store(cfg)?;
    let t = store.require(&args.id)?;
    match store.request_pause(t.id, &who())? {
        TaskState::Paused => println!("{} is already paused", t.id),
        _ => println!(
            "pause requested for {}: it stops before its next LLM call (resume with `saheeli task resume {}`)",
            t.id,
            t.id.short()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn resume(cfg: &Config, args: IdArgs) -> anyhow::Result<ExitCode> {
    let mut store = open_existing_store(cfg)?;
    let t = store.require(&args.id)?;
    store.resume(t.id, &who())?;
    println!("resumed {}", t.id);
    Ok(ExitCode::SUCCESS)
}
