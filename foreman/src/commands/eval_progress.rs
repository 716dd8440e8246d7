//! The progress of an eval run on stderr: a bar on a terminal, a plain
//! line per ended case otherwise. Read from the store, so it is the same
//! whether this process or a running `saheeli serve` runs the tasks.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::eval::{self, Suite};

use super::open_store;

/// How often the cases' tasks are looked at.
const LOOK: Duration = Duration::from_millis(300);

/// Shows progress (a bar on a terminal, lines otherwise) until every
/// case's task has ended (then cancels `done`, returns true) or `drain`.
pub(super) async fn watch(
    cfg: Config,
    run_id: String,
    suite: Suite,
    total: usize,
    done: CancellationToken,
    drain: CancellationToken,
) -> anyhow::Result<bool> {
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
        let (cfg2, id2, suite2) = (cfg.clone(), run_id.clone(), suite.clone());
        let known: Vec<(String, u32)> = seen.keys().cloned().collect();
        let ended = tokio::task::spawn_blocking(move || newly_ended(&cfg2, &id2, &suite2, &known))
            .await
            .context("progress thread panicked")??;
        for (case, r, passed, line) in ended {
            seen.insert((case, r), passed);
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

/// Cases (and repeats) whose task chain ended since `known`: each scored
/// once, with a line for people.
fn newly_ended(
    cfg: &Config,
    run_id: &str,
    suite: &Suite,
    known: &[(String, u32)],
) -> anyhow::Result<Vec<(String, u32, bool, String)>> {
    let store = open_store(cfg)?;
    let mut out = Vec::new();
    for link in store.eval_links(run_id)? {
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
        let Some(case) = suite.cases.iter().find(|c| c.id == link.case_id) else {
            continue;
        };
        let r = eval::case_result(&store, case, &link)?;
        let line = format!(
            "{} {} #{} {} ({}{})",
            if r.passed { "✓" } else { "✗" },
            r.id,
            r.repeat,
            if r.passed { "passed" } else { "failed" },
            r.state,
            r.duration_ms
                .map(|d| format!(", {:.1}s", d as f64 / 1000.0))
                .unwrap_or_default()
        );
        out.push((link.case_id, link.repeat, r.passed, line));
    }
    Ok(out)
}
