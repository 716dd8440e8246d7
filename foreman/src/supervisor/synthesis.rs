//! `report: synthesized` (issue 29): the evidence for the report's
//! synthesis call (the objective, the agent's own account, its
//! verification, the end of its audit log), asked of the task's gateway
//! before its meter is read, so the call counts in the task's usage.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::Path;

use saheeli_protocol::TaskId;
use saheeli_protocol::verify::Check;
use tracing::info;

use super::Ctx;
use crate::collect::{self, Line};
use crate::gateway::Gateway;
use crate::output;
use crate::store::TaskRow;

/// How much of the audit log's end the call reads.
const AUDIT_TAIL: usize = 24 * 1024;

/// How much of each check's output it reads.
const CHECK_OUTPUT: usize = 2 * 1024;

/// The section's text, or why there is none.
pub(super) async fn synthesize(
    ctx: &Ctx,
    task: &TaskRow,
    gateway: &Gateway,
    dest: &Path,
) -> Result<String, String> {
    let id = task.id;
    let checks = ctx
        .db(move |s| s.verify_checks(id))
        .await
        .unwrap_or_default();
    let dir = dest.to_path_buf();
    let (audit, message) = tokio::task::spawn_blocking(move || {
        let message = collect::read_completion(&dir, id)
            .ok()
            .flatten()
            .map(|c| c.message);
        (audit_tail(&dir, id), message)
    })
    .await
    .unwrap_or_default();
    let evidence = evidence(task, message.as_deref(), &checks, &audit);
    // A replay's script answers (`synthesis:`); None there: it has none.
    let replay = task.spec.replay.as_ref().map(|r| r.synthesis.clone());
    let r = gateway.synthesize(evidence, replay).await;
    match &r {
        Ok(t) => info!(task_id = %id, bytes = t.len(), "report synthesis written"),
        Err(why) => info!(task_id = %id, %why, "no report synthesis"),
    }
    r
}

/// The last [`AUDIT_TAIL`] bytes of the audit log's lines, as people read
/// them (`task logs`), and whether earlier lines were left out.
fn audit_tail(dir: &Path, id: TaskId) -> (Vec<String>, bool) {
    let Ok(Some(lines)) = collect::audit_lines(dir, id) else {
        return (Vec::new(), false);
    };
    let mut kept: VecDeque<String> = VecDeque::new();
    let (mut bytes, mut dropped) = (0usize, false);
    for line in lines {
        let text = match line {
            Ok(Line::Text(l)) => output::audit_line(&l),
            Ok(Line::TooLong(n)) => format!("[an audit line of {n} bytes, not shown]"),
            Ok(Line::Truncated) | Err(_) => break,
        };
        bytes += text.len() + 1;
        kept.push_back(text);
        while bytes > AUDIT_TAIL && kept.len() > 1 {
            bytes -= kept.pop_front().map_or(0, |l| l.len() + 1);
            dropped = true;
        }
    }
    (kept.into(), dropped)
}

fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The user message of the synthesis call.
fn evidence(
    task: &TaskRow,
    message: Option<&str>,
    checks: &[Check],
    (audit, dropped): &(Vec<String>, bool),
) -> String {
    let mut s = format!(
        "# Objective\n\n{}\n\n{}\n\n# The agent's own account\n\n{}\n\n# Verification\n\n",
        task.title,
        task.spec.body.trim(),
        message.unwrap_or("(it never called task_complete)")
    );
    if checks.is_empty() {
        s.push_str("No verification ran.\n");
    }
    for c in checks {
        let verdict = match (c.passed, c.limited) {
            (true, _) => "passed",
            (false, true) => "limited",
            (false, false) => "failed",
        };
        let _ = writeln!(
            s,
            "- attempt {}: `{}` {verdict}\n{}",
            c.attempt,
            c.command,
            cut(&c.output, CHECK_OUTPUT)
        );
        for f in &c.findings {
            let _ = writeln!(s, "  finding: {f}");
        }
    }
    s.push_str("\n# The audit log");
    if *dropped {
        s.push_str(" (its end only)");
    }
    s.push_str("\n\n");
    for l in audit {
        s.push_str(l);
        s.push('\n');
    }
    s
}
