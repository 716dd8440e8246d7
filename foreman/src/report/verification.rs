//! Verification in what a user takes away: the report's section (each
//! attempt's checks) and `.saheeli/verify-N.log`, one file per attempt
//! with every command's output and the assessor's feedback. Both are made
//! from the foreman's records; a `verify-*.log` the agent left in
//! `.saheeli/` is removed, so none can pass for Saheeli's.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use saheeli_protocol::verify::{Check, CheckKind};

use super::markdown::{Report, cell, fenced};
use super::write::replace_file;
use crate::output::printable;

/// `verify-N.log`, relative to a results directory.
pub(crate) fn log_name(attempt: u32) -> String {
    format!(".saheeli/verify-{attempt}.log")
}

/// Writes one log per attempt into `results`, after removing any
/// `verify-*.log` already in its `.saheeli/`. Blocking.
pub(crate) fn write_verify_logs(results: &Path, checks: &[Check]) -> anyhow::Result<()> {
    // Listed by a handle: a `.saheeli` that is a link is not listed through.
    for name in super::write::names_in(results, ".saheeli")? {
        if name.starts_with("verify-") && name.ends_with(".log") {
            super::write::remove(results, &format!(".saheeli/{name}"))?;
        }
    }
    let last = checks.iter().map(|c| c.attempt).max().unwrap_or(0);
    for attempt in 1..=last {
        let these: Vec<&Check> = checks.iter().filter(|c| c.attempt == attempt).collect();
        replace_file(results, &log_name(attempt), |w| {
            w.write_all(log_text(attempt, &these).as_bytes())
        })
        .with_context(|| format!("writing `{}`", log_name(attempt)))?;
    }
    Ok(())
}

/// One attempt's log.
fn log_text(attempt: u32, checks: &[&Check]) -> String {
    let passed = !checks.is_empty() && checks.iter().all(|c| c.passed);
    let mut s = format!(
        "attempt {attempt}: {}\n",
        if passed { "passed" } else { "failed" }
    );
    for c in checks {
        match c.kind {
            CheckKind::Verify => {
                let end = match c.exit_code {
                    Some(code) => format!("exit {code}"),
                    None => "no exit code (stopped, or not run)".into(),
                };
                let _ = write!(s, "\n$ {}\n{end} after {} ms\n", c.command, c.duration_ms);
            }
            CheckKind::Assess => {
                let met = match (c.passed, c.limited) {
                    (true, _) => "met",
                    (false, true) => "limited",
                    (false, false) => "not met",
                };
                let _ = write!(s, "\n== assess: {met} after {} ms\n", c.duration_ms);
            }
        }
        s.push_str(&c.output);
        if !c.output.ends_with('\n') {
            s.push('\n');
        }
        if let Some(g) = &c.graded {
            let _ = writeln!(s, "reward: {} (from {})", g.reward, g.source);
        }
        for f in &c.findings {
            let _ = writeln!(s, "finding: {f}");
        }
    }
    s
}

impl Report {
    pub(super) fn verification_section(&self) -> String {
        let Some((checks, allowed)) = &self.verification else {
            return "None configured (no `verify` or `assess`).\n".into();
        };
        let attempts = checks.iter().map(|c| c.attempt).max().unwrap_or(0);
        if attempts == 0 {
            return format!(
                "No attempt was made ({allowed} allowed): the agent never called `task_complete`.\n"
            );
        }
        let last_passed = checks
            .iter()
            .filter(|c| c.attempt == attempts)
            .all(|c| c.passed);
        let mut s = format!(
            "{attempts} attempt{} of {allowed} allowed; the last {}. Each attempt's output is in \
             `.saheeli/verify-N.log`.\n\n| attempt | check | result | exit code | time |\n|---|---|---|---|---|\n",
            if attempts == 1 { "" } else { "s" },
            if last_passed { "passed" } else { "failed" }
        );
        for c in checks {
            let result = match (c.kind, c.passed) {
                (CheckKind::Assess, false) if c.limited => "limited",
                (CheckKind::Assess, true) => "met",
                (CheckKind::Assess, false) => "not met",
                (_, true) => "passed",
                (_, false) => "failed",
            };
            let code = c.exit_code.map_or("-".to_string(), |c| c.to_string());
            let _ = writeln!(
                s,
                "| {} | {} | {result} | {code} | {} ms |",
                c.attempt,
                cell(&c.command),
                c.duration_ms
            );
        }
        if let Some((c, g)) = checks
            .iter()
            .rev()
            .filter(|c| c.kind == saheeli_protocol::verify::CheckKind::Verify)
            .find_map(|c| c.graded.as_ref().map(|g| (c, g)))
        {
            let _ = write!(s, "\nReward on attempt {}: **{}**", c.attempt, g.reward);
            if g.rewards.len() > 1 {
                let all: Vec<String> = g.rewards.iter().map(|(k, v)| format!("{k} {v}")).collect();
                let _ = write!(s, " ({})", cell(&printable(&all.join(", "))));
            }
            let _ = write!(s, ", from {}", cell(&printable(&g.source)));
            if let Some(t) = g.tests {
                let _ = write!(
                    s,
                    "; tests: {} passed, {} failed, {} skipped",
                    t.passed, t.failed, t.skipped
                );
            }
            s.push_str(".\n");
        }
        if let Some(a) = checks.iter().rev().find(|c| c.kind == CheckKind::Assess) {
            let _ = write!(
                s,
                "\nThe assessor on attempt {}:\n\n{}",
                a.attempt,
                fenced(&printable(&a.output))
            );
            if a.limited {
                s.push_str(
                    "\nThe assessor answered `limited`: more attempts could not help, so no \
                     further attempt was made.\n",
                );
            }
            if !a.findings.is_empty() {
                s.push_str("\nIts findings:\n\n");
                for f in &a.findings {
                    let _ = writeln!(s, "- {}", cell(&printable(f)));
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(attempt: u32, kind: CheckKind, passed: bool, output: &str) -> Check {
        Check {
            attempt,
            kind,
            command: if kind == CheckKind::Assess {
                "assess"
            } else {
                "sh test.sh"
            }
            .into(),
            exit_code: (kind == CheckKind::Verify).then_some(if passed { 0 } else { 1 }),
            duration_ms: 12,
            passed,
            output: output.into(),
            limited: false,
            findings: Vec::new(),
            graded: None,
        }
    }

    #[test]
    fn one_log_per_attempt_and_planted_logs_go() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".saheeli")).unwrap();
        std::fs::write(d.path().join(".saheeli/verify-9.log"), "forged").unwrap();
        let checks = [
            check(1, CheckKind::Verify, false, "FAIL add"),
            check(2, CheckKind::Verify, true, "ok"),
            check(2, CheckKind::Assess, true, "fine"),
        ];
        write_verify_logs(d.path(), &checks).unwrap();
        let one = std::fs::read_to_string(d.path().join(".saheeli/verify-1.log")).unwrap();
        assert_eq!(
            one,
            "attempt 1: failed\n\n$ sh test.sh\nexit 1 after 12 ms\nFAIL add\n"
        );
        let two = std::fs::read_to_string(d.path().join(".saheeli/verify-2.log")).unwrap();
        assert!(two.starts_with("attempt 2: passed\n"), "{two}");
        assert!(two.contains("== assess: met after 12 ms\nfine\n"), "{two}");
        assert!(!d.path().join(".saheeli/verify-9.log").exists());
    }
}
