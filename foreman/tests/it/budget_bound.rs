//! Issue 47: a budget a task can spend. A call's input is reserved at what
//! the provider billed the call before it plus one token per byte added
//! (`gateway::input_bound`), not at one token per byte of the whole
//! request: a long task is refused for its budget only when the next call
//! truly may not fit, having spent at least 95% of it, and never more
//! than all of it, however densely its text tokenizes. A first call has
//! no earlier count: where its bytes would refuse it, the provider's own
//! count decides (`gateway::count`).

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::util::{Saheeli, require_docker};

/// Runs a built-in task of short shell steps with `max_tokens: budget`
/// against a provider billing `num/den` tokens per byte of each request,
/// until the budget ends it; its JSON.
fn long_task(budget: u64, num: u64, den: u64) -> Value {
    let llm = FakeLlm::start_matching(vec![], move |body| {
        let bytes = body.to_string().len() as u64;
        let step = body["messages"].as_array().map_or(0, Vec::len);
        Some(Reply::Tools(
            vec![(
                "execute_shell".into(),
                json!({"command": format!("echo step {step}")}),
            )],
            (bytes * num / den, 20),
        ))
    });
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-budget-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write(
        "p.md",
        &format!("---\nmodel: gpt-test\nmax_tokens: {budget}\nmax_steps: 1000\n---\nLoop.\n"),
    );
    let out = s.run(&["run", "p.md", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t["state"], "incomplete", "{t:#}");
    assert_eq!(t["reason"], "budget", "{t:#}");
    let billed: u64 = llm.billed();
    assert_eq!(t["tokens"].as_u64(), Some(billed), "{t:#}");
    eprintln!(
        "{} calls, spent {billed} of {budget} ({:.1}%)",
        llm.seen_count(),
        billed as f64 * 100.0 / budget as f64
    );
    t
}

/// Ordinary text (four bytes a token): the task spends at least 95% of
/// its budget before a call is refused. Reserved at one token per byte,
/// it was refused with about a quarter of it left (the next call's
/// context in bytes, four times its cost).
#[test]
fn a_long_task_spends_at_least_95_percent_of_its_budget() {
    require_docker();
    let t = long_task(100_000, 1, 4);
    let spent = t["tokens"].as_u64().unwrap();
    assert!(spent <= 100_000, "over budget: {t:#}");
    assert!(spent >= 95_000, "refused at {spent} of 100000: {t:#}");
}

/// Dense text, billed at three tokens for four bytes (three times what
/// bytes / 4 guesses): the bound still holds and the task is never billed
/// past its budget.
#[test]
fn dense_text_in_a_long_task_is_never_over_budget() {
    require_docker();
    let t = long_task(30_000, 3, 4);
    let spent = t["tokens"].as_u64().unwrap();
    assert!(spent <= 30_000, "over budget: {t:#}");
}

/// A built-in task of `model` with `max_tokens: 2000` and a prompt that
/// makes its first call about 5 KB, against a provider billing a token for
/// four bytes of each request and counting the same, when `counts`; its
/// JSON, what the provider answered and the count requests it had.
fn first_call(model: &str, counts: bool) -> (Value, FakeLlm) {
    let llm = FakeLlm::start_matching(vec![], |body| {
        let bytes = body.to_string().len() as u64;
        Some(Reply::Tools(
            vec![("execute_shell".into(), json!({"command": "echo step"}))],
            (bytes / 4, 20),
        ))
    });
    if counts {
        llm.count_with(|body| body.to_string().len() as u64 / 4);
    }
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-count-000")
        .env("OPENAI_BASE_URL", &llm.base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test-count-000")
        .env("ANTHROPIC_BASE_URL", &llm.anthropic_url());
    let context = "The build has three stages and each one matters. ".repeat(30);
    s.write(
        "p.md",
        &format!("---\nmodel: {model}\nmax_tokens: 2000\nmax_steps: 50\n---\n{context}\nLoop.\n"),
    );
    let out = s.run(&["run", "p.md", "--json"]);
    let t: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(t["state"], "incomplete", "{t:#}");
    assert_eq!(t["reason"], "budget", "{t:#}");
    assert!(t["tokens"].as_u64().unwrap() <= 2000, "over budget: {t:#}");
    (t, llm)
}

/// A first call of about 5 KB (about 1,300 tokens) in a task of 2,000:
/// reserved at its bytes it was refused before the task began; reserved
/// at OpenAI's own count (asked as the same conversation in the Responses
/// form, with the task's key, nothing of the output cap) it is made.
#[test]
fn a_first_call_too_big_for_its_bytes_is_reserved_at_the_openai_count() {
    require_docker();
    let (t, llm) = first_call("gpt-test", true);
    let seen = llm.seen();
    assert!(!seen.is_empty(), "no call was made: {t:#}");
    assert!(seen[0].body.to_string().len() > 2000, "{:?}", seen[0].body);
    assert_eq!(t["tokens"].as_u64(), Some(llm.billed()), "{t:#}");
    let counts = llm.counts();
    assert!(!counts.is_empty());
    assert_eq!(counts[0].path, "/v1/responses/input_tokens");
    assert_eq!(
        counts[0].authorization.as_deref(),
        Some("Bearer sk-test-count-000")
    );
    let asked = &counts[0].body;
    assert_eq!(asked["model"], "gpt-test");
    assert_eq!(asked["input"][0]["role"], "system", "{asked:#}");
    assert!(asked["tools"].as_array().is_some_and(|t| !t.is_empty()));
    for field in ["messages", "max_tokens", "max_completion_tokens", "stream"] {
        assert!(asked.get(field).is_none(), "{field} in {asked:#}");
    }
}

/// The same through Anthropic's `/v1/messages/count_tokens`.
#[test]
fn a_first_call_too_big_for_its_bytes_is_reserved_at_the_anthropic_count() {
    require_docker();
    let (t, llm) = first_call("claude-test-1", true);
    let seen = llm.seen();
    assert!(!seen.is_empty(), "no call was made: {t:#}");
    assert_eq!(seen[0].path, "/v1/messages");
    let counts = llm.counts();
    assert_eq!(counts[0].path, "/v1/messages/count_tokens");
    assert_eq!(counts[0].api_key.as_deref(), Some("sk-ant-test-count-000"));
    let asked = &counts[0].body;
    assert_eq!(asked["model"], "claude-test-1");
    assert_eq!(asked["messages"], seen[0].body["messages"]);
    assert!(asked.get("max_tokens").is_none(), "{asked:#}");
}

/// A provider with no count (a local server answers 404): the byte bound
/// stands, and the first call is refused for the budget as before.
#[test]
fn with_no_count_a_first_call_too_big_for_its_bytes_is_refused() {
    require_docker();
    let (t, llm) = first_call("gpt-test", false);
    assert_eq!(llm.seen_count(), 0, "{t:#}");
    assert_eq!(llm.counts().len(), 1);
    assert_eq!(t["tokens"], 0, "{t:#}");
}
