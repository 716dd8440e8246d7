//! `saheeli doctor` (issue 27): each configured provider is called once
//! with a tiny tool-calling request, as the gateway sends it (its key or
//! none, `tool_choice: "auto"`, an output cap), once more streamed, and
//! its server is asked for its window (`probe`). What works and what does
//! not is said per line, each failure with its fix.

use serde_json::{Value, json};

use super::Redactor;
use super::probe::{ServerInfo, capped, probe, with_key};
use crate::config::ProviderKind;
use crate::config::providers::Provider;

/// The output cap of the doctor's calls: a tool call fits.
const MAX_TOKENS: u64 = 96;
/// What the model is asked to do.
const ASK: &str = "Call the tool `ping` with x = 1. Answer only with the tool call.";

/// How one check went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    /// Works, but something is worth setting.
    Warn,
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug)]
pub(crate) struct Check {
    pub what: &'static str,
    pub status: Status,
    pub said: String,
    pub fix: Option<String>,
}

fn check(what: &'static str, status: Status, said: impl Into<String>) -> Check {
    Check {
        what,
        status,
        said: said.into(),
        fix: None,
    }
}

impl Check {
    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }

    /// Safe to print: the provider's key redacted (a provider may echo it)
    /// and control characters shown escaped, never sent to the terminal
    /// (an answer's OSC/CSI sequences set titles, clear the screen, write
    /// the clipboard).
    fn cleaned(mut self, redactor: &Redactor) -> Check {
        self.said = printable(&redactor.redact(&self.said));
        self.fix = self.fix.map(|f| printable(&redactor.redact(&f)));
        self
    }
}

/// `text` with every control character but a newline escaped.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' => c.to_string(),
            c if c.is_control() => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// A provider's checks, in order: model, tools, usage, streaming, window
/// (and llama-server's template).
pub(crate) async fn run(
    client: &reqwest::Client,
    provider: &Provider,
    model: Option<String>,
    configured_window: Option<u64>,
) -> Vec<Check> {
    let secrets: Vec<(String, String)> = provider
        .key
        .iter()
        .map(|k| {
            let var = provider.key_env.clone().unwrap_or_else(|| "KEY".into());
            (var, k.0.clone())
        })
        .filter(|(_, k)| k.len() >= 8)
        .collect();
    let redactor = Redactor::new(&secrets);
    checks(client, provider, model, configured_window)
        .await
        .into_iter()
        .map(|c| c.cleaned(&redactor))
        .collect()
}

async fn checks(
    client: &reqwest::Client,
    provider: &Provider,
    model: Option<String>,
    configured_window: Option<u64>,
) -> Vec<Check> {
    let info = probe(client, provider).await;
    let mut out = Vec::new();
    let model = match model {
        Some(m) => {
            out.push(check("model", Status::Ok, format!("{m} (as configured)")));
            m
        }
        None => match super::probe::model_ids(client, provider).await.first() {
            Some(m) => {
                out.push(check(
                    "model",
                    Status::Ok,
                    format!("{m} (the first the server lists at /models)"),
                ));
                m.clone()
            }
            None => {
                out.push(
                    check(
                        "model",
                        Status::Fail,
                        "none given and the server lists none",
                    )
                    .fix(format!(
                        "pass `--model {}/MODEL` (the name the server serves)",
                        provider.name
                    )),
                );
                return out;
            }
        },
    };
    out.extend(
        calls(client, provider, &model)
            .await
            .into_iter()
            .map(|c| explained(c, info.template_tools)),
    );
    out.push(window(provider, &info, &model, configured_window));
    if let Some(t) = template(&info) {
        out.push(t);
    }
    out
}

/// The tool call (with its usage) and the streamed call.
async fn calls(client: &reqwest::Client, provider: &Provider, model: &str) -> Vec<Check> {
    let mut out = Vec::new();
    match send(client, provider, &body(provider.kind, model, false)).await {
        Err(c) => {
            out.push(c);
            return out;
        }
        Ok(v) => {
            out.push(tools(provider.kind, &v));
            out.push(usage(provider.kind, &v));
        }
    }
    out.push(streaming(client, provider, model).await);
    out
}

/// The doctor's request: one user turn and one tool, as the gateway
/// shapes it.
pub(crate) fn body(kind: ProviderKind, model: &str, stream: bool) -> Value {
    let schema =
        json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]});
    let mut b = match kind {
        ProviderKind::Openai => json!({
            "model": model,
            "messages": [{"role": "user", "content": ASK}],
            "tools": [{"type": "function", "function": {
                "name": "ping", "description": "Answers pong.", "parameters": schema}}],
            "tool_choice": "auto",
            "max_tokens": MAX_TOKENS,
        }),
        ProviderKind::Anthropic => json!({
            "model": model,
            "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": ASK}],
            "tools": [{"name": "ping", "description": "Answers pong.", "input_schema": schema}],
            "tool_choice": {"type": "auto"},
        }),
    };
    if stream {
        b["stream"] = json!(true);
        if kind == ProviderKind::Openai {
            b["stream_options"] = json!({"include_usage": true});
        }
    }
    b
}

fn request(client: &reqwest::Client, provider: &Provider, body: &Value) -> reqwest::RequestBuilder {
    let mut req = client.post(provider.endpoint()).json(body);
    if provider.kind == ProviderKind::Anthropic {
        req = req.header("anthropic-version", "2023-06-01");
    }
    with_key(req, provider)
}

/// The fix for an HTTP failure.
fn http_fix(provider: &Provider, status: u16) -> String {
    match status {
        401 | 403 => match &provider.key_env {
            Some(var) => format!("check the key in ${var} (the provider's `api_key_env`)"),
            None => format!(
                "the server wants a key: set `api_key_env: VAR` under providers.{} and export VAR",
                provider.name
            ),
        },
        404 => format!(
            "check providers.{}.base_url: {} answered 404 (OpenAI-compatible servers usually end in /v1; Anthropic-style ones do not)",
            provider.name,
            provider.endpoint()
        ),
        _ => "see the server's own log for this request".into(),
    }
}

async fn send(client: &reqwest::Client, provider: &Provider, body: &Value) -> Result<Value, Check> {
    let resp = request(client, provider, body).send().await.map_err(|e| {
        check(
            "tools",
            Status::Fail,
            format!("no answer from {}: {e}", provider.endpoint()),
        )
        .fix(format!(
            "start the server, or fix providers.{}.base_url",
            provider.name
        ))
    })?;
    let status = resp.status().as_u16();
    let text = match capped(resp).await {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(why) => {
            return Err(check(
                "tools",
                Status::Fail,
                format!("HTTP {status}: {why}"),
            ));
        }
    };
    if status != 200 {
        let snippet: String = text.chars().take(300).collect();
        return Err(
            check("tools", Status::Fail, format!("HTTP {status}: {snippet}"))
                .fix(http_fix(provider, status)),
        );
    }
    serde_json::from_str(&text).map_err(|e| {
        check(
            "tools",
            Status::Fail,
            format!("the answer is not JSON ({e})"),
        )
        .fix("check that base_url points at the API, not a web page")
    })
}

/// Whether the answer calls `ping`.
pub(crate) fn tools(kind: ProviderKind, v: &Value) -> Check {
    let called = match kind {
        ProviderKind::Openai => v["choices"][0]["message"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| {
                Some((
                    c["function"]["name"].as_str()?.to_string(),
                    c["function"]["arguments"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                ))
            }),
        ProviderKind::Anthropic => v["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .find_map(|b| Some((b["name"].as_str()?.to_string(), b["input"].to_string()))),
    };
    match called {
        Some((name, args)) => check(
            "tools",
            Status::Ok,
            format!("called `{name}` with {args} (tool_choice auto)"),
        ),
        None => check(
            "tools",
            Status::Fail,
            "the model answered without a tool call: its chat template may not render tools",
        )
        .fix(
            "llama-server: start it with --jinja (and --chat-template-file TEMPLATE for a model \
             whose own template has no tools); Ollama: use a model tagged `tools`; see the \
             docs page Local models",
        ),
    }
}

/// A tool check that failed with words for an answer, when llama-server
/// says its template renders tools: the template is not the cause, the
/// model is (SmolLM2-135M with the Qwen 2.5 template).
pub(crate) fn explained(c: Check, template_tools: Option<bool>) -> Check {
    if c.what != "tools" || c.status != Status::Fail || template_tools != Some(true) {
        return c;
    }
    if !c.said.starts_with("the model answered without a tool call") {
        return c;
    }
    check(
        "tools",
        Status::Fail,
        "the model answered in words, though the chat template renders tools (llama-server /props)",
    )
    .fix(
        "this model does not call tools of its own accord: use one trained for tool calls \
         (Qwen 2.5 Coder 7B and up, Llama 3.1 8B, Hermes 3) with its own template; see the \
         docs page Local models",
    )
}

/// The usage fields the answer reports (what budgets count).
pub(crate) fn usage(kind: ProviderKind, v: &Value) -> Check {
    let u = &v["usage"];
    let (input, output, cached) = match kind {
        ProviderKind::Openai => (
            ("prompt_tokens", u["prompt_tokens"].as_u64()),
            ("completion_tokens", u["completion_tokens"].as_u64()),
            (
                "prompt_tokens_details.cached_tokens",
                u["prompt_tokens_details"]["cached_tokens"].as_u64(),
            ),
        ),
        ProviderKind::Anthropic => (
            ("input_tokens", u["input_tokens"].as_u64()),
            ("output_tokens", u["output_tokens"].as_u64()),
            (
                "cache_read_input_tokens",
                u["cache_read_input_tokens"].as_u64(),
            ),
        ),
    };
    match (input, output) {
        ((i, Some(a)), (o, Some(b))) => {
            let mut said = format!("{i} {a}, {o} {b}");
            if let (c, Some(n)) = cached {
                said.push_str(&format!(", {c} {n}"));
            }
            check("usage", Status::Ok, said)
        }
        _ => check(
            "usage",
            Status::Fail,
            format!("the answer reports no {} and {}", input.0, output.0),
        )
        .fix("budgets count from these fields: use a server that reports usage (each server in the docs page Local models does)"),
    }
}

/// A streamed call: its events parse and it ends.
async fn streaming(client: &reqwest::Client, provider: &Provider, model: &str) -> Check {
    let body = body(provider.kind, model, true);
    let resp = match request(client, provider, &body).send().await {
        Ok(r) => r,
        Err(e) => return check("streaming", Status::Fail, format!("no answer: {e}")),
    };
    let status = resp.status().as_u16();
    let text = match capped(resp).await {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(why) => return check("streaming", Status::Fail, format!("HTTP {status}: {why}")),
    };
    if status != 200 {
        let snippet: String = text.chars().take(300).collect();
        return check(
            "streaming",
            Status::Fail,
            format!("HTTP {status}: {snippet}"),
        )
        .fix(http_fix(provider, status));
    }
    stream_check(provider.kind, &text)
}

/// What a streamed answer's text says: events, its end, usage.
pub(crate) fn stream_check(kind: ProviderKind, text: &str) -> Check {
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .collect();
    let events: Vec<Value> = data
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let (ended, usage) = match kind {
        ProviderKind::Openai => (
            data.contains(&"[DONE]"),
            events
                .iter()
                .any(|e| e["usage"]["completion_tokens"].is_u64()),
        ),
        ProviderKind::Anthropic => (
            events.iter().any(|e| e["type"] == "message_stop"),
            events
                .iter()
                .any(|e| e["type"] == "message_delta" && e["usage"]["output_tokens"].is_u64()),
        ),
    };
    match (events.is_empty(), ended, usage) {
        (true, _, _) => check(
            "streaming",
            Status::Fail,
            "no server-sent events in the answer to a streamed tool-calling request",
        )
        .fix(
            "the built-in agent streams by default: set `llm: { stream: false }` in config.yaml \
             for whole answers (llama-cpp-python cannot stream a tool-calling answer); agents \
             that stream need a server that does",
        ),
        (false, false, _) => check(
            "streaming",
            Status::Fail,
            format!("{} events, but the stream never ended", events.len()),
        ),
        (false, true, false) => check(
            "streaming",
            Status::Warn,
            format!("{} events, no usage in the stream", events.len()),
        )
        .fix("streamed calls are then billed at their reservation; a newer server reports it"),
        (false, true, true) => check(
            "streaming",
            Status::Ok,
            format!("{} events, usage in the stream", events.len()),
        ),
    }
}

/// Where the model's window comes from, and whether compaction knows it.
fn window(provider: &Provider, info: &ServerInfo, model: &str, configured: Option<u64>) -> Check {
    let served = info.window_for(model);
    match (configured, served, info.source) {
        (Some(c), Some(s), Some(src)) if c != s => check(
            "window",
            Status::Warn,
            format!("{c} tokens from config, but the server ({src}) serves {s}"),
        )
        .fix("make `windows:` or `context_window` match the server's"),
        (Some(c), _, _) => check("window", Status::Ok, format!("{c} tokens (config)")),
        (None, Some(s), Some(src)) => {
            check("window", Status::Ok, format!("{s} tokens ({src})"))
        }
        _ => check("window", Status::Warn, "unknown: the server does not say it")
            .fix(format!(
                "set `windows: {{ \"{}/{model}\": N }}` or providers.{}.context_window, so the agent compacts before the server refuses",
                provider.name, provider.name
            )),
    }
}

/// llama-server's word on its chat template and tools.
fn template(info: &ServerInfo) -> Option<Check> {
    Some(match info.template_tools? {
        true => check(
            "template",
            Status::Ok,
            "the chat template renders tool calls (llama-server /props)",
        ),
        false => check(
            "template",
            Status::Fail,
            "the chat template has no tool calls: llama-server drops `tools` from the prompt",
        )
        .fix("restart llama-server with --jinja --chat-template-file TEMPLATE (a tool-capable template; docs: Local models)"),
    })
}

#[cfg(test)]
#[path = "doctor_tests.rs"]
mod tests;
