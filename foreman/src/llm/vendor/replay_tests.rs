//! Tests of `replay`.

use super::*;

fn script() -> ReplayScript {
    ReplayScript::parse(
        "turns:\n\
         \x20 - content: First I write it.\n\
         \x20   tool_calls:\n\
         \x20     - { name: Bash, arguments: { command: \"echo hi > hi.txt\" } }\n\
         \x20     - { name: Bash, arguments: { command: \"cat hi.txt\" } }\n\
         \x20 - content: Wrote hi.txt.\n",
    )
    .unwrap()
}

async fn body(api: Api, request: Value, streamed: bool) -> Result<String, String> {
    let r = answer(api, &script(), request.to_string().as_bytes(), streamed)?;
    Ok(r.text().await.unwrap())
}

#[test]
fn the_turn_is_the_conversation_s_count_of_assistant_turns() {
    let chat = json!({"messages": [{"role": "system"}, {"role": "user"}]});
    assert_eq!(turns_so_far(Api::Chat, &chat), 0);
    let chat = json!({"messages": [{"role": "user"},
                                   {"role": "assistant", "tool_calls": [{}, {}]},
                                   {"role": "tool"}, {"role": "tool"}]});
    assert_eq!(turns_so_far(Api::Chat, &chat), 1);
    // An example exchange in the prompt (aider's) is not a turn.
    let examples = json!({"messages": [{"role": "system"}, {"role": "user"},
                                       {"role": "assistant", "content": "example"},
                                       {"role": "user"}]});
    assert_eq!(turns_so_far(Api::Chat, &examples), 0);
    let tool = json!({"role": "assistant", "content": [{"type": "text"}, {"type": "tool_use"}]});
    let msgs = json!({"messages": [{"role": "user"}, tool, {"role": "user"}, tool,
                                   {"role": "user"}, {"role": "assistant", "content": "x"}]});
    assert_eq!(turns_so_far(Api::Messages, &msgs), 2);
    // Responses: one turn of a message and two calls is one run.
    let input = json!({"input": [
        {"type": "message", "role": "developer"}, {"type": "message", "role": "user"},
        {"type": "reasoning"}, {"type": "message", "role": "assistant"},
        {"type": "function_call"}, {"type": "reasoning"}, {"type": "function_call"},
        {"type": "function_call_output"}, {"type": "function_call_output"},
        {"type": "function_call"}, {"type": "function_call_output"}]});
    assert_eq!(turns_so_far(Api::Responses, &input), 2);
    assert_eq!(turns_so_far(Api::Responses, &json!({"input": "hi"})), 0);
}

#[tokio::test]
async fn each_api_gets_the_turn_whole_and_streamed() {
    let first = json!({"model": "m", "messages": [{"role": "user", "content": "go"}]});
    let v: Value =
        serde_json::from_str(&body(Api::Messages, first.clone(), false).await.unwrap()).unwrap();
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["content"][1]["input"]["command"], "echo hi > hi.txt");
    assert_eq!(v["content"][2]["id"], "toolu_replay_1_1");
    let s = body(Api::Messages, first.clone(), true).await.unwrap();
    assert!(s.starts_with("event: message_start\n"), "{s}");
    assert!(
        s.contains(r#""partial_json":"{\"command\":\"cat hi.txt\"}""#),
        "{s}"
    );
    assert!(s.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));

    let v: Value =
        serde_json::from_str(&body(Api::Chat, first.clone(), false).await.unwrap()).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][1]["function"]["arguments"],
        r#"{"command":"cat hi.txt"}"#
    );
    let s = body(Api::Chat, first, true).await.unwrap();
    assert!(s.contains(r#""finish_reason":"tool_calls""#) && s.ends_with("data: [DONE]\n\n"));

    let second = json!({"input": [{"type": "message", "role": "user", "content": "go"},
                                  {"type": "function_call"}, {"type": "function_call_output"}]});
    let v: Value =
        serde_json::from_str(&body(Api::Responses, second.clone(), false).await.unwrap()).unwrap();
    assert_eq!(v["output"][0]["content"][0]["text"], "Wrote hi.txt.");
    assert_eq!(v["output"].as_array().unwrap().len(), 1);
    let s = body(Api::Responses, second, true).await.unwrap();
    assert!(s.starts_with("event: response.created\n"), "{s}");
    assert!(s.contains("event: response.output_text.delta\n"), "{s}");
    assert!(s.contains("event: response.completed\n"), "{s}");
}

#[tokio::test]
async fn a_call_to_a_namespaced_tool_names_its_namespace() {
    let script = ReplayScript::parse(
        "turns:\n  - tool_calls:\n      - { name: ask_user, arguments: { question: q } }\n",
    )
    .unwrap();
    let request = json!({"input": "go", "tools": [
        {"type": "function", "name": "exec_command"},
        {"type": "namespace", "name": "mcp__saheeli",
         "tools": [{"type": "function", "name": "ask_user"}]}]});
    let r = answer(
        Api::Responses,
        &script,
        request.to_string().as_bytes(),
        false,
    )
    .unwrap();
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["output"][0]["name"], "ask_user");
    assert_eq!(v["output"][0]["namespace"], "mcp__saheeli");
}

#[tokio::test]
async fn a_script_run_out_is_an_error_naming_its_length() {
    let tool = json!({"role": "assistant", "content": [{"type": "tool_use"}]});
    let third = json!({"messages": [{"role": "user"}, tool, {"role": "user"}, tool,
                                    {"role": "user"}]});
    let why = body(Api::Messages, third, false).await.unwrap_err();
    assert!(why.contains("it has 2") && why.contains("turn 3"), "{why}");
}

#[test]
fn usage_is_the_script_s_or_estimated() {
    let s = script();
    let (i, o) = usage(&s.turns[0], 400);
    assert_eq!(i, 101);
    assert!(o > 10, "{o}");
    let mut t = s.turns[1].clone();
    t.usage = Some(saheeli_protocol::audit::Usage {
        input_tokens: 7,
        output_tokens: 3,
        ..Default::default()
    });
    assert_eq!(usage(&t, 400), (7, 3));
}
