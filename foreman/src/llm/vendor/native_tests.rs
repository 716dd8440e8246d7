//! Tests of `native`.

use super::*;
use crate::config::ProviderKind;

const TASK: TaskModel<'static> = TaskModel {
    provider: "local",
    model: "task-model",
};

fn vetted(api: Api, body: Value) -> Result<Vetted, String> {
    vet(api, body.to_string().as_bytes(), None, TASK)
}

#[test]
fn another_model_is_refused_naming_the_task_s() {
    for api in [Api::Messages, Api::Chat, Api::Responses] {
        for other in [
            json!("claude-opus-other"),
            json!("other/task-model"),
            json!(7),
        ] {
            let why = vetted(api, json!({"model": other, "max_tokens": 5})).unwrap_err();
            assert!(
                why.contains("field `model`") && why.contains("`task-model`"),
                "{api:?} {other}: {why}"
            );
        }
        for same in [json!("task-model"), json!("local/task-model"), Value::Null] {
            let v = vetted(api, json!({"model": same})).unwrap();
            assert_eq!(v.body["model"], "task-model", "{api:?} {same}");
        }
        let v = vetted(api, json!({})).unwrap();
        assert_eq!(v.body["model"], "task-model");
    }
}

#[test]
fn the_model_is_sent_upstream_and_caching_fields_pass() {
    let v = vetted(
        Api::Messages,
        json!({"model": "local/task-model", "max_tokens": 32000, "stream": true,
               "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
               "messages": [{"role": "user", "content": "hi"}],
               "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}),
    )
    .unwrap();
    assert_eq!(v.body["model"], "task-model");
    assert_eq!(v.body["system"][0]["cache_control"]["type"], "ephemeral");
    assert!(v.stream);
    assert_eq!(v.asked, Some(32000));
    let bytes = v.capped(Api::Messages, 100);
    let sent: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(sent["max_tokens"], 100);
}

#[test]
fn a_streamed_chat_always_asks_for_usage() {
    let v = vetted(
        Api::Chat,
        json!({"model": "task-model", "stream": true, "stream_options": {"include_usage": false},
               "max_completion_tokens": 5, "messages": []}),
    )
    .unwrap();
    assert_eq!(v.body["stream_options"], json!({"include_usage": true}));
    let sent: Value = serde_json::from_slice(&v.capped(Api::Chat, 3)).unwrap();
    assert_eq!(sent["max_completion_tokens"], 3);
    assert!(sent.get("max_tokens").is_none());
    let v = vetted(Api::Responses, json!({"input": "hi"})).unwrap();
    assert!(!v.stream);
    let sent: Value = serde_json::from_slice(&v.capped(Api::Responses, 9)).unwrap();
    assert_eq!(
        (sent["max_output_tokens"].clone(), sent["model"].clone()),
        (json!(9), json!("task-model"))
    );
}

#[test]
fn fields_and_tools_that_bypass_the_meter_are_refused() {
    let cases = [
        (Api::Messages, json!({"mcp_servers": []}), "mcp_servers"),
        (Api::Messages, json!({"container": "c"}), "container"),
        (Api::Chat, json!({"n": 2}), "`n`"),
        (
            Api::Chat,
            json!({"service_tier": "priority"}),
            "service_tier",
        ),
        (
            Api::Chat,
            json!({"web_search_options": {}}),
            "web_search_options",
        ),
        (
            Api::Responses,
            json!({"previous_response_id": "r"}),
            "previous_response_id",
        ),
        (Api::Responses, json!({"background": true}), "background"),
        (
            Api::Messages,
            json!({"tools": [{"type": "web_search_20250305", "name": "w"}]}),
            "web_search_20250305",
        ),
        (
            Api::Responses,
            json!({"tools": [{"type": "web_search"}]}),
            "`web_search`",
        ),
        (
            Api::Responses,
            json!({"tools": [{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}]}),
            "`web_search`",
        ),
        (
            Api::Responses,
            json!({"tools": [{"type": "mcp", "server_url": "x"}]}),
            "`mcp`",
        ),
        (Api::Chat, json!({"stream": "yes"}), "stream"),
        (Api::Messages, json!({"max_tokens": -1}), "max_tokens"),
        (Api::Messages, json!([1]), "object"),
    ];
    for (api, body, named) in cases {
        let err = vetted(api, body.clone()).unwrap_err();
        assert!(err.contains(named), "{api:?} {body}: {err}");
    }
    // Tools the agent runs itself pass.
    for (api, tool) in [
        (
            Api::Messages,
            json!({"type": "bash_20250124", "name": "bash"}),
        ),
        (
            Api::Messages,
            json!({"type": "custom", "name": "x", "input_schema": {}}),
        ),
        (
            Api::Chat,
            json!({"type": "function", "function": {"name": "f"}}),
        ),
        (
            Api::Responses,
            json!({"type": "custom", "name": "apply_patch"}),
        ),
        (
            Api::Responses,
            json!({"type": "function", "name": "exec_command"}),
        ),
    ] {
        assert!(
            vetted(api, json!({"tools": [tool]})).is_ok(),
            "{api:?} {tool}"
        );
    }
}

#[test]
fn max_steps_counts_llm_calls_for_third_party_agents_only() {
    use crate::llm::Budget;
    let agent = Budget {
        max_calls: Some(3),
        ..Budget::default()
    };
    let table = [
        (agent, 0, None),
        (agent, 2, None),
        (agent, 3, Some(3)),
        (agent, 9, Some(3)),
        (Budget::default(), 1000, None),
    ];
    for (budget, calls, want) in table {
        assert_eq!(steps_spent(&budget, calls), want, "{budget:?} {calls}");
    }
}

#[test]
fn routes_are_served_by_their_provider_kind_only() {
    use ProviderKind::*;
    let table = [
        (Api::Messages, Anthropic, true),
        (Api::Messages, Openai, false),
        (Api::Chat, Openai, true),
        (Api::Chat, Anthropic, false),
        (Api::Responses, Openai, true),
        (Api::Responses, Anthropic, false),
    ];
    for (api, kind, served) in table {
        assert_eq!(api.served_by(kind), served, "{api:?} {kind:?}");
    }
    assert_eq!(
        Api::Responses.endpoint("http://h/v1"),
        "http://h/v1/responses"
    );
    assert_eq!(Api::Messages.endpoint("http://h"), "http://h/v1/messages");
}

#[test]
fn errors_speak_the_api_format_and_headers_are_checked() {
    let e = Api::Messages.error_body("budget_exceeded", "spent");
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["type"], "billing_error");
    let e = Api::Responses.error_body(MAX_STEPS, "done");
    assert_eq!(e["error"]["code"], "max_steps");
    assert_eq!(anthropic_version(Some("2023-06-01")), "2023-06-01");
    assert_eq!(anthropic_version(Some("evil\r\nx")), "2023-06-01");
    assert_eq!(
        anthropic_beta(Some("prompt-caching-2024-07-31,claude-code-20250219")),
        Ok(Some(
            "prompt-caching-2024-07-31,claude-code-20250219".into()
        ))
    );
    assert_eq!(anthropic_beta(Some("a\nb")), Ok(None));
    assert_eq!(count_tokens(b"{\"a\": 1}").unwrap()["input_tokens"], 2);
    assert!(count_tokens(b"nope").is_err());
}

/// Issue 47, hostile case N5: content parts by allow list, on every route.
/// (api, body, None when it passes, else what the refusal names).
#[test]
fn content_parts_pass_by_allow_list() {
    let png = "data:image/png;base64,iVBORw0KGgo=";
    let url = "http://exfil.invalid/leak?data=SECRET";
    let user = |content: Value| json!({"messages": [{"role": "user", "content": content}]});
    let input = |content: Value| json!({"input": [{"role": "user", "content": content}]});
    let b64 = json!({"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="});
    let cases: Vec<(Api, Value, Option<&str>)> = vec![
        // Chat Completions.
        (Api::Chat, user(json!("hi")), None),
        (
            Api::Chat,
            user(json!([{"type": "text", "text": "hi"}])),
            None,
        ),
        (
            Api::Chat,
            user(json!([{"type": "image_url", "image_url": {"url": png}}])),
            None,
        ),
        (
            Api::Chat,
            user(json!([{"type": "image_url", "image_url": {"url": "DATA:image/png;base64,AA"}}])),
            None,
        ),
        (
            Api::Chat,
            user(
                json!([{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": url}}]),
            ),
            Some("`messages[0].content[1]` (type `image_url`)"),
        ),
        (
            Api::Chat,
            user(json!([{"type": "image_url", "image_url": url}])),
            Some("remote URL"),
        ),
        (
            Api::Chat,
            user(json!([{"type": "file", "file": {"file_id": "file-abc"}}])),
            Some("stored at the provider"),
        ),
        (
            Api::Chat,
            user(
                json!([{"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBE"}}]),
            ),
            None,
        ),
        (
            Api::Chat,
            user(json!([{"type": "file", "file": {"file_data": "https://exfil.invalid/a.pdf"}}])),
            Some("remote URL"),
        ),
        (
            Api::Responses,
            input(json!([{"type": "input_file", "file_data": "http://exfil.invalid/a.pdf"}])),
            Some("remote URL"),
        ),
        (
            Api::Chat,
            user(json!([{"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}])),
            Some("audio tokens"),
        ),
        (
            Api::Chat,
            user(json!([{"type": "video_url", "video_url": {"url": url}}])),
            Some("`video_url`"),
        ),
        (
            Api::Chat,
            json!({"messages": [{"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url", "image_url": {"url": url}}]}]}),
            Some("messages[0].content[0]"),
        ),
        (
            Api::Chat,
            json!({"messages": [{"role": "assistant", "audio": {"id": "audio_1"}}]}),
            Some("messages[0].audio"),
        ),
        (
            Api::Chat,
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
            None,
        ),
        (
            Api::Chat,
            json!({"messages": "hi"}),
            Some("must be an array"),
        ),
        // Responses.
        (
            Api::Responses,
            json!({"input": "hi", "instructions": "be brief"}),
            None,
        ),
        (Api::Responses, input(json!("hi")), None),
        (
            Api::Responses,
            input(
                json!([{"type": "input_text", "text": "hi"}, {"type": "input_image", "image_url": png}]),
            ),
            None,
        ),
        (
            Api::Responses,
            input(json!([{"type": "input_image", "image_url": url}])),
            Some("`input[0].content[0]` (type `input_image`)"),
        ),
        (
            Api::Responses,
            input(json!([{"type": "input_image", "file_id": "file-abc"}])),
            Some("stored at the provider"),
        ),
        (
            Api::Responses,
            input(json!([{"type": "input_file", "file_url": url}])),
            Some("remote URL"),
        ),
        (
            Api::Responses,
            input(json!([{"type": "input_file", "file_id": "file-abc"}])),
            Some("stored at the provider"),
        ),
        (
            Api::Responses,
            input(
                json!([{"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBE"}]),
            ),
            None,
        ),
        (
            Api::Responses,
            json!({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": url}]}]}),
            Some("input[0].output[0]"),
        ),
        (
            Api::Responses,
            json!({"input": [{"type": "function_call_output", "call_id": "c", "output": "ok"},
                             {"type": "custom_tool_call_output", "call_id": "d", "output": [{"type": "input_text", "text": "ok"}]},
                             {"type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
                             {"type": "function_call", "call_id": "c", "name": "exec_command", "arguments": "{}"}]}),
            None,
        ),
        (
            Api::Responses,
            json!({"input": [{"type": "item_reference", "id": "msg_1"}]}),
            Some("`item_reference`"),
        ),
        (
            Api::Responses,
            json!({"input": [{"type": "web_search_call", "id": "ws", "action": {"type": "open_page", "url": url}}]}),
            Some("`web_search_call`"),
        ),
        (
            Api::Responses,
            json!({"instructions": [{"role": "developer", "content": [{"type": "input_image", "image_url": url}]}]}),
            Some("instructions[0].content[0]"),
        ),
        // Codex's tool search: its call and what it loaded round-trip;
        // a loaded tool the provider would run is refused.
        (
            Api::Responses,
            json!({"input": [
                {"type": "tool_search_call", "call_id": "s1", "execution": "client", "arguments": {"query": "ask"}},
                {"type": "tool_search_output", "call_id": "s1", "execution": "client", "status": "completed",
                 "tools": [{"type": "namespace", "name": "mcp__saheeli__", "description": "d",
                            "tools": [{"type": "function", "name": "ask_user", "defer_loading": true, "parameters": {}}]}]}]}),
            None,
        ),
        (
            Api::Responses,
            json!({"input": [{"type": "tool_search_output", "call_id": "s1", "tools": [{"type": "mcp", "server_url": url}]}]}),
            Some("`input[0].tools[0]` (type `mcp`)"),
        ),
        // Anthropic Messages.
        (
            Api::Messages,
            json!({"system": "s", "messages": [{"role": "user", "content": "hi"}]}),
            None,
        ),
        (
            Api::Messages,
            json!({"system": [{"type": "image", "source": b64.clone()}]}),
            Some("`system[0]` (type `image`)"),
        ),
        (
            Api::Messages,
            user(
                json!([{"type": "image", "source": b64.clone()}, {"type": "text", "text": "what?"}]),
            ),
            None,
        ),
        (
            Api::Messages,
            user(json!([{"type": "image", "source": {"type": "url", "url": url}}])),
            Some("`messages[0].content[0].source` (type `url`)"),
        ),
        (
            Api::Messages,
            user(json!([{"type": "document", "source": {"type": "file", "file_id": "file_1"}}])),
            Some("stored at the provider"),
        ),
        (
            Api::Messages,
            user(json!([{"type": "document", "source": {"type": "url", "url": url}}])),
            Some("remote URL"),
        ),
        (
            Api::Messages,
            user(
                json!([{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}},
                        {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "x"}]}}]),
            ),
            None,
        ),
        (
            Api::Messages,
            user(
                json!([{"type": "document", "source": {"type": "content", "content": [{"type": "image", "source": {"type": "url", "url": url}}]}}]),
            ),
            Some("messages[0].content[0].source.content[0].source"),
        ),
        (
            Api::Messages,
            user(
                json!([{"type": "tool_result", "tool_use_id": "t", "content": [
                {"type": "text", "text": "x"}, {"type": "image", "source": {"type": "url", "url": url}}]}]),
            ),
            Some("messages[0].content[0].content[1].source"),
        ),
        (
            Api::Messages,
            user(
                json!([{"type": "tool_result", "tool_use_id": "t", "content": [
                {"type": "text", "text": "x"}, {"type": "image", "source": b64.clone()},
                {"type": "search_result", "source": "https://a", "title": "t", "content": [{"type": "text", "text": "y"}]},
                {"type": "tool_reference", "tool_name": "mcp__saheeli__ask_user"}]}]),
            ),
            None,
        ),
        (
            Api::Messages,
            user(json!([{"type": "container_upload", "file_id": "file_1"}])),
            Some("`container_upload`"),
        ),
        (
            Api::Messages,
            json!({"messages": [{"role": "assistant", "content": [
                {"type": "server_tool_use", "id": "s", "name": "web_fetch", "input": {"url": url}}]}]}),
            Some("`server_tool_use`"),
        ),
        (
            Api::Messages,
            json!({"messages": [{"role": "assistant", "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "server_tool_use", "id": "s", "name": "tool_search_tool_regex", "input": {"query": "ask"}},
                {"type": "tool_search_tool_result", "tool_use_id": "s", "content": {
                    "type": "tool_search_tool_search_result",
                    "tool_references": [{"type": "tool_reference", "tool_name": "ask_user"}]}},
                {"type": "tool_use", "id": "t", "name": "ask_user", "input": {}}]}]}),
            None,
        ),
        (
            Api::Messages,
            user(json!([{"type": "web_fetch_tool_result", "tool_use_id": "t", "content": {}}])),
            Some("`web_fetch_tool_result`"),
        ),
        (
            Api::Messages,
            user(json!([{"type": "mystery"}])),
            Some("`mystery`"),
        ),
    ];
    for (api, body, want) in cases {
        let got = vetted(api, body.clone());
        match want {
            None => assert!(got.is_ok(), "{api:?} {body}: {got:?}"),
            Some(named) => {
                let err = got.expect_err(&format!("{api:?} {body} passed"));
                assert!(err.contains(named), "{api:?} {body}: {err}");
            }
        }
    }
}

/// Tools: a search of the request's own tools passes, on Responses
/// (Codex's `tool_search`) and Messages (Anthropic's tool search tool);
/// tools the provider runs stay refused.
#[test]
fn tool_search_passes_and_provider_tools_stay_refused() {
    let table = [
        (
            Api::Responses,
            json!({"type": "tool_search", "execution": "client", "description": "d", "parameters": {}}),
            true,
        ),
        (
            Api::Responses,
            json!({"type": "tool_search", "execution": "server"}),
            true,
        ),
        (
            Api::Messages,
            json!({"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}),
            true,
        ),
        (
            Api::Messages,
            json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}),
            true,
        ),
        (Api::Responses, json!({"type": "web_search"}), false),
        (Api::Responses, json!({"type": "web_search_preview"}), false),
        (
            Api::Responses,
            json!({"type": "file_search", "vector_store_ids": ["v"]}),
            false,
        ),
        (
            Api::Responses,
            json!({"type": "code_interpreter", "container": {"type": "auto"}}),
            false,
        ),
        (
            Api::Responses,
            json!({"type": "computer_use_preview"}),
            false,
        ),
        (Api::Responses, json!({"type": "image_generation"}), false),
        (
            Api::Responses,
            json!({"type": "mcp", "server_url": "https://x"}),
            false,
        ),
        (
            Api::Messages,
            json!({"type": "web_fetch_20250910", "name": "web_fetch"}),
            false,
        ),
        (
            Api::Messages,
            json!({"type": "code_execution_20250825", "name": "c"}),
            false,
        ),
        (Api::Chat, json!({"type": "tool_search"}), false),
    ];
    for (api, tool, allowed) in table {
        let got = vetted(api, json!({"tools": [tool]}));
        assert_eq!(got.is_ok(), allowed, "{api:?} {tool}: {got:?}");
    }
}

/// Issue 47, hostile case N6: every output field is capped, not only the
/// route's own; the least one asked is what is reserved.
#[test]
fn every_output_field_is_capped() {
    let cases = [
        (
            Api::Chat,
            json!({"max_completion_tokens": 10, "max_tokens": 1_000_000}),
            Some(10),
        ),
        (
            Api::Chat,
            json!({"max_tokens": 50, "n_predict": 7}),
            Some(7),
        ),
        (Api::Chat, json!({"max_tokens": null}), None),
        (
            Api::Responses,
            json!({"max_output_tokens": 99, "max_tokens": 1_000_000}),
            Some(99),
        ),
        (Api::Messages, json!({"max_tokens": 32000}), Some(32000)),
    ];
    for (api, body, want) in cases {
        let v = vetted(api, body.clone()).unwrap();
        assert_eq!(v.asked, want, "{api:?} {body}");
        let sent: Value = serde_json::from_slice(&v.capped(api, 5)).unwrap();
        let own = api.output_field(sent.as_object().unwrap());
        for f in OUTPUT_FIELDS {
            if body.get(f).is_some() || f == own {
                assert_eq!(sent[f], 5, "{api:?} {body}: `{f}` in {sent}");
            }
        }
    }
    let err = vetted(Api::Chat, json!({"max_tokens": 5, "n_predict": -1})).unwrap_err();
    assert!(err.contains("`n_predict`"), "{err}");
    // A thinking budget stays under a lowered cap, or is turned off.
    let thinking =
        json!({"max_tokens": 32000, "thinking": {"type": "enabled", "budget_tokens": 31999}});
    let v = vetted(Api::Messages, thinking.clone()).unwrap();
    let sent: Value = serde_json::from_slice(&v.capped(Api::Messages, 8192)).unwrap();
    assert_eq!(sent["thinking"]["budget_tokens"], 8191, "{sent}");
    let v = vetted(Api::Messages, thinking).unwrap();
    let sent: Value = serde_json::from_slice(&v.capped(Api::Messages, 1000)).unwrap();
    assert_eq!(sent["thinking"], json!({"type": "disabled"}), "{sent}");
}

/// `anthropic-beta` by allow list: known features pass, unknown ones are
/// dropped, those that reach past the task are refused by name.
#[test]
fn anthropic_beta_is_an_allow_list() {
    let table: [(&str, Result<Option<&str>, &str>); 8] = [
        (
            "claude-code-20250219,interleaved-thinking-2025-05-14",
            Ok(Some("claude-code-20250219,interleaved-thinking-2025-05-14")),
        ),
        (
            "prompt-caching-2024-07-31, some-new-thing-2099-01-01",
            Ok(Some("prompt-caching-2024-07-31")),
        ),
        ("oauth-2025-04-20", Ok(None)),
        ("files-api-2025-04-14", Err("`files-api-2025-04-14`")),
        (
            "claude-code-20250219,context-1m-2025-08-07",
            Err("`context-1m-2025-08-07`"),
        ),
        ("mcp-client-2025-04-04", Err("MCP")),
        ("code-execution-2025-08-25", Err("runs code")),
        ("web-fetch-2025-09-10", Err("fetch URLs")),
    ];
    for (sent, want) in table {
        match (anthropic_beta(Some(sent)), want) {
            (Ok(got), Ok(want)) => assert_eq!(got.as_deref(), want, "{sent}"),
            (Err(e), Err(named)) => assert!(
                e.contains(named) && e.contains("anthropic-beta"),
                "{sent}: {e}"
            ),
            (got, want) => panic!("{sent}: {got:?}, wanted {want:?}"),
        }
    }
}
