use serde_json::{Value, json};

use super::*;

const KEY: &str = "sk-hostile4-REALKEY-0123456789abcdef";

fn redactor() -> Redactor {
    Redactor::new(&[("OPENAI_API_KEY".into(), KEY.into())])
}

/// One text delta event of `api` carrying `text`.
fn event(api: Api, text: &str) -> String {
    match api {
        Api::Chat => format!(
            "data: {}",
            json!({"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]})
        ),
        Api::Messages => format!(
            "event: content_block_delta\ndata: {}",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": text}})
        ),
        Api::Responses => format!(
            "event: response.output_text.delta\ndata: {}",
            json!({"type": "response.output_text.delta", "item_id": "m1",
                   "output_index": 0, "content_index": 0, "delta": text})
        ),
    }
}

/// The text an agent puts together from the events passed on.
fn text_of(api: Api, events: &[String]) -> String {
    events
        .iter()
        .filter_map(|e| {
            let data = e.lines().find_map(|l| l.strip_prefix("data: "))?;
            let v: Value = serde_json::from_str(data).ok()?;
            let t = match api {
                Api::Chat => v["choices"][0]["delta"]["content"].as_str(),
                Api::Messages => v["delta"]["text"].as_str(),
                Api::Responses => v["delta"].as_str(),
            };
            t.map(str::to_string)
        })
        .collect()
}

/// Hostile N10: the provider's text carries the key split between
/// events at every place (and in three pieces); what the agent puts
/// together never holds it, no text is lost, and every event goes out.
#[test]
fn a_key_split_between_events_never_reaches_the_agent() {
    let r = redactor();
    let text = format!("here is the key: {KEY} and more text after it");
    let end = "data: [DONE]".to_string();
    for api in [Api::Chat, Api::Messages, Api::Responses] {
        for a in 1..text.len() {
            for b in [a, (a + 7).min(text.len())] {
                let pieces = [&text[..a], &text[a..b], &text[b..]];
                let mut s = Splice::new(api);
                let mut out = vec![];
                for p in pieces {
                    out.extend(s.push(&r, &event(api, p)));
                }
                out.extend(s.push(&r, &end));
                out.extend(s.finish(&r));
                let got = text_of(api, &out);
                assert!(!got.contains(KEY), "{api:?} split at {a},{b}: {got}");
                assert_eq!(got, r.redact(&text), "{api:?} split at {a},{b}");
                assert_eq!(out.len(), 4, "{api:?}: every event once");
                assert_eq!(out.last().unwrap(), &end);
            }
        }
    }
}

/// Text that starts no key is not held back; text ending in a key's
/// start waits only until the next event, and a keep-alive does not
/// push it out early.
#[test]
fn only_the_start_of_a_key_waits() {
    let r = redactor();
    let mut s = Splice::new(Api::Messages);
    assert_eq!(s.push(&r, &event(Api::Messages, "hello world")).len(), 1);
    assert!(s.push(&r, &event(Api::Messages, "then sk-hos")).is_empty());
    let ping = "event: ping\ndata: {\"type\":\"ping\"}";
    assert_eq!(s.push(&r, ping), vec![ping.to_string()]);
    let out = s.push(&r, &event(Api::Messages, "tile4-REALKEY-0123456789abcdef!"));
    assert_eq!(out.len(), 2);
    assert_eq!(
        text_of(Api::Messages, &out),
        "then [REDACTED:OPENAI_API_KEY]!"
    );
    // Tool arguments split between chat chunks are one text too.
    let mut s = Splice::new(Api::Chat);
    let call = |args: &str| {
        format!(
            "data: {}",
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": args}}]}}]})
        )
    };
    let mut out = s.push(&r, &call("{\"cmd\": \"echo sk-hostile4-"));
    out.extend(s.push(&r, &call("REALKEY-0123456789abcdef\"}")));
    out.extend(s.finish(&r));
    let all = out.join("");
    assert!(!all.contains("REALKEY-0123"), "{all}");
}
