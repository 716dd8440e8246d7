//! What the gateway saw of the LLM calls (a third-party agent's, and the
//! servo's own), for `saheeli task trajectory`: one JSON line per call in
//! `<state_dir>/trajectories/<task_id>.jsonl` on the host (never in the
//! container): the request as forwarded (the task's model, no key), the
//! answer (whole, or the stream's events as relayed), its usage, and the
//! per-token `logprobs` the answer carried (`logprobs`, read as a stream
//! passes, before the answer's cap). Each part is capped, the file too, and every line is
//! redacted for the keys.

use std::io::Write;
use std::path::PathBuf;

use serde_json::{Value, json};
use tracing::warn;

use super::{GatewayState, Redactor};

/// Longest request or answer kept per call; the rest is cut with a note.
pub(crate) const MAX_PART: usize = 256 * 1024;
/// A task's file stops growing here.
const MAX_FILE: u64 = 64 * 1024 * 1024;

/// One call as the gateway saw it.
#[derive(Debug, Default)]
pub(crate) struct Call {
    pub call_id: String,
    pub api: &'static str,
    pub at_ms: i64,
    pub request: Vec<u8>,
    /// A whole answer's body, or the stream's events.
    pub response: String,
    pub streamed: bool,
    pub usage: Option<(u64, u64)>,
    /// Why the call ended early (cut, budget), if it did.
    pub ended: Option<String>,
    /// Microseconds the gateway took to read and vet the request (its
    /// JSON, fields, content parts and caps: `native::vet`); what the
    /// bench reports as the vetting's cost per call.
    pub vet_us: u64,
    /// The per-token logprobs read from the answer as it passed (a
    /// stream's, before `response` is cut), and whether some were cut.
    pub logprobs: (Vec<f64>, bool),
}

impl Call {
    /// Reads the logprobs of a piece of the answer passed on (a stream's
    /// event, or a whole body), up to [`super::logprobs::MAX`].
    pub(crate) fn saw_logprobs(&mut self, text: &str) {
        if !text.contains("\"logprob\"") {
            return;
        }
        let (more, cut) = super::logprobs::of_answer(text);
        let (kept, was_cut) = &mut self.logprobs;
        let room = super::logprobs::MAX.saturating_sub(kept.len());
        *was_cut |= cut || more.len() > room;
        kept.extend(more.into_iter().take(room));
    }
}

/// A part as JSON when it parses and fits, else its capped text.
fn part(text: &str) -> Value {
    if text.len() <= MAX_PART
        && let Ok(v) = serde_json::from_str::<Value>(text)
    {
        return v;
    }
    let mut end = text.len().min(MAX_PART);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end < text.len() {
        json!({"truncated": true, "bytes": text.len(), "head": &text[..end]})
    } else {
        Value::String(text.to_string())
    }
}

/// The line written for a call, redacted.
pub(crate) fn line(call: &Call, redactor: &Redactor) -> String {
    let mut v = fields(call);
    v["request"] = part(&String::from_utf8_lossy(&call.request));
    redactor.redact(&v.to_string()).into_owned()
}

/// [`line`] for a request the gateway encoded itself (`request`: compact
/// JSON, no newline), put in the line as it is rather than decoded and
/// encoded again: a long conversation's request is most of the line.
fn line_of_encoded(call: &Call, request: &[u8], redactor: &Redactor) -> String {
    let raw = std::str::from_utf8(request)
        .ok()
        .filter(|r| r.len() <= MAX_PART && !r.contains('\n'));
    let Some(raw) = raw else {
        return line(call, redactor);
    };
    let rest = fields(call).to_string();
    // `rest` is a non-empty object: the request goes before its brace.
    let mut text = String::with_capacity(rest.len() + raw.len() + 16);
    text.push_str(&rest[..rest.len() - 1]);
    text.push_str(",\"request\":");
    text.push_str(raw);
    text.push('}');
    redactor.redact(&text).into_owned()
}

/// A line's fields but the request.
fn fields(call: &Call) -> Value {
    let response = if call.streamed {
        let mut end = call.response.len().min(MAX_PART);
        while !call.response.is_char_boundary(end) {
            end -= 1;
        }
        Value::String(call.response[..end].to_string())
    } else {
        part(&call.response)
    };
    let mut v = json!({
        "call_id": call.call_id,
        "api": call.api,
        "at_ms": call.at_ms,
        "streamed": call.streamed,
        "response": response,
        "usage": call.usage.map(|(i, o)| json!({"input_tokens": i, "output_tokens": o})),
        "ended": call.ended,
        "vet_us": call.vet_us,
    });
    // Beside the answer, whose part may be cut: what a trainer reads.
    let (logprobs, cut) = if call.logprobs.0.is_empty() {
        super::logprobs::of_answer(&call.response)
    } else {
        call.logprobs.clone()
    };
    if !logprobs.is_empty() {
        v["logprobs"] = json!(logprobs);
        if cut {
            v["logprobs_cut"] = json!(true);
        }
    }
    v
}

/// The file of task `task_id` under `dir`.
pub(crate) fn path(dir: &std::path::Path, task_id: &str) -> PathBuf {
    dir.join(format!("{task_id}.jsonl"))
}

/// Appends a call's line (from a blocking thread). Failures are logged:
/// the record is for show, never a reason to fail a call.
pub(crate) fn append(dir: PathBuf, task_id: String, text: String) {
    // The full LLM traffic of a task: this user's only (HOSTILE.md 57).
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let write = || -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        let p = path(&dir, &task_id);
        if std::fs::metadata(&p).is_ok_and(|m| m.len() > MAX_FILE) {
            return Ok(());
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&p)?;
        writeln!(f, "{text}")
    };
    if let Err(e) = write() {
        warn!(task_id, dir = %dir.display(), error = %e, "trajectory line not written");
    }
}

/// A typed call's request as the gateway built it (chat-shaped, whatever
/// the provider): its bytes when they were encoded already, or the
/// request, encoded when the line is written.
pub(crate) enum Request {
    Bytes(Vec<u8>),
    Typed(saheeli_protocol::chat::ChatRequest),
}

/// A typed call's line, to be written off the answer's path
/// ([`Line::write`], on a blocking thread).
pub(crate) struct Line {
    call: Call,
    request: Request,
    dir: PathBuf,
    task: String,
    redactor: Redactor,
}

impl Line {
    /// Encodes, redacts and appends the line: a long conversation's
    /// request is large, and the servo waits for its answer meanwhile.
    pub(crate) fn write(self) {
        let Line {
            call,
            request,
            dir,
            task,
            redactor,
        } = self;
        let request = match request {
            Request::Bytes(b) => b,
            Request::Typed(r) => serde_json::to_vec(&r).unwrap_or_default(),
        };
        append(dir, task, line_of_encoded(&call, &request, &redactor));
    }
}

/// Reads back the answer of one of the servo's (or any) non-streamed
/// chat calls as it leaves for the container (returned unchanged), and
/// the call's line to write.
pub(crate) async fn chat_call(
    gw: &GatewayState,
    call_id: String,
    request: Request,
    response: axum::response::Response,
    usage: Option<(u64, u64)>,
) -> (axum::response::Response, Option<Line>) {
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024 * 1024).await else {
        let empty = axum::response::Response::from_parts(parts, axum::body::Body::empty());
        return (empty, None);
    };
    let ended = (!parts.status.is_success()).then(|| format!("HTTP {}", parts.status.as_u16()));
    let line = Line {
        call: Call {
            call_id,
            api: "chat",
            at_ms: crate::store::now_ms(),
            request: Vec::new(),
            response: String::from_utf8_lossy(&bytes).into_owned(),
            streamed: false,
            usage,
            ended,
            // The servo's own request is typed, not vetted by parts.
            vet_us: 0,
            // Read from the whole answer when the line is written.
            logprobs: Default::default(),
        },
        request,
        dir: gw.upstream.trajectories.clone(),
        task: gw.task_id.to_string(),
        redactor: gw.upstream.redactor.clone(),
    };
    let response = axum::response::Response::from_parts(parts, axum::body::Body::from(bytes));
    (response, Some(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_kept_as_json_capped_and_redacted() {
        let r = Redactor::new(&[("OPENAI_API_KEY".into(), "sk-secret-123456".into())]);
        let call = Call {
            call_id: "c1".into(),
            api: "chat",
            request: br#"{"model": "m", "messages": []}"#.to_vec(),
            response: "data: {\"x\": \"sk-secret-123456\"}\n\n".into(),
            streamed: true,
            usage: Some((3, 4)),
            ..Call::default()
        };
        let l = line(&call, &r);
        assert!(!l.contains("sk-secret-123456"), "{l}");
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["request"]["model"], "m");
        assert_eq!(v["usage"]["output_tokens"], 4);
        // A request the gateway encoded goes in as it is, the same line.
        let typed = Call {
            streamed: false,
            response: r#"{"id": "x"}"#.into(),
            ..call
        };
        let sent = br#"{"model":"m","messages":[{"role":"user","content":"sk-secret-123456"}]}"#;
        let fast = line_of_encoded(&typed, sent, &r);
        assert!(!fast.contains("sk-secret-123456"), "{fast}");
        let whole = line(
            &Call {
                request: sent.to_vec(),
                ..typed
            },
            &r,
        );
        let (a, b): (Value, Value) = (
            serde_json::from_str(&fast).unwrap(),
            serde_json::from_str(&whole).unwrap(),
        );
        assert_eq!(a, b);
        assert!(!fast.contains('\n'));
        // A stream's logprobs are read as it passes, also past the cap
        // on the answer kept.
        let mut streamed = Call {
            streamed: true,
            ..Call::default()
        };
        let event = |lp: f64| {
            format!(
                "data: {}\n\n",
                serde_json::json!({"choices": [{"index": 0,
                "delta": {"content": "x".repeat(MAX_PART / 2)},
                "logprobs": {"content": [{"token": "x", "logprob": lp}]}}]})
            )
        };
        for lp in [-0.5, -1.0, -2.0] {
            let e = event(lp);
            streamed.saw_logprobs(&e);
            let room = MAX_PART.saturating_sub(streamed.response.len());
            streamed.response.push_str(&e[..e.len().min(room)]);
        }
        let v: Value = serde_json::from_str(&line(&streamed, &r)).unwrap();
        assert_eq!(v["logprobs"], serde_json::json!([-0.5, -1.0, -2.0]));
        let big = "x".repeat(MAX_PART + 10);
        assert_eq!(part(&big)["truncated"], true);
        assert_eq!(part(&big)["bytes"], MAX_PART + 10);
    }
}
