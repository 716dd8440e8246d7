//! Keys out of a stream whose text comes in pieces (hostile N10): a
//! provider that splits a key between two events had each event redacted
//! alone, and the agent put the key back together. Here a text delta
//! (assistant text, tool arguments, reasoning) is redacted together with
//! the one before it of the same text, and an event whose text ends in
//! the start of a key waits for the next event, which shows whether the
//! key goes on: the text moves between consecutive events of the same
//! text, every event still goes out once, in order, and the only delay is
//! one event, only when a text ends in what could start a key.

use serde_json::Value;

use super::Redactor;
use crate::llm::api::Api;

/// One text delta event, its text already redacted.
#[derive(Debug)]
struct Piece {
    /// The event's lines other than `data:`, in order.
    lines: Vec<String>,
    data: Value,
    /// Where the text is in `data`.
    pointer: String,
    /// Which text it continues: deltas of one key are one text.
    key: String,
    text: String,
}

impl Piece {
    fn render(mut self, r: &Redactor) -> String {
        if let Some(slot) = self.data.pointer_mut(&self.pointer) {
            *slot = Value::String(self.text);
        }
        let data = r.redact(&self.data.to_string()).into_owned();
        let mut out = String::new();
        for l in &self.lines {
            out.push_str(&r.redact(l));
            out.push('\n');
        }
        out.push_str("data: ");
        out.push_str(&data);
        out
    }
}

/// The relay's redaction across events, for one stream.
#[derive(Debug)]
pub(crate) struct Splice {
    api: Api,
    held: Option<Piece>,
}

impl Splice {
    pub fn new(api: Api) -> Splice {
        Splice { api, held: None }
    }

    /// Takes one event as it came (without its blank line); gives the
    /// events to pass on now, redacted, in order.
    pub fn push(&mut self, r: &Redactor, block: &str) -> Vec<String> {
        let mut out = vec![];
        let Some(mut piece) = delta(self.api, block) else {
            if !passes_held(self.api, block) {
                out.extend(self.finish(r));
            }
            out.push(r.redact(block).into_owned());
            return out;
        };
        match self.held.take() {
            Some(mut held) if held.key == piece.key => {
                let joined = r.redact(&(held.text + &piece.text)).into_owned();
                let cut = joined.len() - r.partial_tail(&joined);
                held.text = joined[..cut].to_string();
                piece.text = joined[cut..].to_string();
                out.push(held.render(r));
            }
            other => {
                out.extend(other.map(|h| h.render(r)));
                piece.text = r.redact(&piece.text).into_owned();
            }
        }
        if r.partial_tail(&piece.text) > 0 {
            self.held = Some(piece);
        } else {
            out.push(piece.render(r));
        }
        out
    }

    /// The event held back, if any: the stream ended or was cut.
    pub fn finish(&mut self, r: &Redactor) -> Option<String> {
        self.held.take().map(|h| h.render(r))
    }
}

/// An event with no text of its own that a held text may wait across
/// (a keep-alive).
fn passes_held(api: Api, block: &str) -> bool {
    let data: Vec<&str> = block.lines().filter(|l| l.starts_with("data:")).collect();
    data.is_empty() || (api == Api::Messages && block.contains("\"type\":\"ping\""))
}

/// The event's text delta: where it is and which text it continues. An
/// event with none, or more than one, is not a delta.
fn delta(api: Api, block: &str) -> Option<Piece> {
    let mut lines = vec![];
    let mut data = vec![];
    for l in block.lines() {
        match l.strip_prefix("data:") {
            Some(d) => data.push(d.strip_prefix(' ').unwrap_or(d)),
            None => lines.push(l.to_string()),
        }
    }
    let data: Value = serde_json::from_str(&data.join("\n")).ok()?;
    let (pointer, key) = match api {
        Api::Chat => chat_delta(&data)?,
        Api::Messages => {
            if data["type"] != "content_block_delta" {
                return None;
            }
            let field = match data["delta"]["type"].as_str()? {
                "text_delta" => "text",
                "input_json_delta" => "partial_json",
                "thinking_delta" => "thinking",
                _ => return None,
            };
            (
                format!("/delta/{field}"),
                format!("{}/{field}", data["index"]),
            )
        }
        Api::Responses => {
            let kind = data["type"].as_str()?;
            if !kind.ends_with(".delta") {
                return None;
            }
            let key = format!(
                "{kind}/{}/{}/{}",
                data["item_id"], data["output_index"], data["content_index"]
            );
            ("/delta".to_string(), key)
        }
    };
    let text = data.pointer(&pointer)?.as_str()?.to_string();
    Some(Piece {
        lines,
        data,
        pointer,
        key,
        text,
    })
}

/// A chat chunk's one text: content, reasoning, or one tool call's
/// arguments, of its one choice.
fn chat_delta(data: &Value) -> Option<(String, String)> {
    let choices = data["choices"].as_array()?;
    if choices.len() != 1 {
        return None;
    }
    let d = &choices[0]["delta"];
    // (pointer, which text, empty)
    let mut found = vec![];
    for field in ["content", "reasoning_content", "reasoning"] {
        if let Some(s) = d[field].as_str() {
            let pointer = format!("/choices/0/delta/{field}");
            found.push((pointer, field.to_string(), s.is_empty()));
        }
    }
    if let Some(calls) = d["tool_calls"].as_array() {
        for (i, c) in calls.iter().enumerate() {
            if let Some(s) = c["function"]["arguments"].as_str() {
                found.push((
                    format!("/choices/0/delta/tool_calls/{i}/function/arguments"),
                    format!("tool/{}", c["index"]),
                    s.is_empty(),
                ));
            }
        }
    }
    // The one text with something in it; with none, the first empty one
    // (an empty piece between two of a split key is still a piece).
    let full: Vec<_> = found.iter().filter(|f| !f.2).collect();
    let (pointer, field, _) = match full.len() {
        1 => full[0].clone(),
        0 => found.first()?.clone(),
        _ => return None,
    };
    Some((pointer, format!("{}/{field}", choices[0]["index"])))
}

#[cfg(test)]
#[path = "splice_tests.rs"]
mod tests;
