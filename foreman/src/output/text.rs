//! Text from prompts and agents made safe for a terminal, and audit
//! events as lines for people.

use saheeli_protocol::human::Reply;
use saheeli_protocol::verify::Check;
use saheeli_protocol::{AuditEvent, Usage};

use crate::text::{printable, waiting_line};

/// One audit event as a line for people.
pub(super) fn describe(ev: &AuditEvent) -> String {
    match ev {
        AuditEvent::Start {
            ts,
            model,
            max_steps,
            agent: None,
            ..
        } => {
            format!("{ts}  start     model {model}, up to {max_steps} steps")
        }
        AuditEvent::Start {
            ts,
            model,
            agent: Some(agent),
            ..
        } => {
            format!("{ts}  start     agent {agent}, model {model}")
        }
        AuditEvent::LlmCall {
            ts,
            step,
            latency_ms,
            usage,
            error,
            text,
            text_cut,
            ..
        } => {
            let said = text.as_deref().map(|t| (t, *text_cut));
            let call = llm_call(*latency_ms, usage, error.as_deref(), said);
            format!("{ts}  step {step:<4} {call}")
        }
        AuditEvent::GatewayWait { ts, step, error } => {
            format!("{ts}  step {step:<4} gateway unreachable, waiting: {error}")
        }
        AuditEvent::GatewayBack {
            ts,
            step,
            waited_ms,
        } => format!("{ts}  step {step:<4} gateway back after {waited_ms} ms"),
        AuditEvent::ToolCall {
            ts,
            step,
            tool,
            arguments,
            ok,
            exit_code,
            duration_ms,
            result_bytes,
            ..
        } => {
            let (args, status) = (short_arguments(arguments), tool_status(*ok, *exit_code));
            format!(
                "{ts}  step {step:<4} {tool} {args} → {status}, {result_bytes} bytes, {duration_ms} ms"
            )
        }
        AuditEvent::Asked {
            ts, step, waiting, ..
        } => format!(
            "{ts}  step {step:<4} asks a human: {}",
            waiting_line(waiting)
        ),
        AuditEvent::Replied {
            ts,
            step,
            reply,
            waited_ms,
            ..
        } => format!("{ts}  step {step:<4} {}", replied(reply, *waited_ms)),
        AuditEvent::Noted {
            ts, step, by, text, ..
        } => format!("{ts}  step {step:<4} message from {by}: {text}"),
        AuditEvent::Verified {
            ts,
            step,
            attempt,
            max_attempts,
            passed,
            checks,
        } => format!(
            "{ts}  step {step:<4} verify attempt {attempt}/{max_attempts} {}: {}",
            if *passed { "passed" } else { "failed" },
            checks_line(checks)
        ),
        AuditEvent::Paused { ts, step } => format!("{ts}  step {step:<4} paused"),
        AuditEvent::Resumed {
            ts,
            step,
            waited_ms,
        } => format!("{ts}  step {step:<4} resumed after {waited_ms} ms"),
        AuditEvent::Parked { ts, step } => {
            format!("{ts}  step {step:<4} parked: session saved, container released")
        }
        AuditEvent::Unparked { ts, step } => {
            format!("{ts}  step {step:<4} unparked: going on from the saved session")
        }
        AuditEvent::Compacted {
            ts,
            step,
            strategy,
            cause,
            tokens_before,
            tokens_after,
        } => format!(
            "{ts}  step {step:<4} compacted ({strategy}, {cause}): about {tokens_before} → {tokens_after} tokens"
        ),
        AuditEvent::Finish {
            ts,
            outcome,
            steps,
            usage,
            detail,
            ..
        } => format!(
            "{ts}  finish    {outcome} after {steps} steps, {} tokens{}",
            usage.total(),
            detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ),
    }
}

/// An LLM call after its step number: its error, or its tokens (and the
/// cache's part of them) and what the model said.
fn llm_call(
    latency_ms: u64,
    usage: &Usage,
    error: Option<&str>,
    said: Option<(&str, Option<u64>)>,
) -> String {
    match (error, said) {
        (Some(e), _) => format!("llm error after {latency_ms} ms: {e}"),
        (None, Some((text, text_cut))) => {
            let cut = text_cut.map_or(String::new(), |n| format!(" [{n} more bytes cut]"));
            format!(
                "llm {latency_ms} ms, {} in / {} out tokens; said: {text}{cut}",
                usage.input_tokens, usage.output_tokens
            )
        }
        (None, None) if usage.cache_read_tokens + usage.cache_write_tokens > 0 => format!(
            "llm {latency_ms} ms, {} in ({} cached, {} written to cache) / {} out tokens",
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.output_tokens
        ),
        (None, None) => format!(
            "llm {latency_ms} ms, {} in / {} out tokens",
            usage.input_tokens, usage.output_tokens
        ),
    }
}

/// A tool call's arguments, their first 100 characters.
fn short_arguments(arguments: &str) -> String {
    let mut args: String = arguments.chars().take(100).collect();
    if args.len() < arguments.len() {
        args.push('…');
    }
    args
}

/// How a tool call ended: its exit code, else ok or error.
fn tool_status(ok: bool, exit_code: Option<i32>) -> String {
    match (ok, exit_code) {
        (_, Some(c)) => format!("exit {c}"),
        (true, None) => "ok".into(),
        (false, None) => "error".into(),
    }
}

/// A person's reply after its step number: the decision, who, how long
/// the servo waited, and the text.
fn replied(reply: &Reply, waited_ms: u64) -> String {
    format!(
        "{} by {} after {waited_ms} ms{}",
        reply.decision.as_str(),
        reply.by,
        reply
            .text
            .as_deref()
            .map(|t| format!(": {t}"))
            .unwrap_or_default()
    )
}

/// Each verify check and how it ended, comma-separated.
fn checks_line(checks: &[Check]) -> String {
    let what: Vec<String> = checks
        .iter()
        .map(|c| {
            let end = match (c.passed, c.exit_code) {
                (true, _) => "passed".to_string(),
                (false, Some(code)) => format!("exit {code}"),
                (false, None) => "failed".to_string(),
            };
            format!("{} {end}", c.command)
        })
        .collect();
    what.join(", ")
}

/// One line of an audit log (or of a servo's live output) for people.
/// Every field came from the container, so the result is made printable;
/// a line that is not an audit event is shown escaped, never raw.
pub(crate) fn audit_line(line: &str) -> String {
    if let Some(live) = saheeli_protocol::live::LiveLine::parse(line) {
        return printable(&live.describe()).into_owned();
    }
    match serde_json::from_str::<AuditEvent>(line) {
        Ok(ev) => printable(&describe(&ev)).into_owned(),
        Err(_) => format!("[not an audit event] {}", printable(line)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_and_newlines_are_shown_not_sent() {
        let hostile = "ok\x1b]0;owned\x07 \x1b[2J\r\u{9b}31m \u{202e}evil";
        let shown = printable(hostile);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown}");
        assert!(shown.contains("\\u{1b}]0;owned") && shown.contains("\\u{202e}evil"));
        assert_eq!(printable("plain\ttext ✓"), "plain\ttext ✓");
        let line = audit_line("\x1b[31mnot json");
        assert!(
            line.starts_with("[not an audit event] \\u{1b}[31m"),
            "{line}"
        );
    }
}
