//! The per-token log probabilities a provider returns (issue 49: RL
//! trainers want them beside each turn), read from its answers as they
//! are on the wire and kept in the call's trajectory line (`record`),
//! capped at [`MAX`] tokens a call.
//!
//! Where they are: OpenAI chat completions, whole or streamed, in
//! `choices[].logprobs.content[]` (`{token, logprob, bytes,
//! top_logprobs}`); the Responses API in `output[].content[].logprobs[]`
//! of a whole answer and in `logprobs[]` of each
//! `response.output_text.delta` event. Anthropic returns none.

use serde_json::Value;

/// Most tokens' logprobs kept per call (a long answer's tail is cut).
pub(crate) const MAX: usize = 32 * 1024;

/// A chat choice's (or chunk's) `logprobs.content` entries, appended to
/// `out` up to [`MAX`]: the streamed answer put back together keeps them
/// in the whole answer's shape.
pub(crate) fn keep_chat(choice: &Value, out: &mut Vec<Value>) {
    let entries = choice
        .pointer("/logprobs/content")
        .and_then(Value::as_array);
    for e in entries.into_iter().flatten() {
        if out.len() >= MAX {
            return;
        }
        out.push(e.clone());
    }
}

/// The logprobs of a recorded answer: a whole body (JSON), or a stream's
/// events (`data:` lines), in order, at most [`MAX`]; and whether some
/// were cut.
pub(crate) fn of_answer(text: &str) -> (Vec<f64>, bool) {
    let mut out = Vec::new();
    let mut cut = false;
    match serde_json::from_str::<Value>(text) {
        Ok(v) => collect(&v, &mut out, &mut cut),
        Err(_) => {
            for line in text.lines() {
                let Some(data) = line.strip_prefix("data:") else {
                    continue;
                };
                if let Ok(v) = serde_json::from_str::<Value>(data.trim_start()) {
                    collect(&v, &mut out, &mut cut);
                }
            }
        }
    }
    (out, cut)
}

/// One body or event's logprobs: chat (`choices`), a whole Responses
/// answer (`output`), or a Responses text delta event.
fn collect(v: &Value, out: &mut Vec<f64>, cut: &mut bool) {
    let mut push = |entries: Option<&Vec<Value>>| {
        for e in entries.into_iter().flatten() {
            if let Some(lp) = e.get("logprob").and_then(Value::as_f64) {
                if out.len() >= MAX {
                    *cut = true;
                    return;
                }
                out.push(lp);
            }
        }
    };
    for c in v
        .get("choices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        push(c.pointer("/logprobs/content").and_then(Value::as_array));
    }
    for item in v
        .get("output")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for part in item
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            push(part.get("logprobs").and_then(Value::as_array));
        }
    }
    if v.get("type").and_then(Value::as_str) == Some("response.output_text.delta") {
        push(v.get("logprobs").and_then(Value::as_array));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(token: &str, logprob: f64) -> Value {
        json!({"token": token, "logprob": logprob, "bytes": token.as_bytes(), "top_logprobs": []})
    }

    #[test]
    fn every_wire_shape_gives_its_tokens_logprobs_in_order() {
        let chat = json!({"object": "chat.completion", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": "Hi there"},
            "logprobs": {"content": [entry("Hi", -0.25), entry(" there", -1.5)]}}]});
        assert_eq!(of_answer(&chat.to_string()), (vec![-0.25, -1.5], false));
        let chunks = [
            json!({"choices": [{"index": 0, "delta": {"content": "Hi"},
                "logprobs": {"content": [entry("Hi", -0.25)]}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": " there"},
                "logprobs": {"content": [entry(" there", -1.5)]}}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
        ];
        let stream: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
        assert_eq!(
            of_answer(&(stream + "data: [DONE]\n\n")),
            (vec![-0.25, -1.5], false)
        );
        let responses = json!({"object": "response", "output": [{"type": "message",
            "content": [{"type": "output_text", "text": "Hi",
                "logprobs": [entry("Hi", -0.5)]}]}]});
        assert_eq!(of_answer(&responses.to_string()), (vec![-0.5], false));
        let delta = json!({"type": "response.output_text.delta", "delta": "Hi",
            "logprobs": [entry("Hi", -0.5)]});
        // The closing event repeats the whole answer: not counted twice.
        let done = json!({"type": "response.completed", "response": responses});
        let events = format!("event: x\ndata: {delta}\n\ndata: {done}\n\n");
        assert_eq!(of_answer(&events), (vec![-0.5], false));
        // None returned: none kept (Anthropic, or not asked).
        assert_eq!(of_answer(r#"{"content": []}"#), (vec![], false));
    }

    #[test]
    fn a_long_answer_keeps_the_first_max_and_says_it_was_cut() {
        let many: Vec<Value> = (0..MAX + 5).map(|_| entry("a", -0.1)).collect();
        let chat = json!({"choices": [{"logprobs": {"content": many}}]});
        let (kept, cut) = of_answer(&chat.to_string());
        assert_eq!((kept.len(), cut), (MAX, true));
        let mut whole = Vec::new();
        keep_chat(&chat["choices"][0], &mut whole);
        assert_eq!(whole.len(), MAX);
    }
}
