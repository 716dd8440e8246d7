//! Tasks as `--json` prints them: the shapes scripts rely on.

use serde::Serialize;

use crate::state::TaskState;
use crate::store::{EventRow, Override, TaskRow, now_ms};
use crate::text::time;

/// A task as `--json` prints it.
#[derive(Debug, Serialize)]
pub(crate) struct TaskView {
    pub id: String,
    pub title: String,
    pub state: String,
    /// Why it ended: a code from a fixed set (`max_steps`, `exit 137`, …).
    pub reason: Option<String>,
    /// For an ended or waiting task: whether an answer, approval, resume,
    /// unblock or `task retry` can move it on (null while it runs).
    pub recoverable: Option<bool>,
    /// What happened, for people.
    pub detail: Option<String>,
    pub model: String,
    /// Who ran it: `saheeli` (the built-in loop), `mini-swe-agent`, … (issue 25).
    pub agent: String,
    /// The `agent_types:` entry it ran as (issue 52), if any.
    pub agent_type: Option<String>,
    pub priority: i64,
    /// The task's `deadline:` (RFC 3339), when it has one.
    pub deadline: Option<String>,
    pub steps: i64,
    pub tokens: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// USD, from the price table in config.yaml (0 when no price is known).
    pub cost_usd: f64,
    /// Input tokens the provider read from its prompt cache (part of
    /// `input_tokens`; issue 26).
    pub cache_read_tokens: i64,
    /// Input tokens the provider wrote to its prompt cache.
    pub cache_write_tokens: i64,
    /// `cache_read_tokens / input_tokens` (0 without input).
    pub cache_hit_rate: f64,
    /// Times the servo compacted the conversation to fit the model's window.
    pub compactions: i64,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub duration_s: Option<f64>,
    /// The results directory, once collected.
    pub results: Option<String>,
    pub retry_of: Option<String>,
    /// The task this one was forked from (`task fork`), with the step it
    /// went on from and which fork of how many it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<serde_json::Value>,
    /// Best-of-N (issue 51): a task's samples and how far they got (one
    /// task in detail), or a sample's place (`task`, `index`, `count`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_of: Option<serde_json::Value>,
    /// 1 for the first attempt; retries (by policy or `task retry`) count up.
    pub attempt: i64,
    pub prompt: String,
    /// The servo container while it exists.
    pub container: Option<String>,
    pub cancel_requested: bool,
    /// What a `waiting_human` or `blocked` task waits for: `{"kind":
    /// "answer", "question"}`, `{"kind": "approval", "tool", "arguments"}`,
    /// `{"kind": "plan", "plan"}` or `{"kind": "blocked", "reason",
    /// "needed"}`; null otherwise.
    pub waiting_for: Option<saheeli_protocol::human::Waiting>,
    /// Waiting on a step's approval that names its approvers or a
    /// message: who may decide, and the message (issue 52).
    pub approval: Option<String>,
    /// A pause was asked for (the task is `paused`, or will be before its
    /// next LLM call).
    pub pause_requested: bool,
    /// Waiting without a container (its workspace kept).
    pub parked: bool,
    /// A call of the running task waits for its turn in the provider's
    /// rate limit (`waiting for provider rate limit`; issue 26).
    pub rate_limited: bool,
    /// Since when it waits for a human (`waiting_human` or `paused`).
    pub waiting_since: Option<String>,
    /// Its servo is frozen while it waits (`suspend_after`, issue 51),
    /// and since when.
    pub frozen: bool,
    pub frozen_at: Option<String>,
    /// The snapshots it keeps (issue 51; one task in detail): each step
    /// kept, and what that snapshot added on disk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<Vec<super::SnapshotView>>,
    /// Set when a person overrode the outcome: `state` is what they gave it.
    #[serde(rename = "override", skip_serializing_if = "Option::is_none")]
    pub overridden: Option<OverrideView>,
    /// The newest events (one task in detail; at most a page of them,
    /// oldest first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<EventView>>,
    /// How many events the task has (shown with `events`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_total: Option<i64>,
    /// When older events than those shown exist: the `seq` to page from
    /// (`--events-before SEQ`, `?events_before=SEQ`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_before: Option<i64>,
    /// Calls to capability (MCP) tools it made (absent when none).
    #[serde(skip_serializing_if = "is_zero")]
    pub capability_calls: i64,
    /// Requests of its container the gateway refused at its caps or gates
    /// (absent when none): a flood, or calls no human approved.
    #[serde(skip_serializing_if = "is_zero")]
    pub gateway_refused: i64,
    /// Its webhook deliveries (when it has any): delivered, pending, dead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhooks: Option<crate::store::WebhookCounts>,
    /// Every attempt of this task, oldest first (one task each).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptView>>,
    /// A template's steps with their state and evidence (one task in
    /// detail; empty when the prompt has no `steps:`). Not `steps`: that
    /// is the number of agent steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template_steps: Option<Vec<super::StepView>>,
    /// A queued task is not claimed before this: a retry waiting out its
    /// `retry_backoff`, or a requeue's delay; kept once it ran (null when
    /// it never had to wait; issue 30).
    pub not_before: Option<String>,
    /// Parent and child tasks (issue 30; one task in detail): the task
    /// that spawned it, its children (their last attempts) and the totals
    /// of its tree (itself and every descendant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub children: Option<Vec<super::ChildView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<super::TreeTotals>,
    /// What its last graded verify gave (issue 49; absent when none
    /// graded): the primary reward, every key of the reward file, and
    /// the tests its output counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reward: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewards: Option<std::collections::BTreeMap<String, f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests: Option<saheeli_protocol::verify::TestCounts>,
    /// Every connection its egress proxies were asked for (issue 50; one
    /// task in detail; absent when it had no proxy and asked for none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<crate::store::EgressEntry>>,
    /// How its set-up went (issue 50; absent without one): the cache
    /// key, `hit`, its time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup: Option<crate::task::SetupRan>,
    /// The repository and commit it started from (issue 52; absent for a
    /// directory workspace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git: Option<crate::task::GitStart>,
    /// Its branch as delivered (issue 52): `branch`, `commit`, `pushed`,
    /// `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<crate::task::Delivered>,
    /// The delivered task whose review it follows up (issue 52).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_up_of: Option<String>,
    /// The definitions template it was submitted by (issue 52).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The definitions repository's commit that template came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub definitions_commit: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct AttemptView {
    pub id: String,
    pub attempt: i64,
    pub state: String,
    pub reason: Option<String>,
    pub results: Option<String>,
}

impl AttemptView {
    pub fn new(t: &TaskRow) -> AttemptView {
        AttemptView {
            id: t.id.to_string(),
            attempt: t.attempt,
            state: t.state.to_string(),
            reason: t.reason.clone(),
            results: t.results_path.clone(),
        }
    }
}

/// `saheeli task override`, as `--json` shows it.
#[derive(Debug, Serialize)]
pub(crate) struct OverrideView {
    /// The state the task ended in before any override.
    pub from: String,
    /// The state it was given (the task's `state`).
    pub to: String,
    pub reason: String,
    /// The OS user.
    pub by: String,
    pub at: String,
}

impl OverrideView {
    pub fn new(o: &Override, state: TaskState) -> OverrideView {
        OverrideView {
            from: o.from.to_string(),
            to: state.to_string(),
            reason: o.reason.clone(),
            by: o.by.clone(),
            at: time(o.at),
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct EventView {
    /// Its place in the trail: pages of events start below one.
    pub seq: i64,
    pub at: String,
    pub from: Option<String>,
    pub to: String,
    pub detail: Option<String>,
    /// Set when the event is not a state change (`asked`, `answered`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// The share of input read from the provider's cache, to 4 places.
pub(crate) fn hit_rate(read: i64, input: i64) -> f64 {
    if input <= 0 {
        return 0.0;
    }
    ((read.max(0) as f64 / input as f64).min(1.0) * 10_000.0).round() / 10_000.0
}

pub(super) fn duration_ms(t: &TaskRow) -> Option<i64> {
    let start = t.started_at?;
    Some(t.finished_at.unwrap_or_else(now_ms) - start)
}

impl TaskView {
    /// With the grade of the last graded check among `checks`.
    /// Adds its egress ledger (when it had a proxy or asked for anything).
    pub fn with_egress(
        mut self,
        had_proxy: bool,
        entries: Vec<crate::store::EgressEntry>,
    ) -> TaskView {
        self.egress = (had_proxy || !entries.is_empty()).then_some(entries);
        self
    }

    pub fn with_grade(mut self, checks: &[saheeli_protocol::verify::Check]) -> TaskView {
        // A verifier's grade (an assessor's score, issue 51, is not a reward).
        let verify = saheeli_protocol::verify::CheckKind::Verify;
        let mut graded = checks.iter().rev().filter(|c| c.kind == verify);
        if let Some(g) = graded.find_map(|c| c.graded.as_ref()) {
            self.reward = Some(g.reward);
            self.rewards = Some(g.rewards.clone()).filter(|r| !r.is_empty());
            self.tests = g.tests;
        }
        self
    }

    pub fn new(t: &TaskRow, events: Option<&[EventRow]>) -> TaskView {
        // A servo frozen by a foreman that stopped is no longer frozen
        // once its task ended.
        let frozen = t.frozen_at.filter(|_| !t.state.is_terminal());
        TaskView {
            id: t.id.to_string(),
            title: t.title.clone(),
            state: t.state.to_string(),
            reason: t.reason.clone(),
            recoverable: super::recoverable(t.state, t.reason.as_deref()),
            detail: t.detail.clone(),
            model: t.spec.model.clone(),
            agent: t.spec.agent.label(),
            agent_type: t.spec.agent_type.clone(),
            priority: t.priority,
            deadline: t.spec.deadline_ms.map(time),
            steps: t.steps,
            tokens: t.input_tokens + t.output_tokens,
            input_tokens: t.input_tokens,
            output_tokens: t.output_tokens,
            cost_usd: t.cost_usd,
            cache_read_tokens: t.cache_read_tokens,
            cache_write_tokens: t.cache_write_tokens,
            cache_hit_rate: hit_rate(t.cache_read_tokens, t.input_tokens),
            compactions: t.compactions,
            created_at: time(t.created_at),
            started_at: t.started_at.map(time),
            finished_at: t.finished_at.map(time),
            duration_s: duration_ms(t).map(|ms| ms as f64 / 1000.0),
            results: t.results_path.clone(),
            retry_of: t.retry_of.map(|r| r.to_string()),
            forked_from: t.spec.forked_from.as_ref().map(|f| {
                serde_json::json!({"task": f.task.to_string(), "at_step": f.step,
                    "index": f.index, "count": f.count})
            }),
            samples: t.spec.samples.map(|p| {
                serde_json::json!({"count": p.count, "select": p.select.as_str(), "fork_at": p.fork_at})
            }),
            sample_of: t.spec.sample_of.map(|o| {
                let index = t.spec.sample_index(o.task).unwrap_or(o.index);
                serde_json::json!({"task": o.task.to_string(), "index": index, "count": o.count})
            }),
            attempt: t.attempt,
            prompt: t.spec.prompt_path.clone(),
            container: t.container_id.clone().filter(|_| !t.state.is_terminal()),
            cancel_requested: t.cancel_requested,
            waiting_for: t.waiting_for.clone(),
            approval: t.approval_asked(),
            pause_requested: t.pause_requested,
            parked: t.parked,
            rate_limited: t.rate_limited(now_ms()),
            waiting_since: t.waiting_since.map(time),
            frozen: frozen.is_some(),
            frozen_at: frozen.map(time),
            snapshots: None,
            overridden: t.overridden.as_ref().map(|o| OverrideView::new(o, t.state)),
            events: events.map(|evs| {
                evs.iter()
                    .map(|e| EventView {
                        seq: e.seq,
                        at: time(e.at),
                        from: e.from.map(|s| s.to_string()),
                        to: e.to.to_string(),
                        detail: e.detail.clone(),
                        kind: e.kind.clone(),
                        by: e.actor.clone(),
                    })
                    .collect()
            }),
            events_total: None,
            events_before: None,
            attempts: None,
            webhooks: None,
            capability_calls: t.capability_calls,
            gateway_refused: t.gateway_refused,
            template_steps: None,
            not_before: t.not_before.map(time),
            parent: None,
            children: None,
            tree: None,
            reward: None,
            rewards: None,
            tests: None,
            egress: None,
            setup: t.setup.clone(),
            git: t.git.clone(),
            delivery: t.delivered.clone(),
            follow_up_of: t.follow_up_of.map(|f| f.to_string()),
            template: t.spec.definitions.as_ref().map(|d| d.template.clone()),
            definitions_commit: t.spec.definitions.as_ref().map(|d| d.commit.clone()),
        }
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}
