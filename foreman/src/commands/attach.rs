//! `saheeli task attach ID`: follows a task live (its servo's audit lines
//! and its events) and takes commands from the terminal: `answer TEXT`,
//! `approve [NOTE]`, `deny REASON`, `inject TEXT`, `pause`, `resume`,
//! `cancel`, `detach`, and a template's step controls: `step` (go on for
//! one step), `breakpoint STEP before|after [clear]`, `skip STEP REASON`
//! and `done STEP REASON` (as `task step-override`). Returns when the task
//! ends (or on `detach`).

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::Duration;

use futures_util::StreamExt;
use saheeli_protocol::TaskId;

use saheeli_protocol::template::Position;

use crate::cli::IdArgs;
use crate::config::Config;
use crate::ops::StepOverrideState;
use crate::output;
use crate::store::{HumanAct, Store};

use super::exit_for;
use crate::ops::open_existing_store;
use crate::ops::{Steer, steer, who};

const HELP: &str = "commands: answer TEXT | approve [NOTE] | deny REASON | inject TEXT | pause | resume | cancel | step | breakpoint STEP before|after [clear] | breakpoint clear | skip STEP REASON | done STEP REASON | detach";

/// One command typed at the attach prompt.
#[derive(Debug, PartialEq)]
enum Typed {
    Act(HumanAct),
    Inject(String),
    Pause,
    Resume,
    Cancel,
    /// The template's step controls.
    Step,
    Breakpoint(String, Position, bool),
    ClearBreakpoints,
    Override(String, StepOverrideState, String),
    Detach,
    Help,
}

/// `STEP before|after [clear]`, or `clear` alone (every breakpoint).
fn breakpoint(rest: &str) -> Result<Typed, String> {
    let words: Vec<&str> = rest.split_whitespace().collect();
    let (step, pos, clear) = match words.as_slice() {
        ["clear"] => return Ok(Typed::ClearBreakpoints),
        [step, pos] => (step, pos, false),
        [step, pos, "clear"] => (step, pos, true),
        _ => {
            return Err(
                "`breakpoint` needs STEP before|after, and `clear` to clear it (or `clear` alone: all)"
                    .into(),
            );
        }
    };
    let position = match *pos {
        "before" => Position::Before,
        "after" => Position::After,
        other => {
            return Err(format!(
                "`{other}`: a breakpoint is `before` or `after` a step"
            ));
        }
    };
    Ok(Typed::Breakpoint(step.to_string(), position, !clear))
}

/// `STEP REASON` of `skip` and `done`.
fn step_override(word: &str, rest: &str, state: StepOverrideState) -> Result<Typed, String> {
    match rest.split_once(char::is_whitespace) {
        Some((step, reason)) if !reason.trim().is_empty() => Ok(Typed::Override(
            step.to_string(),
            state,
            reason.trim().to_string(),
        )),
        _ => Err(format!("`{word}` needs STEP and a reason")),
    }
}

fn parse(line: &str) -> Result<Typed, String> {
    let line = line.trim();
    let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = rest.trim().to_string();
    let need = |what: &str| -> Result<String, String> {
        if rest.is_empty() {
            Err(format!("`{word}` needs {what}"))
        } else {
            Ok(rest.clone())
        }
    };
    Ok(match word {
        "answer" | "a" => Typed::Act(HumanAct::Answer(need("the answer")?)),
        "approve" | "y" => Typed::Act(HumanAct::Approve((!rest.is_empty()).then(|| rest.clone()))),
        "deny" | "n" => Typed::Act(HumanAct::Deny(need("a reason")?)),
        "inject" | "i" => Typed::Inject(need("a message")?),
        "pause" => Typed::Pause,
        "resume" => Typed::Resume,
        "cancel" => Typed::Cancel,
        "step" => Typed::Step,
        "breakpoint" | "b" => breakpoint(&rest)?,
        "skip" => step_override(word, &rest, StepOverrideState::Skipped)?,
        "done" => step_override(word, &rest, StepOverrideState::Done)?,
        "detach" | "quit" | "exit" => Typed::Detach,
        "help" | "?" | "" => Typed::Help,
        other => return Err(format!("unknown command `{other}`; {HELP}")),
    })
}

/// Carries out a typed command; the line to print.
fn apply(cfg: &Config, store: &mut Store, id: TaskId, typed: Typed) -> anyhow::Result<String> {
    let s = match typed {
        Typed::Act(act) => Steer::Reply(act),
        Typed::Inject(text) => Steer::Inject(text),
        Typed::Pause => Steer::Pause,
        Typed::Resume => Steer::Resume,
        Typed::Cancel => Steer::Cancel,
        Typed::Step => Steer::Step,
        Typed::Breakpoint(step, position, active) => Steer::Breakpoint {
            step,
            position,
            active,
        },
        Typed::ClearBreakpoints => Steer::ClearBreakpoints,
        Typed::Override(step, state, reason) => Steer::StepOverride {
            step,
            state,
            reason,
        },
        Typed::Help | Typed::Detach => return Ok(HELP.into()),
    };
    Ok(steer(cfg, store, &id.to_string(), s, &who())?)
}

pub(crate) async fn attach(cfg: &Config, args: IdArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(cfg)?;
    let t = store.require(&args.id)?;
    let id = t.id;
    outln!("attached to {id} ({}); {HELP}", t.state);
    let follower = tokio::spawn(follow(cfg.clone(), id));
    let mut lines = stdin_lines();
    let mut stdin_open = true;
    let mut follower = std::pin::pin!(follower);
    loop {
        tokio::select! {
            ended = &mut follower => {
                let state = ended??;
                return Ok(exit_for(state));
            }
            line = lines.recv(), if stdin_open => {
                let Some(line) = line else {
                    // Input closed: keep following until the task ends.
                    stdin_open = false;
                    continue;
                };
                let typed = match parse(&line) {
                    Ok(t) => t,
                    Err(e) => {
                        outln!("{e}");
                        continue;
                    }
                };
                if typed == Typed::Detach {
                    outln!("detached; the task goes on");
                    return Ok(ExitCode::SUCCESS);
                }
                let cfg = cfg.clone();
                let done = tokio::task::spawn_blocking(move || {
                    let mut store = open_existing_store(&cfg)?;
                    apply(&cfg, &mut store, id, typed)
                })
                .await?;
                match done {
                    Ok(msg) => outln!("{msg}"),
                    Err(e) => outln!("error: {e:#}"),
                }
            }
        }
    }
}

/// The terminal's lines, read on a thread of their own: a read blocked on
/// stdin must not keep the process from exiting when the task ends.
fn stdin_lines() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Prints the task's events and its servos' audit lines until it ends;
/// returns how it ended.
async fn follow(cfg: Config, id: TaskId) -> anyhow::Result<crate::state::TaskState> {
    let store = open_existing_store(&cfg)?;
    let live = super::live::LiveLog::connect(&cfg).await?;
    let mut printed = 0usize;
    let mut seen: HashSet<String> = HashSet::new();
    let mut listed_err: Option<String> = None;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    loop {
        let events = store.events(id)?;
        for e in events.iter().skip(printed) {
            let what = match (&e.kind, &e.actor) {
                (Some(k), Some(by)) => format!("{k} by {by}"),
                (Some(k), None) => k.clone(),
                _ => format!("→ {}", e.to),
            };
            outln!(
                "[event] {what} {}",
                output::clean(e.detail.as_deref().unwrap_or(""))
            );
        }
        let before = printed;
        printed = events.len();
        let t = store.require(&id.to_string())?;
        if printed > before
            && let Some(w) = &t.waiting_for
        {
            outln!("> {}", output::clean(&output::waiting_line(w)));
            if let Some(asked) = t.approval_asked() {
                outln!("  {}", output::clean(&asked));
            }
            outln!(
                "  (type {})",
                match w {
                    saheeli_protocol::human::Waiting::Answer { .. }
                    | saheeli_protocol::human::Waiting::Blocked { .. } => "answer TEXT",
                    _ => "approve [NOTE] or deny REASON",
                }
            );
        }
        while let Ok(line) = rx.try_recv() {
            outln!("{line}");
        }
        if t.state.is_terminal() {
            // The container's last lines may trail its ending a little.
            tokio::time::sleep(Duration::from_millis(300)).await;
            while let Ok(line) = rx.try_recv() {
                outln!("{line}");
            }
            return Ok(t.state);
        }
        match live.containers(&t).await {
            Ok(found) => {
                for (d, cid) in found {
                    if seen.insert(cid.clone()) {
                        outln!("[following container {}]", short(&cid));
                        tokio::spawn(container_lines(d, cid, tx.clone()));
                    }
                }
                listed_err = None;
            }
            // Said once per cause, not every 200 ms.
            Err(e) => {
                let why = format!("{e:#}");
                if listed_err.as_ref() != Some(&why) {
                    outln!(
                        "[cannot list the task's containers: {}]",
                        output::clean(&why)
                    );
                    listed_err = Some(why);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How long a followed log may stay silent before it is opened again: a
/// follow the daemon never feeds (a loaded daemon, a log opened while its
/// container was starting) must not hide the lines that come after. Each
/// quiet reopen doubles it (a reopen reads the log from its start), up
/// to [`QUIET_MAX`]; a line resets it.
const QUIET_REOPEN: Duration = Duration::from_secs(5);
const QUIET_MAX: Duration = Duration::from_secs(60);

/// Sends a container's audit lines (its log) as they come.
async fn container_lines(
    d: bollard::Docker,
    cid: String,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) {
    // A log followed before its container started, cut off, failed or
    // quiet for a while is followed again, the lines already sent
    // skipped, until the container is gone or the attach ended.
    let mut sent = 0usize;
    let mut quiet = QUIET_REOPEN;
    while !tx.is_closed() {
        let opts = bollard::query_parameters::LogsOptionsBuilder::default()
            .stdout(true)
            .follow(true)
            .build();
        let mut stream = d.logs(&cid, Some(opts));
        let mut n = 0usize;
        let mut failed = false;
        let mut fed = false;
        while let Ok(item) = tokio::time::timeout(quiet, stream.next()).await {
            let Some(item) = item else { break };
            let chunk = match item {
                Ok(chunk) => chunk,
                Err(e) => {
                    let why = output::clean(&crate::text::error_chain(&e));
                    let _ = tx.send(format!("[container {} log: {why}]", short(&cid)));
                    failed = true;
                    break;
                }
            };
            for line in chunk.to_string().lines() {
                n += 1;
                if n > sent {
                    sent = n;
                    fed = true;
                    if tx.send(output::audit_line(line)).is_err() {
                        return;
                    }
                }
            }
        }
        drop(stream);
        quiet = if fed {
            QUIET_REOPEN
        } else {
            (quiet * 2).min(QUIET_MAX)
        };
        if failed && is_gone(&d, &cid).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A container id as tables show it.
fn short(cid: &str) -> &str {
    &cid[..cid.len().min(12)]
}

/// Whether the daemon no longer has container `cid` (a failed inspect for
/// another cause is not taken for its end).
async fn is_gone(d: &bollard::Docker, cid: &str) -> bool {
    matches!(
        d.inspect_container(cid, None).await,
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        })
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_commands_parse() {
        assert_eq!(
            parse("answer use the main branch").unwrap(),
            Typed::Act(HumanAct::Answer("use the main branch".into()))
        );
        assert_eq!(
            parse("approve").unwrap(),
            Typed::Act(HumanAct::Approve(None))
        );
        assert_eq!(
            parse("deny too risky").unwrap(),
            Typed::Act(HumanAct::Deny("too risky".into()))
        );
        assert!(parse("deny").is_err());
        assert!(parse("answer").is_err());
        assert_eq!(
            parse("inject try X").unwrap(),
            Typed::Inject("try X".into())
        );
        assert_eq!(parse(" pause ").unwrap(), Typed::Pause);
        assert_eq!(parse("detach").unwrap(), Typed::Detach);
        assert_eq!(parse("step").unwrap(), Typed::Step);
        assert_eq!(
            parse("breakpoint deploy before").unwrap(),
            Typed::Breakpoint("deploy".into(), Position::Before, true)
        );
        assert_eq!(
            parse("breakpoint deploy after clear").unwrap(),
            Typed::Breakpoint("deploy".into(), Position::After, false)
        );
        assert!(parse("breakpoint deploy middle").is_err());
        assert!(parse("breakpoint").is_err());
        assert_eq!(parse("breakpoint clear").unwrap(), Typed::ClearBreakpoints);
        assert_eq!(
            parse("skip announce done by hand").unwrap(),
            Typed::Override(
                "announce".into(),
                StepOverrideState::Skipped,
                "done by hand".into()
            )
        );
        assert_eq!(
            parse("done check seen green in CI").unwrap(),
            Typed::Override(
                "check".into(),
                StepOverrideState::Done,
                "seen green in CI".into()
            )
        );
        assert!(parse("skip announce").is_err());
        assert!(parse("rm -rf /").is_err());
    }
}
