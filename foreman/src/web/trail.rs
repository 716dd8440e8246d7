//! A task's audit trail as a stream sends it: lines numbered so that a
//! cursor means the same in a container's log and in the collected audit
//! log (see `sse`), and a follower of a container's log.

use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::backend::ServoLog;
use crate::output;

/// The longest live line kept (longer ones are reported, not sent).
const MAX_LIVE_LINE: usize = 1 << 20;
/// The most of a line's text sent.
const MAX_TEXT: usize = 8 * 1024;

/// Where a task stream has got to.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Cursor {
    /// The last event row sent.
    pub seq: i64,
    /// The second of the last audit line sent (0: none yet).
    pub ts: i64,
    /// Its number among the lines of that second (from 1).
    pub k: u32,
}

impl Cursor {
    pub fn parse(s: &str) -> Option<Cursor> {
        let mut it = s.trim().split('.');
        let seq = it.next()?.parse().ok()?;
        let ts = it.next().map_or(Some(0), |v| v.parse().ok())?;
        let k = it.next().map_or(Some(0), |v| v.parse().ok())?;
        if it.next().is_some() {
            return None;
        }
        Some(Cursor { seq, ts, k })
    }

    pub fn id(&self) -> String {
        format!("{}.{}.{}", self.seq, self.ts, self.k)
    }

    /// Whether a live line at `at` (its predecessor's number) comes after
    /// the cursor: one standing at the cursor's line came after it.
    pub fn admits_live(&self, at: (i64, u32)) -> bool {
        at.0 > self.ts || (at.0 == self.ts && at.1 >= self.k)
    }

    /// Whether the line at `at` comes after the cursor.
    pub fn admits(&self, at: (i64, u32)) -> bool {
        at.0 > self.ts || (at.0 == self.ts && at.1 > self.k)
    }
}

/// Numbers the lines of one source: (second, number within it). A line
/// without a time (not an audit event) belongs to its predecessor's second.
#[derive(Default)]
pub(super) struct Positions {
    ts: i64,
    k: u32,
}

impl Positions {
    pub fn next(&mut self, ts: Option<i64>) -> (i64, u32) {
        match ts {
            Some(t) if t != self.ts => {
                self.ts = t;
                self.k = 1;
            }
            _ => self.k += 1,
        }
        (self.ts, self.k)
    }
}

/// One audit line, numbered, in the form it is sent.
#[derive(Debug)]
pub(super) struct AuditLine {
    pub at: (i64, u32),
    /// The audit event's kind (`llm_call`, `tool_call`, …), if it is one.
    pub kind: Option<String>,
    pub text: String,
    /// A live line (`llm.delta`, issue 29): the model's text as it came,
    /// in the container log only. It takes no number of its own (the
    /// collected log has no such line): it stands at its predecessor's.
    pub live: Option<saheeli_protocol::live::LiveLine>,
}

impl AuditLine {
    pub fn parse(raw: &str, pos: &mut Positions) -> AuditLine {
        if let Some(l) = saheeli_protocol::live::LiveLine::parse(raw) {
            return AuditLine {
                at: (pos.ts, pos.k),
                kind: Some(saheeli_protocol::live::KIND.into()),
                text: output::printable(&l.describe()).into_owned(),
                live: Some(l),
            };
        }
        #[derive(serde::Deserialize)]
        struct Head {
            event: Option<String>,
            ts: Option<String>,
        }
        let head: Option<Head> = serde_json::from_str(raw).ok();
        let ts = head
            .as_ref()
            .and_then(|h| h.ts.as_deref())
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs() as i64);
        let mut text = output::audit_line(raw);
        if text.len() > MAX_TEXT {
            let mut end = MAX_TEXT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push('…');
        }
        AuditLine {
            at: pos.next(ts),
            kind: head.and_then(|h| h.event),
            text,
            live: None,
        }
    }

    pub fn placeholder(text: String, pos: &mut Positions) -> AuditLine {
        AuditLine {
            at: pos.next(None),
            kind: None,
            text,
            live: None,
        }
    }
}

/// Sends a container's log lines (the servo mirrors its audit lines to
/// stdout), numbered, until the log ends.
pub(super) async fn follow_container(mut stream: ServoLog, tx: mpsc::Sender<AuditLine>) {
    let mut pos = Positions::default();
    let mut pending: Vec<u8> = Vec::new();
    let mut skipping = false;
    while let Some(chunk) = stream.next().await {
        pending.extend_from_slice(&chunk);
        while let Some(i) = memchr::memchr(b'\n', &pending) {
            let raw: Vec<u8> = pending.drain(..=i).collect();
            if std::mem::take(&mut skipping) {
                continue;
            }
            let l = AuditLine::parse(&String::from_utf8_lossy(&raw[..i]), &mut pos);
            if tx.send(l).await.is_err() {
                return;
            }
        }
        if pending.len() > MAX_LIVE_LINE && !skipping {
            let n = pending.len();
            pending.clear();
            skipping = true;
            let l = AuditLine::placeholder(
                format!("[an audit line of more than {n} bytes, not shown]"),
                &mut pos,
            );
            if tx.send(l).await.is_err() {
                return;
            }
        } else if skipping {
            pending.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_order_lines() {
        let c = Cursor {
            seq: 42,
            ts: 1_700_000_000,
            k: 3,
        };
        assert_eq!(Cursor::parse(&c.id()), Some(c));
        assert_eq!(
            Cursor::parse("7"),
            Some(Cursor {
                seq: 7,
                ..Cursor::default()
            })
        );
        assert_eq!(Cursor::parse("7.x.1"), None);
        assert_eq!(Cursor::parse("1.2.3.4"), None);
        assert!(!c.admits((1_700_000_000, 3)));
        assert!(c.admits((1_700_000_000, 4)));
        assert!(c.admits((1_700_000_001, 1)));
        assert!(!c.admits((1_699_999_999, 9)));
    }

    #[test]
    fn lines_are_numbered_within_their_second() {
        let mut pos = Positions::default();
        let a = r#"{"event":"start","ts":"2025-01-01T00:00:00Z"}"#;
        let b = r#"{"event":"llm_call","ts":"2025-01-01T00:00:00Z"}"#;
        let c = r#"{"event":"llm_call","ts":"2025-01-01T00:00:01Z"}"#;
        let t0 = 1_735_689_600;
        let got: Vec<(i64, u32)> = [a, b, "not json", c]
            .iter()
            .map(|l| AuditLine::parse(l, &mut pos).at)
            .collect();
        assert_eq!(got, [(t0, 1), (t0, 2), (t0, 3), (t0 + 1, 1)]);
        let l = AuditLine::parse("<script>alert(1)</script>", &mut pos);
        assert_eq!(l.kind, None);
        assert!(
            l.text.contains("<script>"),
            "sent as text; the page escapes it"
        );
    }
}
