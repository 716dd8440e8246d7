//! How tasks are shown: tables for people, JSON for scripts.

use std::time::{Duration, UNIX_EPOCH};

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{ContentArrangement, Table};
use saheeli_protocol::AuditEvent;
use serde::Serialize;

use crate::store::{EventRow, TaskRow, now_ms};

/// A task as `--json` prints it.
#[derive(Debug, Serialize)]
pub(crate) struct TaskView {
    pub id: String,
    pub title: String,
    pub state: String,
    /// Why it ended: a code from a fixed set (`max_steps`, `exit 137`, …).
    pub reason: Option<String>,
    /// What happened, for people.
    pub detail: Option<String>,
    pub model: String,
    pub priority: i64,
    pub steps: i64,
    pub tokens: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// USD, from the price table in config.yaml (0 when no price is known).
    pub cost_usd: f64,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub duration_s: Option<f64>,
    /// The results directory, once collected.
    pub results: Option<String>,
    pub retry_of: Option<String>,
    /// 1 for the first attempt; retries (by policy or `task retry`) count up.
    pub attempt: i64,
    pub prompt: String,
    /// The servo container while it exists.
    pub container: Option<String>,
    pub cancel_requested: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<EventView>>,
    /// Every attempt of this task, oldest first (one task each).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptView>>,
}

#[derive(Debug, Serialize)]
pub(crate) struct AttemptView {
    pub id: String,
    pub attempt: i64,
    pub state: String,
    pub reason: Option<String>,
    pub results: Option<String>,
}

impl AttemptView {
    pub fn new(t: &TaskRow) -> AttemptView {
        AttemptView {
            id: t.id.to_string(),
            attempt: t.attempt,
            state: t.state.to_string(),
            reason: t.reason.clone(),
            results: t.results_path.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct EventView {
    pub at: String,
    pub from: Option<String>,
    pub to: String,
    pub detail: Option<String>,
}

fn time(ms: i64) -> String {
    saheeli_protocol::rfc3339(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

fn duration_ms(t: &TaskRow) -> Option<i64> {
    let start = t.started_at?;
    Some(t.finished_at.unwrap_or_else(now_ms) - start)
}

impl TaskView {
    pub fn new(t: &TaskRow, events: Option<&[EventRow]>) -> TaskView {
        TaskView {
            id: t.id.to_string(),
            title: t.title.clone(),
            state: t.state.to_string(),
            reason: t.reason.clone(),
            detail: t.detail.clone(),
            model: t.spec.model.clone(),
            priority: t.priority,
            steps: t.steps,
            tokens: t.input_tokens + t.output_tokens,
            input_tokens: t.input_tokens,
            output_tokens: t.output_tokens,
            cost_usd: t.cost_usd,
            created_at: time(t.created_at),
            started_at: t.started_at.map(time),
            finished_at: t.finished_at.map(time),
            duration_s: duration_ms(t).map(|ms| ms as f64 / 1000.0),
            results: t.results_path.clone(),
            retry_of: t.retry_of.map(|r| r.to_string()),
            attempt: t.attempt,
            prompt: t.spec.prompt_path.clone(),
            container: t.container_id.clone().filter(|_| !t.state.is_terminal()),
            cancel_requested: t.cancel_requested,
            events: events.map(|evs| {
                evs.iter()
                    .map(|e| EventView {
                        at: time(e.at),
                        from: e.from.map(|s| s.to_string()),
                        to: e.to.to_string(),
                        detail: e.detail.clone(),
                    })
                    .collect()
            }),
            attempts: None,
        }
    }
}

/// Text from a prompt or the agent, made safe for a terminal: control
/// characters (newlines, escape sequences) are shown escaped, so a title
/// cannot break a table row or drive the terminal.
pub(crate) fn clean(text: &str) -> String {
    printable(text).into_owned()
}

/// `3s`, `4m`, `2h`, `5d`.
pub(crate) fn short_duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d", s / 86400),
    }
}

fn cost(usd: f64) -> String {
    if usd > 0.0 {
        format!("${usd:.4}")
    } else {
        "-".into()
    }
}

/// The `task status` table.
pub(crate) fn table(tasks: &[TaskRow]) -> String {
    if tasks.is_empty() {
        return "no tasks yet; queue one with `saheeli task submit --prompt FILE`".into();
    }
    let mut table = Table::new();
    table
        .load_preset(UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header([
            "ID", "TITLE", "STATE", "AGE", "DURATION", "STEPS", "TOKENS", "COST",
        ]);
    let now = now_ms();
    for t in tasks {
        let state = match &t.reason {
            Some(r) if t.state.is_terminal() && r != t.state.as_str() => {
                format!("{} ({})", t.state, r)
            }
            _ => t.state.to_string(),
        };
        table.add_row([
            t.id.short(),
            clean(&t.title),
            state,
            short_duration(now - t.created_at),
            duration_ms(t)
                .map(short_duration)
                .unwrap_or_else(|| "-".into()),
            t.steps.to_string(),
            (t.input_tokens + t.output_tokens).to_string(),
            cost(t.cost_usd),
        ]);
    }
    table.to_string()
}

/// One task in detail, with its attempts and event history.
pub(crate) fn detail(t: &TaskRow, events: &[EventRow], attempts: &[TaskRow]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "id:        {}", t.id);
    let _ = writeln!(s, "title:     {}", clean(&t.title));
    let _ = writeln!(
        s,
        "state:     {}{}",
        t.state,
        t.reason
            .as_deref()
            .filter(|r| *r != t.state.as_str())
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    if t.cancel_requested && !t.state.is_terminal() {
        let _ = writeln!(s, "cancel:    requested");
    }
    let _ = writeln!(s, "prompt:    {}", clean(&t.spec.prompt_path));
    let _ = writeln!(s, "model:     {}", clean(&t.spec.model));
    let _ = writeln!(s, "steps:     {} of {}", t.steps, t.spec.max_steps);
    let _ = writeln!(
        s,
        "tokens:    {} ({} in, {} out)",
        t.input_tokens + t.output_tokens,
        t.input_tokens,
        t.output_tokens
    );
    let _ = writeln!(s, "cost:      {}", cost(t.cost_usd));
    if t.spec.max_tokens.is_some() || t.spec.max_cost.is_some() {
        let _ = writeln!(
            s,
            "budget:    {} tokens, {}",
            t.spec
                .max_tokens
                .map(|n| n.to_string())
                .unwrap_or_else(|| "no limit on".into()),
            t.spec
                .max_cost
                .map(|c| format!("${c:.4}"))
                .unwrap_or_else(|| "no cost limit".into())
        );
    }
    if let Some(ms) = duration_ms(t) {
        let _ = writeln!(s, "duration:  {}", short_duration(ms));
    }
    if let Some(r) = &t.retry_of {
        let _ = writeln!(s, "retry of:  {r}");
    }
    if let Some(p) = &t.results_path {
        let _ = writeln!(s, "results:   {p}");
    }
    if attempts.len() > 1 {
        let _ = writeln!(s, "attempts:");
        for a in attempts {
            let _ = writeln!(
                s,
                "  {} {}  {}{}{}",
                a.attempt,
                a.id,
                a.state,
                a.reason
                    .as_deref()
                    .filter(|r| *r != a.state.as_str())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default(),
                if a.id == t.id { "  <- this one" } else { "" }
            );
        }
    }
    let _ = writeln!(s, "events:");
    for e in events {
        let _ = writeln!(
            s,
            "  {}  {:<10} {}",
            time(e.at),
            e.to,
            clean(e.detail.as_deref().unwrap_or(""))
        );
    }
    s
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

/// One audit event as a line for people.
fn describe(ev: &AuditEvent) -> String {
    match ev {
        AuditEvent::Start {
            ts,
            model,
            max_steps,
            ..
        } => {
            format!("{ts}  start     model {model}, up to {max_steps} steps")
        }
        AuditEvent::LlmCall {
            ts,
            step,
            latency_ms,
            usage,
            error,
            ..
        } => match error {
            Some(e) => format!("{ts}  step {step:<4} llm error after {latency_ms} ms: {e}"),
            None => format!(
                "{ts}  step {step:<4} llm {latency_ms} ms, {} in / {} out tokens",
                usage.input_tokens, usage.output_tokens
            ),
        },
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
            let mut args: String = arguments.chars().take(100).collect();
            if args.len() < arguments.len() {
                args.push('…');
            }
            let status = match (ok, exit_code) {
                (_, Some(c)) => format!("exit {c}"),
                (true, None) => "ok".into(),
                (false, None) => "error".into(),
            };
            format!(
                "{ts}  step {step:<4} {tool} {args} → {status}, {result_bytes} bytes, {duration_ms} ms"
            )
        }
        AuditEvent::Finish {
            ts,
            outcome,
            steps,
            usage,
            detail,
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

/// One line of an audit log (or of a servo's live output) for people.
/// Every field came from the container, so the result is made printable;
/// a line that is not an audit event is shown escaped, never raw.
pub(crate) fn audit_line(line: &str) -> String {
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

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(clean("plain title"), "plain title");
        assert_eq!(clean("a\nb\x1b[2Jc"), "a\\nb\\u{1b}[2Jc");
    }
}
