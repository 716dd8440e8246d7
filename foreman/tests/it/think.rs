//! Issue 29, watch it think: the built-in loop's calls are streamed from
//! the provider and their text is shown as it arrives (`llm.delta` lines)
//! by `task logs --follow` and the dashboard's audit stream, before the
//! call ends: the fake holds its stream open after the text until the
//! test has seen it (no timing involved). The audit log keeps the text
//! once; metering is what the provider reported. Real Docker.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use saheeli_protocol::AuditEvent;
use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, require_docker};
use crate::web::{WebServe, post, sse, until_api};

/// No setting: streaming is the default (`llm.stream`).
const STREAM: &str = "";

const THOUGHT: &str =
    "Counting the lines of the input first, then I will write the total to a file and finish.";

/// The model's turn that completes the task.
fn done() -> Reply {
    Reply::Tools(
        vec![("task_complete".into(), json!({"message": "done"}))],
        (130, 5),
    )
}

/// The model thinks aloud (held until released), then completes.
fn llm() -> (FakeLlm, Arc<tokio::sync::Notify>) {
    let gate = Arc::new(tokio::sync::Notify::new());
    let llm = FakeLlm::start(vec![
        Reply::Held(
            gate.clone(),
            Box::new(Reply::Text(THOUGHT.into(), (100, 20))),
        ),
        done(),
    ]);
    (llm, gate)
}

/// The ended task: complete, metered as the fake billed, the text in its
/// audit log once (and asked for as a stream).
fn assert_ended(s: &Saheeli, id: &str, llm: &FakeLlm) {
    let t = s.task(id);
    assert_eq!(t["state"], "complete", "{t:#}");
    assert_eq!(t["input_tokens"], 230, "{t:#}");
    assert_eq!(t["output_tokens"], 25, "{t:#}");
    assert_eq!(llm.billed(), 255);
    assert!(llm.seen().iter().all(|r| r.body["stream"] == true));
    let dir = PathBuf::from(t["results"].as_str().unwrap());
    let log =
        std::fs::read_to_string(dir.join(saheeli_protocol::paths::audit_log(&id.parse().unwrap())))
            .unwrap();
    let said: Vec<String> = log
        .lines()
        .filter_map(|l| match serde_json::from_str::<AuditEvent>(l) {
            Ok(AuditEvent::LlmCall { text: Some(t), .. }) => Some(t),
            _ => None,
        })
        .collect();
    // The first turn's whole text, once (the fake's Anthropic tool turn
    // says a few words of its own).
    assert_eq!(said.first().map(String::as_str), Some(THOUGHT), "{log}");
    assert_eq!(log.matches(THOUGHT).count(), 1, "{log}");
    assert!(
        !log.contains("llm.delta"),
        "live lines stay out of the audit log"
    );
}

#[test]
fn streamed_text_appears_in_logs_follow_before_the_call_ends() {
    require_docker();
    let (llm, gate) = llm();
    let s = Saheeli::with_config(STREAM)
        .env("OPENAI_API_KEY", "sk-test-think-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write("p.md", "---\nmodel: gpt-test\n---\nCount the lines.\n");
    let id = s.submit("p.md");
    let mut serve = s
        .cmd(&["serve", "--drain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut logs = s
        .cmd(&["task", "logs", &id, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = logs.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut printed = Vec::new();
    // What the live lines said so far, in order (each is a run of pieces).
    let mut said = String::new();
    // The call cannot end before the gate opens: the text is seen first.
    while !said.contains("Counting the lines of the input") {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("the text never appeared:\n{}", printed.join("\n")));
        if let Some(piece) = line.strip_prefix("[llm] ") {
            said.push_str(piece);
        }
        printed.push(line);
    }
    assert!(
        !printed.iter().any(|l| l.contains("said:")),
        "the call had not ended: {printed:#?}"
    );
    gate.notify_one();
    assert!(serve.wait().unwrap().success());
    assert!(logs.wait().unwrap().success());
    printed.extend(rx.try_iter());
    // After the call: its audit line, with the whole text.
    assert!(
        printed
            .iter()
            .any(|l| l.contains("said: Counting the lines") && l.contains("finish.")),
        "{printed:#?}"
    );
    assert_ended(&s, &id, &llm);
}

#[test]
fn streamed_text_reaches_the_dashboard_audit_stream_before_the_call_ends() {
    require_docker();
    let (llm, gate) = llm();
    let s = Saheeli::with_config(STREAM)
        .env("ANTHROPIC_API_KEY", "sk-ant-think-111")
        .env("ANTHROPIC_BASE_URL", &llm.anthropic_url());
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let r = post(
        &w.addr,
        "/api/tasks",
        json!({"prompt": "---\nmodel: claude-test-1\n---\nCount the lines.\n", "name": "think.md"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let running = wait_for(Duration::from_secs(60), || {
        crate::web::get(&w.addr, &format!("/api/tasks/{id}")).json()["state"] == "running"
    });
    assert!(running);
    let mut said = String::new();
    let events = sse(&w.addr, &format!("/api/tasks/{id}/events"), None, |e| {
        if e.event == "audit" && e.data["kind"] == "llm.delta" {
            said.push_str(e.data["delta"].as_str().unwrap_or(""));
        }
        // The stream's end would mean the text never came.
        e.event == "end" || said.contains("Counting the lines of the input")
    });
    assert!(
        said.contains("Counting the lines of the input"),
        "{events:#?}"
    );
    let live = events.last().unwrap();
    assert_eq!(live.id, "", "live lines carry no cursor: {live:?}");
    assert!(
        !events.iter().any(|e| e.data["kind"] == "llm_call"),
        "the call had not ended: {events:#?}"
    );
    gate.notify_one();
    let t: Value = until_api(&w, &id, "ended", |t| t["state"] == "complete");
    assert_eq!(t["state"], "complete");
    assert_ended(&s, &id, &llm);
}

/// The first call to a provider is its rate-limit probe: the others wait
/// for what it learns (issue 26). They go on at its answer's headers, not
/// once the whole answer has been generated: here the probe's stream is
/// held open after its text, and another task's first call still reaches
/// the provider and completes meanwhile (before the probe's 10 s wait
/// would have let it go anyway).
#[test]
fn calls_waiting_on_the_rate_probe_go_on_at_its_headers() {
    require_docker();
    let gate = Arc::new(tokio::sync::Notify::new());
    let llm = FakeLlm::start(vec![
        Reply::Held(
            gate.clone(),
            Box::new(Reply::Text(THOUGHT.into(), (100, 20))),
        ),
        done(),
        done(),
    ]);
    let s = Saheeli::with_config(STREAM)
        .env("OPENAI_API_KEY", "sk-test-think-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write("p.md", "---\nmodel: gpt-test\n---\nCount the lines.\n");
    let probe = s.submit("p.md");
    let mut serve = s
        .cmd(&["serve", "--drain", "-j", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(120), || !llm.seen().is_empty()),
        "the probe never reached the provider"
    );
    let other = s.submit("p.md");
    assert!(
        wait_for(Duration::from_secs(8), || s.task(&other)["state"]
            == "complete"),
        "a call waited for the probe's whole answer: {}",
        s.task(&other)
    );
    assert_eq!(
        s.task(&probe)["state"],
        "running",
        "the probe is still held"
    );
    gate.notify_one();
    assert!(serve.wait().unwrap().success());
    assert_eq!(s.task(&probe)["state"], "complete", "{}", s.task(&probe));
}
