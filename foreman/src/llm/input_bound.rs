//! How many input tokens a call can be billed, bounded from above without
//! a tokenizer (issue 47). One token per request byte is always safe but
//! four times too much for ordinary text: a long task was refused once its
//! budget left was smaller than its context in bytes. A call that carries
//! on the conversation of one the provider already counted is bounded by
//! that count plus one token per byte of what is new.
//!
//! Why the bound holds. A provider turns a request into one prompt: a
//! header from every field but the conversation (system, tools, …), each
//! conversation item (`messages`, or Responses' `input` list) in order,
//! each opened and closed by its role markers, and the prompt for the
//! answer. The markers are special tokens that no merge crosses, so the
//! prompt's count is the sum of its parts' counts. Two requests whose
//! other fields are the same (the output cap and `stream` aside: they are
//! no input) and whose first `k` items are the same share the header, the
//! answer prompt and those `k` items' counts; the earlier one's count,
//! as the provider reported it (cached tokens included), is at least all
//! of those. What the new request adds is its items from `k` on: each is
//! at most one token per byte of its JSON (every token covers at least a
//! byte of text, and the JSON spells the text no shorter, plus the role
//! and keys its markers stand for). So the new count is at most the old
//! count plus those items' bytes, whatever the earlier request held after
//! item `k` (compacted or removed items only made the old count larger).
//! Inline base64 media in a new item stays at one token per byte, as
//! before. A request naming input the provider adds or drops itself
//! (`truncation: auto`, `context_management`, stored conversations) has
//! no such bound and falls back to its bytes; so does a first call.
//!
//! Items are compared by a SHA-256 of their canonical form (cache
//! breakpoints left out: they are no tokens), so a request cannot be made
//! to look like an earlier one it is not.

use std::sync::Mutex;

use saheeli_protocol::chat::{ChatMessage, ChatRequest};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Fields that are no input: the output cap and streaming.
const NOT_INPUT: &[&str] = &[
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "stream",
    "stream_options",
];

/// Fields with which the provider changes the input itself.
const PROVIDER_EDITS: &[&str] = &[
    "context_management",
    "previous_response_id",
    "conversation",
    "prompt",
];

type Digest32 = [u8; 32];

/// A request as the bound needs it: its size, and, when its conversation
/// can be compared with an earlier one's, the digests of its parts.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Shape {
    /// The request's bytes: the bound with no earlier call.
    pub bytes: u64,
    /// Every field but the conversation; None: not comparable.
    rest: Option<Digest32>,
    /// Each conversation item: its digest and its JSON's bytes.
    items: Vec<(Digest32, u64)>,
}

impl Shape {
    /// A request bounded by its bytes alone.
    pub fn bytes_only(bytes: u64) -> Shape {
        Shape {
            bytes,
            ..Shape::default()
        }
    }

    /// The shape of a request body sent as `bytes` bytes.
    pub fn of(body: &Map<String, Value>, bytes: u64) -> Shape {
        match head(body, bytes) {
            Ok((mut shape, items)) => {
                shape.items = items.iter().map(item).collect();
                shape
            }
            Err(shape) => shape,
        }
    }
}

/// A body's shape but for its items, and its items; `Err`: the body
/// cannot be compared (bounded by its bytes).
fn head(body: &Map<String, Value>, bytes: u64) -> Result<(Shape, &Vec<Value>), Shape> {
    let shape = Shape::bytes_only(bytes);
    let truncates = body
        .get("truncation")
        .is_some_and(|t| t.as_str() != Some("disabled"));
    if truncates || PROVIDER_EDITS.iter().any(|k| body.contains_key(*k)) {
        return Err(shape);
    }
    let key = if body.contains_key("messages") {
        "messages"
    } else {
        "input"
    };
    let Some(Value::Array(items)) = body.get(key) else {
        return Err(shape);
    };
    let mut rest = Sha256::new();
    for (k, v) in body {
        if k != key && !NOT_INPUT.contains(&k.as_str()) {
            feed(&Value::String(k.clone()), &mut rest);
            feed(v, &mut rest);
        }
    }
    Ok((
        Shape {
            rest: Some(rest.finalize().into()),
            ..shape
        },
        items,
    ))
}

/// One conversation item: its digest and its JSON's bytes.
fn item(v: &Value) -> (Digest32, u64) {
    let mut h = Sha256::new();
    feed(v, &mut h);
    let len = serde_json::to_vec(v).map_or(u64::MAX / 4, |b| b.len() as u64);
    (h.finalize().into(), len)
}

/// The servo's typed chats' items as its last call had them: a message
/// equal to the one in its place then has the same digest and bytes, so
/// only what a step added is encoded and hashed. A conversation grows by
/// a few messages a step, and digesting all of it again cost each step
/// a pass over the whole conversation (issue 48's hot path).
#[derive(Debug, Default)]
pub(crate) struct ChatItems(Mutex<Vec<(ChatMessage, Digest32, u64)>>);

impl ChatItems {
    /// `Shape::of` the body `req` serializes to (`bytes` long), without
    /// encoding the messages the last call had in the same places.
    pub fn shape(&self, req: &mut ChatRequest, bytes: u64) -> Shape {
        let messages = std::mem::take(&mut req.messages);
        let head_value = serde_json::to_value(&*req);
        req.messages = messages;
        let Ok(Value::Object(body)) = head_value else {
            return Shape::bytes_only(bytes);
        };
        let (mut shape, _) = match head(&body, bytes) {
            Ok(h) => h,
            Err(shape) => return shape,
        };
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let same = kept
            .iter()
            .zip(&req.messages)
            .take_while(|(k, m)| k.0 == **m)
            .count();
        kept.truncate(same);
        for m in &req.messages[same..] {
            let Ok(v) = serde_json::to_value(m) else {
                kept.clear();
                return Shape::bytes_only(bytes);
            };
            let (digest, len) = item(&v);
            kept.push((m.clone(), digest, len));
        }
        shape.items = kept.iter().map(|(_, d, l)| (*d, *l)).collect();
        shape
    }
}

/// An earlier call: its shape and the input tokens the provider billed.
#[derive(Clone, Debug)]
pub(crate) struct Counted {
    pub shape: Shape,
    pub tokens: u64,
}

/// The most input tokens a request of `shape` can be billed, given calls
/// the provider already counted: the tightest bound any of them gives,
/// never more than the request's bytes.
pub(crate) fn bound(shape: &Shape, earlier: &[Counted]) -> u64 {
    let Some(rest) = shape.rest else {
        return shape.bytes;
    };
    earlier
        .iter()
        .filter(|c| c.shape.rest == Some(rest))
        .map(|c| {
            let k = shape
                .items
                .iter()
                .zip(&c.shape.items)
                .take_while(|(a, b)| a.0 == b.0)
                .count();
            let added: u64 = shape.items[k..].iter().map(|i| i.1).sum();
            c.tokens.saturating_add(added)
        })
        .fold(shape.bytes, u64::min)
}

/// A canonical, unambiguous encoding of `v` into `h`, without
/// `cache_control` (a breakpoint is no token, and moves between calls).
fn feed(v: &Value, h: &mut Sha256) {
    match v {
        Value::Null => h.update(b"n"),
        Value::Bool(b) => h.update(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            let s = n.to_string();
            h.update(b"#");
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        Value::String(s) => {
            h.update(b"s");
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        Value::Array(a) => {
            h.update(b"[");
            h.update((a.len() as u64).to_le_bytes());
            a.iter().for_each(|x| feed(x, h));
        }
        Value::Object(o) => {
            let kept: Vec<_> = o.iter().filter(|(k, _)| *k != "cache_control").collect();
            h.update(b"{");
            h.update((kept.len() as u64).to_le_bytes());
            for (k, x) in kept {
                h.update((k.len() as u64).to_le_bytes());
                h.update(k.as_bytes());
                feed(x, h);
            }
        }
    }
}

#[cfg(test)]
#[path = "input_bound_tests.rs"]
mod tests;
