//! Tasks as tables and text for people.

use comfy_table::presets::UTF8_BORDERS_ONLY;
use std::fmt::Write;

use comfy_table::{ContentArrangement, Table};

use crate::state::TaskState;
use crate::store::{EventRow, Override, StepStatus, TaskRow, now_ms};

use super::{clean, duration_ms, time, waiting_line};

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

pub(super) fn cost(usd: f64) -> String {
    if usd > 0.0 {
        format!("${usd:.4}")
    } else {
        "-".into()
    }
}

/// What a task whose call waits for the provider's rate limit shows.
pub(crate) const RATE_LIMITED: &str = "waiting for provider rate limit";

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
        // `*`: a person set this outcome (explained under the table).
        let mark = if t.overridden.is_some() { "*" } else { "" };
        let state = match (&t.reason, &t.waiting_for) {
            (Some(r), _) if t.state.is_terminal() && r != t.state.as_str() => {
                format!("{}{mark} ({})", t.state, r)
            }
            (_, Some(w)) => format!("{}: {}", t.state, short(&waiting_line(w), 60)),
            _ if t.rate_limited(now) => format!("{}: {RATE_LIMITED}", t.state),
            _ => match super::waits_line(t, now) {
                Some(w) => format!("{} ({w})", t.state),
                None => format!("{}{mark}", t.state),
            },
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
    let mut out = table.to_string();
    if tasks.iter().any(|t| t.overridden.is_some()) {
        out.push_str(
            "\n* outcome overridden by hand: `saheeli task status ID` says by whom and why",
        );
    }
    out
}

/// `overridden: incomplete → complete by USER at TIME: REASON`.
pub(crate) fn override_line(o: &Override, state: TaskState) -> String {
    format!(
        "overridden: {} → {state} by {} at {}: {}",
        o.from,
        clean(&o.by),
        time(o.at),
        clean(&o.reason)
    )
}

/// One task in detail, with its template steps, attempts and event history.
pub(crate) fn detail(
    t: &TaskRow,
    events: &[EventRow],
    attempts: &[TaskRow],
    steps: &[StepStatus],
) -> String {
    let mut s = String::new();
    state_lines(&mut s, t);
    spend_lines(&mut s, t, steps);
    time_lines(&mut s, t);
    attempt_lines(&mut s, t, attempts);
    event_lines(&mut s, events);
    s
}

/// Who and where: id, title, state, what it waits for, a pause.
fn state_lines(s: &mut String, t: &TaskRow) {
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
    if let Some(o) = &t.overridden {
        let _ = writeln!(s, "{}", override_line(o, t.state));
    }
    if t.cancel_requested && !t.state.is_terminal() {
        let _ = writeln!(s, "cancel:    requested");
    }
    if let Some(w) = super::waits_line(t, now_ms()) {
        let _ = writeln!(s, "waits:     {w}");
    }
    if let Some(w) = &t.waiting_for {
        let _ = writeln!(s, "waiting:   {}", clean(&waiting_line(w)));
        if let Some(asked) = t.approval_asked() {
            let _ = writeln!(s, "           {}", clean(&asked));
        }
        let _ = writeln!(s, "           {}", clean(&how_to_reply(t.id, w)));
    }
    if t.rate_limited(now_ms()) {
        let _ = writeln!(s, "waiting:   {RATE_LIMITED}");
    }
    if let Some(at) = t.frozen_at.filter(|_| !t.state.is_terminal()) {
        let since = short_duration(now_ms() - at);
        let _ = writeln!(
            s,
            "frozen:    {since}: its servo is frozen while it waits (`suspend_after`)"
        );
    }
    if t.pause_requested && !t.state.is_terminal() {
        let _ = writeln!(
            s,
            "paused:    {}; resume with `saheeli task resume {}`",
            if t.state == crate::state::TaskState::Paused {
                "yes"
            } else {
                "requested"
            },
            t.id
        );
    }
}

/// What it runs with and what it spent: prompt, model, steps, tokens,
/// cost, its budget.
fn spend_lines(s: &mut String, t: &TaskRow, steps: &[StepStatus]) {
    let _ = writeln!(s, "prompt:    {}", clean(&t.spec.prompt_path));
    let _ = writeln!(s, "model:     {}", clean(&t.spec.model));
    if !t.spec.agent.is_builtin() {
        let _ = writeln!(s, "agent:     {}", clean(&t.spec.agent.label()));
    }
    if let Some(kind) = &t.spec.agent_type {
        let _ = writeln!(s, "type:      {}", clean(kind));
    }
    let _ = writeln!(s, "steps:     {} of {}", t.steps, t.spec.max_steps);
    if !steps.is_empty() {
        let _ = write!(s, "progress:  {}", super::steps_text(steps));
    }
    let _ = writeln!(
        s,
        "tokens:    {} ({} in, {} out)",
        t.input_tokens + t.output_tokens,
        t.input_tokens,
        t.output_tokens
    );
    if t.cache_read_tokens + t.cache_write_tokens > 0 {
        let _ = writeln!(
            s,
            "cache:     {} read, {} written ({:.0}% of input read from the provider's cache)",
            t.cache_read_tokens,
            t.cache_write_tokens,
            super::json::hit_rate(t.cache_read_tokens, t.input_tokens) * 100.0
        );
    }
    if t.compactions > 0 {
        let _ = writeln!(s, "context:   compacted {} times", t.compactions);
    }
    let _ = writeln!(s, "cost:      {}", cost(t.cost_usd));
    if t.gateway_refused > 0 {
        let _ = writeln!(
            s,
            "refused:   {} requests of its container (past the gateway's caps, or not approved)",
            t.gateway_refused
        );
    }
    if t.capability_calls > 0 {
        let _ = writeln!(s, "capability calls: {}", t.capability_calls);
    }
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
}

/// How long it ran, its deadline, what it retried, where its results are.
fn time_lines(s: &mut String, t: &TaskRow) {
    if let Some(ms) = duration_ms(t) {
        let _ = writeln!(s, "duration:  {}", short_duration(ms));
    }
    if let Some(at) = t.spec.deadline_ms {
        let left = at - crate::store::now_ms();
        let when = if t.state.is_terminal() {
            String::new()
        } else if left > 0 {
            format!(" (in {})", short_duration(left))
        } else {
            " (passed)".to_string()
        };
        let _ = writeln!(s, "deadline:  {}{when}", crate::text::time(at));
    }
    if let Some(r) = &t.retry_of {
        let _ = writeln!(s, "retry of:  {r}");
    }
    if let Some(f) = &t.spec.forked_from {
        let _ = writeln!(
            s,
            "fork of:   {} at step {} ({} of {})",
            f.task, f.step, f.index, f.count
        );
    }
    if let Some(ran) = &t.setup {
        let _ = writeln!(s, "setup:     {}", ran.summary());
    }
    if let Some(g) = &t.git {
        let _ = writeln!(s, "git:       {} @ {}, {}", g.url, g.reference, g.commit);
    }
    if let Some(f) = &t.follow_up_of {
        let _ = writeln!(s, "follows:   {f}");
    }
    if let Some(d) = &t.delivered {
        let commit = d.commit.as_deref().unwrap_or("no commit");
        match &d.error {
            None if d.pushed => {
                let _ = writeln!(s, "delivered: {} {commit} (pushed)", d.branch);
            }
            why => {
                let why = why.as_deref().unwrap_or("push: false");
                let _ = writeln!(s, "delivered: {} {commit} (not pushed: {why})", d.branch);
            }
        }
    }
    if let Some(p) = &t.results_path {
        let _ = writeln!(s, "results:   {p}");
    }
}

/// Every attempt of its chain, this one marked.
fn attempt_lines(s: &mut String, t: &TaskRow, attempts: &[TaskRow]) {
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
}

/// Its event history.
fn event_lines(s: &mut String, events: &[EventRow]) {
    let _ = writeln!(s, "events:");
    for e in events {
        let what = match (&e.kind, &e.actor) {
            (Some(k), Some(by)) => format!("{k} by {by}"),
            (Some(k), None) => k.clone(),
            _ => e.to.to_string(),
        };
        let _ = writeln!(
            s,
            "  {}  {:<10} {}",
            time(e.at),
            what,
            clean(e.detail.as_deref().unwrap_or(""))
        );
    }
}

/// The command that replies to what a task waits for.
pub(crate) fn how_to_reply(
    id: saheeli_protocol::TaskId,
    w: &saheeli_protocol::human::Waiting,
) -> String {
    use saheeli_protocol::human::Waiting;
    match w {
        Waiting::Answer { .. } => format!("answer with: saheeli task answer {id} \"TEXT\""),
        Waiting::Blocked { .. } => format!(
            "unblock with: saheeli task answer {id} \"TEXT\"   or: saheeli task resume {id}   or cancel it"
        ),
        Waiting::Approval { .. } | Waiting::Plan { .. } | Waiting::Egress { .. } => format!(
            "approve with: saheeli task approve {id}   or deny: saheeli task deny {id} --reason \"TEXT\""
        ),
    }
}

fn short(text: &str, max: usize) -> String {
    let clean = clean(text).replace('\n', " ");
    if clean.chars().count() <= max {
        return clean;
    }
    let mut s: String = clean.chars().take(max).collect();
    s.push('…');
    s
}
