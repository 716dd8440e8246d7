//! A streamed answer put back together (issue 29): the built-in loop's
//! calls ask the provider for a stream so that their text can be shown as
//! it arrives (`live`), and each event is read into the whole body the
//! provider would have sent unstreamed, in its own shape, usage included.
//! `handler::answer` then reads that body exactly as it reads a whole
//! answer: the servo, the meter and the ledger see no difference.

use axum::body::Bytes;
use futures_util::StreamExt;
use serde_json::{Map, Value, json};

use super::live::{Speaker, Tell};
use crate::config::ProviderKind;
use crate::llm::GatewayState;
use crate::llm::sse::{MAX_EVENT, boundary};
use crate::text::error_chain;

/// Asks for the answer streamed, in the provider's own words (OpenAI
/// sends the usage in a last chunk only when asked).
pub(crate) fn ask_streamed(body: &mut Value, kind: ProviderKind) {
    body["stream"] = json!(true);
    if kind == ProviderKind::Openai {
        body["stream_options"] = json!({"include_usage": true});
    }
}

/// `plain`, a JSON object with no `stream` field as serde_json writes it,
/// asking for a stream as [`ask_streamed`] does: the fields go before its
/// closing brace, and nothing else of it is encoded again.
pub(crate) fn streamed(plain: &[u8], kind: ProviderKind) -> Vec<u8> {
    let suffix: &[u8] = match kind {
        ProviderKind::Openai => br#","stream":true,"stream_options":{"include_usage":true}}"#,
        ProviderKind::Anthropic => br#","stream":true}"#,
    };
    debug_assert!(plain.len() > 2 && plain.ends_with(b"}"));
    let mut out = Vec::with_capacity(plain.len() + suffix.len());
    out.extend_from_slice(&plain[..plain.len() - 1]);
    out.extend_from_slice(suffix);
    out
}

/// Reads a streamed answer to its end, telling the task's followers what
/// the model writes as it comes: the whole body, or why the stream failed
/// (cut, ended early, an error event), which is worth another try.
pub(crate) async fn read(gw: &GatewayState, resp: reqwest::Response) -> Result<Bytes, String> {
    let mut live = Speaker::new(&gw.live, &gw.upstream.redactor);
    let mut a = Assembler::new(gw.route.provider.kind);
    let mut chunks = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut ended = false;
    while !a.done {
        while let Some((len, sep)) = boundary(&buf) {
            let block: Vec<u8> = buf.drain(..len + sep).take(len).collect();
            a.event(&String::from_utf8_lossy(&block), &mut live);
            if a.done {
                break;
            }
        }
        if a.done || ended {
            break;
        }
        // What this chunk said goes out now, not at the end of the call.
        live.flush();
        if buf.len() > MAX_EVENT {
            return Err(format!("sent an event longer than {MAX_EVENT} bytes"));
        }
        match chunks.next().await {
            Some(Ok(c)) => buf.extend_from_slice(&c),
            Some(Err(e)) => {
                live.note("the answer was cut off; the call is tried again");
                return Err(format!(
                    "response cut off: {}",
                    error_chain(&e.without_url())
                ));
            }
            // A last event without its blank line is still read.
            None => {
                ended = true;
                buf.extend_from_slice(b"\n\n");
            }
        }
    }
    live.finish();
    if let Some(why) = a.failed.take() {
        live.note("the provider ended the answer with an error; the call is tried again");
        return Err(format!("ended its stream with an error: {why}"));
    }
    // Some servers end without `[DONE]`: a stop reason is enough.
    if !a.done && a.finish.is_none() {
        live.note("the answer ended early; the call is tried again");
        return Err("ended its stream before its last event".into());
    }
    Ok(serde_json::to_vec(&a.body())
        .expect("bodies serialize")
        .into())
}

/// One streamed answer being put back together.
#[derive(Default)]
pub(crate) struct Assembler {
    kind: Option<ProviderKind>,
    /// The body so far: the message (Anthropic) or the completion (OpenAI)
    /// without its content.
    head: Map<String, Value>,
    text: String,
    /// Tool calls: (id, name, arguments as they came).
    calls: Vec<(String, String, String)>,
    /// Anthropic: what each content block index is (a tool call's number,
    /// or None for text and others).
    blocks: Vec<Option<usize>>,
    finish: Option<String>,
    usage: Map<String, Value>,
    /// OpenAI: the chunks' `logprobs.content` entries, in order.
    logprobs: Vec<Value>,
    /// The stream's last event came.
    pub done: bool,
    /// The provider ended the stream with an error: its message.
    pub failed: Option<String>,
}

impl Assembler {
    pub fn new(kind: ProviderKind) -> Assembler {
        Assembler {
            kind: Some(kind),
            ..Assembler::default()
        }
    }

    /// Reads one event block (its `data:` lines), telling `live` what the
    /// model wrote or started calling.
    pub fn event(&mut self, block: &str, live: &mut impl Tell) {
        let data: Vec<&str> = block
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        let data = data.join("\n");
        if data.trim() == "[DONE]" {
            self.done = true;
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(&data) else {
            return;
        };
        match self.kind {
            Some(ProviderKind::Anthropic) => self.anthropic(v, live),
            _ => self.openai(v, live),
        }
    }

    /// Text the model wrote: kept, and told when there is any.
    fn said(&mut self, t: &str, live: &mut impl Tell) {
        if !t.is_empty() {
            self.text.push_str(t);
            live.text(t);
        }
    }

    fn openai(&mut self, v: Value, live: &mut impl Tell) {
        if let Some(e) = v.get("error") {
            self.failed = Some(error_message(e));
            self.done = true;
            return;
        }
        for key in ["id", "model", "created", "system_fingerprint"] {
            if let Some(x) = v.get(key) {
                self.head.insert(key.into(), x.clone());
            }
        }
        if let Some(u) = v.get("usage").and_then(Value::as_object) {
            self.usage = u.clone();
        }
        let Some(choice) = v.pointer("/choices/0") else {
            return;
        };
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(r.to_string());
        }
        super::logprobs::keep_chat(choice, &mut self.logprobs);
        let Some(delta) = choice.get("delta") else {
            return;
        };
        if let Some(t) = delta.get("content").and_then(Value::as_str) {
            self.said(t, live);
        }
        for c in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let i = c.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            while self.calls.len() <= i {
                self.calls.push(Default::default());
            }
            let call = &mut self.calls[i];
            if let Some(id) = c.get("id").and_then(Value::as_str) {
                call.0 = id.to_string();
            }
            if let Some(name) = c.pointer("/function/name").and_then(Value::as_str) {
                call.1.push_str(name);
                live.tool(name);
            }
            if let Some(a) = c.pointer("/function/arguments").and_then(Value::as_str) {
                call.2.push_str(a);
            }
        }
    }

    fn anthropic(&mut self, v: Value, live: &mut impl Tell) {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "message_start" => {
                if let Some(m) = v.get("message").and_then(Value::as_object) {
                    for (k, x) in m {
                        match k.as_str() {
                            "usage" => self.usage = x.as_object().cloned().unwrap_or_default(),
                            "content" => {}
                            _ => {
                                self.head.insert(k.clone(), x.clone());
                            }
                        }
                    }
                }
            }
            "content_block_start" => {
                let i = v.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                while self.blocks.len() <= i {
                    self.blocks.push(None);
                }
                let b = v.get("content_block").cloned().unwrap_or_default();
                match b.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let id = b.get("id").and_then(Value::as_str).unwrap_or("");
                        let name = b.get("name").and_then(Value::as_str).unwrap_or("");
                        live.tool(name);
                        self.blocks[i] = Some(self.calls.len());
                        self.calls
                            .push((id.to_string(), name.to_string(), String::new()));
                    }
                    Some("text") => {
                        if let Some(t) = b.get("text").and_then(Value::as_str) {
                            self.said(t, live);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let i = v.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                let d = v.get("delta").cloned().unwrap_or_default();
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let t = d.get("text").and_then(Value::as_str).unwrap_or("");
                        self.said(t, live);
                    }
                    Some("input_json_delta") => {
                        let p = d.get("partial_json").and_then(Value::as_str).unwrap_or("");
                        if let Some(Some(c)) = self.blocks.get(i) {
                            self.calls[*c].2.push_str(p);
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.finish = Some(r.to_string());
                }
                // Later counts win (output grows; some servers send input here).
                if let Some(u) = v.get("usage").and_then(Value::as_object) {
                    for (k, x) in u {
                        if !x.is_null() {
                            self.usage.insert(k.clone(), x.clone());
                        }
                    }
                }
            }
            "message_stop" => self.done = true,
            "error" => {
                self.failed = Some(error_message(v.get("error").unwrap_or(&Value::Null)));
                self.done = true;
            }
            _ => {}
        }
    }

    /// The whole body, as the provider would have sent it unstreamed.
    pub fn body(self) -> Value {
        let usage = (!self.usage.is_empty()).then_some(Value::Object(self.usage));
        match self.kind {
            Some(ProviderKind::Anthropic) => {
                let mut content = Vec::new();
                if !self.text.is_empty() {
                    content.push(json!({"type": "text", "text": self.text}));
                }
                for (id, name, args) in self.calls {
                    let input = if args.trim().is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str::<Value>(&args)
                            .unwrap_or_else(|_| json!({ "_raw": args }))
                    };
                    content
                        .push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
                }
                let mut m = self.head;
                m.insert("content".into(), Value::Array(content));
                m.insert("stop_reason".into(), json!(self.finish));
                m.insert("usage".into(), usage.unwrap_or(Value::Null));
                Value::Object(m)
            }
            _ => {
                let calls: Vec<Value> = self
                    .calls
                    .into_iter()
                    .map(|(id, name, args)| {
                        json!({"id": id, "type": "function",
                               "function": {"name": name, "arguments": args}})
                    })
                    .collect();
                let mut message = json!({
                    "role": "assistant",
                    "content": (!self.text.is_empty()).then_some(self.text),
                });
                if !calls.is_empty() {
                    message["tool_calls"] = Value::Array(calls);
                }
                let mut choice =
                    json!({"index": 0, "message": message, "finish_reason": self.finish});
                if !self.logprobs.is_empty() {
                    choice["logprobs"] = json!({"content": self.logprobs});
                }
                let mut m = self.head;
                m.insert("object".into(), json!("chat.completion"));
                m.insert("choices".into(), json!([choice]));
                if let Some(u) = usage {
                    m.insert("usage".into(), u);
                }
                Value::Object(m)
            }
        }
    }
}

/// What an agent's stream (`stream::relay`) says as it passes, told to
/// the followers; the stream itself is passed on untouched.
pub(crate) struct Listener {
    api: crate::llm::api::Api,
    a: Assembler,
}

impl Listener {
    pub fn new(api: crate::llm::api::Api) -> Listener {
        use crate::llm::api::Api;
        let kind = match api {
            Api::Messages => ProviderKind::Anthropic,
            Api::Chat | Api::Responses => ProviderKind::Openai,
        };
        Listener {
            api,
            a: Assembler::new(kind),
        }
    }

    pub fn event(&mut self, block: &str, live: &mut impl Tell) {
        if self.api != crate::llm::api::Api::Responses {
            // Only what it tells is wanted: the text is not kept.
            self.a.event(block, live);
            self.a.text.clear();
            return;
        }
        let Some(v) = block
            .lines()
            .find_map(|l| l.strip_prefix("data:"))
            .and_then(|d| serde_json::from_str::<Value>(d.trim()).ok())
        else {
            return;
        };
        match v.get("type").and_then(Value::as_str) {
            Some("response.output_text.delta") => {
                if let Some(t) = v.get("delta").and_then(Value::as_str) {
                    live.text(t);
                }
            }
            Some("response.output_item.added") => {
                if let Some(name) = v
                    .pointer("/item/name")
                    .and_then(Value::as_str)
                    .filter(|_| v.pointer("/item/type").is_some_and(|t| t != "message"))
                {
                    live.tool(name);
                }
            }
            _ => {}
        }
    }
}

fn error_message(e: &Value) -> String {
    e.get("message")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Heard(Vec<String>);

    impl Tell for Heard {
        fn text(&mut self, piece: &str) {
            self.0.push(piece.to_string());
        }
        fn tool(&mut self, name: &str) {
            self.0.push(format!("tool {name}"));
        }
    }

    fn feed(kind: ProviderKind, events: &[Value]) -> (Value, Vec<String>) {
        let mut a = Assembler::new(kind);
        let mut heard = Heard::default();
        for e in events {
            a.event(&format!("data: {e}"), &mut heard);
        }
        a.event("data: [DONE]", &mut heard);
        assert!(a.done && a.failed.is_none());
        (a.body(), heard.0)
    }

    #[test]
    fn openai_chunks_make_the_whole_completion() {
        let (body, heard) = feed(
            ProviderKind::Openai,
            &[
                json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let "}}]}),
                json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "me look."}}]}),
                json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "execute_shell", "arguments": "{\"comm"}}]}}]}),
                json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "and\": \"ls\"}"}}]}, "finish_reason": "tool_calls"}]}),
                json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}}),
            ],
        );
        assert_eq!(heard, ["Let ", "me look.", "tool execute_shell"]);
        let r: saheeli_protocol::chat::ChatResponse = serde_json::from_value(body).unwrap();
        let m = &r.choices[0].message;
        assert_eq!(m.content.as_deref(), Some("Let me look."));
        assert_eq!(m.tool_calls[0].function.arguments, r#"{"command": "ls"}"#);
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.usage.unwrap().total_tokens, 14);
    }

    #[test]
    fn anthropic_events_make_the_whole_message() {
        let (body, heard) = feed(
            ProviderKind::Anthropic,
            &[
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [], "usage": {"input_tokens": 30, "cache_read_input_tokens": 5, "output_tokens": 1}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Checking."}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "execute_shell", "input": {}}}),
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"command\":"}}),
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": " \"ls\"}"}}),
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
                json!({"type": "message_stop"}),
            ],
        );
        assert_eq!(heard, ["Checking.", "tool execute_shell"]);
        let r = crate::llm::anthropic::response(&body).unwrap();
        let m = &r.choices[0].message;
        assert_eq!(m.content.as_deref(), Some("Checking."));
        assert_eq!(m.tool_calls[0].function.arguments, r#"{"command":"ls"}"#);
        let u = crate::llm::usage::of_body(ProviderKind::Anthropic, &body).unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cache_read_tokens),
            (35, 9, 5)
        );
    }

    #[test]
    fn an_error_event_fails_the_stream() {
        let mut a = Assembler::new(ProviderKind::Anthropic);
        a.event(
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}",
            &mut Heard::default(),
        );
        assert_eq!(a.failed.as_deref(), Some("Overloaded"));
    }
}
