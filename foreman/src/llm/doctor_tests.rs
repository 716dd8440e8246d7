//! Tests of `doctor`, most on answers recorded from real servers.

use super::*;

#[test]
fn anthropic_answers_are_read_in_their_own_shape() {
    let v = json!({"content": [{"type": "text", "text": "ok"},
        {"type": "tool_use", "id": "t1", "name": "ping", "input": {"x": 1}}],
        "usage": {"input_tokens": 1, "output_tokens": 9, "cache_read_input_tokens": 1110}});
    assert_eq!(tools(ProviderKind::Anthropic, &v).status, Status::Ok);
    let u = usage(ProviderKind::Anthropic, &v);
    assert_eq!(u.status, Status::Ok);
    assert!(
        u.said.contains("cache_read_input_tokens 1110"),
        "{}",
        u.said
    );
    let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\n\
                  event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\n\n\
                  event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    assert_eq!(
        stream_check(ProviderKind::Anthropic, stream).status,
        Status::Ok
    );
    let cut = "data: {\"type\":\"message_start\"}\n\n";
    assert_eq!(
        stream_check(ProviderKind::Anthropic, cut).status,
        Status::Fail
    );
}

#[test]
fn a_text_answer_or_a_stream_without_usage_is_said() {
    let v = json!({"choices": [{"message": {"role": "assistant", "content": "pong"}}]});
    let c = tools(ProviderKind::Openai, &v);
    assert_eq!(c.status, Status::Fail);
    assert!(c.fix.unwrap().contains("--chat-template-file"));
    assert_eq!(usage(ProviderKind::Openai, &v).status, Status::Fail);
    let s = "data: {\"choices\":[{\"delta\":{\"content\":\"p\"}}]}\n\ndata: [DONE]\n\n";
    assert_eq!(stream_check(ProviderKind::Openai, s).status, Status::Warn);
    let b = body(ProviderKind::Openai, "m", true);
    assert_eq!(b["tool_choice"], "auto");
    assert_eq!(b["stream_options"]["include_usage"], true);
    assert!(b["max_tokens"].is_u64());
}

/// Issue 27 item 1, on what llama-server really saw and said: the
/// doctor's request (recorded through a proxy with OPENAI_API_KEY set
/// and no `api_key_env`) carried no key, and is the one `body` makes;
/// its answer (text, no tool call), its stream and a keyed server's
/// 401 are read right.
#[test]
fn llama_server_recorded_answers_are_read_right() {
    use crate::llm::recorded::{answer, exchange};
    let ex = exchange("llama-server", "doctor-tools.json");
    let headers = ex["request"]["headers"].as_object().unwrap();
    assert!(
        !headers.contains_key("authorization") && !headers.contains_key("x-api-key"),
        "{headers:?}"
    );
    assert_eq!(
        ex["request"]["body"],
        body(ProviderKind::Openai, "smollm2", false)
    );
    // SmolLM2-135M answers in words, tools in its prompt or not: said
    // so, with the template fix.
    let v = &ex["response"]["body"];
    let t = tools(ProviderKind::Openai, v);
    assert_eq!(t.status, Status::Fail, "{}", t.said);
    assert!(t.fix.unwrap().contains("--chat-template-file"));
    assert_eq!(usage(ProviderKind::Openai, v).status, Status::Ok);
    let stream = answer("llama-server", "stream.json");
    let s = stream_check(ProviderKind::Openai, stream.as_str().unwrap());
    assert_eq!(s.status, Status::Ok, "{}", s.said);
    // Its /props says the template renders tools: the model is the
    // cause, and the fix says so.
    let props = crate::llm::probe::from_props(&answer("llama-server", "props.json")).unwrap();
    let e = explained(tools(ProviderKind::Openai, v), props.template_tools);
    assert_eq!(e.status, Status::Fail);
    assert!(
        e.said.contains("though the chat template renders tools"),
        "{}",
        e.said
    );
    let fix = e.fix.unwrap();
    assert!(fix.contains("trained for tool calls") && !fix.contains("--chat-template-file"));
    // Without that word from the server, the template fix stays.
    let t = explained(tools(ProviderKind::Openai, v), None);
    assert!(t.fix.unwrap().contains("--chat-template-file"));
    // A server started with --api-key, asked without one.
    let denied = exchange("llama-server", "unauthorized.json");
    assert_eq!(denied["response"]["status"], 401);
    let local = Provider {
        name: "local".into(),
        kind: ProviderKind::Openai,
        base_url: "http://127.0.0.1:8080/v1".into(),
        key_env: None,
        key: None,
        max_output_tokens: None,
        context_window: None,
    };
    assert!(http_fix(&local, 401).contains("api_key_env"));
}

/// Issue 27 items 1 and 7 and the doctor's fixes, on what
/// llama-cpp-python's server really saw and said (recorded): the
/// doctor's request carried no key and is the one `body` makes; the
/// model called `ping`; a streamed tool-calling request got an empty
/// stream, whose fix is `llm.stream: false`; a keyed server's 401 names
/// `api_key_env`.
#[test]
fn llama_cpp_python_recorded_answers_are_read_right() {
    use crate::llm::recorded::{answer, exchange};
    let lcp = "llama-cpp-python";
    let ex = exchange(lcp, "doctor-tools.json");
    let headers = ex["request"]["headers"].as_object().unwrap();
    assert!(
        !headers.contains_key("authorization") && !headers.contains_key("x-api-key"),
        "{headers:?}"
    );
    assert_eq!(
        ex["request"]["body"],
        body(ProviderKind::Openai, "smollm2", false)
    );
    let v = &ex["response"]["body"];
    let t = tools(ProviderKind::Openai, v);
    assert_eq!(t.status, Status::Ok, "{}", t.said);
    assert!(t.said.contains("`ping`"), "{}", t.said);
    assert_eq!(usage(ProviderKind::Openai, v).status, Status::Ok);
    let stream = exchange(lcp, "stream.json");
    assert_eq!(stream["request"]["body"]["stream"], true);
    assert_eq!(stream["response"]["status"], 200);
    let s = stream_check(
        ProviderKind::Openai,
        stream["response"]["body"].as_str().unwrap(),
    );
    assert_eq!(s.status, Status::Fail, "{}", s.said);
    assert!(s.fix.unwrap().contains("`llm: { stream: false }`"));
    // Without tools it streams, but never reports usage.
    let text = answer(lcp, "stream-text.json");
    let s = stream_check(ProviderKind::Openai, text.as_str().unwrap());
    assert_eq!(s.status, Status::Warn, "{}", s.said);
    let denied = exchange(lcp, "unauthorized.json");
    assert_eq!(denied["response"]["status"], 401);
    let local = Provider {
        name: "local".into(),
        kind: ProviderKind::Openai,
        base_url: "http://127.0.0.1:8000/v1".into(),
        key_env: None,
        key: None,
        max_output_tokens: None,
        context_window: None,
    };
    assert!(http_fix(&local, 401).contains("api_key_env"));
    let w = window(&local, &ServerInfo::default(), "smollm2", None);
    assert_eq!(w.status, Status::Warn);
    assert!(w.fix.unwrap().contains("context_window"));
}

/// Issue 47 (hostile N29): what a provider said is printed with its key
/// redacted and its terminal escapes shown, not obeyed.
#[test]
fn what_a_provider_said_is_printed_redacted_without_escapes() {
    let r = Redactor::new(&[("K".into(), "sk-doctor-0123456789".into())]);
    let c = check(
        "tools",
        Status::Fail,
        "HTTP 401: Bearer sk-doctor-0123456789 \u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31m",
    )
    .fix("line one\nline two")
    .cleaned(&r);
    assert!(!c.said.contains("sk-doctor"), "{}", c.said);
    assert!(!c.said.chars().any(char::is_control), "{:?}", c.said);
    assert!(c.said.contains("\\u{1b}]0;pwned"), "{}", c.said);
    assert_eq!(c.fix.as_deref(), Some("line one\nline two"));
}
