//! `saheeli doctor` against the fake LLM (its real wire format): a provider
//! that works, one that answers without a tool call, one that is not there.
//! (Against the real llama-server: local_server.rs.)

use insta::assert_snapshot;
use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply};
use crate::util::Saheeli;

#[test]
fn doctor_says_what_works_and_the_fix_for_what_does_not() {
    let good = FakeLlm::start(vec![
        Reply::tool("ping", json!({"x": 1})),
        Reply::tool("ping", json!({"x": 1})),
    ]);
    let mute = FakeLlm::start(vec![
        Reply::Text("pong".into(), (40, 2)),
        Reply::Text("pong".into(), (40, 2)),
    ]);
    // A port nothing listens on: bound, then closed.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = format!(
        "providers:\n  good: {{ kind: openai, base_url: '{}' }}\n  \
         mute: {{ kind: openai, base_url: '{}', api_key_env: MUTE_KEY, context_window: 16384 }}\n  \
         gone: {{ kind: openai, base_url: 'http://{gone}/v1' }}\n",
        good.base_url(),
        mute.base_url()
    );
    let s = Saheeli::with_config(&config)
        .env("ANTHROPIC_API_KEY", "")
        .env("MUTE_KEY", "mute-secret-key");
    let out = s
        .cmd(&[
            "doctor",
            "--model",
            "good/small",
            "--model",
            "mute/small",
            "--model",
            "gone/small",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout)
        .replace(&good.base_url(), "http://GOOD/v1")
        .replace(&mute.base_url(), "http://MUTE/v1")
        .replace(&gone.to_string(), "GONE");
    // The OS's words for a refused connection vary: keep the line's start.
    let text: String = text
        .lines()
        .map(|l| match l.find("no answer from") {
            Some(i) => format!("{}no answer from …", &l[..i]),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_snapshot!("doctor_fake_llm", text);
    // The key went only where it was named, and no key to the others.
    for seen in good.seen() {
        assert_eq!(seen.authorization, None);
        assert_eq!(seen.body["tool_choice"], "auto");
    }
    for seen in mute.seen() {
        assert_eq!(
            seen.authorization.as_deref(),
            Some("Bearer mute-secret-key")
        );
    }
    assert_eq!(good.seen().len(), 2);
    assert_eq!(good.seen()[1].body["stream"], true);
}
