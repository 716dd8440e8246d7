//! `saheeli task diff` and `saheeli task report`: print what the reconciler
//! wrote beside an ended task's results (`.saheeli/changes.patch`,
//! `report.md`).

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::cli::IdArgs;
use crate::collect::{self, CappedLines, Line};
use crate::config::Config;
use crate::output::printable;
use crate::report::{PATCH, REPORT};
use crate::store::TaskRow;

use super::open_existing_store;

/// `task diff ID`: the task's changes as a patch for `git apply`.
pub(crate) async fn diff(cfg: &Config, args: IdArgs) -> anyhow::Result<ExitCode> {
    print_results_file(cfg, &args.id, PATCH, "patch").await
}

/// `task report ID`: the task's report.md.
pub(crate) async fn report(cfg: &Config, args: IdArgs) -> anyhow::Result<ExitCode> {
    print_results_file(cfg, &args.id, REPORT, "report").await
}

async fn print_results_file(
    cfg: &Config,
    id: &str,
    rel: &'static str,
    what: &'static str,
) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(cfg)?;
    let t = store.require(id)?;
    let dir = results_of(&t, what)?;
    tokio::task::spawn_blocking(move || print_file(&t, &dir, rel, what))
        .await
        .context("printing thread panicked")??;
    Ok(ExitCode::SUCCESS)
}

/// The results directory of an ended task, or why it has no `what`.
fn results_of(t: &TaskRow, what: &str) -> anyhow::Result<PathBuf> {
    let short = t.id.short();
    if !t.state.is_terminal() {
        bail!(
            "task `{}` has no {what} yet: it is {}; wait for it (`saheeli task status {short} \
             --watch`), then ask again",
            t.id,
            t.state
        );
    }
    match &t.results_path {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => bail!(
            "task `{}` has no {what}: it ended {}{} before a workspace was collected; \
             `saheeli task status {short}` says why",
            t.id,
            t.state,
            t.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
    }
}

/// Copies `rel` of the results to stdout (control characters escaped when
/// stdout is a terminal: the file holds what the agent wrote). Blocking.
fn print_file(t: &TaskRow, dir: &Path, rel: &str, what: &str) -> anyhow::Result<()> {
    let path = dir.join(rel);
    let Some(mut file) = collect::open_regular(&path)
        .with_context(|| format!("reading the {what} of task `{}`", t.id))?
    else {
        bail!(
            "task `{}` has no {what} `{}`: it was not written (results cut at the size cap, the \
             submitted workspace gone, or a Saheeli older than the {what}); the log of \
             `saheeli serve` says why",
            t.id,
            path.display()
        );
    };
    let mut out = io::stdout().lock();
    if !out.is_terminal() {
        io::copy(&mut file, &mut out).with_context(|| format!("reading `{}`", path.display()))?;
        return Ok(out.flush()?);
    }
    for line in CappedLines::new(file, 4 << 20, u64::MAX) {
        match line.with_context(|| format!("reading `{}`", path.display()))? {
            Line::Text(l) => writeln!(out, "{}", printable(&l))?,
            Line::TooLong(n) => writeln!(out, "[a line of {n} bytes, not shown]")?,
            Line::Truncated => {}
        }
    }
    Ok(())
}
