//! A provider's prompt cache, as the fake LLM (and the bench's) bills it:
//! what a request read from and wrote to the cache, reported in each
//! provider's real usage shape (issue 26).
//!
//! Anthropic: the request renders as blocks (each tool, the system text,
//! each message's content blocks, in that order); a block carrying
//! `cache_control` is a breakpoint. A breakpoint reads the longest prefix
//! a previous request wrote that ends at it or within the 20 blocks
//! before it; every breakpoint writes its prefix; tokens up to the last
//! breakpoint not read are written (`cache_creation_input_tokens`), the
//! rest is `input_tokens`. OpenAI: the longest prefix (in whole
//! 128-token chunks, from 1,024 tokens) shared with an earlier request of
//! the same `prompt_cache_key` is `prompt_tokens_details.cached_tokens`.
//! A token is four bytes of the block's JSON, rounded up.
//! Shared with the bench through `#[path]`: no test-only dependencies.

#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use serde_json::{Value, json};

/// How many blocks before a breakpoint Anthropic looks back for a hit.
const LOOKBACK: usize = 20;

/// Tokens of a text as the fake counts them.
pub fn tokens(bytes: usize) -> u64 {
    bytes.div_ceil(4) as u64
}

/// What one request read and wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Billed {
    /// All input tokens.
    pub total: u64,
    pub read: u64,
    pub write: u64,
}

#[derive(Default)]
pub struct PromptCache {
    /// Prefix hashes written (Anthropic).
    written: HashSet<u64>,
    /// Earlier requests' prefixes by cache key (OpenAI): the request's
    /// text, so a common prefix can be measured.
    by_key: HashMap<String, Vec<String>>,
    /// Hashes of each request's prefix up to its last breakpoint, in order.
    pub prefixes: Vec<u64>,
}

/// A block without its `cache_control`, as bytes.
fn canonical(block: &Value) -> String {
    let mut b = block.clone();
    if let Some(o) = b.as_object_mut() {
        o.remove("cache_control");
    }
    b.to_string()
}

/// The blocks of a Messages request in render order, and which are breakpoints.
fn blocks(body: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut push = |b: &Value| out.push((canonical(b), b.get("cache_control").is_some()));
    for t in body["tools"].as_array().into_iter().flatten() {
        push(t);
    }
    match &body["system"] {
        Value::String(s) => push(&json!({"type": "text", "text": s})),
        Value::Array(a) => a.iter().for_each(&mut push),
        _ => {}
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or("");
        match &m["content"] {
            Value::String(s) => push(&json!({"role": role, "text": s})),
            Value::Array(a) => {
                for (i, b) in a.iter().enumerate() {
                    // The role is part of the first block's bytes.
                    let mut b = b.clone();
                    if i == 0 {
                        b["_role"] = json!(role);
                    }
                    push(&b);
                }
            }
            _ => {}
        }
    }
    out
}

impl PromptCache {
    /// Bills a Messages request; returns the usage object Anthropic sends.
    pub fn anthropic(&mut self, body: &Value, output: u64) -> (Billed, Value) {
        let blocks = blocks(body);
        let mut hashes = Vec::with_capacity(blocks.len());
        let mut sizes = Vec::with_capacity(blocks.len());
        let mut h = DefaultHasher::new();
        for (text, _) in &blocks {
            text.hash(&mut h);
            hashes.push(h.finish());
            sizes.push(tokens(text.len()));
        }
        let upto = |i: usize| sizes[..=i].iter().sum::<u64>();
        let total: u64 = sizes.iter().sum();
        let breaks: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].1).collect();
        let Some(&last) = breaks.last() else {
            let usage = json!({"input_tokens": total, "output_tokens": output,
                               "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
            return (
                Billed {
                    total,
                    ..Default::default()
                },
                usage,
            );
        };
        // The longest prefix written before that a breakpoint can see.
        let mut hit: Option<usize> = None;
        for &b in &breaks {
            for j in (b.saturating_sub(LOOKBACK)..=b).rev() {
                if self.written.contains(&hashes[j]) {
                    hit = Some(hit.map_or(j, |h: usize| h.max(j)));
                    break;
                }
            }
        }
        let read = hit.map_or(0, upto);
        let write = upto(last) - read;
        for &b in &breaks {
            self.written.insert(hashes[b]);
        }
        self.prefixes.push(hashes[last]);
        let input = total - read - write;
        let usage = json!({"input_tokens": input, "output_tokens": output,
                           "cache_creation_input_tokens": write, "cache_read_input_tokens": read});
        (Billed { total, read, write }, usage)
    }

    /// Bills a chat completion; returns the usage object OpenAI sends.
    pub fn openai(&mut self, body: &Value, output: u64) -> (Billed, Value) {
        // The prompt as rendered: tools, then each message.
        let mut text = body["tools"].to_string();
        for m in body["messages"].as_array().into_iter().flatten() {
            text.push_str(&m.to_string());
        }
        let total = tokens(text.len());
        let mut cached = 0;
        if let Some(key) = body["prompt_cache_key"].as_str() {
            let earlier = self.by_key.entry(key.to_string()).or_default();
            let common = earlier
                .iter()
                .map(|e| {
                    e.bytes()
                        .zip(text.bytes())
                        .take_while(|(a, b)| a == b)
                        .count()
                })
                .max()
                .unwrap_or(0);
            let t = common as u64 / 4;
            if t >= 1024 {
                cached = t / 128 * 128;
            }
            earlier.push(text);
        }
        let usage = json!({"prompt_tokens": total, "completion_tokens": output,
                           "total_tokens": total + output,
                           "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0}});
        (
            Billed {
                total,
                read: cached,
                write: 0,
            },
            usage,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_growing_conversation_reads_what_the_last_call_wrote() {
        let mut c = PromptCache::default();
        let big = "x".repeat(8000);
        let cc = json!({"type": "ephemeral"});
        let one = json!({"system": [{"type": "text", "text": big, "cache_control": cc}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": cc}]}]});
        let (b1, _) = c.anthropic(&one, 1);
        assert_eq!(b1.read, 0);
        assert_eq!(b1.write, b1.total);
        let two = json!({"system": [{"type": "text", "text": big, "cache_control": cc}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": cc}]},
                         {"role": "assistant", "content": [{"type": "text", "text": "b"}]},
                         {"role": "user", "content": [{"type": "text", "text": "c", "cache_control": cc}]}]});
        let (b2, u) = c.anthropic(&two, 1);
        assert_eq!(b2.read, b1.total);
        assert_eq!(u["cache_read_input_tokens"], b1.total);
        // Only the new turns are written: a few tokens against the
        // thousands read.
        assert!(b2.write > 0 && b2.write < b1.total / 10, "{b1:?} {b2:?}");
    }
}
