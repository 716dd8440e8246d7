//! The retry policy (issue 30): whether an ended attempt is tried again,
//! where the next attempt starts (`retry_from`), how long it waits
//! (`retry_backoff`), what the chain of attempts has left, and the note
//! its model is given. Pure: `finish` carries the decision out.

use std::time::Duration;

use saheeli_protocol::Reason;
use saheeli_protocol::attempt::{Backoff, RetryFrom};

use crate::spec::{Chain, TaskSpec, Used};
use crate::store::{Outcome, TaskRow};

/// The retry policy (Kubernetes Job semantics): another attempt when the
/// reason is one `retry_on` lists, another attempt can help, and fewer
/// than `retries` + 1 attempts were made.
pub(super) fn should_retry(
    reason: Reason,
    retry_on: &[String],
    attempt: i64,
    retries: u32,
) -> bool {
    !reason.is_final()
        && retry_on.iter().any(|r| r == reason.code())
        && attempt <= i64::from(retries)
}

/// How long an infrastructure failure waits in the queue before it is
/// claimed again (`requeue_backoff`); `requeues`: how many came before.
pub(super) fn requeue_delay(backoff: &Backoff, requeues: i64, jitter: f64) -> Duration {
    let n = u32::try_from(requeues.max(0))
        .unwrap_or(u32::MAX)
        .saturating_add(1);
    backoff.delay(n, jitter)
}

/// The next attempt, decided.
#[derive(Debug, PartialEq)]
pub(super) struct Next {
    /// Its spec: the ended attempt's, with the chain filled in.
    pub spec: TaskSpec,
    /// How long it waits in the queue.
    pub delay: Duration,
}

/// What the ended attempt left behind, as `plan` needs it.
pub(super) struct Ended<'a> {
    pub task: &'a TaskRow,
    pub reason: Reason,
    pub outcome: &'a Outcome,
    /// Its detail so far (how it exited, what was collected).
    pub detail: &'a str,
    /// How long it ran, in ms.
    pub ran_ms: i64,
}

/// The next attempt of `ended` (already found worth retrying), or why
/// there is none: the chain's budget is spent.
pub(super) fn plan(ended: &Ended<'_>, jitter: f64) -> Result<Next, String> {
    let task = ended.task;
    let spec = &task.spec;
    let this = Used {
        steps: ended.outcome.steps.max(0) as u64,
        tokens: (ended.outcome.input_tokens + ended.outcome.output_tokens).max(0) as u64,
        cost: ended.outcome.cost_usd.max(0.0),
    };
    let used = spec
        .chain
        .as_ref()
        .map(|c| c.used)
        .unwrap_or_default()
        .plus(this);
    let mut next = spec.clone();
    next.chain = Some(Chain {
        from: task.id,
        mode: RetryFrom::Scratch,
        note: String::new(),
        used,
    });
    let left = next.left();
    if let Some(budget) = left.spent() {
        return Err(format!(
            "not retried: the attempts so far spent `{budget}` (set `budget_per_attempt: true` \
             to give each attempt its own)"
        ));
    }
    let mode = spec
        .retry_from
        .unwrap_or_else(|| RetryFrom::default_for(ended.reason.code()));
    let attempt = task.attempt + 1;
    let chain = next.chain.as_mut().expect("set above");
    chain.mode = mode;
    if mode != RetryFrom::Scratch {
        chain.note = note(
            ended,
            attempt,
            mode,
            &left.describe(spec.max_steps),
            spec.timeout_s,
        );
    }
    let waits = u32::try_from(task.attempt.max(1)).unwrap_or(u32::MAX);
    Ok(Next {
        spec: next,
        delay: spec.retry_backoff.delay(waits, jitter),
    })
}

/// Where a retry from the session goes on from, in its note.
const SESSION_FROM: &str = "your conversation so far and the workspace as it left it";

/// The note of a retry from the session whose agent's own conversation
/// is not restored (issue 51): it says plainly that it starts over, and why.
pub(super) fn starts_over(note: &str, why: &str) -> String {
    note.replacen(
        SESSION_FROM,
        &format!(
            "the workspace as it left it, but it starts over with a fresh conversation ({why})"
        ),
        1,
    )
}

/// Longest detail of the ended attempt quoted to the model.
const MAX_DETAIL: usize = 400;

/// What the model of the next attempt is told (the servo adds the last
/// tool call, which it reads from the sealed session).
fn note(ended: &Ended<'_>, attempt: i64, mode: RetryFrom, left: &str, timeout_s: u64) -> String {
    // How it exited (`exit 137`), without what was collected where: the
    // servo is told no host paths.
    let exited = ended.detail.split(';').next().unwrap_or_default().trim();
    let mut detail: String = exited.chars().take(MAX_DETAIL).collect();
    if detail.len() < exited.len() {
        detail.push('…');
    }
    let ran = humantime::format_duration(Duration::from_secs((ended.ran_ms.max(0) / 1000) as u64));
    let from = match mode {
        RetryFrom::Session => SESSION_FROM,
        _ => "the workspace as it left it (a fresh conversation)",
    };
    let total = ended.task.spec.retries + 1;
    format!(
        "[saheeli] Attempt {} of this task ended: {}{}, after running for {ran}. \
         This is attempt {attempt} of {total}; it goes on from {from}. \
         Budget left for it: {left}, and {}s of time. \
         Check the state of the workspace before you go on, and avoid what ended the last attempt.",
        ended.task.attempt,
        why(ended.reason),
        if detail.is_empty() {
            String::new()
        } else {
            format!(" ({detail})")
        },
        timeout_s,
    )
}

/// The reason in words for the model.
fn why(reason: Reason) -> String {
    match reason {
        Reason::Oom => "it ran out of memory (`oom`: the container was killed)".into(),
        Reason::Timeout => "its time ran out (`timeout`)".into(),
        Reason::Terminated => "its servo was stopped (`terminated`)".into(),
        Reason::Lost => "its servo was lost (`lost`)".into(),
        Reason::LlmError => "the model could not be reached (`llm_error`)".into(),
        r => format!("`{r}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requeues_back_off_to_half_a_minute() {
        let b = crate::config::REQUEUE_BACKOFF;
        let secs: Vec<u64> = (-1..8)
            .map(|n| requeue_delay(&b, n, 0.5).as_secs())
            .collect();
        assert_eq!(secs, [1, 1, 2, 4, 8, 16, 32, 32, 32]);
    }

    #[test]
    fn retry_policy() {
        let on = vec![
            "timeout".to_string(),
            "exit".to_string(),
            "budget".to_string(),
        ];
        assert!(should_retry(Reason::Timeout, &on, 1, 1));
        assert!(
            !should_retry(Reason::Timeout, &on, 2, 1),
            "attempts used up"
        );
        assert!(should_retry(Reason::Exit(137), &on, 1, 2));
        assert!(!should_retry(Reason::MaxSteps, &on, 1, 2), "not listed");
        assert!(!should_retry(Reason::Budget, &on, 1, 2), "never helps");
    }

    /// A stored task (the defaults but `retries: 3`, `max_steps: 50`),
    /// changed by `f`.
    fn row(f: impl FnOnce(&mut TaskSpec)) -> TaskRow {
        let d = tempfile::tempdir().unwrap();
        let mut spec = crate::store::tests::spec("t");
        spec.retries = 3;
        spec.max_steps = 50;
        f(&mut spec);
        let mut store = crate::store::Store::open(&d.path().join("db")).unwrap();
        let id = saheeli_protocol::TaskId::new();
        store.submit(id, &spec, 0, None, 1).unwrap();
        store.get(&id.to_string()).unwrap().unwrap()
    }

    fn outcome(steps: i64, tokens: i64) -> Outcome {
        Outcome {
            steps,
            input_tokens: tokens,
            ..Default::default()
        }
    }

    #[test]
    fn where_a_retry_starts_by_reason_and_setting() {
        let task = row(|_| {});
        let o = outcome(3, 100);
        let ended = |reason| Ended {
            task: &task,
            reason,
            outcome: &o,
            detail: "exit 137; collected 3 files into /srv/results/x",
            ran_ms: 42_000,
        };
        let next = plan(&ended(Reason::Oom), 0.5).unwrap();
        let chain = next.spec.chain.unwrap();
        assert_eq!(chain.mode, RetryFrom::Session);
        assert_eq!(chain.from, task.id);
        assert!(chain.note.contains("ran out of memory"), "{}", chain.note);
        assert!(chain.note.contains("42s"), "{}", chain.note);
        assert!(chain.note.contains("(exit 137)"), "{}", chain.note);
        assert!(
            !chain.note.contains("/srv"),
            "no host paths: {}",
            chain.note
        );
        assert!(chain.note.contains("attempt 2 of 4"), "{}", chain.note);
        assert!(chain.note.contains("47 of 50 steps"), "{}", chain.note);
        let next = plan(&ended(Reason::VerificationFailed), 0.5).unwrap();
        let chain = next.spec.chain.unwrap();
        assert_eq!(chain.mode, RetryFrom::Scratch);
        assert!(chain.note.is_empty());
        let task = row(|s| s.retry_from = Some(RetryFrom::Workspace));
        let ended = Ended {
            task: &task,
            reason: Reason::VerificationFailed,
            outcome: &o,
            detail: "",
            ran_ms: 0,
        };
        let chain = plan(&ended, 0.5).unwrap().spec.chain.unwrap();
        assert_eq!(chain.mode, RetryFrom::Workspace);
        assert!(chain.note.contains("fresh conversation"), "{}", chain.note);
    }

    #[test]
    fn an_agent_not_restored_is_told_it_starts_over() {
        let task = row(|_| {});
        let o = outcome(1, 10);
        let ended = Ended {
            task: &task,
            reason: Reason::Lost,
            outcome: &o,
            detail: "",
            ran_ms: 0,
        };
        let note = plan(&ended, 0.5).unwrap().spec.chain.unwrap().note;
        let told = starts_over(&note, "`restore_incomplete`: its session file is not there");
        assert!(!told.contains("your conversation so far"), "{told}");
        assert!(
            told.contains("starts over with a fresh conversation"),
            "{told}"
        );
        assert!(told.contains("restore_incomplete"), "{told}");
    }

    #[test]
    fn the_chain_adds_up_and_a_spent_budget_ends_it() {
        let mut task = row(|s| {
            s.max_steps = 10;
            s.max_tokens = Some(1000);
        });
        let o = outcome(4, 600);
        let ended = Ended {
            task: &task,
            reason: Reason::Timeout,
            outcome: &o,
            detail: "",
            ran_ms: 0,
        };
        let next = plan(&ended, 0.5).unwrap();
        assert_eq!(next.spec.chain.as_ref().unwrap().used.steps, 4);
        assert_eq!(next.spec.left().steps, 6);
        assert_eq!(next.spec.left().tokens, Some(400));
        // The second attempt spends the rest of the tokens.
        task.spec = next.spec;
        task.attempt = 2;
        let o = outcome(2, 400);
        let ended = Ended {
            task: &task,
            reason: Reason::Timeout,
            outcome: &o,
            detail: "",
            ran_ms: 0,
        };
        let e = plan(&ended, 0.5).unwrap_err();
        assert!(e.contains("`max_tokens`"), "{e}");
        // Each attempt its own budget: retried, with all of it.
        task.spec.budget_per_attempt = true;
        let ended = Ended {
            task: &task,
            reason: Reason::Timeout,
            outcome: &o,
            detail: "",
            ran_ms: 0,
        };
        let next = plan(&ended, 0.5).unwrap();
        assert_eq!(next.spec.chain.as_ref().unwrap().used.tokens, 1000);
        assert_eq!(next.spec.left().tokens, Some(1000));
    }

    #[test]
    fn retries_back_off() {
        let mut task = row(|_| {});
        let o = outcome(0, 0);
        let delays: Vec<u64> = (1..=8)
            .map(|attempt| {
                task.attempt = attempt;
                let ended = Ended {
                    task: &task,
                    reason: Reason::Lost,
                    outcome: &o,
                    detail: "",
                    ran_ms: 0,
                };
                plan(&ended, 0.5).unwrap().delay.as_secs()
            })
            .collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 320, 600, 600]);
    }
}
