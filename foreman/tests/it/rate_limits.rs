//! Provider rate limits steer the fleet (issue 26), on real containers:
//! a fake provider enforcing a low limit, with its real headers (OpenAI's
//! and Anthropic's shapes), and several tasks at once. Calls wait their
//! turn in the budget all tasks share: no task fails, few 429s reach the
//! gateway, and `task status` and the metrics say a call is waiting.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_limit::RateLimit;
use crate::fake_llm::{FakeLlm, Reply};
use crate::lifecycle::wait_for;
use crate::metrics::parse;
use crate::util::{Saheeli, require_docker};
use crate::web::WebServe;

/// Calls each task makes: shell steps, then `task_complete`.
const CALLS: usize = 4;

/// Answers every task by the assistant turns already in its conversation,
/// in either API's shape.
fn fleet_llm() -> FakeLlm {
    FakeLlm::start_matching(vec![], |body: &Value| {
        let turns = body["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
            .unwrap_or(0);
        Some(if turns + 1 < CALLS {
            Reply::tool("execute_shell", json!({"command": "true"}))
        } else {
            Reply::tool("task_complete", json!({"message": "done"}))
        })
    })
}

/// `saheeli_gateway_rate_limit_waits_total`, summed over providers.
fn waits(w: &WebServe) -> f64 {
    let res = crate::web::get(&w.addr, "/metrics");
    parse(&res.body)
        .iter()
        .filter(|((name, _), _)| name == "saheeli_gateway_rate_limit_waits_total")
        .map(|(_, v)| *v)
        .sum()
}

/// Runs `tasks` tasks of `model` at once against `llm` limited to
/// `limit`; checks they all complete with few 429s, and that status and
/// metrics showed calls waiting.
fn fleet(s: &Saheeli, llm: &FakeLlm, model: &str, tasks: usize, limit: RateLimit) {
    llm.limit(limit);
    s.write(
        "p.md",
        &format!("---\nmodel: {model}\nmax_steps: 10\n---\nRun the tools you are given.\n"),
    );
    let ids: Vec<String> = (0..tasks).map(|_| s.submit("p.md")).collect();
    let w = WebServe::start(s, "127.0.0.1:0", &["-j", &tasks.to_string()]);
    // While they run, some task's call waits its turn: status says so.
    let mut shown_json = false;
    let mut shown_text = false;
    let done = wait_for(Duration::from_secs(240), || {
        let all = s.tasks();
        shown_json |= all.iter().any(|t| t["rate_limited"] == true);
        if !shown_text {
            let text = s.expect(&["task", "status"], 0);
            shown_text = text.contains("running: waiting for provider rate limit");
        }
        ids.iter().all(|id| {
            all.iter()
                .any(|t| t["id"] == id.as_str() && t["state"] == "complete")
        })
    });
    let log = w.serve.log();
    assert!(done, "not all complete: {:#?}\n{log}", s.tasks());
    assert!(
        shown_json,
        "no task showed `rate_limited` in `task status --json`"
    );
    assert!(
        shown_text,
        "`task status` never showed `waiting for provider rate limit`"
    );
    assert!(waits(&w) > 0.0, "the metrics counted no wait");
    for id in &ids {
        let t = s.task(id);
        assert_eq!(t["state"], "complete", "{t:#}");
        assert_eq!(t["attempt"], 1, "{t:#}");
        assert_eq!(t["rate_limited"], false, "{t:#}");
    }
    let (served, refused) = llm.rate_limited();
    let calls = (tasks * CALLS) as u64;
    eprintln!("{model}: {served} calls served, {refused} 429s");
    assert_eq!(served, calls, "every call served once");
    // The fleet waits instead of collecting 429s: a few at most, from
    // answers that arrive out of order.
    assert!(
        refused * 10 <= calls,
        "{refused} 429s for {calls} calls\n{log}"
    );
}

#[test]
fn issue_26_openai_rate_limit_slows_the_fleet_and_fails_no_task() {
    require_docker();
    let llm = fleet_llm();
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-limits-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    // 3 requests a second for 6 tasks × 4 calls.
    let limit = RateLimit {
        requests: 6,
        tokens: 1_000_000,
        window: Duration::from_secs(2),
    };
    fleet(&s, &llm, "gpt-4o-mini", 6, limit);
}

#[test]
fn issue_26_anthropic_rate_limit_slows_the_fleet_and_fails_no_task() {
    require_docker();
    let llm = fleet_llm();
    let s = Saheeli::new()
        .env("ANTHROPIC_API_KEY", "sk-ant-test-limits-111")
        .env("ANTHROPIC_BASE_URL", &llm.anthropic_url());
    // Tokens bind here: about three requests' worth a second.
    let limit = RateLimit {
        requests: 1000,
        tokens: 5_000,
        window: Duration::from_secs(2),
    };
    fleet(&s, &llm, "claude-test-1", 4, limit);
}
