//! `saheeli metrics` before and after real tasks (replay servos and one
//! through the gateway to the fake LLM): the exposition is parsed by a
//! strict OpenMetrics parser and its values agree with `task status`.

use std::collections::{BTreeMap, HashSet};

use openmetrics_parser::{OpenMetricsValue, openmetrics::parse_openmetrics};
use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::util::{Saheeli, replay_prompt, require_docker, script};

/// One series: its name as written (`_total`, `_count`, `_sum`), its labels.
pub(crate) type Series = (String, BTreeMap<String, String>);

/// Parses the exposition strictly; panics (showing it) when it is not
/// valid OpenMetrics.
pub(crate) fn parse(text: &str) -> BTreeMap<Series, f64> {
    let exp = parse_openmetrics(text)
        .unwrap_or_else(|e| panic!("not valid OpenMetrics ({e:?}):\n{text}"));
    let mut out = BTreeMap::new();
    for (name, fam) in &exp.families {
        for s in fam.iter_samples() {
            let labels: BTreeMap<String, String> = s
                .get_labelset()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut put = |suffix: &str, v: f64| {
                out.insert((format!("{name}{suffix}"), labels.clone()), v);
            };
            match &s.value {
                OpenMetricsValue::Counter(c) => put("_total", c.value.as_f64()),
                OpenMetricsValue::Gauge(n) => put("", n.as_f64()),
                OpenMetricsValue::Info => put("_info", 1.0),
                OpenMetricsValue::Histogram(h) => {
                    put("_count", h.count.unwrap_or(0) as f64);
                    put("_sum", h.sum.map_or(0.0, |n| n.as_f64()));
                }
                other => panic!("unexpected value in `{name}`: {other:?}"),
            }
        }
    }
    out
}

pub(crate) fn get(m: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    m.get(&(name.to_string(), labels)).copied().unwrap_or(0.0)
}

fn sum(m: &BTreeMap<Series, f64>, name: &str) -> f64 {
    m.iter()
        .filter(|((n, _), _)| n == name)
        .map(|(_, v)| v)
        .sum()
}

/// `saheeli metrics`, parsed.
fn scrape(s: &Saheeli) -> (String, BTreeMap<Series, f64>) {
    let text = s.expect(&["metrics"], 0);
    let parsed = parse(&text);
    (text, parsed)
}

#[test]
fn metrics_before_and_after_real_tasks_agree_with_task_status() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::tool("create_file", json!({"path": "a.txt", "content": "a\n"})),
        Reply::Tools(
            vec![("task_complete".into(), json!({"message": "done"}))],
            (150, 10),
        ),
    ]);
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &llm.base_url());
    // Nothing to read yet: an error naming the database, nothing created.
    let err = s.expect_err(&["metrics"], 2);
    assert!(err.contains("no database at"), "{err}");
    assert!(!s.path().join("saheeli.db").exists());

    s.write(
        "ok.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write(
        "short.json",
        &script(&[("execute_shell", json!({"command": "true"}))]),
    );
    s.write("ok.md", &replay_prompt("ok.json", ""));
    s.write("short.md", &replay_prompt("short.json", "max_steps: 1\n"));
    s.write("llm.md", "---\nmodel: gpt-test\n---\nWrite a.txt.\n");
    let queued = [s.submit("ok.md"), s.submit("ok.md"), s.submit("short.md")];

    let (text, before) = scrape(&s);
    assert!(
        text.starts_with("# HELP saheeli_exposition ")
            && text.lines().next().unwrap().contains("empty"),
        "the first comment line says the in-process metrics are empty:\n{text}"
    );
    assert_eq!(
        get(
            &before,
            "saheeli_exposition_info",
            &[("source", "database")]
        ),
        1.0
    );
    assert_eq!(get(&before, "saheeli_tasks", &[("state", "queued")]), 3.0);
    assert_eq!(sum(&before, "saheeli_tasks"), 3.0);
    assert_eq!(
        get(
            &before,
            "saheeli_task_transitions_total",
            &[("state", "queued"), ("reason", "none")]
        ),
        3.0
    );
    assert_eq!(sum(&before, "saheeli_llm_tokens_total"), 0.0);

    s.expect(&["serve", "--drain"], 1);
    let t = s.expect_json(&["run", "llm.md", "--json"], 0);
    assert_eq!(t["state"], "complete");

    let (_, after) = scrape(&s);
    let tasks = s.tasks();
    assert_eq!(tasks.len(), 4);
    agree_with_status(&s, &after, &tasks);
    // The gateway's ledger: one row per call the fake answered.
    assert_eq!(
        get(
            &after,
            "saheeli_llm_calls_total",
            &[("provider", "openai"), ("model", "gpt-test")]
        ),
        llm.seen_count() as f64
    );
    assert_eq!(
        get(
            &after,
            "saheeli_llm_tokens_total",
            &[
                ("provider", "openai"),
                ("model", "gpt-test"),
                ("direction", "input")
            ]
        ),
        250.0
    );
    // Labels never carry a task id.
    let ids: HashSet<String> = tasks
        .iter()
        .map(|t| t["id"].as_str().unwrap().into())
        .collect();
    for (name, labels) in after.keys() {
        for v in labels.values() {
            assert!(!ids.contains(v), "{name} has a task id label");
        }
    }
    assert!(queued.iter().all(|id| ids.contains(id)));
    // Counters only grew.
    for (series, v) in &before {
        if series.0.ends_with("_total") {
            assert!(
                after.get(series).copied().unwrap_or(0.0) >= *v,
                "{series:?}"
            );
        }
    }
}

/// The label pair a task's model is counted under.
fn model_labels(model: &str) -> (&str, &str) {
    if model.starts_with("replay:") {
        ("replay", "replay")
    } else {
        ("openai", model)
    }
}

/// Every metric that `task status` also shows has the same value.
fn agree_with_status(s: &Saheeli, m: &BTreeMap<Series, f64>, tasks: &[Value]) {
    let mut states: BTreeMap<&str, f64> = BTreeMap::new();
    let mut transitions = 0.0;
    let (mut ended, mut duration) = (0.0, 0.0);
    let mut tokens: BTreeMap<(String, String, &str), f64> = BTreeMap::new();
    for t in tasks {
        let state = t["state"].as_str().unwrap();
        *states.entry(state).or_default() += 1.0;
        let one = s.task(t["id"].as_str().unwrap());
        transitions += one["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e.get("kind").is_none())
            .count() as f64;
        if let Some(d) = t["duration_s"].as_f64()
            && t["finished_at"].is_string()
        {
            ended += 1.0;
            duration += d;
        }
        let (p, model) = model_labels(t["model"].as_str().unwrap());
        for (dir, key) in [("input", "input_tokens"), ("output", "output_tokens")] {
            *tokens
                .entry((p.to_string(), model.to_string(), dir))
                .or_default() += t[key].as_f64().unwrap();
        }
        let reason = t["reason"].as_str().unwrap().split(' ').next().unwrap();
        assert!(
            get(
                m,
                "saheeli_task_transitions_total",
                &[("state", state), ("reason", reason)]
            ) >= 1.0,
            "{state}/{reason}"
        );
    }
    for (state, n) in &states {
        assert_eq!(get(m, "saheeli_tasks", &[("state", state)]), *n, "{state}");
    }
    assert_eq!(sum(m, "saheeli_tasks"), tasks.len() as f64);
    assert_eq!(sum(m, "saheeli_task_transitions_total"), transitions);
    assert_eq!(sum(m, "saheeli_task_duration_seconds_count"), ended);
    let got = sum(m, "saheeli_task_duration_seconds_sum");
    assert!((got - duration).abs() < 0.01 * ended, "{got} vs {duration}");
    for ((p, model, dir), n) in &tokens {
        let labels = [
            ("provider", p.as_str()),
            ("model", model.as_str()),
            ("direction", dir),
        ];
        assert_eq!(
            get(m, "saheeli_llm_tokens_total", &labels),
            *n,
            "{labels:?}"
        );
    }
    assert_eq!(
        sum(m, "saheeli_llm_tokens_total"),
        tokens.values().sum::<f64>()
    );
    let cost: f64 = tasks.iter().map(|t| t["cost_usd"].as_f64().unwrap()).sum();
    assert!((sum(m, "saheeli_llm_cost_usd_total") - cost).abs() < 1e-9);
    assert_eq!(get(m, "saheeli_servos_running", &[]), 0.0);
    assert_eq!(sum(m, "saheeli_tasks_waiting"), 0.0);
    // Every task started from the queue once.
    assert_eq!(
        sum(m, "saheeli_task_queue_wait_seconds_count"),
        tasks.len() as f64
    );
}

/// `GET /metrics` of a serving foreman: parsed strictly, with the same
/// task counts as `task status`, and the Docker latencies this process
/// recorded while it ran a task.
#[test]
fn a_serving_foreman_answers_get_metrics() {
    crate::util::require_docker();
    let s = crate::util::Saheeli::new();
    s.write(
        "s.json",
        &crate::util::script(&[("task_complete", serde_json::json!({"message": "ok"}))]),
    );
    s.write("p.md", &crate::util::replay_prompt("s.json", ""));
    let id = s.submit("p.md");
    let w = crate::web::WebServe::start(&s, "127.0.0.1:0", &[]);
    assert!(crate::lifecycle::wait_for(
        std::time::Duration::from_secs(60),
        || s.task(&id)["state"] == "complete"
    ));
    let res = crate::web::get(&w.addr, "/metrics");
    assert_eq!(res.status, 200, "{}", res.body);
    assert!(
        res.headers.contains("application/openmetrics-text"),
        "{}",
        res.headers
    );
    let m = parse(&res.body);
    assert_eq!(
        get(&m, "saheeli_tasks", &[("state", "complete")]),
        1.0,
        "{}",
        res.body
    );
    assert!(
        m.keys()
            .any(|(n, _)| n.starts_with("saheeli_docker_operation") && n.ends_with("_count")),
        "no Docker latency recorded by the serving process:\n{}",
        res.body
    );
    // What one cold task asks of Docker, and no more (at a thousand tasks
    // every call is the daemon's time): its image's id looked up, a
    // container made, started and removed once, never inspected (its
    // servo exited 0, so whether it was OOM-killed decides nothing: see
    // `seam::may_be_oom`); its workspace image is bound in directly, no volume
    // made, asked or removed. Serve's start checked the image and copied
    // its servo once (two image inspects and that copy before the task).
    let calls = |op: &str| {
        get(
            &m,
            "saheeli_docker_operation_duration_seconds_count",
            &[("operation", op)],
        )
    };
    for (op, n) in [
        ("inspect_image", 3.0),
        ("copy_servo", 1.0),
        ("create_volume", 0.0),
        ("create_container", 1.0),
        ("start", 1.0),
        ("inspect", 0.0),
        ("remove_container", 1.0),
        ("remove_volume", 0.0),
        ("inspect_volume", 0.0),
    ] {
        assert_eq!(
            calls(op),
            n,
            "Docker `{op}` calls for one task:\n{}",
            res.body
        );
    }
}

/// A serving foreman's warm pool sitting idle, no task submitted: its
/// `saheeli_pool_idle` gauge shows the idle servo without any task waking
/// the loop. Waits on the gauge itself (bounded), never a sleep.
#[test]
fn an_idle_pool_shows_in_get_metrics_with_no_task() {
    crate::util::require_docker();
    let s = crate::util::Saheeli::with_config("pool:\n  - { size: 1, max_idle: 10m }\n");
    let w = crate::web::WebServe::start(&s, "127.0.0.1:0", &[]);
    let mut last = String::new();
    let idle = crate::lifecycle::wait_for(std::time::Duration::from_secs(90), || {
        let res = crate::web::get(&w.addr, "/metrics");
        assert_eq!(res.status, 200, "{}", res.body);
        last = res.body;
        parse(&last).get(&("saheeli_pool_idle".to_string(), BTreeMap::new())) == Some(&1.0)
    });
    assert!(
        idle,
        "no `saheeli_pool_idle 1` while the pool is up:\n{last}"
    );
    drop(w);
}
