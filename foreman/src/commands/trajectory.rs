//! `saheeli task trajectory ID [--format atif|openai]`: what a task's
//! gateway saw of a third-party agent's LLM calls (`llm::record`), as
//! one JSON document. `atif` is Harbor's Agent Trajectory Interchange
//! Format (v1.4: a system and a user step, then one agent step per call
//! with its tool calls, the tool results the next request carried as its
//! observation, and its token counts); `openai` is the same conversation
//! as OpenAI chat messages. Whole answers and streams (their events
//! reassembled) of all three APIs are read.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};

use crate::cli::{TrajectoryArgs, TrajectoryFormat};
use crate::config::Config;

use super::open_existing_store;

/// Longest trajectory file read (the gateway stops writing at 64 MiB).
const MAX_FILE: u64 = 80 * 1024 * 1024;

pub(crate) async fn trajectory(cfg: &Config, args: TrajectoryArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(cfg)?;
    let t = store.require(&args.id)?;
    let dir = crate::llm::trajectories_dir(cfg);
    let path = crate::llm::record::path(&dir, &t.id.to_string());
    let text = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_file() => {
            let mut s = String::new();
            std::fs::File::open(&path)
                .and_then(|f| f.take(MAX_FILE).read_to_string(&mut s))
                .with_context(|| format!("reading `{}`", path.display()))?;
            s
        }
        Ok(_) => bail!("`{}` is not a regular file; remove it", path.display()),
        Err(_) => bail!(
            "task `{}` has no trajectory: the gateway records the calls of third-party agents \
             (`/v1/messages`, `/v1/responses`, streamed chat completions) in `{}`, and this task \
             made none (Saheeli's own loop keeps its conversation in the results' \
             `servo-<id>-session.json`)",
            t.id.short(),
            dir.display()
        ),
    };
    let mut calls: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // Lines are appended as calls end; a call's place is when it began.
    calls.sort_by_key(|c| c["at_ms"].as_i64().unwrap_or(0));
    let conv = conversation(&calls);
    let doc = match args.format {
        TrajectoryFormat::Atif => atif(&t.id.to_string(), &t.spec.model, &conv),
        TrajectoryFormat::Openai => openai(&t.spec.model, &conv),
    };
    let doc = crate::llm::redact_keys(cfg, &serde_json::to_string_pretty(&doc)?);
    println!("{doc}");
    Ok(ExitCode::SUCCESS)
}

/// One LLM call, read from its record.
#[derive(Debug, Default, PartialEq)]
struct Turn {
    at_ms: i64,
    text: String,
    /// (id, name, arguments)
    calls: Vec<(String, String, Value)>,
    usage: Option<(u64, u64)>,
    /// Results of these calls, from a later request: (id, content).
    results: Vec<(String, String)>,
}

#[derive(Debug, Default, PartialEq)]
struct Conversation {
    system: Option<String>,
    user: Option<String>,
    turns: Vec<Turn>,
}

/// Text of a string, or of an array of parts with `text`.
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let t: Vec<&str> = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!t.is_empty()).then(|| t.join("\n"))
        }
        _ => None,
    }
}

/// The conversation the records hold.
fn conversation(calls: &[Value]) -> Conversation {
    let mut conv = Conversation::default();
    let mut results: BTreeMap<String, String> = BTreeMap::new();
    for c in calls {
        let (api, req) = (c["api"].as_str().unwrap_or(""), &c["request"]);
        if conv.user.is_none() {
            (conv.system, conv.user) = opening(api, req);
        }
        results.extend(tool_results(api, req));
        let (text, tool_calls) = if c["streamed"] == true {
            from_events(api, c["response"].as_str().unwrap_or(""))
        } else {
            answer(api, &c["response"])
        };
        let u = &c["usage"];
        conv.turns.push(Turn {
            at_ms: c["at_ms"].as_i64().unwrap_or(0),
            text,
            calls: tool_calls,
            usage: u["input_tokens"]
                .as_u64()
                .map(|i| (i, u["output_tokens"].as_u64().unwrap_or(0))),
            results: vec![],
        });
    }
    for turn in &mut conv.turns {
        turn.results = turn
            .calls
            .iter()
            .filter_map(|(id, _, _)| Some((id.clone(), results.get(id)?.clone())))
            .collect();
    }
    conv
}

/// The system prompt and the first user message of a request.
fn opening(api: &str, req: &Value) -> (Option<String>, Option<String>) {
    let first_user = |msgs: &Value| {
        msgs.as_array()?
            .iter()
            .find(|m| m["role"] == "user")
            .and_then(|m| text_of(&m["content"]))
    };
    match api {
        "messages" => (text_of(&req["system"]), first_user(&req["messages"])),
        "chat" => {
            let system = req["messages"].as_array().and_then(|m| {
                m.iter()
                    .find(|m| matches!(m["role"].as_str(), Some("system" | "developer")))
                    .and_then(|m| text_of(&m["content"]))
            });
            (system, first_user(&req["messages"]))
        }
        _ => {
            let user = match &req["input"] {
                Value::String(s) => Some(s.clone()),
                items => first_user(items),
            };
            (req["instructions"].as_str().map(String::from), user)
        }
    }
}

/// Tool results a request carries: (call id, content).
fn tool_results(api: &str, req: &Value) -> Vec<(String, String)> {
    let items = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    match api {
        "messages" => {
            for m in items(&req["messages"]) {
                for b in items(&m["content"]) {
                    if b["type"] == "tool_result"
                        && let Some(id) = b["tool_use_id"].as_str()
                    {
                        out.push((id.into(), text_of(&b["content"]).unwrap_or_default()));
                    }
                }
            }
        }
        "chat" => {
            for m in items(&req["messages"]) {
                if m["role"] == "tool"
                    && let Some(id) = m["tool_call_id"].as_str()
                {
                    out.push((id.into(), text_of(&m["content"]).unwrap_or_default()));
                }
            }
        }
        _ => {
            for i in items(&req["input"]) {
                let kind = i["type"].as_str().unwrap_or("");
                if kind.ends_with("call_output")
                    && let Some(id) = i["call_id"].as_str()
                {
                    out.push((id.into(), text_of(&i["output"]).unwrap_or_default()));
                }
            }
        }
    }
    out
}

/// Arguments as JSON: an object as sent, anything else under `input`.
fn arguments(raw: &Value) -> Value {
    let parsed = match raw {
        Value::String(s) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        v => v.clone(),
    };
    if parsed.is_object() {
        parsed
    } else {
        json!({"input": parsed})
    }
}

type Answer = (String, Vec<(String, String, Value)>);

/// Text and tool calls of a whole answer.
fn answer(api: &str, v: &Value) -> Answer {
    let mut text = Vec::new();
    let mut calls = Vec::new();
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    match api {
        "messages" => {
            for b in v["content"].as_array().into_iter().flatten() {
                match b["type"].as_str() {
                    Some("text") => text.push(s(&b["text"])),
                    Some("tool_use") => {
                        calls.push((s(&b["id"]), s(&b["name"]), arguments(&b["input"])))
                    }
                    _ => {}
                }
            }
        }
        "chat" => {
            let m = &v["choices"][0]["message"];
            text.extend(text_of(&m["content"]));
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                let f = &c["function"];
                calls.push((s(&c["id"]), s(&f["name"]), arguments(&f["arguments"])));
            }
        }
        _ => {
            for o in v["output"].as_array().into_iter().flatten() {
                match o["type"].as_str() {
                    Some("message") => text.extend(text_of(&o["content"])),
                    Some("function_call") => {
                        calls.push((s(&o["call_id"]), s(&o["name"]), arguments(&o["arguments"])))
                    }
                    Some("custom_tool_call") => {
                        calls.push((s(&o["call_id"]), s(&o["name"]), arguments(&o["input"])))
                    }
                    _ => {}
                }
            }
        }
    }
    (text.join("\n"), calls)
}

/// Text and tool calls of a stream, from its events.
fn from_events(api: &str, events: &str) -> Answer {
    let data: Vec<Value> = events
        .split("\n\n")
        .filter_map(|b| {
            let d: String = b
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            serde_json::from_str(&d).ok()
        })
        .collect();
    if api == "responses" {
        return data
            .iter()
            .find(|d| d["type"] == "response.completed")
            .map(|d| answer(api, &d["response"]))
            .unwrap_or_default();
    }
    // Per block (Messages) or tool-call index (chat): id, name, text.
    let mut text = String::new();
    let mut blocks: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    for d in &data {
        if api == "messages" {
            let i = d["index"].as_u64().unwrap_or(0);
            match d["type"].as_str() {
                Some("content_block_start") if d["content_block"]["type"] == "tool_use" => {
                    let b = &d["content_block"];
                    blocks.insert(
                        i,
                        (
                            b["id"].as_str().unwrap_or("").into(),
                            b["name"].as_str().unwrap_or("").into(),
                            String::new(),
                        ),
                    );
                }
                Some("content_block_delta") => match d["delta"]["type"].as_str() {
                    Some("text_delta") => text.push_str(d["delta"]["text"].as_str().unwrap_or("")),
                    Some("input_json_delta") => {
                        if let Some(b) = blocks.get_mut(&i) {
                            b.2.push_str(d["delta"]["partial_json"].as_str().unwrap_or(""));
                        }
                    }
                    _ => {}
                },
                _ => {}
            }
        } else {
            let delta = &d["choices"][0]["delta"];
            text.push_str(delta["content"].as_str().unwrap_or(""));
            for c in delta["tool_calls"].as_array().into_iter().flatten() {
                let b = blocks.entry(c["index"].as_u64().unwrap_or(0)).or_default();
                if let Some(id) = c["id"].as_str() {
                    b.0 = id.into();
                }
                if let Some(n) = c["function"]["name"].as_str() {
                    b.1 = n.into();
                }
                b.2.push_str(c["function"]["arguments"].as_str().unwrap_or(""));
            }
        }
    }
    let calls = blocks
        .into_values()
        .map(|(id, name, args)| (id, name, arguments(&Value::String(args))))
        .collect();
    (text, calls)
}

/// Harbor's Agent Trajectory Interchange Format.
fn atif(task_id: &str, model: &str, conv: &Conversation) -> Value {
    let mut steps = Vec::new();
    let mut push = |mut step: Map<String, Value>| {
        step.insert("step_id".into(), json!(steps.len() + 1));
        steps.push(Value::Object(step));
    };
    for (source, text) in [("system", &conv.system), ("user", &conv.user)] {
        if let Some(t) = text {
            push(
                json!({"source": source, "message": t})
                    .as_object()
                    .unwrap()
                    .clone(),
            );
        }
    }
    let (mut input, mut output) = (0, 0);
    for t in &conv.turns {
        let mut step = json!({
            "timestamp": crate::eval::rfc3339(t.at_ms),
            "source": "agent",
            "model_name": model,
            "message": t.text,
        });
        if !t.calls.is_empty() {
            step["tool_calls"] = t.calls.iter().map(|(id, name, args)| json!({"tool_call_id": id, "function_name": name, "arguments": args})).collect();
        }
        if !t.results.is_empty() {
            step["observation"] = json!({"results": t.results.iter().map(|(id, c)| json!({"source_call_id": id, "content": c})).collect::<Vec<_>>()});
        }
        if let Some((i, o)) = t.usage {
            step["metrics"] = json!({"prompt_tokens": i, "completion_tokens": o});
            (input, output) = (input + i, output + o);
        }
        push(step.as_object().unwrap().clone());
    }
    let total = steps.len();
    json!({
        "schema_version": "ATIF-v1.4",
        "session_id": task_id,
        "agent": {"name": "saheeli-gateway", "version": env!("CARGO_PKG_VERSION"), "model_name": model},
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": input, "total_completion_tokens": output, "total_steps": total},
    })
}

/// The conversation as OpenAI chat messages.
fn openai(model: &str, conv: &Conversation) -> Value {
    let mut messages = Vec::new();
    if let Some(s) = &conv.system {
        messages.push(json!({"role": "system", "content": s}));
    }
    if let Some(u) = &conv.user {
        messages.push(json!({"role": "user", "content": u}));
    }
    let (mut input, mut output) = (0, 0);
    for t in &conv.turns {
        let mut m = json!({"role": "assistant", "content": t.text});
        if !t.calls.is_empty() {
            m["tool_calls"] = t.calls.iter().map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})).collect();
        }
        messages.push(m);
        for (id, c) in &t.results {
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": c}));
        }
        if let Some((i, o)) = t.usage {
            (input, output) = (input + i, output + o);
        }
    }
    json!({"model": model, "messages": messages,
           "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(api: &str, streamed: bool, request: Value, response: Value) -> Value {
        json!({"api": api, "streamed": streamed, "at_ms": 0, "request": request,
               "response": response, "usage": {"input_tokens": 10, "output_tokens": 2}})
    }

    /// The same two-call conversation in each API, whole and streamed,
    /// reads the same.
    #[test]
    fn every_api_reads_as_one_conversation() {
        let stream_messages = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"Bash\",\"input\":{}}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"cmd\\\":\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"ls\\\"}\"}}\n\n";
        let stream_chat = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t1\",\"function\":{\"name\":\"Bash\",\"arguments\":\"{\\\"cmd\\\":\"}}]}}]}\n\n\
            data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"ls\\\"}\"}}]}}]}\n\ndata: [DONE]\n\n";
        let cases = [
            vec![
                call(
                    "messages",
                    true,
                    json!({"system": "S", "messages": [{"role": "user", "content": "U"}]}),
                    json!(stream_messages),
                ),
                call(
                    "messages",
                    false,
                    json!({"messages": [{"role": "user", "content": "U"},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "out"}]}]}),
                    json!({"content": [{"type": "text", "text": "done"}]}),
                ),
            ],
            vec![
                call(
                    "chat",
                    true,
                    json!({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]}),
                    json!(stream_chat),
                ),
                call(
                    "chat",
                    false,
                    json!({"messages": [{"role": "tool", "tool_call_id": "t1", "content": "out"}]}),
                    json!({"choices": [{"message": {"content": "done"}}]}),
                ),
            ],
            vec![
                call(
                    "responses",
                    true,
                    json!({"instructions": "S", "input": "U"}),
                    json!(
                        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"function_call\",\"call_id\":\"t1\",\"name\":\"Bash\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\"}]}}\n\n"
                    ),
                ),
                call(
                    "responses",
                    false,
                    json!({"input": [{"type": "function_call_output", "call_id": "t1", "output": "out"}]}),
                    json!({"output": [{"type": "message", "content": [{"type": "output_text", "text": "done"}]}]}),
                ),
            ],
        ];
        for calls in cases {
            let c = conversation(&calls);
            assert_eq!(
                (c.system.as_deref(), c.user.as_deref()),
                (Some("S"), Some("U")),
                "{calls:?}"
            );
            assert_eq!(
                c.turns[0].calls,
                vec![("t1".into(), "Bash".into(), json!({"cmd": "ls"}))],
                "{calls:?}"
            );
            assert_eq!(c.turns[0].results, vec![("t1".into(), "out".into())]);
            assert_eq!(c.turns[1].text, "done");
            let a = atif("task", "m", &c);
            assert_eq!(a["schema_version"], "ATIF-v1.4");
            let steps = a["steps"].as_array().unwrap();
            assert_eq!(steps.len(), 4);
            assert_eq!(steps[2]["tool_calls"][0]["function_name"], "Bash");
            assert_eq!(steps[2]["observation"]["results"][0]["content"], "out");
            assert_eq!(a["final_metrics"]["total_prompt_tokens"], 20);
            let o = openai("m", &c);
            let roles: Vec<&str> = o["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["role"].as_str().unwrap())
                .collect();
            assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
        }
    }
}
