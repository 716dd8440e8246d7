//! Issue 51: a servo frozen while its model call waits. The gateway holds
//! the agent's call through a provider's rate limit (a 429 with
//! `retry-after`); after `suspend_after` the servo's container is frozen
//! (Docker says paused, its cgroup says frozen, its CPU time stands
//! still), thawed before the answer goes back, and the task completes with
//! no step lost and the frozen time not counted against its timeout; a
//! task cancelled while frozen so ends `cancelled` with nothing left.
//! Real Docker, a real `saheeli serve`, the fake LLM answering the 429.

use std::time::Duration;

use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply};
use crate::freeze::{cgroup_frozen, cpu_ns, detail_of, inspect, kinds, metrics};
use crate::human::{Serve, project, request_text, until};
use crate::metrics::get;
use crate::util::{leftovers, require_docker};

const CONFIG: &str = "suspend_after: 1s\n";

/// A step, then a call the provider refuses for `pause` seconds (the
/// gateway waits that long for its turn), then a step and the end.
fn limited(pause: u64) -> FakeLlm {
    FakeLlm::start(vec![
        Reply::tool("execute_shell", json!({"command": "echo first-step"})),
        Reply::Error(429, Some(pause.to_string())),
        Reply::tool("execute_shell", json!({"command": "echo second-step"})),
        Reply::tool("task_complete", json!({"message": "both steps done"})),
    ])
}

#[test]
fn a_servo_whose_model_call_waits_on_a_rate_limit_is_frozen_and_thawed_for_its_answer() {
    require_docker();
    let llm = limited(20);
    let s = project(&llm, CONFIG);
    // The wait (20 s) is longer than the whole timeout: frozen time is
    // not working time, for the foreman's clock nor for the servo's.
    s.write(
        "p.md",
        "---\nmodel: gpt-test\ntimeout: 12s\n---\nRun two steps.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "frozen", |t| t["frozen"] == true);
    assert_eq!(t["state"], "running", "{t:#}");
    let container = t["container"].as_str().expect("a container").to_string();
    assert_eq!(llm.seen_count(), 2, "frozen while its second call waits");
    assert_eq!(inspect(&container, "{{.State.Paused}}"), "true");
    assert!(cgroup_frozen(&container));
    let before = cpu_ns(&container);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(cpu_ns(&container), before, "CPU time grew while frozen");
    let m = metrics(&s);
    assert_eq!(get(&m, "saheeli_tasks_frozen", &[]), 1.0);

    let t = until(&s, &id, &serve, "ended", |t| {
        ["complete", "incomplete", "failed"].contains(&t["state"].as_str().unwrap_or(""))
    });
    assert_eq!(t["reason"], "complete", "{t:#}\n{}", serve.log());
    assert_eq!(t["frozen"], false);
    // No step lost: the call refused was tried again once, and the model
    // saw both steps' output.
    assert_eq!(llm.seen_count(), 4);
    let last = request_text(&llm, 3);
    assert!(
        last.contains("first-step") && last.contains("second-step"),
        "{last}"
    );
    let t = s.expect_json(&["task", "status", &id, "--json"], 0);
    let k = kinds(&t);
    let frozen = k.iter().position(|x| x == "frozen").expect("frozen");
    let thawed = k.iter().position(|x| x == "thawed").expect("thawed");
    assert!(frozen < thawed, "{k:?}");
    let froze = detail_of(&t, "frozen");
    assert!(
        froze.contains("a model call held (a rate-limit wait)"),
        "{froze}"
    );
    let thaw = detail_of(&t, "thawed");
    assert!(thaw.contains("the model call is answered"), "{thaw}");
    // The retried call was answered after the freeze was over: it went
    // upstream again only after the 20 s pause.
    let waited = llm.seen_at(2).unwrap() - llm.seen_at(1).unwrap();
    assert!(waited >= Duration::from_secs(19), "{waited:?}");
    let m = metrics(&s);
    assert_eq!(get(&m, "saheeli_tasks_frozen", &[]), 0.0);
    assert_eq!(get(&m, "saheeli_servo_freezes_total", &[]), 1.0);
    assert_eq!(get(&m, "saheeli_servo_thaws_total", &[]), 1.0);
    eprintln!("measure: model wait: {froze}; {thaw}");
    let gone = crate::lifecycle::wait_for(Duration::from_secs(30), || leftovers(&id).is_empty());
    assert!(gone, "{:?}", leftovers(&id));
}

#[test]
fn a_task_frozen_in_a_model_wait_cancelled_ends_cancelled_with_nothing_left() {
    require_docker();
    let llm = limited(60);
    let s = project(&llm, CONFIG);
    s.write("p.md", "---\nmodel: gpt-test\n---\nRun two steps.\n");
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "frozen", |t| t["frozen"] == true);
    let container = t["container"].as_str().unwrap().to_string();
    assert_eq!(inspect(&container, "{{.State.Paused}}"), "true");

    s.expect(&["task", "cancel", &id], 0);
    let t = until(&s, &id, &serve, "cancelled", |t| t["state"] == "cancelled");
    assert_eq!(t["frozen"], false);
    assert_eq!(t["reason"], "cancelled", "{t:#}");
    let t = s.expect_json(&["task", "status", &id, "--json"], 0);
    assert!(kinds(&t).contains(&"thawed".to_string()), "{:?}", kinds(&t));
    assert_eq!(get(&metrics(&s), "saheeli_tasks_frozen", &[]), 0.0);
    // The call refused was never tried again.
    assert_eq!(llm.seen_count(), 2);
    let gone = crate::lifecycle::wait_for(Duration::from_secs(30), || leftovers(&id).is_empty());
    assert!(gone, "{:?}", leftovers(&id));
}
