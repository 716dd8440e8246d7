//! Issue 47: a budget a task can spend. A call's input is reserved at what
//! the provider billed the call before it plus one token per byte added
//! (`gateway::input_bound`), not at one token per byte of the whole
//! request: a long task is refused for its budget only when the next call
//! truly may not fit, having spent at least 95% of it, and never more
//! than all of it, however densely its text tokenizes.

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
