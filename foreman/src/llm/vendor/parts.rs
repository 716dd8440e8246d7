//! What a third-party agent's request carries, by allow list (issue 47,
//! hostile case N5): every message's content parts are walked, and only
//! the forms the gateway knows and that reach nothing outside the task
//! pass. A provider fetches a remote URL (`image_url: http://…`,
//! `input_file.file_url`, Anthropic `source: {type: url}`) or reads a file
//! stored in the organisation (`file_id`, `source: {type: file}`,
//! `container_upload`) on its own, with the task's key, from a task whose
//! network may be `none`, and the reservation (the request's bytes) does
//! not count what it would fetch: all of those are refused, and so is any
//! part type not listed here. Inline content (`data:` URLs, base64
//! sources) is what the request's bytes already hold: it passes, within
//! the gateway's body limit, and is reserved by its bytes.

use serde_json::{Map, Value};

use super::native::{Api, tool_refused};

/// Where in the request a part is, rendered only for an error.
#[derive(Clone, Copy)]
enum At<'a> {
    Root,
    Key(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
}

impl At<'_> {
    fn render(&self) -> String {
        match self {
            At::Root => String::new(),
            At::Key(up, k) => match up {
                At::Root => (*k).to_string(),
                _ => format!("{}.{k}", up.render()),
            },
            At::Index(up, i) => format!("{}[{i}]", up.render()),
        }
    }
}

type Checked = Result<(), String>;

/// A part or item refused: where it is, what it is and why.
fn refused(at: &At<'_>, kind: &str, why: &str) -> String {
    format!(
        "`{}` (type `{kind}`) is refused by the gateway: {why}",
        at.render()
    )
}

const REMOTE: &str = "the provider would fetch a remote URL itself, outside the task and its \
                      budget; send the content inline (a `data:` URL or base64)";
const STORED: &str = "it names a file stored at the provider, which the request does not carry \
                      and the budget cannot bound; send the content inline (base64)";
const AUDIO: &str = "audio is billed as audio tokens, outside the task's price table; send text";
const UNKNOWN: &str = "only text, inline images and documents, and the agent's own tool calls \
                       and results are allowed; remove it";
const PROVIDER_TOOL: &str = "it is the call or result of a tool the provider runs itself, which \
                             the gateway refuses; remove it";

/// Checks every content part of `body` for `api`.
pub(crate) fn check(api: Api, body: &Map<String, Value>) -> Checked {
    let root = At::Root;
    match api {
        Api::Chat => {
            if let Some(v) = body.get("messages") {
                let at = At::Key(&root, "messages");
                each(v, &at, chat_message)?;
            }
        }
        Api::Responses => {
            for key in ["input", "instructions"] {
                match body.get(key) {
                    None | Some(Value::Null | Value::String(_)) => {}
                    Some(v) => each(v, &At::Key(&root, key), responses_item)?,
                }
            }
        }
        Api::Messages => {
            match body.get("system") {
                None | Some(Value::Null | Value::String(_)) => {}
                Some(v) => each(v, &At::Key(&root, "system"), |b, at| only(b, at, &["text"]))?,
            }
            if let Some(v) = body.get("messages") {
                each(v, &At::Key(&root, "messages"), |m, at| {
                    content(m, at, anthropic_block)
                })?;
            }
        }
    }
    Ok(())
}

/// Runs `f` on every element of the array `v` (anything else refused).
fn each(v: &Value, at: &At<'_>, f: impl Fn(&Value, &At<'_>) -> Checked) -> Checked {
    let Some(items) = v.as_array() else {
        return Err(format!("field `{}` must be an array", at.render()));
    };
    for (i, item) in items.iter().enumerate() {
        f(item, &At::Index(at, i))?;
    }
    Ok(())
}

/// A message's or result's `content`: text, or parts each checked by `f`.
fn content(owner: &Value, at: &At<'_>, f: fn(&Value, &At<'_>) -> Checked) -> Checked {
    parts_of(owner.get("content"), &At::Key(at, "content"), f)
}

fn parts_of(v: Option<&Value>, at: &At<'_>, f: fn(&Value, &At<'_>) -> Checked) -> Checked {
    match v {
        None | Some(Value::Null | Value::String(_)) => Ok(()),
        Some(v) => each(v, at, f),
    }
}

fn kind(part: &Value) -> &str {
    part.get("type").and_then(Value::as_str).unwrap_or("")
}

/// A part whose type must be one of `allowed` (text-like).
fn only(part: &Value, at: &At<'_>, allowed: &[&str]) -> Checked {
    let k = kind(part);
    if allowed.contains(&k) {
        Ok(())
    } else {
        Err(refused(at, k, UNKNOWN))
    }
}

/// An inline `data:` URL (what the request's bytes hold); anything else
/// (`http(s)://`, `gs://`, a file id) the provider would fetch.
fn inline_url(url: Option<&Value>) -> bool {
    url.and_then(Value::as_str)
        .is_some_and(|u| u.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("data:")))
}

/// Inline file data: base64 or a `data:` URL, never a URL to fetch.
fn inline_data(data: Option<&Value>) -> bool {
    data.and_then(Value::as_str)
        .is_some_and(|d| !d.get(..16).unwrap_or(d).contains("://"))
}

fn has(part: &Value, key: &str) -> bool {
    part.get(key).is_some_and(|v| !v.is_null())
}

/// Chat Completions: `messages[]`, their `content[]` and `audio`.
fn chat_message(m: &Value, at: &At<'_>) -> Checked {
    if has(m, "audio") {
        return Err(refused(&At::Key(at, "audio"), "audio", STORED));
    }
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
        for (i, c) in calls.iter().enumerate() {
            if !matches!(kind(c), "" | "function" | "custom") {
                let at = At::Index(&At::Key(at, "tool_calls"), i);
                return Err(refused(&at, kind(c), PROVIDER_TOOL));
            }
        }
    }
    content(m, at, chat_part)
}

fn chat_part(p: &Value, at: &At<'_>) -> Checked {
    let k = kind(p);
    match k {
        "text" | "refusal" => Ok(()),
        "image_url" => {
            // `{"image_url": {"url": …}}`, or the URL alone as some send it.
            let url = p.get("image_url").map(|i| i.get("url").unwrap_or(i));
            if inline_url(url) {
                Ok(())
            } else {
                Err(refused(at, k, REMOTE))
            }
        }
        "file" => {
            let file = p.get("file").unwrap_or(&Value::Null);
            if has(file, "file_id") {
                Err(refused(at, k, STORED))
            } else if inline_data(file.get("file_data")) {
                Ok(())
            } else {
                Err(refused(at, k, REMOTE))
            }
        }
        "input_audio" => Err(refused(at, k, AUDIO)),
        _ => Err(refused(at, k, UNKNOWN)),
    }
}

/// Responses: an `input[]` item.
fn responses_item(item: &Value, at: &At<'_>) -> Checked {
    let k = match kind(item) {
        "" if item.get("role").is_some() => "message",
        k => k,
    };
    match k {
        "message" => content(item, at, responses_part),
        "function_call_output" | "custom_tool_call_output" => {
            parts_of(item.get("output"), &At::Key(at, "output"), responses_part)
        }
        // The agent's own tools' calls and results, and the provider's
        // own opaque state (reasoning, a compacted history).
        "function_call"
        | "custom_tool_call"
        | "local_shell_call"
        | "local_shell_call_output"
        | "shell_call"
        | "shell_call_output"
        | "apply_patch_call"
        | "apply_patch_call_output"
        | "tool_search_call"
        | "reasoning"
        | "compaction" => Ok(()),
        // The tools a search loaded, which the provider adds to the
        // request's own: checked as `tools[]` is.
        "tool_search_output" => {
            let tools = At::Key(at, "tools");
            each(
                item.get("tools").unwrap_or(&Value::Null),
                &tools,
                |t, at| match tool_refused(Api::Responses, t) {
                    Some(tk) => Err(refused(at, tk, PROVIDER_TOOL)),
                    None => Ok(()),
                },
            )
        }
        "item_reference" => Err(refused(at, k, STORED)),
        "web_search_call"
        | "file_search_call"
        | "computer_call"
        | "computer_call_output"
        | "code_interpreter_call"
        | "image_generation_call"
        | "mcp_list_tools"
        | "mcp_approval_request"
        | "mcp_approval_response"
        | "mcp_call" => Err(refused(at, k, PROVIDER_TOOL)),
        _ => Err(refused(at, k, UNKNOWN)),
    }
}

fn responses_part(p: &Value, at: &At<'_>) -> Checked {
    let k = kind(p);
    match k {
        "input_text" | "output_text" | "refusal" | "summary_text" | "reasoning_text" => Ok(()),
        "input_image" => {
            if has(p, "file_id") {
                Err(refused(at, k, STORED))
            } else if inline_url(p.get("image_url")) {
                Ok(())
            } else {
                Err(refused(at, k, REMOTE))
            }
        }
        "input_file" => {
            if has(p, "file_id") {
                Err(refused(at, k, STORED))
            } else if has(p, "file_url") || !inline_data(p.get("file_data")) {
                Err(refused(at, k, REMOTE))
            } else {
                Ok(())
            }
        }
        "input_audio" => Err(refused(at, k, AUDIO)),
        _ => Err(refused(at, k, UNKNOWN)),
    }
}

/// Anthropic Messages: a content block of a message.
fn anthropic_block(b: &Value, at: &At<'_>) -> Checked {
    let k = kind(b);
    match k {
        "text" | "thinking" | "redacted_thinking" | "tool_use" => Ok(()),
        "image" | "document" | "search_result" | "tool_reference" => anthropic_inline(b, at),
        "tool_result" => content(b, at, anthropic_inline),
        // A search of the request's own tools (allowed as a tool: it
        // reaches nothing outside), and what it found.
        "server_tool_use"
            if b.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| n.starts_with("tool_search_tool_")) =>
        {
            Ok(())
        }
        "tool_search_tool_result" => {
            let found = b.get("content").unwrap_or(&Value::Null);
            match kind(found) {
                "tool_search_tool_search_result" => each(
                    found.get("tool_references").unwrap_or(&Value::Null),
                    &At::Key(&At::Key(at, "content"), "tool_references"),
                    |r, at| only(r, at, &["tool_reference"]),
                ),
                "tool_search_tool_result_error" => Ok(()),
                other => Err(refused(&At::Key(at, "content"), other, UNKNOWN)),
            }
        }
        "container_upload" => Err(refused(at, k, STORED)),
        "server_tool_use"
        | "web_search_tool_result"
        | "web_fetch_tool_result"
        | "code_execution_tool_result"
        | "bash_code_execution_tool_result"
        | "text_editor_code_execution_tool_result"
        | "mcp_tool_use"
        | "mcp_tool_result" => Err(refused(at, k, PROVIDER_TOOL)),
        _ => Err(refused(at, k, UNKNOWN)),
    }
}

/// A block that may sit in a tool result too: text, and images,
/// documents and search results carried inline.
fn anthropic_inline(b: &Value, at: &At<'_>) -> Checked {
    let k = kind(b);
    match k {
        "text" | "tool_reference" => Ok(()),
        "image" | "document" => {
            let source = b.get("source").unwrap_or(&Value::Null);
            let at = At::Key(at, "source");
            match kind(source) {
                "base64" => Ok(()),
                "text" if k == "document" => Ok(()),
                "content" if k == "document" => parts_of(
                    source.get("content"),
                    &At::Key(&at, "content"),
                    anthropic_inline,
                ),
                "url" => Err(refused(&at, "url", REMOTE)),
                "file" => Err(refused(&at, "file", STORED)),
                other => Err(refused(&at, other, UNKNOWN)),
            }
        }
        // Its `source` is a label for citations, never fetched.
        "search_result" => content(b, at, |p, at| only(p, at, &["text"])),
        _ => Err(refused(at, k, UNKNOWN)),
    }
}
