//! The vendors' own APIs on the task socket, for third-party agents
//! (issue 25): Anthropic Messages (`/v1/messages`, and its
//! `count_tokens`), OpenAI Chat Completions streamed, OpenAI Responses.
//!
//! A request is passed through as the agent wrote it, after [`vet`]:
//! another model than the task's refused, the fields that would spend outside the
//! meter refused (server-side tools that bill on their own, stored
//! conversations whose input the request does not carry, background runs,
//! several choices), content parts by allow list (`parts`: no remote URL
//! or stored file for the provider to fetch), every output field capped
//! to what the budget leaves and, for a streamed chat, usage asked for.
//! The agent's headers are dropped but for `anthropic-version` and the
//! known `anthropic-beta` features ([`anthropic_beta`]); its placeholder
//! key never leaves the gateway. Errors are answered in the API's own
//! format so that the agent's SDK understands them.

use serde_json::{Map, Value, json};

pub(crate) use crate::llm::api::{Api, MAX_STEPS, NOT_FOUND, TaskModel};

/// A request ready to forward once its output cap is known.
#[derive(Debug, PartialEq)]
pub(crate) struct Vetted {
    pub body: Map<String, Value>,
    pub stream: bool,
    /// The output cap the agent asked for, if any.
    pub asked: Option<u64>,
}

/// Every request field that sizes the output, whatever the route: each
/// one present is capped, so that a second one (`max_tokens: 1000000`
/// beside a capped `max_completion_tokens`, hostile case N6) asks for no
/// more; a compatible server reads whichever it knows (llama.cpp's
/// `n_predict` too).
const OUTPUT_FIELDS: [&str; 4] = [
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "n_predict",
];

impl Vetted {
    /// The body with the output capped to `max`, as bytes to send: the
    /// route's own field always, every other output field present too,
    /// and an Anthropic thinking budget kept under it (the API refuses
    /// one that is not).
    pub fn capped(mut self, api: Api, max: u64) -> Vec<u8> {
        let field = api.output_field(&self.body);
        self.body.insert(field.into(), json!(max));
        for f in OUTPUT_FIELDS {
            if let Some(v) = self.body.get_mut(f) {
                *v = json!(max);
            }
        }
        if api == Api::Messages {
            cap_thinking(&mut self.body, max);
        }
        serde_json::to_vec(&self.body).expect("JSON values serialize")
    }
}

/// Anthropic's `thinking.budget_tokens` must be at least 1024 and below
/// `max_tokens`: lowered under a cap that is lower, thinking turned off
/// when the cap leaves no room for it.
fn cap_thinking(body: &mut Map<String, Value>, max: u64) {
    let Some(thinking) = body.get_mut("thinking").and_then(Value::as_object_mut) else {
        return;
    };
    let budget = thinking.get("budget_tokens").and_then(Value::as_u64);
    if thinking.get("type").and_then(Value::as_str) != Some("enabled")
        || budget.is_none_or(|b| b < max)
    {
        return;
    }
    if max > 1024 {
        thinking.insert("budget_tokens".into(), json!(max - 1));
    } else {
        *thinking = Map::from_iter([("type".to_string(), json!("disabled"))]);
    }
}

/// The output the request asks for: the least of its output fields, each
/// a non-negative integer or null.
fn asked(body: &Map<String, Value>) -> Result<Option<u64>, String> {
    let mut least: Option<u64> = None;
    for f in OUTPUT_FIELDS {
        match body.get(f) {
            None | Some(Value::Null) => {}
            Some(v) => {
                let n = v
                    .as_u64()
                    .ok_or_else(|| format!("field `{f}` must be a positive integer"))?;
                least = Some(least.map_or(n, |l| l.min(n)));
            }
        }
    }
    Ok(least)
}

/// Top-level fields refused, per API, with why.
fn refused_field(api: Api, name: &str) -> Option<&'static str> {
    let why = match (api, name) {
        (Api::Messages, "mcp_servers") => "runs MCP servers at the provider, outside the task",
        (Api::Messages, "container") => "runs code at the provider, billed outside the meter",
        (_, "service_tier") => "changes the price outside the task's price table",
        (Api::Chat, "n" | "best_of") => "asks for several answers, outside the output cap",
        (Api::Chat, "audio" | "modalities" | "prediction") => {
            "bills other than text tokens, outside the meter"
        }
        (Api::Chat, "web_search_options") => "searches the web at the provider, billed apart",
        (Api::Responses, "previous_response_id" | "conversation" | "prompt") => {
            "sends input stored at the provider, which the request does not carry and the meter \
             cannot bound"
        }
        (Api::Responses, "background") => "runs the call after the request ends, unmetered",
        _ => return None,
    };
    Some(why)
}

/// Whether a tool of this `type` runs in the agent, or searches the
/// request's own tools (allowed), rather than at the provider, billed or
/// reaching out on its own (refused: web search and fetch, code
/// execution, file search, MCP connectors, image generation, hosted
/// computer use).
fn client_tool(api: Api, kind: Option<&str>) -> bool {
    match (api, kind) {
        (_, None) => true,
        (Api::Messages, Some(k)) => {
            k == "custom"
                || [
                    "bash_",
                    "text_editor_",
                    "computer_",
                    "memory_",
                    // Anthropic's tool search tool: regex or BM25 over the
                    // request's own (deferred) tools.
                    "tool_search_tool_",
                ]
                .iter()
                .any(|p| k.starts_with(p))
        }
        (Api::Chat, Some(k)) => matches!(k, "function" | "custom"),
        // `tool_search` (Codex offers it for its MCP tools with current
        // models) loads tools from the request's own list, whether the
        // provider or the agent runs the search.
        (Api::Responses, Some(k)) => {
            matches!(
                k,
                "function" | "custom" | "local_shell" | "shell" | "apply_patch" | "tool_search"
            )
        }
    }
}

/// The `type` of a tool in `tools[]` (or loaded by a tool search) that the
/// agent does not run itself, if it is one. A Responses `namespace`
/// groups tools (Codex's MCP servers'): refused when any tool in it is.
pub(crate) fn tool_refused(api: Api, t: &Value) -> Option<&str> {
    let kind = t.get("type").and_then(Value::as_str);
    let kind = match (api, kind) {
        (Api::Responses, Some("namespace")) => t
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|n| n.get("type").and_then(Value::as_str))
            .find(|k| !client_tool(api, *k))
            .unwrap_or(None),
        _ => kind,
    };
    (!client_tool(api, kind)).then(|| kind.unwrap_or_default())
}

/// Checks a request for `api` from the container, with its
/// `anthropic-beta` header (`beta`): another model than the task's is
/// refused (none named: the task's is used), and the upstream name is
/// what is sent. The error names the field, part or header and what to do.
pub(crate) fn vet(
    api: Api,
    body: &[u8],
    beta: Option<&str>,
    task: TaskModel<'_>,
) -> Result<Vetted, String> {
    let model = task.model;
    if api == Api::Messages {
        anthropic_beta(beta)?;
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not JSON for {}: {e}", api.path()))?;
    let Value::Object(mut body) = v else {
        return Err(format!("the body of {} must be a JSON object", api.path()));
    };
    match body.get("model") {
        None | Some(Value::Null) => {}
        Some(Value::String(named)) if task.is(named) => {}
        Some(named) => return Err(task.refusal(&named.to_string())),
    }
    for name in body.keys() {
        if let Some(why) = refused_field(api, name) {
            return Err(format!(
                "field `{name}` is refused by the gateway: it {why}; remove it"
            ));
        }
    }
    if let Some(tools) = body.get("tools") {
        let Some(tools) = tools.as_array() else {
            return Err("field `tools` must be an array".into());
        };
        for (i, t) in tools.iter().enumerate() {
            if let Some(kind) = tool_refused(api, t) {
                return Err(format!(
                    "tools[{i}] has type `{kind}`, a tool the provider runs itself (billed apart \
                     or reaching outside the task); only tools the agent runs, and searches of \
                     the request's own tools, are allowed"
                ));
            }
        }
    }
    super::parts::check(api, &body)?;
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("field `stream` must be true or false".into()),
    };
    let asked = asked(&body)?;
    body.insert("model".into(), json!(model));
    if api == Api::Chat && stream {
        // Usage is what a stream is settled from: always asked for.
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(Vetted {
        body,
        stream,
        asked,
    })
}

/// A third-party agent's `max_steps` when its `calls` have reached it:
/// the next LLM call is refused (Saheeli's own loop has no such limit
/// here: it counts its steps itself).
pub(crate) fn steps_spent(budget: &crate::llm::Budget, calls: u64) -> Option<u64> {
    budget.max_calls.filter(|max| calls >= *max)
}

/// Anthropic `count_tokens`, answered here without a call: the request's
/// bytes / 4, the usual estimate. Nothing is billed or forwarded.
pub(crate) fn count_tokens(body: &[u8]) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not JSON for /v1/messages/count_tokens: {e}"))?;
    if !v.is_object() {
        return Err("the body of /v1/messages/count_tokens must be a JSON object".into());
    }
    Ok(json!({"input_tokens": (body.len() as u64).div_ceil(4)}))
}

/// `anthropic-version` as the agent sent it when it looks like one (a
/// date), else the version the gateway speaks.
pub(crate) fn anthropic_version(sent: Option<&str>) -> String {
    match sent {
        Some(v) if v.len() == 10 && v.bytes().all(|b| b.is_ascii_digit() || b == b'-') => {
            v.to_string()
        }
        _ => "2023-06-01".into(),
    }
}

/// `anthropic-beta` families that pass: caching, streaming, thinking,
/// context editing, output and effort settings, client-run tools, inline
/// PDFs and search results, the tool search over the request's own tools.
const BETAS_PASSED: &[&str] = &[
    "prompt-caching-",
    "extended-cache-ttl-",
    "claude-code-",
    "interleaved-thinking-",
    "fine-grained-tool-streaming-",
    "token-efficient-tools-",
    "context-management-",
    "model-context-window-exceeded-",
    "output-128k-",
    "effort-",
    "structured-outputs-",
    "computer-use-",
    "token-counting-",
    "pdfs-",
    "search-results-",
    "tool-examples-",
    "advanced-tool-use-",
    "tool-search-tool-",
];

/// `anthropic-beta` families refused, with why: each lets a request reach
/// past the task or its price table.
fn beta_refused(name: &str) -> Option<&'static str> {
    let why = [
        (
            "files-api-",
            "lets the request name files stored at the provider",
        ),
        ("mcp-client-", "runs MCP connectors at the provider"),
        ("code-execution-", "runs code at the provider, billed apart"),
        ("skills-", "runs skills in a container at the provider"),
        ("web-fetch-", "lets the provider fetch URLs"),
        ("web-search-", "lets the provider search the web"),
        (
            "context-1m-",
            "prices input past 200k tokens above the task's price table",
        ),
    ];
    why.iter()
        .find(|(family, _)| name.starts_with(family))
        .map(|(_, why)| *why)
}

/// `anthropic-beta` as forwarded, by allow list: a plain comma-separated
/// list, of which the families in [`BETAS_PASSED`] go on and any other
/// value is dropped; one that lets the request reach past the task is
/// refused (the error names it).
pub(crate) fn anthropic_beta(sent: Option<&str>) -> Result<Option<String>, String> {
    let Some(v) = sent else { return Ok(None) };
    let plain = v.len() <= 1024
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.,: ".contains(&b));
    if !plain {
        return Ok(None);
    }
    let mut passed = Vec::new();
    for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if let Some(why) = beta_refused(name) {
            return Err(format!(
                "header `anthropic-beta` names `{name}`, refused by the gateway: it {why}; \
                 remove it"
            ));
        }
        if BETAS_PASSED.iter().any(|f| name.starts_with(f)) {
            passed.push(name);
        }
    }
    Ok((!passed.is_empty()).then(|| passed.join(",")))
}

#[cfg(test)]
#[path = "native_tests.rs"]
mod tests;
