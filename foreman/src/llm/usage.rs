//! Usage from a provider's own shape: the one place every route (and
//! every streamed usage event) turns what a provider billed into a
//! [`ChatUsage`], cached tokens included (issues 26 and 27 item 4).
//!
//! - OpenAI chat completions: `prompt_tokens` (cached included) and
//!   `prompt_tokens_details.cached_tokens` (reads; OpenAI reports no
//!   writes); DeepSeek's `prompt_cache_hit_tokens` as reads too.
//! - OpenAI Responses: `input_tokens` (cached included) and
//!   `input_tokens_details.cached_tokens`.
//! - Anthropic Messages: `input_tokens` counts only the input after the
//!   last cache breakpoint; `cache_read_input_tokens` and
//!   `cache_creation_input_tokens` are added to it, so `prompt_tokens` is
//!   all the input the provider processed. llama-server's `/v1/messages`
//!   answers `{"cache_read_input_tokens": 1110, "input_tokens": 1}`:
//!   1,111 input tokens, not 1.

use saheeli_protocol::chat::ChatUsage;
use serde_json::Value;

use crate::config::ProviderKind;

fn n(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn nested(v: &Value, outer: &str, key: &str) -> u64 {
    v.get(outer).map_or(0, |o| n(o, key))
}

/// The usage object of a provider speaking `kind` (the `usage` of a
/// response, or of a streamed usage event). None when it is not one.
pub(crate) fn parse(kind: ProviderKind, u: &Value) -> Option<ChatUsage> {
    if !u.is_object() {
        return None;
    }
    let out = |input: u64, output: u64, read: u64, write: u64| ChatUsage {
        prompt_tokens: input,
        completion_tokens: output,
        total_tokens: input + output,
        cache_read_tokens: read.min(input),
        cache_write_tokens: write.min(input - read.min(input)),
    };
    if u.get("prompt_tokens").is_some() || u.get("completion_tokens").is_some() {
        // Chat completions, whatever the provider's kind.
        let read = nested(u, "prompt_tokens_details", "cached_tokens")
            .max(n(u, "prompt_cache_hit_tokens"));
        return Some(out(
            n(u, "prompt_tokens"),
            n(u, "completion_tokens"),
            read,
            0,
        ));
    }
    u.get("input_tokens")
        .or(u.get("cache_read_input_tokens"))
        .or(u.get("output_tokens"))?;
    let anthropic = match kind {
        ProviderKind::Anthropic => true,
        // Responses reports details (and a total); Messages never does.
        ProviderKind::Openai => {
            u.get("input_tokens_details").is_none() && u.get("total_tokens").is_none()
        }
    };
    if anthropic {
        let read = n(u, "cache_read_input_tokens");
        let write = n(u, "cache_creation_input_tokens");
        let input = n(u, "input_tokens") + read + write;
        Some(out(input, n(u, "output_tokens"), read, write))
    } else {
        let read = nested(u, "input_tokens_details", "cached_tokens");
        Some(out(n(u, "input_tokens"), n(u, "output_tokens"), read, 0))
    }
}

/// The usage of a whole response body (its `usage` field).
pub(crate) fn of_body(kind: ProviderKind, body: &Value) -> Option<ChatUsage> {
    parse(kind, body.get("usage")?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_providers_shape() {
        use ProviderKind::*;
        type Case = (ProviderKind, Value, (u64, u64, u64, u64));
        let cases: &[Case] = &[
            // kind, usage, (prompt, completion, read, write)
            (
                Openai,
                json!({"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
                       "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0}}),
                (2006, 300, 1920, 0),
            ),
            (
                Openai,
                json!({"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}),
                (12, 5, 0, 0),
            ),
            // DeepSeek's cache fields.
            (
                Openai,
                json!({"prompt_tokens": 100, "completion_tokens": 1,
                       "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36}),
                (100, 1, 64, 0),
            ),
            // OpenAI Responses.
            (
                Openai,
                json!({"input_tokens": 5000, "output_tokens": 20, "total_tokens": 5020,
                       "input_tokens_details": {"cached_tokens": 4864},
                       "output_tokens_details": {"reasoning_tokens": 0}}),
                (5000, 20, 4864, 0),
            ),
            // Anthropic: a write, then a read.
            (
                Anthropic,
                json!({"input_tokens": 21, "cache_creation_input_tokens": 188086,
                       "cache_read_input_tokens": 0, "output_tokens": 393}),
                (188_107, 393, 0, 188_086),
            ),
            (
                Anthropic,
                json!({"input_tokens": 50, "cache_creation_input_tokens": 0,
                       "cache_read_input_tokens": 100000, "output_tokens": 503}),
                (100_050, 503, 100_000, 0),
            ),
            // llama-server's /v1/messages (issue 27 item 4).
            (
                Anthropic,
                json!({"cache_read_input_tokens": 1110, "input_tokens": 1}),
                (1111, 0, 1110, 0),
            ),
            (
                Anthropic,
                json!({"input_tokens": 30, "output_tokens": 7}),
                (30, 7, 0, 0),
            ),
            // A stream's message_delta usage (output only).
            (Anthropic, json!({"output_tokens": 15}), (0, 15, 0, 0)),
        ];
        for (kind, u, (prompt, completion, read, write)) in cases {
            let got = parse(*kind, u).unwrap_or_else(|| panic!("{u}"));
            assert_eq!(
                (
                    got.prompt_tokens,
                    got.completion_tokens,
                    got.cache_read_tokens,
                    got.cache_write_tokens
                ),
                (*prompt, *completion, *read, *write),
                "{u}"
            );
            assert_eq!(got.total_tokens, prompt + completion);
        }
        assert!(parse(Openai, &json!({"foo": 1})).is_none());
        assert!(parse(Anthropic, &json!(3)).is_none());
        assert_eq!(
            of_body(Anthropic, &json!({"usage": {"input_tokens": 2}})).map(|u| u.prompt_tokens),
            Some(2)
        );
    }

    /// Issue 27 item 4: llama-server's `/v1/messages` reports the prompt
    /// it read from its cache as `cache_read_input_tokens` beside a tiny
    /// `input_tokens`; all of it is counted (recorded: the same request
    /// twice).
    #[test]
    fn llama_server_cached_prompt_is_counted_on_the_messages_route() {
        let body = crate::llm::recorded::answer("llama-server", "messages-cached.json");
        let u = &body["usage"];
        let read = u["cache_read_input_tokens"].as_u64().unwrap();
        let fresh = u["input_tokens"].as_u64().unwrap();
        assert!(read > 10 * fresh, "{u}");
        let got = of_body(ProviderKind::Anthropic, &body).unwrap();
        assert_eq!(got.prompt_tokens, read + fresh);
        assert_eq!(got.cache_read_tokens, read);
        assert_eq!(got.completion_tokens, u["output_tokens"].as_u64().unwrap());
    }
}
