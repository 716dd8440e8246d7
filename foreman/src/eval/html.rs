//! `report.html`: one self-contained page (inline CSS, JS and SVG; a
//! Content-Security-Policy that forbids fetching anything and runs only
//! the page's own script, by hash). Everything is rendered here, escaped
//! with [`esc`]: titles, messages, verify output and patches are the
//! agent's and hostile. The script only sorts, filters and opens details.

use std::fmt::Write;
use std::path::Path;

use base64::Engine;
use sha2::Digest;

use super::charts;
use super::report::{CaseResult, EvalReport, cap};

const CSS: &str = include_str!("report.css");
const JS: &str = include_str!("report.js");
/// The most of a case's patch the page shows.
const MAX_PATCH: usize = 64 << 10;

/// Escapes text for HTML element content and quoted attributes.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// `850ms`, `12.4s`, `3m 05s`.
pub(crate) fn human_ms(ms: i64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m {:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

fn money(x: f64) -> String {
    format!("${x:.4}")
}

/// The page for `r`.
pub(crate) fn render(r: &EvalReport) -> String {
    let hash =
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(JS.as_bytes()));
    let mut s = String::new();
    let _ = write!(
        s,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; \
         script-src 'sha256-{hash}'; img-src data:\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · eval {}</title><style>{CSS}</style></head><body>",
        esc(&r.suite),
        esc(&r.run_id)
    );
    header(&mut s, r);
    s.push_str("<main>");
    summary(&mut s, r);
    categories_and_failures(&mut s, r);
    let _ = write!(
        s,
        "<div class=\"grid2\" style=\"margin-top:14px\">\
         <div class=\"panel\"><h3>Latency distribution</h3>{}</div>\
         <div class=\"panel\"><h3>Tool usage</h3>{}</div></div>",
        charts::latency(&r.cases),
        charts::tools(&r.tool_calls)
    );
    table(&mut s, r);
    s.push_str("<h2>Case details</h2>");
    for c in &r.cases {
        details(&mut s, c);
    }
    let _ = write!(
        s,
        "<footer>Written by <code>saheeli eval</code>; the data is in <code>report.json</code> beside this page.</footer>\
         </main><script>{JS}</script></body></html>"
    );
    s
}

fn header(s: &mut String, r: &EvalReport) {
    let _ = write!(
        s,
        "<header><h1>{} <span class=\"muted\" style=\"color:#c7cdd9;font-weight:400\">evaluation</span></h1>\
         <div class=\"meta\"><span>run <code>{}</code></span><span>started {}</span><span>{}</span>\
         <span title=\"{}\">model{} {}</span><span>suite <code>{}</code></span></div></header>",
        esc(&r.suite),
        esc(&r.run_id),
        esc(&r.started),
        match &r.ended {
            Some(e) => format!("ended {}", esc(e)),
            None => "not ended (resume with <code>saheeli eval --resume</code>)".into(),
        },
        esc(&r.models.join(", ")),
        if r.models.len() == 1 { "" } else { "s" },
        esc(&models_line(&r.models)),
        esc(&r.suite_path),
    );
}

/// The models for the header: names as they are, and the recorded
/// sessions of `replay:` (one per case, long paths) counted instead of
/// listed; the full list is the line's tooltip.
fn models_line(models: &[String]) -> String {
    let replays = models.iter().filter(|m| m.starts_with("replay:")).count();
    let mut parts: Vec<String> = models
        .iter()
        .filter(|m| !m.starts_with("replay:"))
        .cloned()
        .collect();
    match replays {
        0 => {}
        1 => parts.push("replay (1 recorded session)".into()),
        n => parts.push(format!("replay ({n} recorded sessions)")),
    }
    parts.join(", ")
}

fn card(s: &mut String, class: &str, label: &str, value: &str, sub: &str) {
    let _ = write!(
        s,
        "<div class=\"card {class}\"><div class=\"label\">{label}</div><div class=\"value\">{value}</div>\
         <div class=\"sub\">{sub}</div></div>"
    );
}

fn summary(s: &mut String, r: &EvalReport) {
    s.push_str("<div class=\"cards\">");
    let ok = r.pass_rate + 1e-9 >= r.pass_threshold;
    card(
        s,
        if ok { "verdict ok" } else { "verdict bad" },
        "Pass rate",
        &pct(r.pass_rate),
        &format!(
            "threshold {} · {}",
            pct(r.pass_threshold),
            if ok { "met" } else { "not met" }
        ),
    );
    card(
        s,
        "",
        "Results",
        &format!("{} / {}", r.passed, r.passed + r.failed + r.unfinished),
        &format!(
            "{} passed · {} failed{}{}",
            r.passed,
            r.failed,
            if r.unfinished > 0 {
                format!(" · {} unfinished", r.unfinished)
            } else {
                String::new()
            },
            if r.infra_failed > 0 {
                format!(" · {} infra, not scored", r.infra_failed)
            } else {
                String::new()
            }
        ),
    );
    if r.pass_at_k.len() > 1 {
        let most = r.pass_at_k.keys().last().copied().unwrap_or(1);
        card(
            s,
            "",
            "pass@1",
            &pct(r.pass_at_1),
            &format!("pass@{most} {}", pct(r.pass_at_k[&most])),
        );
    }
    if let Some(m) = r.mean_reward {
        card(
            s,
            "",
            "Mean reward",
            &format!("{m:.3}"),
            "over the scored results",
        );
    }
    let classes = |k: &str| r.failure_classes.get(k).copied().unwrap_or(0);
    card(
        s,
        if r.infra_failed > 0 {
            "verdict bad"
        } else {
            ""
        },
        "Infra failed",
        &pct(r.infra_failed_rate),
        &format!(
            "{} infra (not scored) · {} agent · {} verifier",
            classes("infra"),
            classes("agent"),
            classes("verifier")
        ),
    );
    card(
        s,
        "",
        "Time by phase",
        &human_ms(r.agent_ms),
        &format!(
            "agent · set-up {} · verify {}",
            human_ms(r.setup_ms),
            human_ms(r.verify_ms)
        ),
    );
    card(
        s,
        "",
        "Cost",
        &money(r.cost_usd),
        &if r.cache_read_tokens + r.cache_write_tokens > 0 {
            format!(
                "{} tokens, {} of input from the prompt cache",
                r.tokens,
                pct(r.cache_hit_rate)
            )
        } else {
            format!("{} tokens", r.tokens)
        },
    );
    let lat = |v: Option<i64>| v.map(human_ms).unwrap_or_else(|| "–".into());
    card(
        s,
        "",
        "Latency p50",
        &lat(r.latency_ms.p50),
        &format!(
            "p90 {} · max {}",
            lat(r.latency_ms.p90),
            lat(r.latency_ms.max)
        ),
    );
    let wall = r.wall_ms.map(human_ms).unwrap_or_else(|| "–".into());
    let speedup = match r.wall_ms {
        Some(w) if w > 0 => format!(
            "tasks took {} in all: {:.1}× faster",
            human_ms(r.task_ms_sum),
            r.task_ms_sum as f64 / w as f64
        ),
        _ => format!("tasks took {} in all", human_ms(r.task_ms_sum)),
    };
    card(s, "", "Wall time", &wall, &speedup);
    s.push_str("</div>");
}

fn categories_and_failures(s: &mut String, r: &EvalReport) {
    s.push_str(
        "<div class=\"grid2\" style=\"margin-top:14px\"><div class=\"panel\"><h3>By category</h3>",
    );
    for (name, t) in &r.by_category {
        let _ = write!(
            s,
            "<div class=\"cat\"><div>{}</div><div class=\"bar\"><i style=\"width:{:.1}%\"></i></div>\
             <div class=\"n\">{} / {} · {}</div></div>",
            esc(name),
            t.pass_rate * 100.0,
            t.passed,
            t.total,
            pct(t.pass_rate)
        );
    }
    s.push_str("</div><div class=\"panel\"><h3>Failures by reason</h3><div class=\"chips\">");
    if r.failures_by_reason.is_empty() {
        s.push_str("<span class=\"none\">no failures</span>");
    }
    for (reason, n) in &r.failures_by_reason {
        let _ = write!(s, "<span>{} × {n}</span>", esc(reason));
    }
    s.push_str("</div></div></div>");
}

fn outcome(c: &CaseResult) -> (&'static str, &'static str) {
    if c.passed {
        ("pass", "passed")
    } else if c.failure_class == Some(super::outcome::FailureClass::Infra) {
        ("wait", "infra")
    } else if c.duration_ms.is_none()
        && !matches!(
            c.state.as_str(),
            "complete" | "incomplete" | "failed" | "cancelled"
        )
    {
        ("wait", "unfinished")
    } else {
        ("fail", "failed")
    }
}

fn table(s: &mut String, r: &EvalReport) {
    s.push_str(
        "<h2>Cases</h2><div class=\"tools\"><input id=\"filter\" type=\"search\" placeholder=\"Filter cases…\" aria-label=\"filter\">\
         <select id=\"outcome\" aria-label=\"outcome\"><option value=\"\">all outcomes</option>\
         <option value=\"passed\">passed</option><option value=\"failed\">failed</option>\
         <option value=\"unfinished\">unfinished</option><option value=\"infra\">infra (not scored)</option></select>\
         <select id=\"category\" aria-label=\"category\"><option value=\"\">all categories</option>",
    );
    for name in r.by_category.keys() {
        let _ = write!(s, "<option value=\"{0}\">{0}</option>", esc(name));
    }
    s.push_str(
        "</select><span class=\"count\" id=\"shown\"></span></div>\
         <table id=\"cases\"><thead><tr><th>Case</th><th>Category</th><th class=\"num\">Repeat</th>\
         <th>Outcome</th><th>State</th><th class=\"num\">Score</th><th class=\"num\">Duration</th>\
         <th class=\"num\">Queue wait</th><th class=\"num\">Steps</th><th class=\"num\">Tokens</th>\
         <th class=\"num\">Cost</th><th class=\"num\">Verify</th><th class=\"num\">Reward</th>\
         <th>Class</th><th class=\"num\">Set-up</th><th class=\"num\">Agent</th>\
         <th class=\"num\">Verify time</th></tr></thead><tbody>",
    );
    for c in &r.cases {
        let (class, word) = outcome(c);
        let state = match &c.reason {
            Some(reason) if reason != &c.state => format!("{} ({reason})", c.state),
            _ => c.state.clone(),
        };
        let d = c.duration_ms.unwrap_or(-1);
        let q = c.queue_wait_ms.unwrap_or(-1);
        let ms = |v: Option<i64>| v.map(human_ms).unwrap_or_else(|| "–".into());
        let _ = write!(
            s,
            "<tr data-outcome=\"{word}\" data-category=\"{cat}\" data-details=\"case-{id}-{rep}\">\
             <td data-v=\"{id}\"><strong>{id}</strong></td><td data-v=\"{cat}\">{cat}</td>\
             <td class=\"num\" data-v=\"{rep}\">{rep}</td>\
             <td data-v=\"{word}\"><span class=\"badge {class}\">{word}</span></td>\
             <td data-v=\"{st}\">{st}</td><td class=\"num\" data-v=\"{score}\">{score_pct}</td>\
             <td class=\"num\" data-v=\"{d}\">{dur}</td><td class=\"num\" data-v=\"{q}\">{qw}</td>\
             <td class=\"num\" data-v=\"{steps}\">{steps}</td><td class=\"num\" data-v=\"{tok}\">{tok}</td>\
             <td class=\"num\" data-v=\"{cost}\">{cost_s}</td><td class=\"num\" data-v=\"{va}\">{va}</td>\
             <td class=\"num\" data-v=\"{rw}\">{reward}</td><td data-v=\"{class_}\">{class_}</td>\
             <td class=\"num\" data-v=\"{su}\">{setup}</td><td class=\"num\" data-v=\"{ag}\">{agent}</td>\
             <td class=\"num\" data-v=\"{vf}\">{verify}</td></tr>",
            id = esc(&c.id),
            cat = esc(&c.category),
            rep = c.repeat,
            st = esc(&state),
            score = c.score,
            score_pct = pct(c.score),
            dur = ms(c.duration_ms),
            qw = ms(c.queue_wait_ms),
            steps = c.steps,
            tok = c.tokens,
            cost = c.cost_usd,
            cost_s = money(c.cost_usd),
            va = c.verify_attempts,
            rw = c.reward.unwrap_or(-1.0),
            reward = c
                .reward
                .map(|r| format!("{r:.2}"))
                .unwrap_or_else(|| "–".into()),
            class_ = c.failure_class.map(|f| f.as_str()).unwrap_or(""),
            su = c.setup_ms.unwrap_or(-1),
            setup = ms(c.setup_ms),
            ag = c.agent_ms.unwrap_or(-1),
            agent = ms(c.agent_ms),
            vf = c.verify_ms.unwrap_or(-1),
            verify = ms(c.verify_ms),
        );
    }
    s.push_str("</tbody></table>");
}

fn details(s: &mut String, c: &CaseResult) {
    let (class, word) = outcome(c);
    let _ = write!(
        s,
        "<details class=\"case\" id=\"case-{id}-{rep}\"><summary>{id} <span class=\"muted\">#{rep}</span> \
         <span class=\"badge {class}\">{word}</span> <span class=\"muted\">{title}</span></summary><div class=\"body\">\
         <div class=\"kv\"><div>task</div><div><code>{task}</code></div><div>model</div><div>{model}</div>\
         <div>attempts</div><div>{attempts}</div><div>results</div><div><code>{results}</code></div>\
         <div>reward</div><div>{reward}</div><div>failure</div><div>{class_}</div></div>\
         <h4>Score</h4><ul class=\"why\">",
        id = esc(&c.id),
        rep = c.repeat,
        title = esc(&c.title),
        task = esc(&c.task_id),
        model = esc(&c.model),
        attempts = c.attempts,
        results = esc(c.results.as_deref().unwrap_or("not collected")),
        reward = match (c.reward, &c.tests) {
            (Some(r), Some(t)) => format!(
                "{r} ({} passed, {} failed, {} skipped)",
                t.passed, t.failed, t.skipped
            ),
            (Some(r), None) => r.to_string(),
            (None, _) => "none".into(),
        },
        class_ = match c.failure_class {
            None if c.passed => "none (passed)",
            None => "–",
            Some(f) => f.as_str(),
        },
    );
    for w in &c.why {
        let (class, text) = match w.split_once(": ") {
            Some(("pass", t)) => ("ok", t),
            Some(("fail", t)) => ("no", t),
            _ => ("", w.as_str()),
        };
        let _ = write!(s, "<li class=\"{class}\">{}</li>", esc(text));
    }
    s.push_str("</ul>");
    if let Some(d) = &c.detail {
        let _ = write!(s, "<h4>Detail</h4><pre>{}</pre>", esc(d));
    }
    let _ = write!(s, "<h4>Prompt</h4><pre>{}</pre>", esc(&c.prompt));
    let _ = write!(
        s,
        "<h4>Completion message</h4>{}",
        match &c.message {
            Some(m) => format!("<pre>{}</pre>", esc(m)),
            None => "<p class=\"muted\">none (the task did not complete)</p>".into(),
        }
    );
    if !c.verify.is_empty() {
        s.push_str("<h4>Verify</h4>");
        for v in &c.verify {
            let _ = write!(
                s,
                "<pre>attempt {} · $ {} → {}{}\n{}</pre>",
                v.attempt,
                esc(&v.command),
                if v.passed { "passed" } else { "failed" },
                v.exit_code
                    .map(|e| format!(" (exit {e})"))
                    .unwrap_or_default(),
                esc(&v.output)
            );
        }
    }
    s.push_str("<h4>Patch</h4>");
    match c
        .results
        .as_deref()
        .map(|d| super::score::read_below(Path::new(d), crate::report::PATCH))
    {
        Some(Ok(p)) if p.trim().is_empty() => s.push_str("<p class=\"muted\">no changes</p>"),
        Some(Ok(p)) => {
            s.push_str("<pre>");
            for line in cap(&p, MAX_PATCH).lines() {
                let class = if line.starts_with("+++") || line.starts_with("---") {
                    ""
                } else if line.starts_with('+') {
                    "add"
                } else if line.starts_with('-') {
                    "del"
                } else if line.starts_with("@@") {
                    "hunk"
                } else {
                    ""
                };
                let _ = writeln!(s, "<span class=\"{class}\">{}</span>", esc(line));
            }
            s.push_str("</pre>");
        }
        Some(Err(e)) => {
            let _ = write!(s, "<p class=\"muted\">no patch: {}</p>", esc(&e));
        }
        None => s.push_str("<p class=\"muted\">no results were collected</p>"),
    }
    s.push_str("</div></details>");
}

#[cfg(test)]
#[path = "html_tests.rs"]
mod tests;
