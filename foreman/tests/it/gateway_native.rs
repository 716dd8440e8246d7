//! Issue 25, the gateway half: the vendors' own APIs on a running task's
//! gateway socket, as a third-party agent's CLI reaches them through the
//! servo's loopback listener (which forwards the bytes unchanged).
//! Anthropic Messages (streamed and whole, `count_tokens`), Chat
//! Completions streamed, OpenAI Responses (streamed and whole): another
//! model refused, the placeholder key never forwarded, the real key never
//! returned, fields that bypass the meter refused, streams metered from
//! their own usage events and cut, in the API's own format, when the
//! budget is spent.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::gateway_guard::{hold, holding, release};
use crate::human::{Serve, until};
use crate::util::{Saheeli, require_docker};

const REAL_ANTHROPIC: &str = "sk-ant-real-0123456789abcdef";
const REAL_OPENAI: &str = "sk-openai-real-0123456789abcdef";
const PLACEHOLDER: &str = "sk-placeholder-from-the-container";

/// An answer from the gateway: status, headers (lower-case names) and the
/// body with any chunked encoding undone.
pub(crate) struct Answer {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

impl Answer {
    /// The `data:` payloads of a server-sent event stream, as JSON where
    /// they parse (`[DONE]` as a string).
    pub fn events(&self) -> Vec<(Option<String>, Value)> {
        self.body
            .split("\n\n")
            .filter(|b| !b.trim().is_empty())
            .map(|b| {
                let name = b
                    .lines()
                    .find_map(|l| l.strip_prefix("event: "))
                    .map(String::from);
                let data: String = b.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
                let v = serde_json::from_str(&data).unwrap_or(Value::String(data));
                (name, v)
            })
            .collect()
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn dechunk(raw: &str) -> String {
    let mut out = String::new();
    let mut rest = raw;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// One POST to a gateway socket with the agent's headers.
pub(crate) fn post(sock: &Path, path: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    let mut c = UnixStream::connect(sock)
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", sock.display()));
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.to_string();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{extra}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
    let headers = head.to_ascii_lowercase();
    let body = if headers.contains("transfer-encoding: chunked") {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Answer {
        status,
        headers,
        body,
    }
}

/// The official Python SDKs (`foreman/tests/sdk/check_gateway.py`, in
/// the venv `scripts/setup.sh sdk` makes) calling the socket: what they
/// parsed. Fails when the venv is missing: these tests never skip.
fn sdk(sock: &Path, scenario: &str, first: usize) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let python = root.join(".venv-sdk/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `scripts/setup.sh sdk` (the pinned anthropic and openai SDKs)",
        python.display()
    );
    let out = std::process::Command::new(&python)
        .arg(root.join("foreman/tests/sdk/check_gateway.py"))
        .arg(sock)
        .args([scenario, &first.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the {scenario} SDK client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The fake's answers: the servo's own calls (no marker in their
/// messages) hold at `go`, then complete; a test's call (its last message
/// holds `NATIVE-<k>`) gets `replies[k]`.
fn fake(replies: Vec<Reply>) -> FakeLlm {
    FakeLlm::start_matching(vec![], move |body| {
        let text = body.to_string();
        if let Some(at) = text.find("NATIVE-") {
            let k: usize = text[at + 7..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .unwrap();
            return Some(replies[k].clone());
        }
        let servo_calls = body["messages"].as_array().map_or(0, Vec::len);
        Some(if servo_calls <= 2 {
            Reply::tool("execute_shell", hold("go"))
        } else {
            Reply::tool("task_complete", json!({"message": "done"}))
        })
    })
}

fn anthropic_task(llm: &FakeLlm, front: &str) -> (Saheeli, String) {
    let s = Saheeli::new()
        .env("ANTHROPIC_API_KEY", REAL_ANTHROPIC)
        .env("ANTHROPIC_BASE_URL", &llm.anthropic_url());
    s.write(
        "p.md",
        &format!("---\nmodel: claude-test\n{front}---\nGo.\n"),
    );
    let id = s.submit("p.md");
    (s, id)
}

fn openai_task(llm: &FakeLlm, front: &str) -> (Saheeli, String) {
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", REAL_OPENAI)
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write("p.md", &format!("---\nmodel: gpt-test\n{front}---\nGo.\n"));
    let id = s.submit("p.md");
    (s, id)
}

fn claude_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("x-api-key", PLACEHOLDER),
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", "prompt-caching-2024-07-31"),
    ]
}

/// The tool input a Messages stream carries, assembled from its pieces.
fn assembled_tool_input(events: &[(Option<String>, Value)]) -> Value {
    let json: String = events
        .iter()
        .filter(|(_, v)| v["delta"]["type"] == "input_json_delta")
        .map(|(_, v)| v["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    serde_json::from_str(&json).unwrap()
}

/// An Anthropic task's socket serves Messages streamed and whole and
/// `count_tokens`, with the task's model and key only; the OpenAI routes,
/// unknown paths and provider-side tools are refused; usage is settled
/// to exactly what the provider billed.
#[test]
fn an_anthropic_task_speaks_messages_natively() {
    require_docker();
    let args = json!({"command": "echo hi > made.txt"});
    let llm = fake(vec![
        Reply::Tools(vec![("Bash".into(), args.clone())], (1200, 80)),
        Reply::Text(format!("the key is {REAL_ANTHROPIC}"), (300, 12)),
        Reply::Tools(vec![("Bash".into(), args.clone())], (1000, 70)),
        Reply::Text("done here".into(), (200, 9)),
    ]);
    let (s, id) = anthropic_task(&llm, "");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "go");

    let req = |k: usize, stream: bool| {
        json!({"model": "claude-test", "max_tokens": 32000, "stream": stream,
               "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
               "messages": [{"role": "user", "content": format!("NATIVE-{k}")}],
               "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}]})
    };
    let a = post(&sock, "/v1/messages", &claude_headers(), &req(0, true));
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.headers.contains("text/event-stream"), "{}", a.headers);
    let events = a.events();
    let names: Vec<&str> = events.iter().filter_map(|(n, _)| n.as_deref()).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
    assert_eq!(names.last(), Some(&"message_stop"), "{names:?}");
    assert!(names.contains(&"message_delta"), "{names:?}");
    assert_eq!(assembled_tool_input(&events), args);

    // Whole, and a text that echoes the real key: redacted.
    let a = post(&sock, "/v1/messages", &claude_headers(), &req(1, false));
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert_eq!(v["type"], "message", "{v}");
    assert!(
        !a.body.contains(REAL_ANTHROPIC),
        "the real key came back: {}",
        a.body
    );
    assert!(
        a.body.contains("[REDACTED:ANTHROPIC_API_KEY]"),
        "{}",
        a.body
    );

    // The Anthropic SDK parses both, as Claude Code would.
    let got = sdk(&sock, "messages", 2);
    assert_eq!(got["stream"]["stop_reason"], "tool_use", "{got:#}");
    let tool = got["stream"]["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use");
    assert_eq!(tool.unwrap()["input"], args, "{got:#}");
    assert_eq!(got["stream"]["usage"]["input_tokens"], 1000);
    assert_eq!(got["stream"]["usage"]["output_tokens"], 70);
    assert_eq!(got["whole"]["blocks"][0]["text"], "done here");
    assert!(got["count_tokens"].as_u64().unwrap() > 0);

    let a = post(
        &sock,
        "/v1/messages/count_tokens",
        &claude_headers(),
        &req(9, false),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.json()["input_tokens"].as_u64().unwrap() > 0);

    // Refused without reaching the provider, in the API's own format.
    let before = llm.seen_count();
    let mut other = req(9, true);
    other["model"] = json!("claude-opus-elsewhere");
    let a = post(&sock, "/v1/messages", &claude_headers(), &other);
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(
        a.json()["error"]["type"],
        "invalid_request_error",
        "{}",
        a.body
    );
    assert!(
        a.body.contains("claude-opus-elsewhere") && a.body.contains("`claude-test`"),
        "{}",
        a.body
    );
    let mut bypass = req(9, true);
    bypass["mcp_servers"] = json!([{"type": "url", "url": "https://example.com"}]);
    let a = post(&sock, "/v1/messages", &claude_headers(), &bypass);
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.json()["type"], "error");
    assert!(a.body.contains("mcp_servers"), "{}", a.body);
    let mut server_tool = req(9, true);
    server_tool["tools"] = json!([{"type": "web_search_20250305", "name": "web_search"}]);
    let a = post(&sock, "/v1/messages", &claude_headers(), &server_tool);
    assert_eq!(a.status, 400, "{}", a.body);
    for path in ["/v1/responses", "/v1/complete", "/v1/messages/batches"] {
        let a = post(&sock, path, &claude_headers(), &req(9, true));
        assert_eq!(a.status, 404, "{path}: {}", a.body);
    }
    let chat = json!({"model": "x", "stream": true, "messages": [{"role": "user", "content": "NATIVE-9"}]});
    let a = post(&sock, "/v1/chat/completions", &[], &chat);
    assert_eq!(a.status, 404, "{}", a.body);
    assert!(a.body.contains("/v1/messages"), "{}", a.body);
    assert_eq!(
        llm.seen_count(),
        before,
        "a refused call reached the provider"
    );

    // What the provider saw: the task's model and key, the caching
    // fields and header, never the placeholder.
    let native: Vec<_> = llm
        .seen()
        .into_iter()
        .filter(|c| c.body.to_string().contains("NATIVE-"))
        .collect();
    assert_eq!(native.len(), 4);
    assert_eq!(
        native[0].body["system"][0]["cache_control"]["type"],
        "ephemeral"
    );
    for c in &native {
        assert_eq!(c.body["model"], "claude-test");
        assert_eq!(c.api_key.as_deref(), Some(REAL_ANTHROPIC));
        assert!(c.authorization.is_none());
        assert!(!format!("{c:?}").contains(PLACEHOLDER));
        assert!(c.body["max_tokens"].as_u64().unwrap() <= 8192, "{}", c.body);
    }
    release(&id, "go");
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert_eq!(t["tokens"].as_u64(), Some(llm.billed()), "{t:#}");

    // What the gateway saw, as Harbor's trajectory format: the streamed
    // tool call reassembled, usage per step, no key.
    let out = s.expect(&["task", "trajectory", &id], 0);
    assert!(
        !out.contains(REAL_ANTHROPIC) && !out.contains(PLACEHOLDER),
        "{out}"
    );
    let atif: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(atif["schema_version"], "ATIF-v1.4");
    let steps = atif["steps"].as_array().unwrap();
    let agent: Vec<&Value> = steps.iter().filter(|s| s["source"] == "agent").collect();
    // The servo's own two calls, and the four native ones between them.
    assert_eq!(agent.len(), 6, "{atif:#}");
    assert_eq!(agent[0]["tool_calls"][0]["function_name"], "execute_shell");
    assert_eq!(agent[1]["tool_calls"][0]["function_name"], "Bash");
    assert_eq!(agent[1]["tool_calls"][0]["arguments"], args);
    assert_eq!(agent[1]["metrics"]["prompt_tokens"], 1200);
    assert!(
        agent[2]["message"]
            .as_str()
            .unwrap()
            .contains("[REDACTED:ANTHROPIC_API_KEY]")
    );
    assert_eq!(agent[5]["tool_calls"][0]["function_name"], "task_complete");
    assert_eq!(
        (steps[0]["source"].as_str(), steps[1]["source"].as_str()),
        (Some("system"), Some("user"))
    );
    let openai: Value =
        serde_json::from_str(&s.expect(&["task", "trajectory", &id, "--format", "openai"], 0))
            .unwrap();
    let bash = openai["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["tool_calls"][0]["function"]["name"] == "Bash")
        .count();
    assert_eq!(bash, 2, "{openai:#}");
}

/// An OpenAI task's socket serves Chat Completions streamed (usage forced
/// on) and Responses streamed and whole; Messages and `n` are refused; a
/// stream the provider cuts ends with an error event and is settled at
/// its reservation.
#[test]
fn an_openai_task_speaks_chat_streams_and_responses() {
    require_docker();
    let args = json!({"cmd": "ls -la"});
    let tools = || vec![("exec_command".to_string(), args.clone())];
    let llm = fake(vec![
        Reply::Tools(tools(), (500, 40)),
        Reply::Tools(tools(), (700, 50)),
        Reply::Text("all done".into(), (800, 5)),
        Reply::CutStream(3, Box::new(Reply::Tools(tools(), (900, 60)))),
        Reply::Tools(tools(), (400, 30)),
        Reply::Tools(tools(), (450, 35)),
        Reply::Text("sdk done".into(), (460, 4)),
    ]);
    let (s, id) = openai_task(&llm, "");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "go");
    let bearer = format!("Bearer {PLACEHOLDER}");
    let auth = [("authorization", bearer.as_str())];

    let chat = |k: usize| {
        json!({"model": "gpt-test", "stream": true, "max_tokens": 50,
               "messages": [{"role": "user", "content": format!("NATIVE-{k}")}],
               "tools": [{"type": "function", "function": {"name": "exec_command", "parameters": {"type": "object"}}}]})
    };
    let a = post(&sock, "/v1/chat/completions", &auth, &chat(0));
    assert_eq!(a.status, 200, "{}", a.body);
    let events = a.events();
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let pieces: String = events
        .iter()
        .filter_map(|(_, v)| {
            v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
        })
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&pieces).unwrap(), args);
    let usage = events
        .iter()
        .find(|(_, v)| v["usage"].is_object())
        .expect("a usage chunk");
    assert_eq!(usage.1["usage"]["prompt_tokens"], 500);

    let responses = |k: usize, stream: bool| {
        json!({"model": "gpt-test", "stream": stream, "instructions": "be brief",
               "input": [{"role": "user", "content": format!("NATIVE-{k}")}],
               "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]})
    };
    let a = post(&sock, "/v1/responses", &auth, &responses(1, true));
    assert_eq!(a.status, 200, "{}", a.body);
    let events = a.events();
    let names: Vec<&str> = events.iter().filter_map(|(n, _)| n.as_deref()).collect();
    for want in [
        "response.created",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ] {
        assert!(names.contains(&want), "{want} missing: {names:?}");
    }
    assert_eq!(names.last(), Some(&"response.completed"));
    let a = post(&sock, "/v1/responses", &auth, &responses(2, false));
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["output"][0]["content"][0]["text"], "all done");

    // The provider cuts a stream: the agent gets a well-formed error.
    let cut = chat(3);
    let a = post(&sock, "/v1/chat/completions", &auth, &cut);
    assert_eq!(a.status, 200, "{}", a.body);
    let last = a.events().last().unwrap().1.clone();
    assert!(last["error"]["message"].is_string(), "{}", a.body);
    let reservation = cut.to_string().len() as u64 + 50;

    // The OpenAI SDK parses them all, as Codex and litellm would.
    let got = sdk(&sock, "openai", 4);
    assert_eq!(got["chat_stream"]["arguments"], args, "{got:#}");
    assert_eq!(got["chat_stream"]["usage"]["prompt_tokens"], 400, "{got:#}");
    assert_eq!(got["responses_stream"]["arguments"], args, "{got:#}");
    assert_eq!(
        got["responses_stream"]["usage"]["output_tokens"], 35,
        "{got:#}"
    );
    assert_eq!(got["responses_whole"]["text"], "sdk done", "{got:#}");

    let before = llm.seen_count();
    let a = post(
        &sock,
        "/v1/messages",
        &[],
        &json!({"messages": [], "max_tokens": 5}),
    );
    assert_eq!(a.status, 404, "{}", a.body);
    let mut two = chat(9);
    two["n"] = json!(2);
    let a = post(&sock, "/v1/chat/completions", &auth, &two);
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(
        a.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`n`")
    );
    let mut stored = responses(9, true);
    stored["previous_response_id"] = json!("resp_elsewhere");
    assert_eq!(post(&sock, "/v1/responses", &auth, &stored).status, 400);
    // Another model, on each route (the servo's own whole chat too).
    for (path, mut body) in [
        ("/v1/chat/completions", chat(9)),
        ("/v1/responses", responses(9, false)),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "NATIVE-9"}]}),
        ),
    ] {
        body["model"] = json!("gpt-other-expensive");
        let a = post(&sock, path, &auth, &body);
        assert_eq!(a.status, 400, "{path}: {}", a.body);
        assert!(
            a.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("`gpt-test`"),
            "{path}: {}",
            a.body
        );
    }
    assert_eq!(
        llm.seen_count(),
        before,
        "a refused call reached the provider"
    );

    let native: Vec<_> = llm
        .seen()
        .into_iter()
        .filter(|c| c.body.to_string().contains("NATIVE-"))
        .collect();
    assert_eq!(native.len(), 7);
    for c in &native {
        assert_eq!(c.body["model"], "gpt-test");
        assert_eq!(
            c.authorization.as_deref(),
            Some(format!("Bearer {REAL_OPENAI}").as_str())
        );
        assert!(!format!("{c:?}").contains(PLACEHOLDER));
    }
    assert_eq!(native[0].body["stream_options"]["include_usage"], true);
    assert_eq!(native[0].path, "/v1/chat/completions");
    assert_eq!(native[1].path, "/v1/responses");
    release(&id, "go");
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    // Billed as reported, and the cut stream at its reservation.
    assert_eq!(
        t["tokens"].as_u64(),
        Some(llm.billed() + reservation),
        "{t:#}"
    );
    // The trajectory reads chat and Responses streams alike.
    let atif: Value = serde_json::from_str(&s.expect(&["task", "trajectory", &id], 0)).unwrap();
    let agent: Vec<&Value> = atif["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["source"] == "agent")
        .collect();
    // The servo's own two calls, and the seven native ones between them.
    assert_eq!(agent.len(), 9, "{atif:#}");
    for i in [1, 2, 5, 6] {
        assert_eq!(
            agent[i]["tool_calls"][0]["arguments"], args,
            "{i}: {atif:#}"
        );
    }
    assert_eq!(agent[3]["message"], "all done");
}

/// A stream whose reported usage spends the budget is ended with the
/// API's error event instead of its end; the task ends `incomplete` /
/// `budget`, its usage exactly what the provider billed.
#[test]
fn a_budget_spent_mid_stream_ends_the_stream_and_the_task() {
    require_docker();
    let args = json!({"command": "cat big.txt"});
    let llm = fake(vec![
        // Reported after the stream's content: past the budget.
        Reply::Tools(vec![("Bash".into(), args.clone())], (1500, 30_000)),
        Reply::Tools(vec![("Bash".into(), args)], (100, 10)),
    ]);
    let (s, id) = anthropic_task(&llm, "max_tokens: 20000\n");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "go");
    // The Anthropic SDK sees the error event as an API error, and the
    // stream never ended as if nothing happened.
    let got = sdk(&sock, "messages_budget", 0);
    assert!(
        got["raised"].is_string(),
        "the SDK took the stream as whole: {got:#}"
    );
    assert!(got.to_string().contains("billing_error"), "{got:#}");
    let req = json!({"model": "claude-test", "max_tokens": 1000, "stream": true,
                     "messages": [{"role": "user", "content": "NATIVE-1"}]});
    // The next call is refused before it reaches the provider.
    let seen = llm.seen_count();
    let again = post(&sock, "/v1/messages", &claude_headers(), &req);
    assert_eq!(again.status, 402, "{}", again.body);
    assert_eq!(again.json()["error"]["type"], "billing_error");
    assert_eq!(
        llm.seen_count(),
        seen,
        "a call past the budget reached the provider"
    );
    release(&id, "go");
    let t = until(&s, &id, &serve, "ended", |t| t["finished_at"].is_string());
    assert_eq!(
        (t["state"].as_str(), t["reason"].as_str()),
        (Some("incomplete"), Some("budget")),
        "{t:#}"
    );
    assert_eq!(t["tokens"].as_u64(), Some(llm.billed()), "{t:#}");
}
