//! The progress of an eval run on stderr: a bar on a terminal, a plain
//! line per ended case otherwise. Read from the store, so it is the same
//! whether this process or a running `saheeli serve` runs the tasks.
//!
//! A result the platform failed (`infra`, eval/outcome.rs) is submitted
//! again here, up to `--infra-retries` times: its last task queued anew
//! as a retry (the chain of attempts the report follows to its last).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::eval::{self, FailureClass, Suite};

use super::open_store;

/// How often the cases' tasks are looked at.
const LOOK: Duration = Duration::from_millis(300);

/// The run a watcher follows.
#[derive(Clone)]
pub(super) struct Watched {
    pub run_id: String,
    pub suite: Suite,
    pub repeat: u32,
    /// How often an infra-failed result is submitted again.
    pub infra_retries: u32,
}

/// A result whose task chain ended: to count, or to submit again.
struct Ended {
    case: String,
    repeat: u32,
    passed: bool,
    line: String,
    /// The last task, to retry (an infra failure under the policy).
    retry: Option<String>,
}

/// Shows progress (a bar on a terminal, lines otherwise) until every
/// case's task has ended (then cancels `done`, returns true) or `drain`.
pub(super) async fn watch(
    cfg: Config,
    w: Watched,
    done: CancellationToken,
    drain: CancellationToken,
) -> anyhow::Result<bool> {
    let total: usize = w
        .suite
        .cases
        .iter()
        .map(|c| c.runs(w.repeat) as usize)
        .sum();
    let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
        let b = indicatif::ProgressBar::new(total as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30.green/red} {pos}/{len} cases {msg} [{elapsed}]",
            )
            .expect("a valid template"),
        );
        b
    });
    let mut seen: BTreeMap<(String, u32), bool> = BTreeMap::new();
    loop {
        let draining = drain.is_cancelled();
        let (cfg2, w2) = (cfg.clone(), w.clone());
        let known: Vec<(String, u32)> = seen.keys().cloned().collect();
        let ended = tokio::task::spawn_blocking(move || newly_ended(&cfg2, &w2, &known))
            .await
            .context("progress thread panicked")??;
        for e in ended {
            let line = match &e.retry {
                Some(task) => match crate::ops::retry_task(&cfg, task).await {
                    Ok(r) => {
                        let line = format!("{}: submitted again as {}", e.line, r.id.short());
                        match &bar {
                            Some(b) => b.println(line),
                            None => eprintln!("{line}"),
                        }
                        continue;
                    }
                    Err(err) => format!("{}: could not be submitted again ({err:#})", e.line),
                },
                None => e.line,
            };
            seen.insert((e.case, e.repeat), e.passed);
            let passed_n = seen.values().filter(|p| **p).count();
            let failed_n = seen.len() - passed_n;
            match &bar {
                Some(b) => {
                    b.set_position(seen.len() as u64);
                    b.set_message(format!("{passed_n} passed, {failed_n} failed"));
                    b.println(line);
                }
                None => eprintln!(
                    "{line} [{}/{total} done: {passed_n} passed, {failed_n} failed]",
                    seen.len()
                ),
            }
        }
        if seen.len() >= total {
            if let Some(b) = &bar {
                b.finish_and_clear();
            }
            done.cancel();
            return Ok(true);
        }
        if draining {
            if let Some(b) = &bar {
                b.abandon();
            }
            return Ok(false);
        }
        tokio::select! {
            _ = tokio::time::sleep(LOOK) => {}
            _ = drain.cancelled() => {}
        }
    }
}

/// Cases (and samples) whose task chain ended since `known`: each scored
/// once, with a line for people; an infra failure with retries left is
/// to be submitted again instead.
fn newly_ended(cfg: &Config, w: &Watched, known: &[(String, u32)]) -> anyhow::Result<Vec<Ended>> {
    let store = open_store(cfg)?;
    let mut out = Vec::new();
    for link in store.eval_links(&w.run_id)? {
        if known
            .iter()
            .any(|(c, r)| c == &link.case_id && *r == link.repeat)
        {
            continue;
        }
        let (_, ended) = eval::last_attempt(&store, link.task_id)?;
        if !ended {
            continue;
        }
        let Some(case) = w.suite.cases.iter().find(|c| c.id == link.case_id) else {
            continue;
        };
        let r = eval::case_result(&store, case, &link)?;
        let infra = r.failure_class == Some(FailureClass::Infra);
        let ended = match &r.reason {
            Some(reason) if reason != &r.state => format!("{} ({reason})", r.state),
            _ => r.state.clone(),
        };
        let line = format!(
            "{} {} #{} {}{} ({ended}{})",
            if r.passed { "✓" } else { "✗" },
            r.id,
            r.repeat,
            if r.passed { "passed" } else { "failed" },
            match r.failure_class {
                Some(c) if c != FailureClass::Agent => format!(" [{}]", c.as_str()),
                _ => String::new(),
            },
            r.duration_ms
                .map(|d| format!(", {:.1}s", d as f64 / 1000.0))
                .unwrap_or_default()
        );
        let retry = (infra && r.infra_attempts <= w.infra_retries).then(|| r.task_id.clone());
        out.push(Ended {
            case: link.case_id,
            repeat: link.repeat,
            passed: r.passed,
            line: match &retry {
                Some(_) => format!(
                    "{line}: an infra failure, retry {} of {}",
                    r.infra_attempts, w.infra_retries
                ),
                None => line,
            },
            retry,
        });
    }
    Ok(out)
}

/// An ended run on stdout: report.json with `--json`, else one line and
/// where the HTML report is.
pub(super) fn print_summary(
    report: &eval::EvalReport,
    json_text: &str,
    state: &str,
    dir: &Path,
    json: bool,
) {
    if json {
        outln!("{}", json_text.trim_end());
    } else {
        let infra = match report.infra_failed {
            0 => String::new(),
            n => format!(" ({n} infra failures not scored)"),
        };
        outln!(
            "{}: {:.0}% passed ({} of {}{infra}), threshold {:.0}%: {}",
            crate::output::clean(&report.suite),
            report.pass_rate * 100.0,
            report.passed,
            report.passed + report.failed + report.unfinished,
            report.pass_threshold * 100.0,
            state
        );
        outln!("{}", dir.join("report.html").display());
    }
}
