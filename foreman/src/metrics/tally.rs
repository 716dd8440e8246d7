//! What the event trail and the call ledger add up to. Both only grow, so
//! each scrape reads on from where the last one stopped and adds the new
//! rows; a restarted foreman reads them again from the start and arrives
//! at the same counts (it is a counter reset for Prometheus, nothing more).

use std::collections::BTreeMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use saheeli_protocol::Reason;
use strum::IntoEnumIterator;

use super::labels::{ModelLabels, Models};
use crate::state::TaskState;
use crate::store::{ScrapeRead, ScrapeSink, TrailFact};

/// A task's run, from its first start to its end: a second to a day.
const DURATION_BUCKETS: &[f64] = &[
    1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
    43200.0, 86400.0,
];
/// One stay in the queue: 50 ms to a day.
const WAIT_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0,
];

/// The events that are not state changes; any other kind is `other`.
const HUMAN_KINDS: &[&str] = &[
    "asked",
    "answered",
    "approved",
    "denied",
    "injected",
    "pause_requested",
    "resumed",
    "breakpoint",
    "parked",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    state: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitingLabels {
    state: &'static str,
    parked: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: String,
    model: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    provider: String,
    model: String,
    kind: &'static str,
}

#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    input: u64,
    output: u64,
    cost: f64,
    cache_read: u64,
    cache_write: u64,
    compactions: u64,
}

impl Usage {
    fn add(&mut self, input: i64, output: i64, cost: f64) {
        self.input += input.max(0) as u64;
        self.output += output.max(0) as u64;
        self.cost += cost.max(0.0);
    }

    /// Cached input (read, written) and compactions (issue 26).
    fn add_long(&mut self, cached: (i64, i64), compactions: i64) {
        self.cache_read += cached.0.max(0) as u64;
        self.cache_write += cached.1.max(0) as u64;
        self.compactions += compactions.max(0) as u64;
    }
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS.iter().copied())
}

/// The sums kept between scrapes, and where to read on from.
#[derive(Debug)]
pub(super) struct Tally {
    pub trail_after: i64,
    pub calls_after: i64,
    transitions: BTreeMap<(&'static str, &'static str), u64>,
    human: BTreeMap<&'static str, u64>,
    /// Servos frozen and thawed (issue 51: `frozen`, `thawed` events).
    freezes: (u64, u64),
    durations: Family<StateLabels, Histogram, fn() -> Histogram>,
    queue_wait: Histogram,
    /// Usage of ended tasks (final); unended ones are added per scrape.
    ended: BTreeMap<ModelLabels, Usage>,
    calls: BTreeMap<ModelLabels, u64>,
    models: Models,
}

impl Tally {
    pub fn new(models: Models) -> Tally {
        let durations: Family<StateLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        for s in TaskState::iter().filter(|s| s.is_terminal()) {
            let _ = durations.get_or_create(&StateLabels { state: s.as_str() });
        }
        Tally {
            trail_after: 0,
            calls_after: 0,
            transitions: BTreeMap::new(),
            human: BTreeMap::new(),
            freezes: (0, 0),
            durations,
            queue_wait: Histogram::new(WAIT_BUCKETS.iter().copied()),
            ended: BTreeMap::new(),
            calls: BTreeMap::new(),
            models,
        }
    }
}

/// The reason label of a transition: the task's reason code into an end
/// state (`override` between end states), `none` otherwise.
fn reason_label(from: Option<TaskState>, to: TaskState, reason: Option<&str>) -> &'static str {
    if !to.is_terminal() {
        return "none";
    }
    if from.is_some_and(|f| f.is_terminal()) {
        return "override";
    }
    match reason.map(str::parse::<Reason>) {
        Some(Ok(r)) => r.code(),
        Some(Err(_)) => "other",
        None => "none",
    }
}

impl ScrapeSink for Tally {
    fn fact(&mut self, f: TrailFact) {
        if let Some(kind) = &f.kind {
            match kind.as_str() {
                "frozen" => self.freezes.0 += 1,
                "thawed" => self.freezes.1 += 1,
                _ => {
                    let kind = HUMAN_KINDS
                        .iter()
                        .find(|k| **k == kind.as_str())
                        .copied()
                        .unwrap_or("other");
                    *self.human.entry(kind).or_default() += 1;
                }
            }
            return;
        }
        let Some(to) = f.to else { return };
        let reason = reason_label(f.from, to, f.reason.as_deref());
        *self.transitions.entry((to.as_str(), reason)).or_default() += 1;
        if let Some(ms) = f.queued_ms {
            self.queue_wait.observe(ms.max(0) as f64 / 1000.0);
        }
        if let Some(e) = f.ended {
            if let Some(ms) = e.duration_ms {
                self.durations
                    .get_or_create(&StateLabels { state: to.as_str() })
                    .observe(ms.max(0) as f64 / 1000.0);
            }
            let l = self.models.label(&e.model);
            let u = self.ended.entry(l).or_default();
            u.add(e.input_tokens, e.output_tokens, e.cost_usd);
            u.add_long(e.cached, e.compactions);
        }
    }

    fn calls(&mut self, model: &str, calls: u64) {
        let l = self.models.label(model);
        *self.calls.entry(l).or_default() += calls;
    }
}

impl Tally {
    /// Adds the task metrics to `reg`: the sums kept here and the gauges of
    /// this scrape's `read`, at `now_ms`.
    pub fn register(&mut self, reg: &mut Registry, read: &ScrapeRead, now_ms: i64) {
        register_gauges(reg, read, now_ms);
        let transitions = Family::<TransitionLabels, Counter>::default();
        for ((state, reason), n) in &self.transitions {
            transitions
                .get_or_create(&TransitionLabels { state, reason })
                .inc_by(*n);
        }
        reg.register(
            "task_transitions",
            "Task state changes by the state entered and, into an end state, the reason \
             (from the event trail, as `task status ID` lists them)",
            transitions,
        );
        let human = Family::<KindLabels, Counter>::default();
        for kind in HUMAN_KINDS.iter().chain(["other"].iter()) {
            human
                .get_or_create(&KindLabels { kind })
                .inc_by(self.human.get(kind).copied().unwrap_or(0));
        }
        reg.register(
            "task_human_events",
            "Events of humans in the loop by kind (asked, answered, approved, parked and the others)",
            human,
        );
        for (name, help, n) in [
            (
                "servo_freezes",
                "Servos frozen while their task waited (`suspend_after`)",
                self.freezes.0,
            ),
            (
                "servo_thaws",
                "Frozen servos thawed (an answer came, a stop)",
                self.freezes.1,
            ),
        ] {
            let c = Counter::<u64>::default();
            c.inc_by(n);
            reg.register(name, help, c);
        }
        reg.register(
            "task_duration_seconds",
            "Ended tasks from their first start to their end, by end state \
             (`duration_s` of `task status`)",
            self.durations.clone(),
        );
        reg.register(
            "task_queue_wait_seconds",
            "Each stay of a task in the queue, from `queued` to `starting`",
            self.queue_wait.clone(),
        );
        self.register_usage(reg, read);
    }

    fn register_usage(&mut self, reg: &mut Registry, read: &ScrapeRead) {
        let mut usage = self.ended.clone();
        for u in &read.unended {
            let l = self.models.label(&u.model);
            let sum = usage.entry(l).or_default();
            sum.add(u.input_tokens, u.output_tokens, u.cost_usd);
            sum.add_long(u.cached, u.compactions);
        }
        let calls = Family::<ModelLabels, Counter>::default();
        for (l, n) in &self.calls {
            calls.get_or_create(l).inc_by(*n);
        }
        let tokens = Family::<TokenLabels, Counter>::default();
        let cached = Family::<CacheLabels, Counter>::default();
        let compactions = Family::<ModelLabels, Counter>::default();
        let cost = Family::<ModelLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
        for (l, u) in &usage {
            for (direction, n) in [("input", u.input), ("output", u.output)] {
                tokens
                    .get_or_create(&TokenLabels {
                        provider: l.provider.clone(),
                        model: l.model.clone(),
                        direction,
                    })
                    .inc_by(n);
            }
            cost.get_or_create(l).inc_by(u.cost);
            for (kind, n) in [("read", u.cache_read), ("write", u.cache_write)] {
                cached
                    .get_or_create(&CacheLabels {
                        provider: l.provider.clone(),
                        model: l.model.clone(),
                        kind,
                    })
                    .inc_by(n);
            }
            compactions.get_or_create(l).inc_by(u.compactions);
        }
        reg.register(
            "llm_cached_tokens",
            "Input tokens of tasks read from (`read`) or written to (`write`) the provider's \
             prompt cache, by provider and model; part of `llm_tokens`' input",
            cached,
        );
        reg.register(
            "context_compactions",
            "Times the servo compacted a task's conversation to keep it inside the model's \
             window, by provider and model (`compactions` of `task status`)",
            compactions,
        );
        reg.register(
            "llm_calls",
            "LLM calls forwarded by the gateway, by provider and model (the call ledger)",
            calls,
        );
        reg.register(
            "llm_tokens",
            "Tokens used by tasks, by provider, model and direction (the tokens of `task status`)",
            tokens,
        );
        reg.register_with_unit(
            "llm_cost",
            "Cost of tasks in USD from config.yaml's prices, by provider and model",
            Unit::Other("usd".into()),
            cost,
        );
    }
}

/// Gauges counted afresh at each scrape.
fn register_gauges(reg: &mut Registry, read: &ScrapeRead, now_ms: i64) {
    let tasks = Family::<StateLabels, Gauge>::default();
    for s in TaskState::iter() {
        let n = read
            .states
            .iter()
            .find(|(st, _)| *st == s)
            .map_or(0, |x| x.1);
        tasks
            .get_or_create(&StateLabels { state: s.as_str() })
            .set(n);
    }
    reg.register(
        "tasks",
        "Tasks by state, as `task status` counts them",
        tasks,
    );
    let waiting = Family::<WaitingLabels, Gauge>::default();
    let mut since: Option<i64> = None;
    for state in [
        TaskState::WaitingHuman,
        TaskState::Paused,
        TaskState::Blocked,
    ] {
        for parked in [false, true] {
            let w = read
                .waiting
                .iter()
                .find(|w| w.state == state && w.parked == parked);
            since = match (since, w.and_then(|w| w.since)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let l = WaitingLabels {
                state: state.as_str(),
                parked: if parked { "true" } else { "false" },
            };
            waiting.get_or_create(&l).set(w.map_or(0, |w| w.tasks));
        }
    }
    reg.register(
        "tasks_waiting",
        "Tasks waiting for a human, by state and whether they are parked (no container)",
        waiting,
    );
    let longest = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    longest.set(since.map_or(0.0, |s| (now_ms - s).max(0) as f64 / 1000.0));
    reg.register_with_unit(
        "tasks_waiting_longest",
        "How long the task waiting longest for a human has waited (0: none waits)",
        Unit::Seconds,
        longest,
    );
    let hooks = Family::<StateLabels, Gauge>::default();
    for state in ["pending", "delivered", "dead"] {
        let n = read
            .webhooks
            .iter()
            .find(|(s, _)| s == state)
            .map_or(0, |x| x.1);
        hooks.get_or_create(&StateLabels { state }).set(n);
    }
    reg.register(
        "webhook_deliveries",
        "Webhook deliveries by state (dead: given up after notify_max_age)",
        hooks,
    );
    let frozen = Gauge::<i64>::default();
    frozen.set(read.frozen);
    reg.register(
        "tasks_frozen",
        "Tasks whose servo is frozen while they wait (`suspend_after`; no CPU, no slot, same memory)",
        frozen,
    );
    let servos = Gauge::<i64>::default();
    servos.set(read.servos);
    reg.register(
        "servos_running",
        "Servo containers of tasks that have not ended (parked tasks hold none)",
        servos,
    );
}
