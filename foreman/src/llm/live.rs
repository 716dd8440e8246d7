//! Watching the model think (issue 29): what a call's answer says as it
//! streams in, published to the task's live followers (`GET
//! /saheeli/v1/live`, newline-delimited `protocol::live::LiveLine`s).
//!
//! Live only: a follower that is not there misses it, nothing is written
//! to the database, and the servo prints what it follows to its container
//! log, never to its audit file (which keeps each turn's text once, in
//! `llm_call.text`). Every piece is redacted with the gateway's redactor;
//! a piece's last characters wait for the next one, so a key split
//! between two pieces is still caught.

use std::sync::Arc;
use std::time::Duration;

use crate::llm::Redactor;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use saheeli_protocol::live::LiveLine;
use tokio::sync::broadcast;

/// Lines a slow follower may fall behind before it misses some.
const CAPACITY: usize = 512;

/// How long one follow lasts; the follower asks again (so a gateway that
/// stops is never held open by one).
const FOLLOW: Duration = Duration::from_secs(30);

/// One task's live channel.
#[derive(Debug)]
pub(crate) struct LiveBus {
    tx: broadcast::Sender<Arc<str>>,
    /// Set when the gateway stops: its follows end (a server stopping
    /// waits for its open requests).
    closed: tokio_util::sync::CancellationToken,
}

impl Default for LiveBus {
    fn default() -> Self {
        LiveBus {
            tx: broadcast::channel(CAPACITY).0,
            closed: Default::default(),
        }
    }
}

impl LiveBus {
    pub fn close(&self) {
        self.closed.cancel();
    }

    fn publish(&self, line: &LiveLine) {
        let text = serde_json::to_string(line).expect("live lines serialize");
        // Nobody following is not an error: live only.
        let _ = self.tx.send(text.into());
    }
}

/// Who hears what the model writes as it comes (`Speaker`; the tests'
/// listeners).
pub(crate) trait Tell {
    fn text(&mut self, piece: &str);
    fn tool(&mut self, name: &str);
}

/// One answer's text on its way to the followers: pieces gathered and
/// redacted, sent at each `flush`.
pub(crate) struct Speaker<'a> {
    live: &'a LiveBus,
    redactor: &'a Redactor,
    pending: String,
}

impl<'a> Speaker<'a> {
    pub fn new(live: &'a LiveBus, redactor: &'a Redactor) -> Speaker<'a> {
        Speaker {
            live,
            redactor,
            pending: String::new(),
        }
    }

    /// A note of the gateway's own (a stream cut and asked again).
    pub fn note(&mut self, note: &str) {
        self.finish();
        self.live.publish(&LiveLine::note(note));
    }

    /// Sends what has come, but the characters that could still be the
    /// start of a key split with the next piece.
    pub fn flush(&mut self) {
        let hold = self.redactor.longest().saturating_sub(1);
        self.send(hold);
    }

    /// Sends everything that has come.
    pub fn finish(&mut self) {
        self.send(0);
    }

    fn send(&mut self, hold: usize) {
        let redactor = self.redactor;
        if let Some(out) = take_safe(redactor, &mut self.pending, hold) {
            self.live.publish(&LiveLine::text(out));
        }
    }
}

/// What of `pending` can go out redacted, holding back its last `hold`
/// bytes (they may begin a key the next piece ends); the rest stays.
fn take_safe(redactor: &Redactor, pending: &mut String, hold: usize) -> Option<String> {
    if pending.is_empty() {
        return None;
    }
    let redacted = redactor.redact(pending).into_owned();
    let mut cut = redacted.len().saturating_sub(hold);
    while !redacted.is_char_boundary(cut) {
        cut -= 1;
    }
    *pending = redacted[cut..].to_string();
    (cut > 0).then(|| redacted[..cut].to_string())
}

impl Tell for Speaker<'_> {
    /// A piece of the model's text.
    fn text(&mut self, piece: &str) {
        self.pending.push_str(piece);
    }

    /// The model started a tool call: the text before it goes first.
    fn tool(&mut self, name: &str) {
        self.finish();
        let name = self.redactor.redact(name);
        self.live.publish(&LiveLine::tool(name));
    }
}

impl Drop for Speaker<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `GET /saheeli/v1/live`: the task's live lines as they come, for
/// [`FOLLOW`]; lines a slow follower missed are counted in a note.
pub(crate) async fn follow(State(bus): State<Arc<LiveBus>>) -> Response {
    let rx = bus.tx.subscribe();
    let closed = bus.closed.clone();
    let until = tokio::time::Instant::now() + FOLLOW;
    let lines = futures_util::stream::unfold(rx, move |mut rx| {
        let closed = closed.clone();
        async move {
            let got = tokio::select! {
                _ = closed.cancelled() => return None,
                got = tokio::time::timeout_at(until, rx.recv()) => got,
            };
            let line = match got {
                Err(_) | Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                Ok(Ok(l)) => l.to_string(),
                Ok(Err(broadcast::error::RecvError::Lagged(n))) => serde_json::to_string(
                    &LiveLine::note(format!("{n} live lines missed by a slow follower")),
                )
                .expect("live lines serialize"),
            };
            Some((Ok::<_, std::io::Error>(Bytes::from(line + "\n")), rx))
        }
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(lines),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_split_between_pieces_is_still_redacted() {
        let key = "sk-live-0123456789abcdef";
        let r = Redactor::new(&[("OPENAI_API_KEY".into(), key.into())]);
        let hold = r.longest() - 1;
        let text = format!("the key is {key}, é done");
        // Every split of the text into two pieces.
        for at in (0..text.len()).filter(|i| text.is_char_boundary(*i)) {
            let mut pending = String::new();
            let mut out = String::new();
            for piece in [&text[..at], &text[at..]] {
                pending.push_str(piece);
                out.extend(take_safe(&r, &mut pending, hold));
            }
            out.extend(take_safe(&r, &mut pending, 0));
            assert!(pending.is_empty());
            assert_eq!(
                out, "the key is [REDACTED:OPENAI_API_KEY], é done",
                "split at {at}"
            );
        }
    }

    #[test]
    fn without_keys_nothing_is_held_back() {
        let r = Redactor::new(&[]);
        assert_eq!(r.longest(), 0);
        let mut pending = "thinking".to_string();
        assert_eq!(take_safe(&r, &mut pending, 0).as_deref(), Some("thinking"));
        assert_eq!(take_safe(&r, &mut pending, 0), None);
    }
}
