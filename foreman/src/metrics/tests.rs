//! The exposition rendered from a real SQLite file, parsed by a strict
//! OpenMetrics parser and checked against what the store says.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use openmetrics_parser::{MetricNumber, OpenMetricsType, OpenMetricsValue};
use saheeli_protocol::TaskId;

use super::*;
use crate::config::{Config, ConfigFile, Providers};
use crate::state::TaskState;
use crate::store::{Lease, Outcome, Store};

/// One sample of the exposition: its series name (with `_total`,
/// `_bucket`, `_count`, `_sum` as written), labels and value.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Point {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses `text` strictly (a malformed exposition fails the test) into
/// its families (name, type, unit) and samples.
pub(super) fn parse(text: &str) -> (Vec<(String, OpenMetricsType, String)>, Vec<Point>) {
    let exp = openmetrics_parser::openmetrics::parse_openmetrics(text)
        .unwrap_or_else(|e| panic!("not valid OpenMetrics ({e:?}):\n{text}"));
    let mut families = Vec::new();
    let mut points = Vec::new();
    for (name, fam) in &exp.families {
        families.push((name.clone(), fam.family_type, fam.unit.clone()));
        for s in fam.iter_samples() {
            let labels: BTreeMap<String, String> = s
                .get_labelset()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut push = |suffix: &str, extra: Option<(&str, String)>, value: f64| {
                let mut labels = labels.clone();
                if let Some((k, v)) = extra {
                    labels.insert(k.into(), v);
                }
                points.push(Point {
                    name: format!("{name}{suffix}"),
                    labels,
                    value,
                });
            };
            match &s.value {
                OpenMetricsValue::Counter(c) => push("_total", None, c.value.as_f64()),
                OpenMetricsValue::Gauge(n) | OpenMetricsValue::Unknown(n) => {
                    push("", None, n.as_f64())
                }
                OpenMetricsValue::Info => push("_info", None, 1.0),
                OpenMetricsValue::Histogram(h) => {
                    push("_count", None, h.count.unwrap_or(0) as f64);
                    push(
                        "_sum",
                        None,
                        h.sum.map_or(0.0, |n: MetricNumber| n.as_f64()),
                    );
                    for b in &h.buckets {
                        let le = if b.upper_bound.is_infinite() {
                            "+Inf".to_string()
                        } else {
                            b.upper_bound.to_string()
                        };
                        push("_bucket", Some(("le", le)), b.count.as_f64());
                    }
                }
                other => panic!("unexpected value in `{name}`: {other:?}"),
            }
        }
    }
    families.sort_by(|a, b| a.0.cmp(&b.0));
    (families, points)
}

/// The value of the series `name` with exactly `labels` (0 when absent).
pub(super) fn value(points: &[Point], name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    points
        .iter()
        .filter(|p| p.name == name && p.labels == want)
        .map(|p| p.value)
        .sum()
}

/// The sum of every series named `name`.
fn total(points: &[Point], name: &str) -> f64 {
    points
        .iter()
        .filter(|p| p.name == name)
        .map(|p| p.value)
        .sum()
}

fn providers() -> Providers {
    let file: ConfigFile = serde_yaml::from_str(
        "providers:\n  local: { kind: openai, base_url: 'http://127.0.0.1:9/v1' }\n",
    )
    .unwrap();
    Providers::from_config(&Config {
        source: None,
        base_dir: "/tmp".into(),
        file,
        set_keys: Default::default(),
    })
}

fn spec(model: &str) -> crate::spec::TaskSpec {
    serde_json::from_value(serde_json::json!({
        "title": "t", "prompt_path": "p.md", "body": "b", "model": model,
        "max_steps": 1, "max_tokens": null, "max_cost": null, "retries": 0,
        "retry_on": [], "timeout_s": 60, "network": "none", "memory": 1,
        "cpus": 1.0, "pids": 1, "env": {}, "max_output_bytes": 1,
        "replay": null, "workspace": null
    }))
    .unwrap()
}

fn lease() -> Lease {
    Lease::new(Duration::from_secs(60))
}

/// Submits a task and moves it to `running`.
fn running(s: &mut Store, model: &str, lease: &Lease) -> TaskId {
    let id = TaskId::new();
    s.submit(id, &spec(model), 0, None, 1).unwrap();
    s.claim_next(Some(id), lease).unwrap().unwrap();
    s.set_container(id, lease, "c0ffee").unwrap();
    s.transition(id, lease, TaskState::Running, None, None)
        .unwrap();
    id
}

/// Runs a task to `to` with `reason` and usage.
fn ended(s: &mut Store, model: &str, to: TaskState, reason: &str, tokens: (i64, i64)) -> TaskId {
    let l = lease();
    let id = running(s, model, &l);
    let o = Outcome {
        reason: Some(reason.into()),
        input_tokens: tokens.0,
        output_tokens: tokens.1,
        cost_usd: 0.25,
        ..Default::default()
    };
    s.transition(id, &l, to, None, Some(&o)).unwrap();
    id
}

/// Ledger rows for `task`, as the gateway writes them.
fn calls(db: &Path, task: TaskId, n: usize) {
    let c = rusqlite::Connection::open(db).unwrap();
    for _ in 0..n {
        c.execute(
            "INSERT INTO llm_calls (call_id, task_id, state, reserved_tokens, reserved_cost, started_at)
             VALUES (?1, ?2, 'settled', 10, 0.0, 0)",
            rusqlite::params![uuid::Uuid::now_v7().to_string(), task.to_string()],
        )
        .unwrap();
    }
}

#[test]
fn a_scrape_parses_and_agrees_with_the_store() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("q.db");
    let mut s = Store::open(&db).unwrap();
    let m = Metrics::new(db.clone(), providers(), Source::Foreman);

    // Before any task: valid, every state at zero.
    let (_, p) = parse(&m.render().unwrap());
    assert_eq!(total(&p, "saheeli_tasks"), 0.0);
    assert_eq!(value(&p, "saheeli_tasks", &[("state", "queued")]), 0.0);
    assert_eq!(
        value(&p, "saheeli_exposition_info", &[("source", "foreman")]),
        1.0
    );

    let done = ended(&mut s, "gpt-x", TaskState::Complete, "complete", (100, 20));
    calls(&db, done, 3);
    ended(
        &mut s,
        "replay:a.json",
        TaskState::Incomplete,
        "exit 3",
        (7, 1),
    );
    let queued = TaskId::new();
    s.submit(queued, &spec("gpt-x"), 0, None, 1).unwrap();
    let cancelled = TaskId::new();
    s.submit(cancelled, &spec("local/llama3"), 0, None, 1)
        .unwrap();
    s.request_cancel(cancelled).unwrap();
    let l = lease();
    let live_task = running(&mut s, "local/llama3", &l);
    s.set_usage(live_task, &l, 2, 50, 5, 0.5, (0, 0)).unwrap();
    calls(&db, live_task, 2);

    let (_, p) = parse(&m.render().unwrap());
    let state = |st: &str| value(&p, "saheeli_tasks", &[("state", st)]);
    assert_eq!(
        (state("complete"), state("incomplete"), state("queued")),
        (1.0, 1.0, 1.0)
    );
    assert_eq!((state("cancelled"), state("running")), (1.0, 1.0));
    assert_eq!(value(&p, "saheeli_servos_running", &[]), 1.0);
    let tr = |st: &str, r: &str| {
        value(
            &p,
            "saheeli_task_transitions_total",
            &[("state", st), ("reason", r)],
        )
    };
    assert_eq!(tr("queued", "none"), 5.0);
    assert_eq!(tr("starting", "none"), 3.0);
    assert_eq!(tr("complete", "complete"), 1.0);
    assert_eq!(tr("incomplete", "exit"), 1.0, "`exit 3` is the code `exit`");
    assert_eq!(tr("cancelled", "cancelled"), 1.0);
    // Every event row is one transition.
    assert_eq!(
        total(&p, "saheeli_task_transitions_total"),
        5.0 + 3.0 * 2.0 + 3.0
    );
    // Durations of the two ended tasks that started; the cancelled one never did.
    assert_eq!(total(&p, "saheeli_task_duration_seconds_count"), 2.0);
    assert_eq!(total(&p, "saheeli_task_queue_wait_seconds_count"), 3.0);
    let tokens = |prov: &str, model: &str, dir: &str| {
        value(
            &p,
            "saheeli_llm_tokens_total",
            &[("provider", prov), ("model", model), ("direction", dir)],
        )
    };
    assert_eq!(tokens("openai", "gpt-x", "input"), 100.0);
    assert_eq!(tokens("openai", "gpt-x", "output"), 20.0);
    assert_eq!(tokens("replay", "replay", "input"), 7.0);
    // A running task's usage so far counts too.
    assert_eq!(tokens("local", "llama3", "input"), 50.0);
    let calls_of = |prov: &str, model: &str| {
        value(
            &p,
            "saheeli_llm_calls_total",
            &[("provider", prov), ("model", model)],
        )
    };
    assert_eq!(
        (calls_of("openai", "gpt-x"), calls_of("local", "llama3")),
        (3.0, 2.0)
    );
    let cost = total(&p, "saheeli_llm_cost_usd_total");
    assert!((cost - 1.0).abs() < 1e-9, "{cost}");

    // The running task ends: its usage moves from the live part to the
    // ended part without being counted twice; new rows are added once.
    let o = Outcome {
        reason: Some("complete".into()),
        input_tokens: 60,
        output_tokens: 6,
        ..Default::default()
    };
    s.transition(live_task, &l, TaskState::Complete, None, Some(&o))
        .unwrap();
    s.override_outcome(done, TaskState::Incomplete, "not really", "bob")
        .unwrap();
    let text = m.render().unwrap();
    let (_, p) = parse(&text);
    assert_eq!(
        value(
            &p,
            "saheeli_llm_tokens_total",
            &[
                ("provider", "local"),
                ("model", "llama3"),
                ("direction", "input")
            ]
        ),
        60.0
    );
    let tr = |st: &str, r: &str| {
        value(
            &p,
            "saheeli_task_transitions_total",
            &[("state", st), ("reason", r)],
        )
    };
    assert_eq!(tr("complete", "complete"), 2.0);
    assert_eq!(tr("incomplete", "override"), 1.0);
    assert_eq!(total(&p, "saheeli_task_duration_seconds_count"), 3.0);

    // A restarted foreman reads the trail from the start: the same counts.
    let again = Metrics::new(db, providers(), Source::Foreman);
    let (_, q) = parse(&again.render().unwrap());
    for name in [
        "saheeli_task_transitions_total",
        "saheeli_llm_tokens_total",
        "saheeli_llm_calls_total",
        "saheeli_task_duration_seconds_count",
        "saheeli_task_queue_wait_seconds_count",
    ] {
        let of = |p: &[Point]| {
            let mut v: Vec<_> = p
                .iter()
                .filter(|x| x.name == name)
                .map(|x| (x.labels.clone(), x.value))
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        };
        assert_eq!(of(&p), of(&q), "{name}");
    }
}

#[test]
fn waiting_tasks_are_counted_by_state_and_parking() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("q.db");
    let mut s = Store::open(&db).unwrap();
    let l = lease();
    let id = running(&mut s, "gpt-x", &l);
    s.request_pause(id, "alice").unwrap();
    s.inbox(id, &l, 60_000, None).unwrap();
    s.inject(id, "hello", "alice").unwrap();
    let m = Metrics::new(db, providers(), Source::Database);
    let (_, p) = parse(&m.render().unwrap());
    let w = |st: &str, parked: &str| {
        value(
            &p,
            "saheeli_tasks_waiting",
            &[("state", st), ("parked", parked)],
        )
    };
    assert_eq!(w("paused", "false"), 1.0);
    assert_eq!(w("paused", "true") + w("waiting_human", "false"), 0.0);
    assert_eq!(value(&p, "saheeli_servos_running", &[]), 1.0);
    assert!(value(&p, "saheeli_tasks_waiting_longest_seconds", &[]) >= 0.0);
    let kind = |k: &str| value(&p, "saheeli_task_human_events_total", &[("kind", k)]);
    assert_eq!((kind("pause_requested"), kind("injected")), (1.0, 1.0));
    // Human events are not transitions.
    assert_eq!(
        value(
            &p,
            "saheeli_task_transitions_total",
            &[("state", "paused"), ("reason", "none")]
        ),
        1.0
    );
    assert_eq!(
        value(&p, "saheeli_exposition_info", &[("source", "database")]),
        1.0
    );

    // Parked: still waiting, but holding no container.
    s.park(id, &l, 10).unwrap();
    let (_, p) = parse(&m.render().unwrap());
    assert_eq!(
        value(
            &p,
            "saheeli_tasks_waiting",
            &[("state", "paused"), ("parked", "true")]
        ),
        1.0
    );
    assert_eq!(value(&p, "saheeli_servos_running", &[]), 0.0);
}

#[test]
fn hooks_are_recorded_in_the_live_instruments() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("q.db");
    drop(Store::open(&db).unwrap());
    let m = Metrics::new(db, providers(), Source::Foreman);
    let (_, before) = parse(&m.render().unwrap());
    // A provider name no other test uses: exact deltas.
    live().know_providers(["metrics-test"]);
    live().retry("metrics-test", RetryCause::of(Some(429)));
    live().retry("metrics-test", RetryCause::of(None));
    live().llm_call("metrics-test", Duration::from_millis(1500));
    live().refusal(Refusal::Budget);
    live().docker(DockerOp::Kill, Duration::from_millis(3), false);
    live().collection(CollectPath::Archive, Duration::from_millis(20), Some(4096));
    let (_, after) = parse(&m.render().unwrap());
    let delta = |name: &str, labels: &[(&str, &str)]| {
        value(&after, name, labels) - value(&before, name, labels)
    };
    let retries = "saheeli_gateway_retries_total";
    assert_eq!(
        delta(
            retries,
            &[("provider", "metrics-test"), ("cause", "rate_limited")]
        ),
        1.0
    );
    assert_eq!(
        delta(
            retries,
            &[("provider", "metrics-test"), ("cause", "connection")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &after,
            "saheeli_llm_call_duration_seconds_bucket",
            &[("provider", "metrics-test"), ("le", "2.5")]
        ),
        1.0
    );
    assert!(delta("saheeli_gateway_refusals_total", &[("cause", "budget")]) >= 1.0);
    assert!(
        delta(
            "saheeli_docker_operation_errors_total",
            &[("operation", "kill")]
        ) >= 1.0
    );
    assert!(
        delta(
            "saheeli_docker_operation_duration_seconds_count",
            &[("operation", "kill")]
        ) >= 1.0
    );
    assert!(delta("saheeli_collection_bytes_total", &[("path", "archive")]) >= 4096.0);
}

#[test]
fn names_follow_conventions_and_label_sets_are_bounded() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("q.db");
    let mut s = Store::open(&db).unwrap();
    // Many tasks, each with its own model: ids never become labels, and
    // models are capped.
    for i in 0..(labels::MAX_MODELS + 20) {
        ended(
            &mut s,
            &format!("model-{i}"),
            TaskState::Complete,
            "complete",
            (1, 1),
        );
    }
    let m = Metrics::new(db, providers(), Source::Foreman);
    let (families, points) = parse(&m.render().unwrap());
    for (name, ty, unit) in &families {
        assert!(name.starts_with("saheeli_"), "{name}");
        assert!(
            !name.ends_with("_total"),
            "{name}: the parser adds `_total`"
        );
        if !unit.is_empty() {
            assert!(name.ends_with(&format!("_{unit}")), "{name} in {unit}");
        }
        if *ty == OpenMetricsType::Histogram {
            assert!(name.ends_with("_seconds"), "{name}: latencies in seconds");
        }
    }
    let mut per_family: BTreeMap<&str, usize> = BTreeMap::new();
    for p in points.iter().filter(|p| !p.name.ends_with("_bucket")) {
        for (k, v) in &p.labels {
            assert!(
                !["task", "task_id", "id", "container"].contains(&k.as_str()),
                "{p:?}"
            );
            assert!(v.parse::<TaskId>().is_err(), "a task id as a label: {p:?}");
        }
        *per_family.entry(&p.name).or_default() += 1;
    }
    for (name, n) in per_family {
        // Tokens: models (capped, plus `other`) × 2 directions.
        assert!(n <= 2 * (labels::MAX_MODELS + 1) + 2, "{name}: {n} series");
    }
    let models: std::collections::HashSet<_> = points
        .iter()
        .filter(|p| p.name == "saheeli_llm_tokens_total")
        .map(|p| p.labels["model"].clone())
        .collect();
    assert_eq!(models.len(), labels::MAX_MODELS + 1);
    assert!(models.contains("other"));
}

/// The Docker backend's calls go through the timing helper (a real daemon).
#[tokio::test]
async fn docker_calls_are_timed_by_operation() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("q.db");
    drop(Store::open(&db).unwrap());
    let m = Metrics::new(db, providers(), Source::Foreman);
    let (_, before) = parse(&m.scrape().await.unwrap());
    let docker = crate::backend::docker::connect()
        .await
        .expect("these tests need a real Docker daemon");
    let missing =
        crate::backend::docker::require_image(&docker, "saheeli-metrics-test:absent").await;
    assert!(missing.is_err());
    crate::backend::docker::task_containers(&docker, TaskId::new())
        .await
        .unwrap();
    let (_, after) = parse(&m.scrape().await.unwrap());
    let delta = |name: &str, op: &str| {
        value(&after, name, &[("operation", op)]) - value(&before, name, &[("operation", op)])
    };
    let count = "saheeli_docker_operation_duration_seconds_count";
    let errors = "saheeli_docker_operation_errors_total";
    assert!(delta(count, "inspect_image") >= 1.0);
    assert!(
        delta(errors, "inspect_image") >= 1.0,
        "a missing image is an error"
    );
    assert!(delta(count, "list") >= 1.0);
}

/// Issue 15: the admission gauges come from the serving foreman's row, and
/// say nothing once it is stale.
#[test]
fn admission_gauges_follow_the_fresh_admission_row() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("q.db");
    let mut s = Store::open(&db).unwrap();
    let m = Metrics::new(db, providers(), Source::Database);
    let (_, none) = parse(&m.render().unwrap());
    for state in ["closed", "open", "half_open"] {
        let l = [("state", state)];
        assert_eq!(value(&none, "saheeli_admission_breaker_state", &l), 0.0);
    }
    assert!(!none.iter().any(|p| p.name == "saheeli_admission_limit"));
    let row = crate::store::AdmissionRow {
        owner: "f1".into(),
        concurrency: "auto".into(),
        limit: 12,
        running: 7,
        breaker: "half_open".into(),
        failures: 6,
        latency_ms: Some(250.0),
        baseline_ms: Some(80.0),
        open_for_ms: None,
        updated_at: crate::store::now_ms(),
        pool_idle: Some(3),
    };
    s.put_admission(&row).unwrap();
    let (families, p) = parse(&m.render().unwrap());
    assert_eq!(value(&p, "saheeli_admission_limit", &[]), 12.0);
    assert_eq!(value(&p, "saheeli_admission_running", &[]), 7.0);
    let state = |s| value(&p, "saheeli_admission_breaker_state", &[("state", s)]);
    assert_eq!(
        (state("closed"), state("open"), state("half_open")),
        (0.0, 0.0, 1.0)
    );
    assert_eq!(
        value(&p, "saheeli_admission_launch_latency_seconds", &[]),
        0.25
    );
    assert_eq!(
        value(&p, "saheeli_admission_launch_baseline_seconds", &[]),
        0.08
    );
    assert!(
        families
            .iter()
            .any(|(n, _, u)| n == "saheeli_admission_launch_latency_seconds" && u == "seconds")
    );
    // Stale: the foreman is gone.
    s.put_admission(&crate::store::AdmissionRow {
        updated_at: crate::store::now_ms() - 60_000,
        ..row
    })
    .unwrap();
    let (_, p) = parse(&m.render().unwrap());
    assert!(!p.iter().any(|p| p.name == "saheeli_admission_limit"));
    assert_eq!(
        value(
            &p,
            "saheeli_admission_breaker_state",
            &[("state", "half_open")]
        ),
        0.0
    );
}

/// Issue 15: launches that failed for the daemon's sake, by cause.
#[test]
fn launch_failures_are_counted_by_cause() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("q.db");
    drop(Store::open(&db).unwrap());
    let m = Metrics::new(db, providers(), Source::Foreman);
    let (_, before) = parse(&m.render().unwrap());
    live().launch_failed(crate::fault::DaemonFault::ServerError.into());
    let (_, after) = parse(&m.render().unwrap());
    let name = "saheeli_launch_failures_total";
    let delta = |c| value(&after, name, &[("cause", c)]) - value(&before, name, &[("cause", c)]);
    assert!(delta("server_error") >= 1.0);
    assert!(
        after
            .iter()
            .any(|p| p.name == name && p.labels["cause"] == "unreachable")
    );
}
