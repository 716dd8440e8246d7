//! The OpenAI-compatible path against a fake gateway: the wire format,
//! retries and `Retry-After`, and the gateway's typed errors.

use std::time::Duration;

use saheeli_protocol::{AuditEvent, ServoExit};
use serde_json::json;

use crate::util::{Fake, Reply, Servo};

#[test]
fn retries_a_rate_limit_then_completes() {
    let fake = Fake::tcp(vec![
        Reply::error(429, "rate_limit_exceeded", "slow down").header("retry-after", "1"),
        Reply::tool_call(
            "call_1",
            "execute_shell",
            json!({"command": "echo hi > out.txt"}),
            (100, 20),
        ),
        Reply::tool_call(
            "call_2",
            "task_complete",
            json!({"message": "wrote out.txt"}),
            (150, 10),
        ),
    ]);
    let ws = Servo::model("gpt-test").gateway(&fake.address).run();
    assert_eq!(ws.code, Some(ServoExit::Complete.code()), "{}", ws.stderr);

    let c = ws.completion().expect("complete.json");
    assert_eq!(c.message, "wrote out.txt");
    assert_eq!(c.steps, 2);
    assert_eq!((c.usage.input_tokens, c.usage.output_tokens), (250, 30));
    assert_eq!(std::fs::read_to_string(ws.path("out.txt")).unwrap(), "hi\n");

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    // Retry-After: 1 was honoured.
    let waited = requests[1].at - requests[0].at;
    assert!(waited >= Duration::from_millis(950), "{waited:?}");
    for r in requests.iter() {
        assert!(
            r.head.starts_with("POST /v1/chat/completions HTTP/1.1"),
            "{}",
            r.head
        );
        assert!(!r.head.to_ascii_lowercase().contains("authorization"));
        assert_eq!(r.body["model"], "gpt-test");
        // The six tools, `ask_user` and `task_blocked`.
        assert_eq!(r.body["tools"].as_array().unwrap().len(), 8);
        assert!(r.body["tools"].to_string().contains("ask_user"));
        assert!(r.body["tools"].to_string().contains("task_blocked"));
        assert_eq!(r.body["messages"][0]["role"], "system");
        assert_eq!(r.body["messages"][1]["content"], "Do it.\n");
    }
    // The second turn carries the first's tool call and its result.
    let messages = requests[2].body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_call_id"], "call_1");
    assert!(
        messages[3]["content"]
            .as_str()
            .unwrap()
            .contains("[exit code 0]")
    );

    let usages: Vec<_> = ws
        .audit()
        .iter()
        .filter_map(|e| match e {
            AuditEvent::LlmCall { usage, .. } => Some(usage.total()),
            _ => None,
        })
        .collect();
    assert_eq!(usages, [120, 160]);
}

#[test]
fn works_over_a_unix_socket() {
    let sockets = tempfile::tempdir().unwrap();
    let fake = Fake::unix(
        &sockets.path().join("gateway.sock"),
        vec![Reply::tool_call(
            "call_1",
            "task_complete",
            json!({"message": "done"}),
            (5, 1),
        )],
    );
    let ws = Servo::model("gpt-test").gateway(&fake.address).run();
    assert_eq!(ws.code, Some(0), "{}", ws.stderr);
    assert_eq!(ws.completion().unwrap().usage.total(), 6);
    let requests = fake.requests();
    assert!(
        requests[0].head.contains("host: gateway"),
        "{}",
        requests[0].head
    );
}

#[test]
fn a_refused_request_is_not_retried() {
    let fake = Fake::tcp(vec![Reply::error(
        400,
        "invalid_request_error",
        "bad tools",
    )]);
    let ws = Servo::model("gpt-test").gateway(&fake.address).run();
    assert_eq!(ws.code, Some(ServoExit::LlmError.code()), "{}", ws.stderr);
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(ws.outcome(), "llm_error");
    assert!(ws.audit().iter().any(|e| matches!(
        e,
        AuditEvent::LlmCall { error: Some(m), .. } if m.contains("HTTP 400: bad tools")
    )));
}

#[test]
fn the_gateway_having_given_up_is_final() {
    // The gateway already retried the provider: retrying here would
    // multiply its attempts.
    let fake = Fake::tcp(vec![Reply::error(
        503,
        "upstream_unavailable",
        "giving up after 6 attempts",
    )]);
    let ws = Servo::model("gpt-test").gateway(&fake.address).run();
    assert_eq!(ws.code, Some(ServoExit::LlmError.code()), "{}", ws.stderr);
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn a_spent_budget_ends_the_task() {
    let fake = Fake::tcp(vec![Reply::error(
        402,
        "budget_exceeded",
        "token budget: 1000 of 1000 used",
    )]);
    let ws = Servo::model("gpt-test").gateway(&fake.address).run();
    assert_eq!(ws.code, Some(ServoExit::Budget.code()), "{}", ws.stderr);
    assert_eq!(ws.outcome(), "budget");
}

#[test]
fn an_unusable_answer_is_reported_to_the_model() {
    let fake = Fake::tcp(vec![
        Reply::raw(200, "{\"choices\": \"nope\"}"),
        Reply::error(502, "malformed_response", "no choices"),
        Reply::tool_call("c", "task_complete", json!({"message": "ok"}), (1, 1)),
    ]);
    let ws = Servo::model("gpt-test").gateway(&fake.address).run();
    assert_eq!(ws.code, Some(0), "{}", ws.stderr);
    assert_eq!(fake.requests().len(), 3);
    let text = ws.conversation();
    assert!(text.contains("could not be used"), "{text}");
}

#[test]
fn an_unreachable_gateway_is_retried_until_the_time_budget() {
    // Nothing listens there: every attempt fails to connect and is retried.
    let ws = Servo::model("gpt-test")
        .gateway("unix:/nonexistent/gateway.sock")
        .timeout_s(3)
        .run();
    assert_eq!(ws.code, Some(ServoExit::TimeLimit.code()), "{}", ws.stderr);
    assert!(ws.stderr.contains("waiting for it"), "{}", ws.stderr);
}
