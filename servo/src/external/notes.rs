//! Messages a person injects (`saheeli task inject`) reach a third-party
//! agent's model as the built-in loop's do: before each of the agent's
//! LLM calls the servo looks at the desk's inbox, adds the new messages
//! to the call as a user turn (in the API's own shape: a chat message, a
//! Responses input item, a text block of the Anthropic turn the call
//! ends on), logs each as a `noted` audit event and marks it delivered.
//!
//! The agent keeps its own history, which lacks the message: on its
//! later calls the message is put back where it was first told (after
//! the same turn, in the same conversation: its first item unchanged),
//! so the model keeps reading it. A call whose shape cannot take it there
//! (a tool call's result would be split from its call) goes without it.
//!
//! A pause asked for (`saheeli task pause`) holds the agent's next call
//! until it is lifted; the wait is not working time.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::Request;
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, HeaderValue, TRANSFER_ENCODING};
use saheeli_protocol::AuditEvent;
use saheeli_protocol::human::Note;
use serde_json::{Value, json};
use tracing::{info, warn};

use super::own::Own;
use crate::audit::{Audit, now};
use crate::desk::Desk;

/// The largest request body the servo reads to add a message to.
const MAX_BODY: usize = 64 << 20;
/// One wait for a pause to be lifted; the servo asks again.
const PAUSE_WAIT: Duration = Duration::from_secs(60);

/// The request body the agent's call goes on with.
pub(super) type Body = http_body_util::Either<Incoming, String>;

/// The API a call speaks, by its path (None: not a model call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Api {
    Chat,
    Responses,
    Messages,
}

impl Api {
    pub fn of(path: &str) -> Option<Api> {
        match path {
            "/v1/chat/completions" => Some(Api::Chat),
            "/v1/responses" => Some(Api::Responses),
            "/v1/messages" => Some(Api::Messages),
            _ => None,
        }
    }
}

/// A message told to the model, kept for the agent's later calls.
#[derive(Clone, Debug, PartialEq)]
struct Told {
    /// The index it was inserted at, or of the user turn it joined.
    at: usize,
    /// It joined a user turn (Anthropic's) rather than being one.
    joins: bool,
    /// The conversation's first item, hashed: another conversation (a
    /// sub-agent's) does not get it.
    first: u64,
    text: String,
}

#[derive(Default)]
struct Carried {
    /// The newest note taken (0: none).
    newest: i64,
    /// The agent's LLM calls so far (the audit events' `step`).
    calls: u32,
    told: Vec<Told>,
}

pub(crate) struct Notes {
    desk: Option<Desk>,
    audit: Option<std::sync::Mutex<Audit>>,
    own: Arc<Own>,
    /// Held for the whole look, so that two calls never take one note.
    state: tokio::sync::Mutex<Carried>,
}

impl Notes {
    pub fn new(gateway: &str, audit_path: &std::path::Path, own: Arc<Own>) -> Notes {
        let desk = Desk::new(gateway)
            .inspect_err(|e| warn!(error = %e, "no desk: injected messages are not carried"))
            .ok();
        let audit = Audit::open(audit_path, true)
            .inspect_err(|e| warn!(error = %e, "injected messages are not logged"))
            .ok()
            .map(std::sync::Mutex::new);
        Notes {
            desk,
            audit,
            own,
            state: tokio::sync::Mutex::new(Carried::default()),
        }
    }

    fn log(&self, event: &AuditEvent) {
        if let Some(a) = &self.audit {
            a.lock().unwrap().log(event);
        }
    }

    /// The agent's call `req` to `api`, with the messages injected so far
    /// in it; waits first while the task is paused.
    pub async fn carry(&self, api: Api, req: Request<Incoming>) -> Result<Request<Body>, String> {
        let Some(desk) = &self.desk else {
            return Ok(req.map(Body::Left));
        };
        let mut state = self.state.lock().await;
        state.calls += 1;
        let step = state.calls;
        let mut new: Vec<Note> = Vec::new();
        if let Some(inbox) = desk.inbox_now(state.newest).await {
            new.extend(inbox.notes);
            if inbox.pause {
                new.extend(self.paused(desk, step, state.newest).await);
            }
        }
        new.retain(|n| n.id > state.newest);
        new.sort_by_key(|n| n.id);
        new.dedup_by_key(|n| n.id);
        if new.is_empty() && state.told.is_empty() {
            return Ok(req.map(Body::Left));
        }
        let (mut parts, body) = req.into_parts();
        let bytes = http_body_util::Limited::new(body, MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("reading the agent's call: {e} (at most {MAX_BODY} bytes)"))?
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let mut body: Value = match serde_json::from_str(&text) {
            Ok(v @ Value::Object(_)) => v,
            // Not a call the gateway will take: it says why.
            _ => return Ok(Request::from_parts(parts, Body::Right(text))),
        };
        let Some(items) = conversation(api, &mut body) else {
            return Ok(Request::from_parts(parts, Body::Right(text)));
        };
        // The conversation's first item, before anything is added to it.
        let first = items.first().map(hash_of);
        let put = put_back(api, items, first, &state.told);
        if put == 0 && new.is_empty() {
            // As the agent sent it.
            return Ok(Request::from_parts(parts, Body::Right(text)));
        }
        if !new.is_empty() {
            let said = new.iter().map(words).collect::<Vec<_>>().join("\n\n");
            match first.and_then(|first| add(api, items, first, &said)) {
                Some(told) => {
                    state.told.extend(told);
                    state.newest = new.iter().map(|n| n.id).max().unwrap_or(state.newest);
                    for n in &new {
                        self.log(&AuditEvent::Noted {
                            ts: now(),
                            step,
                            id: n.id,
                            by: n.by.clone(),
                            text: n.text.clone(),
                        });
                    }
                    let ids = new.iter().map(|n| n.id).collect();
                    if let Err(e) = desk.delivered(ids).await {
                        warn!(error = %e.0, "could not mark messages delivered");
                    }
                    info!(
                        notes = new.len(),
                        step, "injected messages added to the agent's call"
                    );
                }
                None => warn!(
                    step,
                    "the agent's call has no conversation to add a message to"
                ),
            }
        }
        let out = body.to_string();
        parts.headers.remove(TRANSFER_ENCODING);
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(out.len()));
        Ok(Request::from_parts(parts, Body::Right(out)))
    }

    /// Paused before call `step`: waits for the pause to be lifted; the
    /// messages that came meanwhile.
    async fn paused(&self, desk: &Desk, step: u32, after: i64) -> Vec<Note> {
        self.log(&AuditEvent::Paused { ts: now(), step });
        info!(step, "paused before the agent's LLM call");
        let t0 = Instant::now();
        let mut notes = Vec::new();
        loop {
            match desk.inbox_wait(PAUSE_WAIT, after).await {
                Ok(inbox) => {
                    notes.extend(inbox.notes);
                    if inbox.pause {
                        continue;
                    }
                }
                Err(e) => warn!(error = %e.0, "the desk refused the pause; going on"),
            }
            break;
        }
        let waited = t0.elapsed();
        *self.own.waited.lock().unwrap() += waited;
        self.log(&AuditEvent::Resumed {
            ts: now(),
            step,
            waited_ms: waited.as_millis() as u64,
        });
        notes
    }
}

/// What the model reads, as the built-in loop words it.
fn words(n: &Note) -> String {
    format!(
        "[saheeli] A message from {} (a human watching this task): {}",
        n.by, n.text
    )
}

/// The call's conversation: chat's and Anthropic's `messages`, the
/// Responses `input` (a string becomes one user item).
fn conversation(api: Api, body: &mut Value) -> Option<&mut Vec<Value>> {
    let key = match api {
        Api::Chat | Api::Messages => "messages",
        Api::Responses => "input",
    };
    let obj = body.as_object_mut()?;
    if let Some(Value::String(s)) = obj.get(key) {
        let first = json!({"role": "user", "content": s});
        obj.insert(key.to_string(), json!([first]));
    }
    obj.get_mut(key)?.as_array_mut()
}

/// An item's role and text, hashed: what an agent resends unchanged,
/// whatever it moves around it (Claude Code's `cache_control` marks).
fn hash_of(v: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    v["role"].as_str().unwrap_or("").hash(&mut h);
    match &v["content"] {
        Value::String(s) => s.hash(&mut h),
        Value::Array(blocks) => {
            for b in blocks {
                b["text"].as_str().unwrap_or("").hash(&mut h);
            }
        }
        other => other.to_string().hash(&mut h),
    }
    h.finish()
}

fn user_item(api: Api, text: &str) -> Value {
    match api {
        Api::Responses => json!({"type": "message", "role": "user", "content": text}),
        Api::Chat | Api::Messages => json!({"role": "user", "content": text}),
    }
}

/// Adds `text` at the end of the conversation (whose first item hashes
/// to `first`); where it was told.
fn add(api: Api, items: &mut Vec<Value>, first: u64, text: &str) -> Option<Option<Told>> {
    let at = items.len();
    let role = items.last()?["role"].as_str().unwrap_or("").to_string();
    let told = |at, joins| {
        Some(Some(Told {
            at,
            joins,
            first,
            text: text.to_string(),
        }))
    };
    if api == Api::Messages {
        match role.as_str() {
            // Turns alternate: the text joins the user turn the call ends
            // on (after its tool results).
            "user" => {
                append_text(items.last_mut()?, text);
                return told(at - 1, true);
            }
            // After an assistant turn (a prefill) it is a turn of its own,
            // told this once: on the next call that place is the answer's.
            "assistant" => {
                items.push(user_item(api, text));
                return Some(None);
            }
            // After a turn of another kind (Claude Code's `system` turns),
            // a user turn of its own, kept in place.
            _ => {}
        }
    }
    items.push(user_item(api, text));
    told(at, false)
}

fn append_text(turn: &mut Value, text: &str) {
    let block = json!({"type": "text", "text": text});
    match turn.get_mut("content") {
        Some(Value::Array(blocks)) => blocks.push(block),
        Some(Value::String(s)) => {
            let first = json!({"type": "text", "text": s.clone()});
            turn["content"] = json!([first, block]);
        }
        _ => turn["content"] = json!([block]),
    }
}

/// Puts the messages told on earlier calls back where they were, when
/// this is the same conversation grown past that point and the place can
/// take a user turn; how many it put back.
fn put_back(api: Api, items: &mut Vec<Value>, first: Option<u64>, told: &[Told]) -> usize {
    let Some(first) = first else {
        return 0;
    };
    let (mut shift, mut put) = (0, 0);
    for t in told {
        if t.first != first {
            continue;
        }
        let at = t.at + shift;
        if t.joins {
            if items.get(at).is_none_or(|u| u["role"] != "user") {
                continue;
            }
            append_text(&mut items[at], &t.text);
        } else {
            if !fits(api, items, at) {
                continue;
            }
            items.insert(at, user_item(api, &t.text));
            shift += 1;
        }
        put += 1;
    }
    put
}

/// Whether a user turn can be inserted at `at`: after something, and
/// never between a tool call and its result.
fn fits(api: Api, items: &[Value], at: usize) -> bool {
    let Some(before) = at.checked_sub(1).and_then(|i| items.get(i)) else {
        return false;
    };
    if at > items.len() {
        return false;
    }
    let next = items.get(at);
    match api {
        // A user turn right after an assistant's would split its tool
        // uses from their results, or its answer from the next turn.
        Api::Messages => before["role"] != "assistant",
        Api::Chat => {
            before.get("tool_calls").is_none_or(Value::is_null)
                && next.is_none_or(|n| n["role"] != "tool")
        }
        Api::Responses => {
            let kind = |v: &Value| v["type"].as_str().unwrap_or("").to_string();
            !kind(before).ends_with("_call") && next.is_none_or(|n| !kind(n).ends_with("_output"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told(api: Api, items: &mut Vec<Value>) -> Told {
        let first = hash_of(&items[0]);
        add(api, items, first, "NOTE").unwrap().unwrap()
    }

    fn back(api: Api, items: &mut Vec<Value>, told: &[Told]) -> usize {
        let first = items.first().map(hash_of);
        put_back(api, items, first, told)
    }

    /// Chat: the note is a user message after the tool result; on the
    /// next call (the agent's history has the answer, not the note) it is
    /// back in its place, before the answer.
    #[test]
    fn chat_keeps_the_note_in_its_place() {
        let mut call1 = vec![
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "go"}),
            json!({"role": "assistant", "tool_calls": [{"id": "a"}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "ok"}),
        ];
        let t = told(Api::Chat, &mut call1);
        assert_eq!(call1[4], json!({"role": "user", "content": "NOTE"}));
        let mut call2 = call1[..4].to_vec();
        call2.push(json!({"role": "assistant", "content": "heard"}));
        call2.push(json!({"role": "user", "content": "more"}));
        assert_eq!(back(Api::Chat, &mut call2, std::slice::from_ref(&t)), 1);
        assert_eq!(call2[4]["content"], "NOTE");
        assert_eq!(call2[5]["content"], "heard");
        // Another conversation (a sub-agent's) does not get it.
        let mut other = vec![json!({"role": "system", "content": "sub"}); 6];
        assert_eq!(back(Api::Chat, &mut other, std::slice::from_ref(&t)), 0);
        assert_eq!(other.len(), 6);
        // Nor a place between a tool call and its result.
        let mut split = call1[..3].to_vec();
        split.push(json!({"role": "tool", "content": "x"}));
        let at3 = Told { at: 3, ..t };
        assert_eq!(back(Api::Chat, &mut split, &[at3]), 0);
        assert_eq!(split.len(), 4);
    }

    /// Anthropic: the note joins the user turn the call ends on, after
    /// its tool results, so the turns still alternate.
    #[test]
    fn anthropic_adds_a_text_block_to_the_last_user_turn() {
        let mut items = vec![
            json!({"role": "user", "content": "go"}),
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t"}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}),
        ];
        let t = told(Api::Messages, &mut items);
        assert_eq!(items.len(), 3);
        assert_eq!(items[2]["content"][0]["type"], "tool_result");
        assert_eq!(items[2]["content"][1]["text"], "NOTE");
        let mut next = items.clone();
        next[2]["content"].as_array_mut().unwrap().pop();
        next.push(json!({"role": "assistant", "content": "heard"}));
        // Claude Code moves its cache marks between calls: the same turn.
        next[0] = json!({"role": "user", "content": [
            {"type": "text", "text": "go", "cache_control": {"type": "ephemeral"}}]});
        assert_eq!(back(Api::Messages, &mut next, &[t]), 1);
        assert_eq!(next[2]["content"][1]["text"], "NOTE");
        // After Claude Code's `system` turn: a user turn of its own, kept
        // in place before the answer on the next call.
        let mut sys = vec![
            json!({"role": "user", "content": "go"}),
            json!({"role": "system", "content": "env"}),
        ];
        let t = told(Api::Messages, &mut sys);
        assert_eq!(sys[2]["role"], "user");
        let mut next = sys[..2].to_vec();
        next.push(json!({"role": "assistant", "content": "heard"}));
        assert_eq!(back(Api::Messages, &mut next, &[t]), 1);
        assert_eq!(next[2]["content"], "NOTE");
        assert_eq!(next[3]["role"], "assistant");
        // A string first turn becomes blocks.
        let mut one = vec![json!({"role": "user", "content": "go"})];
        told(Api::Messages, &mut one);
        assert_eq!(one[0]["content"][0]["text"], "go");
        assert_eq!(one[0]["content"][1]["text"], "NOTE");
    }

    /// Responses: a string input becomes a list; the note is a user
    /// message item, never between a function call and its output.
    #[test]
    fn responses_take_a_user_message_item() {
        let mut body = json!({"model": "m", "input": "go"});
        let items = conversation(Api::Responses, &mut body).unwrap();
        told(Api::Responses, items);
        assert_eq!(body["input"][0], json!({"role": "user", "content": "go"}));
        assert_eq!(body["input"][1]["type"], "message");
        assert_eq!(body["input"][1]["content"], "NOTE");
        let call = vec![
            json!({"role": "user", "content": "go"}),
            json!({"type": "function_call", "call_id": "c"}),
            json!({"type": "function_call_output", "call_id": "c"}),
        ];
        assert!(!fits(Api::Responses, &call, 2));
        assert!(fits(Api::Responses, &call, 3));
    }
}
