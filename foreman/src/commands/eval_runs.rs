//! `saheeli eval list` (past runs, the JSON history) and `saheeli eval
//! compare RUN_A RUN_B` (from the two runs' report.json).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{ContentArrangement, Table};
use serde::Serialize;

use crate::cli::{EvalCompareArgs, EvalListArgs};
use crate::config::Config;
use crate::eval::{self, EvalReport};
use crate::store::{EvalRunRow, now_ms};

use super::{open_existing_store, open_store};

/// One run as `eval list --json` prints it.
#[derive(Debug, Serialize)]
struct RunView {
    run_id: String,
    /// The suite's name.
    suite: String,
    suite_path: String,
    started: String,
    ended: Option<String>,
    /// `running`, `interrupted` (resume it), `passed` or `failed`.
    state: String,
    pass_rate: Option<f64>,
    report: String,
}

impl RunView {
    fn new(r: &EvalRunRow, now: i64) -> RunView {
        RunView {
            run_id: r.id.clone(),
            suite: r.suite_name.clone(),
            suite_path: r.suite_path.clone(),
            started: eval::rfc3339(r.started_at),
            ended: r.ended_at.map(eval::rfc3339),
            state: r.shown_state(now).to_string(),
            pass_rate: r.pass_rate,
            report: Path::new(&r.report_dir)
                .join("report.json")
                .display()
                .to_string(),
        }
    }
}

pub(crate) async fn eval_list(cfg: &Config, args: EvalListArgs) -> anyhow::Result<ExitCode> {
    let runs = if cfg.database().exists() {
        open_store(cfg)?.eval_runs()?
    } else {
        Vec::new()
    };
    let now = now_ms();
    let views: Vec<RunView> = runs.iter().map(|r| RunView::new(r, now)).collect();
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&views)?);
        return Ok(ExitCode::SUCCESS);
    }
    if views.is_empty() {
        outln!("no eval runs yet; start one with `saheeli eval SUITE.yaml`");
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(["RUN_ID", "SUITE", "STARTED", "STATE", "PASS_RATE"]);
    for v in &views {
        t.add_row([
            v.run_id.clone(),
            crate::output::clean(&v.suite),
            v.started.clone(),
            v.state.clone(),
            v.pass_rate
                .map(|p| format!("{:.0}%", p * 100.0))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    outln!("{t}");
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn eval_compare(cfg: &Config, args: EvalCompareArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(cfg)?;
    let load = |query: &str| -> anyhow::Result<EvalReport> {
        let Some(run) = store.eval_run(query)? else {
            bail!("no eval run with id `{query}`; `saheeli eval list` shows them");
        };
        let path = Path::new(&run.report_dir).join("report.json");
        if run.state == "running" || !path.exists() {
            bail!(
                "eval run `{}` has no report yet ({}); finish it with `saheeli eval --resume {}`",
                run.id,
                run.shown_state(now_ms()),
                run.id
            );
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading `{}`", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("reading `{}`", path.display()))
    };
    let a = load(&args.run_a)?;
    let b = load(&args.run_b)?;
    let c = eval::compare(&a, &b);
    if let Some(file) = &args.html {
        std::fs::write(file, eval::compare_html(&c))
            .with_context(|| format!("writing `{}`", file.display()))?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        outln!("{}", eval::compare_table(&c));
    }
    Ok(ExitCode::SUCCESS)
}
