//! Text made safe and short for people, below every module that shows
//! some: a prompt's or an agent's text escaped for a terminal, what a task
//! waits for in one line, a time in RFC 3339. Imports only the protocol.

use std::time::{Duration, UNIX_EPOCH};

/// Text from a prompt or the agent, made safe for a terminal: control
/// characters (newlines, escape sequences) are shown escaped, so a title
/// cannot break a table row or drive the terminal.
pub(crate) fn clean(text: &str) -> String {
    printable(text).into_owned()
}

/// `text` with control characters (C0 but tab, DEL, C1) and bidi overrides
/// shown as `\u{..}` escapes: what an agent wrote never drives the terminal.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    fn unsafe_char(c: char) -> bool {
        (c.is_control() && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }
    if !text.chars().any(unsafe_char) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if unsafe_char(c) {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// What a task waits for, in one line.
pub(crate) fn waiting_line(w: &saheeli_protocol::human::Waiting) -> String {
    use saheeli_protocol::human::Waiting;
    match w {
        Waiting::Answer { question } => format!("question: {question}"),
        Waiting::Approval { tool, arguments } => {
            let mut args: String = arguments.chars().take(200).collect();
            if args.len() < arguments.len() {
                args.push('…');
            }
            format!("approve {tool} {args}")
        }
        Waiting::Plan { plan } => format!("approve plan: {}", plan.join(" / ")),
        Waiting::Blocked { reason, needed } => format!("blocked: {reason}; needs: {needed}"),
        Waiting::Egress { host, port, phase } => {
            format!("the {phase} phase wants {host}:{port} (egress)")
        }
    }
}

/// A time in milliseconds since the epoch, in RFC 3339.
/// A size as people read it: `512 B`, `3.4 KiB`, `12.0 MiB`, `1.5 GiB`.
pub(crate) fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

pub(crate) fn time(ms: i64) -> String {
    saheeli_protocol::rfc3339(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

/// An error and its causes on one line (reqwest's own message is terse).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(clean("plain title"), "plain title");
        assert_eq!(clean("a\nb\x1b[2Jc"), "a\\nb\\u{1b}[2Jc");
    }
}
