//! Eval results by whose failure they are (issue 49), on real containers:
//! a case whose `image:` Docker does not have fails at launch — the
//! platform's failure, classed `infra`, retried by `--infra-retries` and
//! never scored — beside a case that passes with a reward from its hidden
//! tests; `samples: K` gives each case its own n for pass@k; and every
//! result's time is split into set-up, agent and verify.

use serde_json::{Value, json};

use crate::util::{Saheeli, require_docker, script};

/// An image no Docker here has: the launch cannot make the task's image.
const NO_IMAGE: &str = "saheeli-eval-classes-no-such-image:never";

/// Requeues after a failed launch come fast here (the default waits 1 s,
/// 2 s, 4 s before giving up).
const FAST_REQUEUE: &str = "requeue_backoff: { initial: 50ms, multiplier: 1, max: 50ms }\n";

fn fixture(s: &Saheeli, samples: u32) {
    s.write(
        "ok.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write(
        "t/test.sh",
        "#!/bin/bash\necho 0.75 > /logs/verifier/reward.txt\necho graded\n",
    );
    s.write(
        "suite.yaml",
        &format!(
            "name: classes\n\
             defaults: {{ max_steps: 5, timeout: 2m, verify_retries: 0 }}\n\
             cases:\n\
             \x20 - id: ok\n\
             \x20   text: Say done.\n\
             \x20   model: replay:ok.json\n\
             \x20   samples: {samples}\n\
             \x20   verify: {{ files: t/, run: bash /tests/test.sh }}\n\
             \x20   pass_reward: 0.5\n\
             \x20 - id: no-image\n\
             \x20   text: Say done.\n\
             \x20   model: replay:ok.json\n\
             \x20   image: {NO_IMAGE}\n"
        ),
    );
}

fn results<'a>(report: &'a Value, id: &str) -> Vec<&'a Value> {
    report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == id)
        .collect()
}

fn eval(s: &Saheeli, args: &[&str], code: i32) -> Value {
    let out = s.run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn eval_classes_a_docker_error_at_launch_is_infra_and_left_out_of_the_pass_rate() {
    require_docker();
    let s = Saheeli::with_config(FAST_REQUEUE);
    fixture(&s, 1);
    // The one scored result passed: the threshold (1.0) is met.
    let r = eval(
        &s,
        &["eval", "suite.yaml", "--json", "--infra-retries", "0"],
        0,
    );
    assert_eq!(r["pass_rate"], 1.0, "{r:#}");
    assert_eq!(r["infra_failed_rate"], 0.5, "{r:#}");
    assert_eq!(r["infra_failed"], 1);
    assert_eq!(
        (r["passed"].as_u64(), r["failed"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(
        r["failure_classes"],
        json!({"agent": 0, "infra": 1, "verifier": 0})
    );
    assert_eq!(r["pass_at_1"], 1.0);
    assert_eq!(r["pass_at_k"], json!({"1": 1.0}));
    assert_eq!(r["case_pass_fraction"], json!({"ok": 1.0}));
    assert_eq!(r["mean_reward"], 0.75);
    let bad = results(&r, "no-image");
    assert_eq!(bad.len(), 1);
    let bad = bad[0];
    assert_eq!(bad["state"], "failed", "{bad:#}");
    assert_eq!(bad["reason"], "launch", "{bad:#}");
    assert_eq!(bad["failure_class"], "infra", "{bad:#}");
    assert_eq!(bad["attempts"], 1, "no infra retry with --infra-retries 0");
    assert!(
        bad["detail"].as_str().unwrap().contains(NO_IMAGE),
        "{bad:#}"
    );
    assert_eq!(bad["agent_ms"], 0, "it never ran: {bad:#}");
    let ok = results(&r, "ok")[0];
    assert_eq!(ok["passed"], true);
    assert_eq!(ok["failure_class"], Value::Null);
    assert_eq!(ok["reward"], 0.75, "{ok:#}");
    // Time by phase: each part measured, the three within the task's time.
    let (setup, agent, verify) = (
        ok["setup_ms"].as_i64().unwrap(),
        ok["agent_ms"].as_i64().unwrap(),
        ok["verify_ms"].as_i64().unwrap(),
    );
    assert!(setup > 0 && agent > 0 && verify > 0, "{ok:#}");
    assert!(
        setup + agent + verify <= ok["duration_ms"].as_i64().unwrap() + 1,
        "{ok:#}"
    );
    assert_eq!(
        r["verify_ms"].as_i64().unwrap(),
        verify + bad["verify_ms"].as_i64().unwrap()
    );
    // The HTML report shows the class, the reward and the phases.
    let dir = s
        .path()
        .join("results")
        .join(format!("eval-{}", r["run_id"].as_str().unwrap()));
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for want in [
        "Infra failed",
        "Mean reward",
        "Time by phase",
        ">0.75<",
        ">infra<",
    ] {
        assert!(html.contains(want), "report.html lacks {want}");
    }
}

#[test]
fn eval_classes_infra_failures_are_retried_and_samples_give_each_case_its_n() {
    require_docker();
    let s = Saheeli::with_config(FAST_REQUEUE);
    fixture(&s, 3);
    let out = s.run(&["eval", "suite.yaml", "--json", "--infra-retries", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        stderr.contains("an infra failure, retry 1 of 1"),
        "{stderr}"
    );
    assert!(stderr.contains("submitted again as"), "{stderr}");
    // `ok` ran 3 times (samples: 3), each its own task; `no-image` once,
    // retried once, and kept as its last attempt.
    let ok = results(&r, "ok");
    assert_eq!(ok.len(), 3, "{r:#}");
    let mut ids: Vec<&str> = ok.iter().map(|c| c["task_id"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    assert_eq!(
        ok.iter()
            .map(|c| c["repeat"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let bad = results(&r, "no-image");
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0]["attempts"], 2, "{:#}", bad[0]);
    assert_eq!(bad[0]["infra_attempts"], 2);
    assert_eq!(bad[0]["failure_class"], "infra");
    // pass@k over `ok`'s own n (3); `no-image` has no scored result.
    assert_eq!(
        r["pass_at_k"],
        json!({"1": 1.0, "2": 1.0, "3": 1.0}),
        "{r:#}"
    );
    assert_eq!(r["pass_rate"], 1.0);
    assert_eq!(r["infra_failed_rate"], 0.25);
    let listed = s.expect_json(&["task", "status", "--json"], 0);
    assert_eq!(
        listed.as_array().unwrap().len(),
        5,
        "3 samples + 2 attempts"
    );
}
