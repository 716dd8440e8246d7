//! Tests of `native`.

use super::*;

const TASK: TaskModel<'static> = TaskModel {
    provider: "local",
    model: "task-model",
};

fn vetted(api: Api, body: Value) -> Result<Vetted, String> {
    vet(api, body.to_string().as_bytes(), TASK)
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
    use crate::gateway::Budget;
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
        anthropic_beta(Some("prompt-caching-2024-07-31,claude-code-20250219")).as_deref(),
        Some("prompt-caching-2024-07-31,claude-code-20250219")
    );
    assert_eq!(anthropic_beta(Some("a\nb")), None);
    assert_eq!(count_tokens(b"{\"a\": 1}").unwrap()["input_tokens"], 2);
    assert!(count_tokens(b"nope").is_err());
}
