//! Long tasks, cheaply (issue 26) on real containers: the cached prefix is
//! byte-identical call after call, cached tokens from both providers'
//! usage shapes are counted and priced exactly, and `task status --json`
//! shows them.

use std::path::Path;

use serde_json::{Value, json};

use crate::fake_cache::Billed;
use crate::fake_llm::{FakeLlm, Reply};
use crate::util::{Saheeli, require_docker};

const CALLS: usize = 50;

/// A task of `CALLS` calls: write a 4 KB file, read it again and again,
/// complete.
fn reading_script() -> Vec<Reply> {
    let text: String = (0..64)
        .map(|i| format!("line {i:03}: {}\n", "x".repeat(52)))
        .collect();
    let mut script = vec![Reply::Tools(
        vec![(
            "create_file".into(),
            json!({"path": "data.txt", "content": text}),
        )],
        (0, 20),
    )];
    for _ in 2..CALLS {
        script.push(Reply::Tools(
            vec![("read_file".into(), json!({"path": "data.txt"}))],
            (0, 20),
        ));
    }
    script.push(Reply::Tools(
        vec![("task_complete".into(), json!({"message": "read it"}))],
        (0, 20),
    ));
    script
}

fn run(s: &Saheeli, model: &str) -> Value {
    s.write(
        "p.md",
        &format!("---\nmodel: {model}\nmax_steps: 60\n---\nRead data.txt until you know it.\n"),
    );
    let out = s.run(&["run", "p.md", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A block as the provider hashes it: without its breakpoint marker.
fn plain(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("cache_control");
    }
    if let Some(a) = v.get_mut("content").and_then(Value::as_array_mut) {
        for b in a {
            if let Some(o) = b.as_object_mut() {
                o.remove("cache_control");
            }
        }
    }
    v
}

fn hash(v: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    h.finish()
}

/// The messages of a Messages request as the provider caches them: every
/// message but the newest, whose content the next request may extend.
fn settled(body: &Value) -> Vec<Value> {
    let msgs = body["messages"].as_array().unwrap();
    msgs[..msgs.len() - 1].iter().map(plain).collect()
}

fn price_of(b: &Billed, output: u64) -> f64 {
    // $3 input, $0.30 cache read (0.1×), $3.75 cache write (1.25×), $15 output.
    let plain = b.total - b.read - b.write;
    // Micro-USD, rounded per call as the gateway bills.
    (plain as f64 * 3.0 + b.read as f64 * 0.3 + b.write as f64 * 3.75 + output as f64 * 15.0)
        .round()
        / 1e6
}

/// Issue 26: the prefix each call sends (tools, system prompt, and the
/// conversation up to the previous call's end) is byte-identical across
/// 50 calls of a task; breakpoints mark it; the provider's cache serves
/// at least 90% of the input from the third call on; and the cached reads
/// and writes Anthropic reports are counted and priced exactly.
#[test]
fn anthropic_prefix_is_cached_and_priced_exactly() {
    require_docker();
    let llm = FakeLlm::start_caching(reading_script());
    let s = Saheeli::with_config(
        "prices:\n  claude-cache-test: { input_per_mtok: 3, output_per_mtok: 15 }\n",
    )
    .env("ANTHROPIC_API_KEY", "sk-ant-test-cache")
    .env("ANTHROPIC_BASE_URL", &llm.anthropic_url());
    let t = run(&s, "claude-cache-test");
    assert_eq!(t["state"], "complete");
    let seen = llm.seen();
    assert_eq!(seen.len(), CALLS);
    let bodies: Vec<&Value> = seen.iter().map(|s| &s.body).collect();
    // Tools and system: one hash for all 50 calls.
    let head = |b: &Value| hash(&json!([plain_all(&b["tools"]), plain_all(&b["system"])]));
    let first = head(bodies[0]);
    assert!(bodies.iter().all(|b| head(b) == first));
    assert!(bodies[0]["tools"].as_array().unwrap().last().unwrap()["cache_control"].is_object());
    assert!(bodies[0]["system"][0]["cache_control"].is_object());
    // Each request begins with everything the previous one sent but its
    // newest message, byte for byte; that message is extended, not changed.
    for w in bodies.windows(2) {
        let (before, after) = (w[0], w[1]);
        let prefix = settled(before);
        let now: Vec<Value> = after["messages"].as_array().unwrap()[..prefix.len()]
            .iter()
            .map(plain)
            .collect();
        assert_eq!(hash(&json!(prefix)), hash(&json!(now)));
        let newest = plain(before["messages"].as_array().unwrap().last().unwrap());
        let same = plain(&after["messages"][prefix.len()]);
        let (a, b) = (
            newest["content"].as_array().unwrap(),
            same["content"].as_array().unwrap(),
        );
        assert_eq!(a[..], b[..a.len()], "the newest message was rewritten");
    }
    // What the provider billed: every call from the second reads all the
    // previous call sent, and at least 90% of the input of calls 3 on
    // came from the cache (each step's new 4 KB is written once).
    let billed: Vec<Billed> = seen.iter().map(|s| s.billed.unwrap()).collect();
    for (i, w) in billed.windows(2).enumerate() {
        assert!(w[1].read >= w[0].total - 8, "call {}: {w:?}", i + 2);
    }
    let later = &billed[2..];
    let rate = later.iter().map(|b| b.read).sum::<u64>() as f64
        / later.iter().map(|b| b.total).sum::<u64>() as f64;
    assert!(rate >= 0.9, "{rate:.3} of input cached from call 3 on");
    // Counted and priced exactly: input includes cached tokens.
    let sum = |f: fn(&Billed) -> u64| billed.iter().map(f).sum::<u64>();
    assert_eq!(t["input_tokens"], sum(|b| b.total));
    assert_eq!(t["cache_read_tokens"], sum(|b| b.read));
    assert_eq!(t["cache_write_tokens"], sum(|b| b.write));
    assert_eq!(t["output_tokens"], 20 * CALLS as u64);
    let cost: f64 = billed.iter().map(|b| price_of(b, 20)).sum();
    let got = t["cost_usd"].as_f64().unwrap();
    assert!((got - cost).abs() < 1e-5, "cost {got} != {cost}");
    let rate = t["cache_hit_rate"].as_f64().unwrap();
    assert!(rate > 0.8, "{rate}");
    assert_eq!(t["compactions"], 0);
    // The same numbers in the audit log and report.md.
    let results = Path::new(t["results"].as_str().unwrap());
    let report = std::fs::read_to_string(results.join("report.md")).unwrap();
    assert!(report.contains("| prompt cache |"), "{report}");
}

fn plain_all(v: &Value) -> Value {
    match v {
        Value::Array(a) => Value::Array(a.iter().map(plain).collect()),
        other => plain(other),
    }
}

/// Issue 26: an OpenAI task sends its id as `prompt_cache_key` on every
/// call, its messages only grow, and `prompt_tokens_details.cached_tokens`
/// is counted as cache reads and priced at OpenAI's ratio (0.5× for
/// `gpt-4o`); `cache: off` sends no key.
#[test]
fn openai_cache_key_and_cached_tokens() {
    require_docker();
    let llm = FakeLlm::start_caching(reading_script());
    let s = Saheeli::with_config(
        "prices:\n  gpt-4o-cache-test: { input_per_mtok: 2.5, output_per_mtok: 10 }\n",
    )
    .env("OPENAI_API_KEY", "sk-test-cache-000")
    .env("OPENAI_BASE_URL", &llm.base_url());
    let t = run(&s, "gpt-4o-cache-test");
    assert_eq!(t["state"], "complete");
    let seen = llm.seen();
    assert_eq!(seen.len(), CALLS);
    let id = t["id"].as_str().unwrap();
    assert!(seen.iter().all(|s| s.body["prompt_cache_key"] == id));
    for w in seen.windows(2) {
        let a = w[0].body["messages"].as_array().unwrap();
        let b = w[1].body["messages"].as_array().unwrap();
        assert_eq!(a[..], b[..a.len()]);
    }
    let billed: Vec<Billed> = seen.iter().map(|s| s.billed.unwrap()).collect();
    let read: u64 = billed.iter().map(|b| b.read).sum();
    assert!(read > 0);
    assert_eq!(t["cache_read_tokens"], read);
    assert_eq!(t["cache_write_tokens"], 0);
    let cost: f64 = billed
        .iter()
        // Micro-USD, rounded per call as the gateway bills.
        .map(|b| ((b.total - b.read) as f64 * 2.5 + b.read as f64 * 1.25 + 200.0).round() / 1e6)
        .sum();
    let got = t["cost_usd"].as_f64().unwrap();
    assert!((got - cost).abs() < 1e-5, "cost {got} != {cost}");

    // `cache: off`: no key, no breakpoints.
    let llm = FakeLlm::start(vec![Reply::tool(
        "task_complete",
        json!({"message": "done"}),
    )]);
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-cache-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write("q.md", "---\nmodel: gpt-4o-mini\ncache: off\n---\nDone.\n");
    let out = s.run(&["run", "q.md", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(llm.seen()[0].body.get("prompt_cache_key").is_none());
}

/// Issue 26: `cache: 1h` marks every breakpoint with the hour's lifetime
/// and sends the beta header it needs.
#[test]
fn an_hour_cache_is_asked_for() {
    require_docker();
    let llm = FakeLlm::start(vec![Reply::tool(
        "task_complete",
        json!({"message": "done"}),
    )]);
    let s = Saheeli::new()
        .env("ANTHROPIC_API_KEY", "sk-ant-test-cache")
        .env("ANTHROPIC_BASE_URL", &llm.anthropic_url());
    s.write(
        "p.md",
        "---\nmodel: claude-cache-test\ncache: 1h\n---\nDone.\n",
    );
    let out = s.run(&["run", "p.md", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let seen = llm.seen();
    let body = seen[0].body.to_string();
    assert_eq!(body.matches(r#""ttl":"1h""#).count(), 3, "{body}");
    assert_eq!(
        seen[0].beta.as_deref(),
        Some("extended-cache-ttl-2025-04-11")
    );
}

/// The `compacted` events of a finished task: (step, strategy, cause).
fn compactions(t: &Value) -> Vec<(u32, String, String)> {
    let results = Path::new(t["results"].as_str().unwrap());
    let id = t["id"].as_str().unwrap();
    let audit = std::fs::read_to_string(results.join(format!("servo-{id}-audit.log"))).unwrap();
    audit
        .lines()
        .filter_map(|l| serde_json::from_str::<saheeli_protocol::AuditEvent>(l).ok())
        .filter_map(|e| match e {
            saheeli_protocol::AuditEvent::Compacted {
                step,
                strategy,
                cause,
                tokens_before,
                tokens_after,
                ..
            } => {
                assert!(
                    tokens_after < tokens_before,
                    "{step}: {tokens_before} → {tokens_after}"
                );
                Some((step, strategy, cause))
            }
            _ => None,
        })
        .collect()
}

/// A summary call is one without tools.
fn summary_reply(body: &Value) -> Option<Reply> {
    body["tools"]
        .as_array()
        .is_none_or(|t| t.is_empty())
        .then(|| {
            Reply::Text(
                "Goal: read data.txt.\nWhat was done: read it.".into(),
                (500, 30),
            )
        })
}

/// Issue 26: in a small window the servo masks old tool outputs, then has
/// the older turns summarised (one metered call), and the task completes;
/// the compactions are counted in status; a replay of the recorded session
/// makes the same compactions at the same steps.
#[test]
fn compaction_keeps_a_task_in_its_window_and_replays_exactly() {
    require_docker();
    let mut script = reading_script();
    script.truncate(24);
    script.push(Reply::tool("task_complete", json!({"message": "done"})));
    let llm = FakeLlm::start_matching(script, summary_reply);
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-cache-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    let ctx = "context: { window: 8000, keep_recent: 2 }\n";
    s.write(
        "p.md",
        &format!(
            "---\nmodel: gpt-4o-mini\nmax_steps: 60\n{ctx}---\nRead data.txt until you know it.\n"
        ),
    );
    let out = s.run(&["run", "p.md", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t["state"], "complete");
    let done = compactions(&t);
    assert!(done.iter().any(|c| c.1 == "mask"), "{done:?}");
    assert!(done.iter().any(|c| c.1 == "summarize"), "{done:?}");
    assert!(done.iter().all(|c| c.2 == "threshold"), "{done:?}");
    assert_eq!(t["compactions"], done.len());
    // No request the provider saw was over the window's threshold (bytes / 3).
    let summaries = llm
        .seen()
        .iter()
        .filter(|s| summary_reply(&s.body).is_some())
        .count();
    assert_eq!(
        summaries,
        done.iter().filter(|c| c.1 == "summarize").count()
    );
    for seen in llm.seen() {
        let bytes = seen.body["messages"].to_string().len() + seen.body["tools"].to_string().len();
        assert!(bytes / 3 < 8000, "a request of {bytes} bytes");
    }

    // The recorded session, replayed: the same compactions.
    let results = Path::new(t["results"].as_str().unwrap());
    let id = t["id"].as_str().unwrap();
    std::fs::copy(
        results.join(format!("servo-{id}-session.json")),
        s.path().join("rec.json"),
    )
    .unwrap();
    s.write(
        "r.md",
        &format!("---\nmodel: replay:rec.json\nmax_steps: 60\n{ctx}---\nRead data.txt until you know it.\n"),
    );
    let out = s.run(&["run", "r.md", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(compactions(&r), done);
}

/// Issue 26: a provider's context-length error (both providers' real
/// shapes) compacts the conversation and the call is made again: the task
/// completes instead of ending `bad_request`.
#[test]
fn a_context_length_error_compacts_and_the_task_goes_on() {
    require_docker();
    let openai_error = json!({"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}});
    let anthropic_error = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 208310 tokens > 200000 maximum"}});
    for (model, base, key, error) in [
        (
            "gpt-4o-mini",
            "OPENAI_BASE_URL",
            "OPENAI_API_KEY",
            openai_error,
        ),
        (
            "claude-ctx-test",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_API_KEY",
            anthropic_error,
        ),
    ] {
        // Four reads, then the provider refuses the fifth call once.
        let mut script = reading_script();
        script.truncate(5);
        script.push(Reply::Body(400, error.clone()));
        script.push(Reply::tool("read_file", json!({"path": "data.txt"})));
        script.push(Reply::tool("task_complete", json!({"message": "done"})));
        let llm = FakeLlm::start_matching(script, summary_reply);
        let url = if base.starts_with("OPENAI") {
            llm.base_url()
        } else {
            llm.anthropic_url()
        };
        let s = Saheeli::new().env(key, "sk-test-ctx-0000").env(base, &url);
        s.write(
            "p.md",
            &format!(
                "---\nmodel: {model}\nmax_steps: 60\ncontext: {{ keep_recent: 2 }}\n---\nRead.\n"
            ),
        );
        let out = s.run(&["run", "p.md", "--json"]);
        let t: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(t["state"], "complete", "{model}: {t}");
        let done = compactions(&t);
        assert_eq!(done.len(), 1, "{model}: {done:?}");
        assert_eq!(done[0].2, "context_error");
        // The call after the error sent the compacted conversation.
        let seen = llm.seen();
        let tools: Vec<&Value> = seen
            .iter()
            .map(|s| &s.body)
            .filter(|b| summary_reply(b).is_none())
            .collect();
        let (refused, again) = (tools[5].to_string(), tools[6].to_string());
        assert!(
            again.len() < refused.len(),
            "{model}: {} !< {}",
            again.len(),
            refused.len()
        );
        assert!(
            again.contains("was removed to keep the conversation"),
            "{model}"
        );
    }
}
