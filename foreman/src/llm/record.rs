//! What the gateway saw of the LLM calls (a third-party agent's, and the
//! servo's own), for `saheeli task trajectory`: one JSON line per call in
//! `<state_dir>/trajectories/<task_id>.jsonl` on the host (never in the
//! container): the request as forwarded (the task's model, no key), the
//! answer (whole, or the stream's events as relayed), its usage. Each part
//! is capped, the file too, and every line is redacted for the keys.

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
    let response = if call.streamed {
        let mut end = call.response.len().min(MAX_PART);
        while !call.response.is_char_boundary(end) {
            end -= 1;
        }
        Value::String(call.response[..end].to_string())
    } else {
        part(&call.response)
    };
    let v = json!({
        "call_id": call.call_id,
        "api": call.api,
        "at_ms": call.at_ms,
        "streamed": call.streamed,
        "request": part(&String::from_utf8_lossy(&call.request)),
        "response": response,
        "usage": call.usage.map(|(i, o)| json!({"input_tokens": i, "output_tokens": o})),
        "ended": call.ended,
        "vet_us": call.vet_us,
    });
    redactor.redact(&v.to_string()).into_owned()
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

/// Records one of the servo's (or any) non-streamed chat calls, given
/// the request as the gateway built it (chat-shaped, whatever the
/// provider) and the answer as it leaves for the container
/// (read back, and returned unchanged).
pub(crate) async fn chat_call(
    gw: &GatewayState,
    call_id: String,
    request: saheeli_protocol::chat::ChatRequest,
    response: axum::response::Response,
    usage: Option<(u64, u64)>,
) -> axum::response::Response {
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024 * 1024).await else {
        return axum::response::Response::from_parts(parts, axum::body::Body::empty());
    };
    let at_ms = crate::store::now_ms();
    let ended = (!parts.status.is_success()).then(|| format!("HTTP {}", parts.status.as_u16()));
    let (dir, task) = (gw.upstream.trajectories.clone(), gw.task_id.to_string());
    let redactor = gw.upstream.redactor.clone();
    let answer = bytes.clone();
    // Parsed, redacted and written off the call's path: a long
    // conversation's request is large, and the servo waits for the answer.
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn_blocking(move || {
            let call = Call {
                call_id,
                api: "chat",
                at_ms,
                request: serde_json::to_vec(&request).unwrap_or_default(),
                response: String::from_utf8_lossy(&answer).into_owned(),
                streamed: false,
                usage,
                ended,
                // The servo's own request is typed, not vetted by parts.
                vet_us: 0,
            };
            append(dir, task, line(&call, &redactor));
        });
    }
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
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
        let big = "x".repeat(MAX_PART + 10);
        assert_eq!(part(&big)["truncated"], true);
        assert_eq!(part(&big)["bytes"], MAX_PART + 10);
    }
}
