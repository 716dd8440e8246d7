//! A collected servo's ending: what it used (the gateway's count beats
//! the servo's), its completion, whether its checks passed, and so its
//! state and reason (`outcome::classify`), recorded by `finish`.

use saheeli_protocol::{Reason, ServoExit, TaskId};
use tracing::{error, warn};

use super::finish::finish;
use super::outcome::{Completion, Ending, classify};
use super::watch::{Ended, Metered, Watched};
use super::{Ctx, Joined};
use crate::collect;
use crate::state::TaskState;
use crate::store::Outcome;

/// What the supervisor learnt about a servo besides its workspace.
pub(super) struct Seen {
    pub watched: Watched,
    pub oom: bool,
    pub metered: Option<Metered>,
    pub collect_ms: u128,
    /// `report: synthesized`: the section, or why there is none.
    pub synthesis: Option<Result<String, String>>,
    /// The task verifies (`verify:` in its spec).
    pub verifies: bool,
}

/// Reads what was collected (usage, completion), decides the outcome and
/// records it.
pub(super) async fn conclude(
    ctx: &Ctx,
    id: TaskId,
    dest: &std::path::Path,
    collected: anyhow::Result<collect::Collected>,
    seen: Seen,
) -> Joined {
    let Seen {
        watched,
        oom,
        metered,
        collect_ms,
        synthesis,
        verifies,
    } = seen;
    let dest = dest.to_path_buf();
    let mut outcome = Outcome {
        results_path: Some(dest.display().to_string()),
        synthesis,
        ..Default::default()
    };
    let servo_said = count_usage(id, &dest, &mut outcome).await;

    let collected = match collected {
        Ok(c) => c,
        Err(e) => {
            let detail = format!("collect: {e:#}");
            error!(task_id = %id, error = %detail, "collection failed");
            outcome.results_path = None;
            return finish(
                ctx,
                id,
                TaskState::Failed,
                Reason::Collect,
                outcome,
                &detail,
            )
            .await;
        }
    };
    let cap = ctx.cfg.file.max_results_size.0;
    let ended = ending_words(&watched.ended, servo_said.as_deref());
    let mut detail = describe(id, ended, &collected, collect_ms, &dest, cap);
    // A servo that could not run its task says why (never the agent: the
    // file is in the servo's own directory).
    if watched.exit() == Some(i64::from(ServoExit::BadTask.code()))
        && let Some(why) = collect::servo_error(&dest)
    {
        detail.push_str(&format!("; the servo: {why}"));
    }

    let completion = match collect::read_completion(&dest, id) {
        Ok(Some(c)) => {
            outcome.steps = c.steps.into();
            outcome.input_tokens = c.usage.input_tokens as i64;
            outcome.output_tokens = c.usage.output_tokens as i64;
            Completion::Valid
        }
        Ok(None) => Completion::Absent,
        Err(why) => {
            detail.push_str(&format!("; invalid complete.json: {why}"));
            Completion::Invalid(why)
        }
    };
    // What the gateway counted beats what the servo says it used.
    if let Some(m) = &metered {
        outcome.input_tokens = m.input;
        outcome.output_tokens = m.output;
        outcome.cost_usd = m.cost;
        (outcome.cache_read_tokens, outcome.cache_write_tokens) = m.cached;
        // A third-party agent's steps are its LLM calls (its servo counts
        // none), as `max_steps` counts them and status shows them live.
        if outcome.steps == 0 {
            outcome.steps = m.calls;
        }
    }
    let verified = if verifies {
        verified(ctx, id, watched.exit()).await
    } else {
        None
    };
    let ending = Ending {
        verified,
        stopped: watched.stopped,
        truncated: collected.truncated,
        completion,
        timed_out: watched.timed_out,
        oom,
        exit: watched.exit(),
        gateway_fatal: metered.and_then(|m| m.fatal),
    };
    let (state, reason) = classify(&ending);
    finish(ctx, id, state, reason, outcome, &detail).await
}

/// For a task that verifies: whether its last attempt passed (the
/// foreman's own rows, never the agent's files) and the servo then exited
/// 0, as it does only right after a passing verdict.
async fn verified(ctx: &Ctx, id: TaskId, exit: Option<i64>) -> Option<bool> {
    let r = ctx.db(move |s| s.verify_passed(id)).await;
    match r {
        Ok(passed) => Some(passed && exit == Some(0)),
        Err(e) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "verification records not read");
            None
        }
    }
}

/// Steps and tokens from the collected audit log (the servo's account;
/// the gateway's, when there is one, replaces the tokens later); the
/// detail of its `finish` event.
pub(super) async fn count_usage(
    id: TaskId,
    dest: &std::path::Path,
    outcome: &mut Outcome,
) -> Option<String> {
    let dest = dest.to_path_buf();
    match tokio::task::spawn_blocking(move || collect::audit_totals(&dest, id)).await {
        Ok(Ok(t)) => {
            outcome.steps = t.steps.into();
            outcome.input_tokens = t.usage.input_tokens as i64;
            outcome.output_tokens = t.usage.output_tokens as i64;
            outcome.cache_read_tokens = t.usage.cache_read_tokens as i64;
            outcome.cache_write_tokens = t.usage.cache_write_tokens as i64;
            outcome.compactions = t.compactions.into();
            t.detail
        }
        Ok(Err(e)) => {
            warn!(task_id = %id, error = %e, "audit log not counted");
            None
        }
        Err(e) => {
            error!(task_id = %id, error = %e, "audit log reader panicked");
            None
        }
    }
}

/// How the servo ended, for people. A third-party agent that failed is
/// told by the servo's account in its audit log (the agent's own exit
/// code and last words), not by the servo's exit code: status, the
/// report and the dashboard then say what the audit log says.
fn ending_words(exit: &Ended, servo_said: Option<&str>) -> String {
    let agent_failed = i64::from(ServoExit::AgentFailed.code());
    match (exit, servo_said) {
        (Ended::Exited(code), Some(said)) if *code == agent_failed => said.to_string(),
        (Ended::Exited(code), _) => format!("exit {code}"),
        (Ended::WaitFailed(e), _) => format!("wait failed: {e:#}"),
        (Ended::Lost(why), _) => format!("lost: {why}"),
    }
}

/// The ending's detail for people (how the servo exited, what was
/// collected, what was redacted), logging what an operator should know.
fn describe(
    id: TaskId,
    exit_desc: String,
    collected: &collect::Collected,
    collect_ms: u128,
    dest: &std::path::Path,
    cap: u64,
) -> String {
    if !collected.skipped.is_empty() {
        warn!(task_id = %id, skipped = collected.skipped.len(), first = %collected.skipped[0], "unsafe entries not collected");
    }
    let mut detail = format!(
        "{exit_desc}; collected {} files, {} bytes in {collect_ms} ms into {}",
        collected.files,
        collected.bytes,
        dest.display()
    );
    if !collected.redacted.is_empty() {
        warn!(task_id = %id, redacted = %collected.redacted.join(", "), "API key found in the workspace; redacted");
        detail.push_str(&format!("; redacted {}", collected.redacted.join(", ")));
    }
    if collected.truncated {
        warn!(task_id = %id, cap, "results over the size cap; collection stopped");
    }
    detail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_agent_is_told_by_its_own_exit_and_last_words() {
        let said = "agent `custom (sh)` exited with code 7; its last words: boom";
        let cases = [
            (Ended::Exited(10), Some(said), said),
            (Ended::Exited(10), None, "exit 10"),
            // Another ending keeps the servo's code.
            (Ended::Exited(1), Some("max steps"), "exit 1"),
            (Ended::Exited(0), None, "exit 0"),
            (Ended::Lost("gone".into()), Some(said), "lost: gone"),
        ];
        for (exit, servo_said, want) in cases {
            assert_eq!(ending_words(&exit, servo_said), want, "{exit:?}");
        }
    }
}
