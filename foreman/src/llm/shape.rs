//! The request shape every OpenAI-compatible server accepts (issue 27):
//! the conservative common subset of the vendors', llama.cpp's,
//! llama-cpp-python's, vLLM's, Ollama's and LM Studio's, with no switch per
//! server. Also the output cap every call carries.

use saheeli_protocol::chat::{ChatRequest, Role};

use crate::config::{LlmConfig, ProviderKind};

/// Fixes what the servo sends into what every server takes:
/// - `tool_choice: "auto"` whenever tools are offered: llama-cpp-python
///   reads a missing one as "none" and drops the tools from the prompt;
/// - an assistant turn that only calls tools has `content: ""`: null (and
///   an absent field) makes llama-cpp-python answer HTTP 500;
/// - a call whose arguments are not a JSON object (one cut at the output
///   cap, which the servo keeps and answers with an error) goes as `{}`:
///   llama-server parses every call in the history and answers HTTP 500.
pub(crate) fn conservative(req: &mut ChatRequest) {
    req.tool_choice = (!req.tools.is_empty()).then(|| "auto".to_string());
    for m in &mut req.messages {
        if m.role != Role::Assistant {
            continue;
        }
        if m.content.is_none() {
            m.content = Some(String::new());
        }
        for c in &mut m.tool_calls {
            let object = serde_json::from_str::<serde_json::Value>(&c.function.arguments)
                .is_ok_and(|v| v.is_object());
            if !object {
                c.function.arguments = "{}".into();
            }
        }
    }
}

/// Why a typed chat (the servo's own route, and a third-party agent's
/// whole chat) is refused for a tool or tool call that is not a
/// `function`: a provider-run tool would otherwise go on under its own
/// `type` (the streamed routes check theirs in `native`).
pub(crate) fn foreign_tool(req: &ChatRequest) -> Option<String> {
    let tool = req
        .tools
        .iter()
        .position(|t| t.kind != "function")
        .map(|i| (format!("tools[{i}]"), &req.tools[i].kind));
    let call = || {
        req.messages.iter().enumerate().find_map(|(m, msg)| {
            let c = msg.tool_calls.iter().position(|c| c.kind != "function")?;
            Some((
                format!("messages[{m}].tool_calls[{c}]"),
                &msg.tool_calls[c].kind,
            ))
        })
    };
    let (at, kind) = tool.or_else(call)?;
    Some(format!(
        "`{at}` has type `{kind}`; this route takes `function` tools only, which the agent runs"
    ))
}

/// The most output tokens one call may ask for before the budget has its
/// say: the provider's `max_output_tokens`, else `llm.max_output_tokens`
/// (and for Anthropic no more than `llm.anthropic_max_tokens`), lowered to
/// what the caller asked. Without it a small local model generated until
/// its context was full (6,702 tokens in 191 s, then a 400).
pub(crate) fn output_cap(
    policy: &LlmConfig,
    kind: ProviderKind,
    provider_cap: Option<u64>,
    asked: Option<u64>,
) -> u64 {
    let mut cap = provider_cap.unwrap_or(policy.max_output_tokens);
    if kind == ProviderKind::Anthropic {
        cap = cap.min(policy.anthropic_max_tokens);
    }
    asked.map_or(cap, |a| a.min(cap)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::recorded::{answer, exchange, sent};
    use serde_json::Value;

    /// The servo's step after a tool call, as it reaches the gateway
    /// (`content: null` on the tool-call turn, no `tool_choice`), shaped.
    fn shaped() -> Value {
        let mut req: ChatRequest =
            serde_json::from_value(sent("llama-server", "tool-turn-content-null.json")).unwrap();
        conservative(&mut req);
        serde_json::to_value(&req).unwrap()
    }

    /// Issue 27 item 2: without `tool_choice`, llama-cpp-python dropped
    /// the tools from the prompt. Shaped, the servo's request is the one
    /// recorded as the gateway sends it, which llama-server answered.
    #[test]
    fn tools_offered_go_with_tool_choice_auto() {
        let v = shaped();
        assert_eq!(v["tool_choice"], "auto", "{v}");
        assert_eq!(v, sent("llama-server", "tool-turn.json"));
        let mut none: ChatRequest =
            serde_json::from_value(sent("llama-server", "tool-turn-content-null.json")).unwrap();
        none.tools.clear();
        conservative(&mut none);
        let v = serde_json::to_value(&none).unwrap();
        assert!(v.get("tool_choice").is_none(), "{v}");
        // llama-server took the first step so (its tools in the prompt).
        let first = exchange("llama-server", "first-turn.json");
        assert_eq!(first["request"]["body"]["tool_choice"], "auto");
        assert_eq!(first["response"]["status"], 200, "{first}");
    }

    /// Issue 27 item 3: `content: null` on a tool-call turn got HTTP 500
    /// from llama-cpp-python; `""` works on every server tried.
    #[test]
    fn a_tool_call_turn_without_text_sends_empty_content() {
        let v = shaped();
        let turn = &v["messages"][2];
        assert_eq!(turn["role"], "assistant");
        assert_eq!(turn["content"], "", "{turn}");
        assert_eq!(turn["tool_calls"][0]["id"], "call_0");
        // Other turns keep their text.
        assert_eq!(v["messages"][3]["content"], "created hello.txt (5 bytes)");
        // Sent so, llama-server answered 200.
        let ok = exchange("llama-server", "tool-turn.json");
        assert_eq!(ok["request"]["body"]["messages"][2]["content"], "");
        assert_eq!(
            ok["response"]["status"],
            200,
            "{}",
            answer("llama-server", "tool-turn.json")
        );
    }

    /// Issue 27 items 2 and 3 on llama-cpp-python's server itself
    /// (`chatml-function-calling`, recorded): without `tool_choice` it left
    /// the tools out (41 prompt tokens, an answer in words), with `auto` it
    /// put them in and the model called one; `content: null` on the
    /// tool-call turn got HTTP 500, no `content` too, `""` got 200.
    /// Shaped, the servo's requests are exactly the ones it answered.
    #[test]
    fn llama_cpp_python_answers_the_shaped_requests() {
        let lcp = "llama-cpp-python";
        let shape = |name: &str| {
            let mut req: ChatRequest = serde_json::from_value(sent(lcp, name)).unwrap();
            conservative(&mut req);
            serde_json::to_value(&req).unwrap()
        };
        // Item 2: the first step.
        let bare = exchange(lcp, "first-turn-no-tool-choice.json");
        assert!(bare["request"]["body"].get("tool_choice").is_none());
        let auto = exchange(lcp, "first-turn.json");
        assert_eq!(
            shape("first-turn-no-tool-choice.json"),
            auto["request"]["body"]
        );
        let (b, a) = (&bare["response"]["body"], &auto["response"]["body"]);
        let prompt = |v: &Value| v["usage"]["prompt_tokens"].as_u64().unwrap();
        assert!(prompt(b) * 4 < prompt(a), "tools dropped: {b} / {a}");
        assert!(b["choices"][0]["message"]["tool_calls"].is_null(), "{b}");
        assert_eq!(
            a["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "list_files"
        );
        // `required` is refused by this format: why `auto` is sent.
        assert_eq!(
            exchange(lcp, "tool-choice-required.json")["response"]["status"],
            500
        );
        // Item 3: the step after a tool call.
        for refused in ["tool-turn-content-null.json", "tool-turn-no-content.json"] {
            assert_eq!(
                exchange(lcp, refused)["response"]["status"],
                500,
                "{refused}"
            );
        }
        let ok = exchange(lcp, "tool-turn.json");
        assert_eq!(ok["response"]["status"], 200, "{ok}");
        assert_eq!(shape("tool-turn-content-null.json"), ok["request"]["body"]);
    }

    /// Issue 27 item 5 on llama-server (recorded): a history holding a call
    /// cut at the cap (its arguments unfinished JSON) got HTTP 500; shaped,
    /// the call's arguments are `{}` and the server answers.
    #[test]
    fn a_cut_call_in_the_history_goes_with_empty_arguments() {
        let refused = exchange("llama-server", "tool-turn-cut-arguments.json");
        assert_eq!(refused["response"]["status"], 500, "{refused}");
        let mut req: ChatRequest =
            serde_json::from_value(refused["request"]["body"].clone()).unwrap();
        conservative(&mut req);
        let v = serde_json::to_value(&req).unwrap();
        let ok = exchange("llama-server", "tool-turn-cut-arguments-shaped.json");
        assert_eq!(v, ok["request"]["body"]);
        assert_eq!(
            v["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{}"
        );
        assert_eq!(ok["response"]["status"], 200, "{ok}");
        // Whole arguments are kept as they are.
        let whole = sent("llama-server", "tool-turn.json");
        let mut req: ChatRequest = serde_json::from_value(whole.clone()).unwrap();
        conservative(&mut req);
        assert_eq!(serde_json::to_value(&req).unwrap(), whole);
    }

    /// Issue 47: a typed chat's tools and tool calls are `function`s only.
    #[test]
    fn a_typed_chat_takes_function_tools_only() {
        let base: ChatRequest =
            serde_json::from_value(sent("llama-server", "tool-turn.json")).unwrap();
        assert_eq!(foreign_tool(&base), None);
        let mut hosted = base.clone();
        hosted.tools[0].kind = "web_search_preview".into();
        let why = foreign_tool(&hosted).unwrap();
        assert!(
            why.contains("`tools[0]`") && why.contains("`web_search_preview`"),
            "{why}"
        );
        let mut call = base;
        call.messages[2].tool_calls[0].kind = "mcp".into();
        let why = foreign_tool(&call).unwrap();
        assert!(why.contains("`messages[2].tool_calls[0]`"), "{why}");
    }

    /// Issue 27 item 5: every call carries a cap, the caller's lower one
    /// kept, a provider's own overriding the default.
    #[test]
    fn every_call_has_an_output_cap() {
        let policy = LlmConfig::default();
        assert_eq!(policy.max_output_tokens, 4096);
        assert_eq!(output_cap(&policy, ProviderKind::Openai, None, None), 4096);
        assert_eq!(
            output_cap(&policy, ProviderKind::Openai, None, Some(100)),
            100
        );
        assert_eq!(
            output_cap(&policy, ProviderKind::Openai, None, Some(1 << 20)),
            4096
        );
        assert_eq!(
            output_cap(&policy, ProviderKind::Openai, Some(512), None),
            512
        );
        assert_eq!(
            output_cap(&policy, ProviderKind::Anthropic, Some(1 << 20), None),
            policy.anthropic_max_tokens
        );
    }
}
