//! Watching the model think (issue 29): the assistant's text and tool
//! calls as they stream in, live only.
//!
//! The gateway reads each call's answer as a stream (where the provider
//! can stream) and publishes what arrives, redacted, to whoever follows
//! the task's [`routes::LIVE`] route: the servo, which prints each
//! [`LiveLine`] to its stdout (the container log) and never to its audit
//! file. `task logs --follow`, `task attach` and the dashboard's audit pane
//! read the container log, so they show the text as it arrives; the audit
//! log keeps each turn's whole text once, capped (`llm_call.text`).

use serde::{Deserialize, Serialize};

pub mod routes {
    /// `GET`: newline-delimited [`super::LiveLine`]s as they come; the
    /// stream ends after a while and the follower asks again.
    pub const LIVE: &str = "/saheeli/v1/live";
}

/// The `event` of every live line: not an audit event, never in the
/// audit log.
pub const KIND: &str = "llm.delta";

/// One piece of a call's answer as it streamed in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveLine {
    /// Always [`KIND`].
    pub event: String,
    /// Text the model wrote (a run of deltas; no line breaks added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A tool call the model started (its name; arguments follow in the
    /// audit log's `tool_call`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Set on a note from the gateway itself: deltas missed by a slow
    /// follower, a stream cut and tried again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl LiveLine {
    pub fn text(text: impl Into<String>) -> LiveLine {
        LiveLine {
            event: KIND.into(),
            text: Some(text.into()),
            ..LiveLine::default()
        }
    }

    pub fn tool(name: impl Into<String>) -> LiveLine {
        LiveLine {
            event: KIND.into(),
            tool: Some(name.into()),
            ..LiveLine::default()
        }
    }

    pub fn note(note: impl Into<String>) -> LiveLine {
        LiveLine {
            event: KIND.into(),
            note: Some(note.into()),
            ..LiveLine::default()
        }
    }

    /// A line of a container log that is a live line, parsed.
    pub fn parse(line: &str) -> Option<LiveLine> {
        if !line.contains(KIND) {
            return None;
        }
        serde_json::from_str::<LiveLine>(line)
            .ok()
            .filter(|l| l.event == KIND)
    }

    /// For people: `[llm] text`, `[llm] → tool NAME`, `[llm] (note)`.
    pub fn describe(&self) -> String {
        match (&self.text, &self.tool, &self.note) {
            (Some(t), _, _) => format!("[llm] {t}"),
            (None, Some(name), _) => format!("[llm] → tool {name}"),
            (None, None, Some(n)) => format!("[llm] ({n})"),
            (None, None, None) => "[llm]".into(),
        }
    }
}

/// Longest text of one turn the audit log keeps (`llm_call.text`).
pub const MAX_AUDIT_TEXT: usize = 16 * 1024;

/// `text` capped at [`MAX_AUDIT_TEXT`] bytes (at a character boundary),
/// and how many bytes were cut.
pub fn capped(text: &str) -> (String, usize) {
    if text.len() <= MAX_AUDIT_TEXT {
        return (text.to_string(), 0);
    }
    let mut end = MAX_AUDIT_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_string(), text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_lines_round_trip_and_are_told_from_audit_events() {
        let l = LiveLine::text("thinking");
        let s = serde_json::to_string(&l).unwrap();
        assert_eq!(s, r#"{"event":"llm.delta","text":"thinking"}"#);
        assert_eq!(LiveLine::parse(&s), Some(l));
        assert_eq!(LiveLine::parse(r#"{"event":"llm_call","ts":"x"}"#), None);
        assert_eq!(LiveLine::tool("bash").describe(), "[llm] → tool bash");
    }

    #[test]
    fn audit_text_is_capped_at_a_character_boundary() {
        let long = "é".repeat(MAX_AUDIT_TEXT);
        let (kept, cut) = capped(&long);
        assert!(kept.len() <= MAX_AUDIT_TEXT && kept.len() + cut == long.len());
        assert_eq!(capped("short"), ("short".into(), 0));
    }
}
