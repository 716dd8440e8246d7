//! A task's conversation as ATIF v1.8 (Harbor's Agent Trajectory
//! Interchange Format, `docs/design/benchmark-formats.md` §4), from the
//! servo's session file (the messages) and audit log (each LLM call's
//! time and tokens): a system and a user step, then one agent step per
//! assistant turn with its tool calls and, as its observation, the tool
//! results that answered them.
//!
//! Token counts come per call from the audit log; the per-token
//! `logprobs` a provider returned (one per completion token, ATIF's step
//! `metrics.logprobs`), from the gateway's line of the same call
//! (`<state_dir>/trajectories/<id>.jsonl`, `llm::record`): its answered
//! calls, in order, are the audit log's. Token ids are not returned by
//! the chat APIs, so steps carry none. A replayed task (the oracle, `replay:` scripts) called no
//! model: its agent steps say `llm_call_count: 0` and carry no metrics.

use saheeli_protocol::audit::{AuditEvent, Usage};
use saheeli_protocol::chat::{ChatMessage, Role};
use serde_json::{Map, Value, json};

use crate::store::TaskRow;

pub(crate) const SCHEMA: &str = "ATIF-v1.8";

/// The trajectory of `task` from its session file's text, its audit
/// log's and its gateway's call lines' (`gateway`, may be empty); None
/// when the session does not parse or holds no message.
pub(crate) fn from_session(
    task: &TaskRow,
    session: &str,
    audit: &str,
    gateway: &str,
) -> Option<Value> {
    let doc: Value = serde_json::from_str(session).ok()?;
    let messages: Vec<ChatMessage> = serde_json::from_value(doc.get("messages")?.clone()).ok()?;
    if messages.is_empty() {
        return None;
    }
    let calls: Vec<(String, Usage)> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<AuditEvent>(l).ok())
        .filter_map(|e| match e {
            AuditEvent::LlmCall {
                ts,
                usage,
                error: None,
                ..
            } => Some((ts, usage)),
            _ => None,
        })
        .collect();
    let replayed = task.spec.model.starts_with("replay:");
    Some(build(task, &messages, &calls, &logprobs(gateway), replayed))
}

/// Each answered call's logprobs, in order (empty when none came back).
fn logprobs(gateway: &str) -> Vec<Vec<f64>> {
    gateway
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["ended"].is_null())
        .map(|v| {
            v["logprobs"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default()
        })
        .collect()
}

fn build(
    task: &TaskRow,
    messages: &[ChatMessage],
    calls: &[(String, Usage)],
    logprobs: &[Vec<f64>],
    replayed: bool,
) -> Value {
    let model = task.spec.model.as_str();
    let mut steps: Vec<Map<String, Value>> = Vec::new();
    let mut turn = 0usize;
    let mut totals = Usage::default();
    for m in messages {
        let text = m.content.clone().unwrap_or_default();
        match m.role {
            Role::System => steps.push(plain("system", text)),
            Role::User => steps.push(plain("user", text)),
            Role::Assistant => {
                let mut step = plain("agent", text);
                step.insert("model_name".into(), json!(model));
                if !m.tool_calls.is_empty() {
                    let calls: Vec<Value> = m
                        .tool_calls
                        .iter()
                        .map(|c| {
                            json!({
                                "tool_call_id": c.id,
                                "function_name": c.function.name,
                                "arguments": arguments(&c.function.arguments),
                            })
                        })
                        .collect();
                    step.insert("tool_calls".into(), Value::Array(calls));
                }
                let call = calls.get(turn);
                turn += 1;
                if let Some((ts, _)) = call {
                    step.insert("timestamp".into(), json!(ts));
                }
                if replayed {
                    step.insert("llm_call_count".into(), json!(0));
                } else if let Some((_, u)) = call {
                    totals.add(*u);
                    let mut metrics = json!({
                        "prompt_tokens": u.input_tokens,
                        "completion_tokens": u.output_tokens,
                        "cached_tokens": u.cache_read_tokens,
                    });
                    if let Some(lp) = logprobs.get(turn - 1).filter(|lp| !lp.is_empty()) {
                        metrics["logprobs"] = json!(lp);
                    }
                    step.insert("metrics".into(), metrics);
                }
                steps.push(step);
            }
            Role::Tool => observe(&mut steps, m.tool_call_id.as_deref(), text),
        }
    }
    let steps: Vec<Value> = steps
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            s.insert("step_id".into(), json!(i + 1));
            Value::Object(s)
        })
        .collect();
    let mut final_metrics = json!({
        "total_steps": steps.len(),
        "total_cost_usd": task.cost_usd,
    });
    if !replayed {
        final_metrics["total_prompt_tokens"] = json!(totals.input_tokens);
        final_metrics["total_completion_tokens"] = json!(totals.output_tokens);
        final_metrics["total_cached_tokens"] = json!(totals.cache_read_tokens);
    }
    let mut agent = json!({"name": task.spec.agent.label(), "version": env!("CARGO_PKG_VERSION")});
    if !replayed {
        agent["model_name"] = json!(model);
    }
    json!({
        "schema_version": SCHEMA,
        "session_id": task.id.to_string(),
        "agent": agent,
        "steps": steps,
        "final_metrics": final_metrics,
    })
}

/// Harbor's `rollout_details[].logprobs`: each model call's logprobs (an
/// agent step with `metrics`; empty when it returned none), in order;
/// None when no call returned any.
pub(crate) fn rollout_logprobs(trajectory: &Value) -> Option<Vec<Value>> {
    let per_call: Vec<Value> = trajectory["steps"]
        .as_array()?
        .iter()
        .filter(|s| s["source"] == "agent" && s.get("metrics").is_some())
        .map(|s| s["metrics"].get("logprobs").cloned().unwrap_or(json!([])))
        .collect();
    per_call
        .iter()
        .any(|l| l.as_array().is_some_and(|a| !a.is_empty()))
        .then_some(per_call)
}

fn plain(source: &str, text: String) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("source".into(), json!(source));
    m.insert("message".into(), json!(text));
    m
}

/// A tool result as an observation of the agent step whose call it
/// answers (the last agent step when none names it).
fn observe(steps: &mut [Map<String, Value>], call_id: Option<&str>, text: String) {
    let names = |s: &Map<String, Value>| {
        call_id.is_some_and(|id| {
            s.get("tool_calls")
                .and_then(Value::as_array)
                .is_some_and(|calls| calls.iter().any(|c| c["tool_call_id"] == id))
        })
    };
    let Some(i) = steps
        .iter()
        .rposition(&names)
        .or_else(|| steps.iter().rposition(|s| s["source"] == "agent"))
    else {
        return;
    };
    let mut result = json!({"content": text});
    if names(&steps[i]) {
        result["source_call_id"] = json!(call_id);
    }
    let obs = steps[i]
        .entry("observation")
        .or_insert_with(|| json!({"results": []}));
    if let Some(list) = obs["results"].as_array_mut() {
        list.push(result);
    }
}

/// A call's arguments as ATIF's object: the JSON object the model sent,
/// else its text under `input`.
fn arguments(raw: &str) -> Value {
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({"input": raw}),
    }
}
