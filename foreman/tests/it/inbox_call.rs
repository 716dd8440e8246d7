//! The inbox look that rides on the servo's own chat call (issue 48's hot
//! path): the gateway looks at the inbox as the call arrives and answers
//! HTTP 409 with it, sending nothing to the provider, when a message or a
//! pause waits; the servo takes them and asks again. Real serve, real
//! container, the fake provider standing in for the paid API.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::gateway_guard::{hold, holding, release};
use crate::human::{Serve, project, until};
use crate::util::require_docker;

/// A chat call on the task's socket, as the servo sends it, with the
/// inbox header: its status and body.
fn call_with_inbox(sock: &Path, after: i64) -> (u16, String) {
    let body =
        json!({"model": "gpt-test", "messages": [{"role": "user", "content": "x"}]}).to_string();
    let mut c = UnixStream::connect(sock).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        c,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n\
         x-saheeli-inbox-after: {after}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (status, body.to_string())
}

/// The user turns of the `i`th request the provider saw.
fn user_texts(llm: &FakeLlm, i: usize) -> Vec<String> {
    llm.seen()[i].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(String::from))
        .collect()
}

#[test]
fn a_note_and_a_pause_reach_the_model_through_its_calls_and_nothing_extra_is_sent() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::tool("execute_shell", hold("go")),
        Reply::tool("execute_shell", json!({"command": "true"})),
        Reply::tool("task_complete", json!({"message": "done"})),
    ]);
    let s = project(&llm, "");
    s.write("p.md", "---\nmodel: gpt-test\n---\nDo the thing.\n");
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "go");
    assert_eq!(llm.seen_count(), 1);

    s.expect(&["task", "inject", &id, "use the staging database"], 0);
    // A call carrying the look while a note waits: answered with the
    // inbox, and the provider never hears of it.
    let (status, body) = call_with_inbox(&sock, 0);
    assert_eq!(status, 409, "{body}");
    let first: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(first["error"]["type"], "saheeli_inbox", "{body}");
    assert_eq!(
        first["inbox"]["notes"][0]["text"], "use the staging database",
        "{body}"
    );
    assert_eq!(first["inbox"]["pause"], false, "{body}");
    // After the note's id, nothing waits: the call would go on.
    assert_eq!(llm.seen_count(), 1, "the 409 reached the provider");

    // A pause asked while the tool runs holds the next call back.
    s.expect(&["task", "pause", &id], 0);
    release(&id, "go");
    until(&s, &id, &serve, "paused", |t| t["state"] == "paused");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(llm.seen_count(), 1, "a paused task called the model");

    s.expect(&["task", "resume", &id], 0);
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert_eq!(t["steps"], 3, "{t:#}");
    // Three calls reached the provider, one a turn: the note was in the
    // second, once, and stays in the third.
    assert_eq!(llm.seen_count(), 3);
    let second = user_texts(&llm, 1);
    assert_eq!(
        second
            .iter()
            .filter(|t| t.contains("use the staging database"))
            .count(),
        1,
        "{second:?}"
    );
    assert!(
        user_texts(&llm, 2)
            .iter()
            .any(|t| t.contains("use the staging database"))
    );
}
