//! `saheeli eval SUITE.yaml` and `eval --resume RUN_ID`: every case (and
//! repeat) checked first, then queued as an ordinary task linked to the
//! run, served here (or by a running `saheeli serve` with `--no-serve`)
//! until all have ended, then scored into `report.json` and `report.html`.
//!
//! A run is held by one process at a time through a heartbeat in its row;
//! a run whose process died (`kill -9`) shows as interrupted, and
//! `--resume` submits only the cases that have no task yet: tasks already
//! queued or running are picked up (by lease takeover), never doubled.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use saheeli_protocol::TaskId;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use tokio_util::sync::CancellationToken;

use crate::cli::EvalArgs;
use crate::config::Config;
use crate::eval::{self, Overrides, Suite};
use crate::reconciler::{self, ServeOptions};
use crate::spec::TaskSpec;
use crate::store::{EvalRunRow, Store, now_ms};

use super::{context, open_existing_store, open_store, signals};

/// How often the eval process renews its hold on the run, and how long
/// a hold lasts without renewal.
const BEAT: Duration = Duration::from_secs(1);
const HOLD: Duration = Duration::from_secs(5);

/// `--infra-retries`' default.
pub(super) const INFRA_RETRIES: u32 = 2;

fn default_infra_retries() -> u32 {
    INFRA_RETRIES
}

/// The options a run was started with (the `options` column), so a
/// resumed run is the same run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct RunOptions {
    pub repeat: u32,
    /// How often an infra-failed result is submitted again.
    #[serde(default = "default_infra_retries")]
    pub infra_retries: u32,
    pub model: Option<String>,
    pub params: Vec<String>,
    pub concurrency: Option<crate::config::Concurrency>,
}

pub(crate) async fn eval(cfg: &Config, args: EvalArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = cfg.clone();
    if let Some(c) = args.concurrency {
        cfg.file.concurrency = c;
    }
    if let Some(query) = &args.resume
        && let Some(code) = ended(&cfg, query, args.json)?
    {
        return Ok(code);
    }
    let (run, opts, suite_path, suite, text) = match &args.resume {
        Some(query) => resumed(&cfg, query)?,
        None => {
            let path = args
                .suite
                .clone()
                .expect("clap requires SUITE without --resume");
            let repeat = args.repeat.unwrap_or(1);
            if repeat == 0 {
                bail!("`--repeat` must be at least 1");
            }
            let path = match args.from_definitions {
                true => crate::definitions::suite_path(
                    &cfg,
                    &super::open_existing_store(&cfg)?,
                    &path.to_string_lossy(),
                )?,
                false => imported_suite(&cfg, &path)?,
            };
            let (text, digest) = read_suite(&path)?;
            let suite = eval::parse(&path, &text)?;
            let opts = RunOptions {
                repeat,
                infra_retries: args.infra_retries.unwrap_or(INFRA_RETRIES),
                model: args.model.clone(),
                params: args.params.clone(),
                concurrency: args.concurrency,
            };
            let id = TaskId::new().to_string();
            let report_dir = match &args.out {
                Some(d) => std::path::absolute(d)?,
                None => cfg.results_dir().join(format!("eval-{id}")),
            };
            let run = EvalRunRow {
                id,
                suite_name: suite.name.0.clone(),
                suite_path: std::path::absolute(&path)?.display().to_string(),
                suite_digest: digest,
                options: serde_json::to_string(&opts)?,
                report_dir: report_dir.display().to_string(),
                started_at: now_ms(),
                ended_at: None,
                state: "running".into(),
                alive_until: None,
                pass_rate: None,
            };
            (run, opts, path, suite, text)
        }
    };
    // Every case is checked before anything is written.
    let over = Overrides {
        model: opts.model.clone(),
        params: opts.params.clone(),
    };
    let mut specs = Vec::new();
    for case in &suite.cases {
        let checked = eval::case_spec(&cfg, &suite_path, &suite, case, &over).and_then(|spec| {
            if let Some(ws) = &spec.workspace {
                crate::inputs::check_workspace_path(&suite_path, ws, false)?;
            }
            Ok(spec)
        });
        let spec = checked.map_err(|e| case_error(&suite_path, &text, &case.id, e))?;
        specs.push((case.id.clone(), case.runs(opts.repeat), spec));
    }
    let mut store = open_store(&cfg)?;
    if args.resume.is_none() {
        store.create_eval_run(&run)?;
    }
    hold(&mut store, &run.id).await?;
    let total: usize = specs.iter().map(|(_, runs, _)| *runs as usize).sum();
    eprintln!(
        "eval run {} of suite `{}`: {} cases{} = {} results",
        run.id,
        crate::output::clean(&suite.name.0),
        suite.cases.len(),
        if opts.repeat > 1 {
            format!(" × {}", opts.repeat)
        } else {
            String::new()
        },
        total
    );
    let submitted = submit_missing(&cfg, &mut store, &run.id, &specs, &suite_path).await;
    let heartbeat = CancellationToken::new();
    let beating = tokio::spawn(beat(cfg.clone(), run.id.clone(), heartbeat.clone()));
    let outcome = match submitted {
        Ok(n) => {
            if n > 0 {
                eprintln!("submitted {n} tasks");
            }
            follow_and_serve(&cfg, &run, &suite, &opts, args.no_serve).await
        }
        Err(e) => Err(e),
    };
    heartbeat.cancel();
    let _ = beating.await;
    let all_ended = match outcome {
        Ok(done) => done,
        Err(e) => {
            let _ = store.release_eval_run(&run.id);
            return Err(e);
        }
    };
    if !all_ended {
        store.release_eval_run(&run.id)?;
        eprintln!(
            "interrupted: finish it with `saheeli eval --resume {}`",
            run.id
        );
        return Ok(ExitCode::from(1));
    }
    finish(&cfg, &mut store, &run, &suite, opts.repeat, args.json)
}

/// A case that the task checks refused, named by the suite's line.
fn case_error(suite: &Path, text: &str, id: &str, e: anyhow::Error) -> anyhow::Error {
    let inner = format!("{e:#}");
    let prefix = format!("{}: ", suite.display());
    let inner = inner.strip_prefix(&prefix).unwrap_or(&inner);
    match eval::case_line(text, id) {
        Some(line) => anyhow::anyhow!("{}:{line}: case `{id}`: {inner}", suite.display()),
        None => anyhow::anyhow!("{}: case `{id}`: {inner}", suite.display()),
    }
}

/// `--resume` of a run that has ended: its report again (the summary, or
/// report.json with `--json`), and the exit code of its pass rate. None:
/// the run is still going (or was interrupted), so it is resumed.
fn ended(cfg: &Config, query: &str, json: bool) -> anyhow::Result<Option<ExitCode>> {
    /// report.json is ours, but a results directory is shared: cap the read.
    const MAX_REPORT: u64 = 64 << 20;
    use std::io::Read as _;
    let store = open_existing_store(cfg)?;
    let Some(run) = store.eval_run(query)? else {
        bail!("no eval run with id `{query}`; `saheeli eval list` shows them");
    };
    if run.state == "running" {
        return Ok(None);
    }
    let dir = PathBuf::from(&run.report_dir);
    let path = dir.join("report.json");
    let mut text = String::new();
    std::fs::File::open(&path)
        .and_then(|f| std::io::Read::take(f, MAX_REPORT).read_to_string(&mut text))
        .with_context(|| {
            format!(
                "eval run `{}` has ended ({}) but its report `{}` cannot be read",
                run.id,
                run.state,
                path.display()
            )
        })?;
    let report: eval::EvalReport =
        serde_json::from_str(&text).with_context(|| format!("reading `{}`", path.display()))?;
    eprintln!("eval run {} has ended ({}); its report:", run.id, run.state);
    let passed = run.state == "passed";
    super::eval_progress::print_summary(&report, &text, &run.state, &dir, json);
    Ok(Some(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }))
}

/// A run to resume: its row, options and suite (which must be unchanged).
#[allow(clippy::type_complexity)]
fn resumed(
    cfg: &Config,
    query: &str,
) -> anyhow::Result<(EvalRunRow, RunOptions, PathBuf, Suite, String)> {
    let store = open_existing_store(cfg)?;
    let Some(run) = store.eval_run(query)? else {
        bail!("no eval run with id `{query}`; `saheeli eval list` shows them");
    };
    if run.state != "running" {
        bail!(
            "eval run `{}` has ended ({}); its report is in `{}`",
            run.id,
            run.state,
            run.report_dir
        );
    }
    let opts: RunOptions = serde_json::from_str(&run.options)
        .with_context(|| format!("reading the options of eval run `{}`", run.id))?;
    let path = PathBuf::from(&run.suite_path);
    let (text, digest) = read_suite(&path)?;
    if digest != run.suite_digest {
        bail!(
            "`{}` changed since eval run `{}` started; a resumed run must run the same suite \
             (start a new run, or restore the file)",
            path.display(),
            run.id
        );
    }
    let suite = eval::parse(&path, &text)?;
    Ok((run, opts, path, suite, text))
}

/// The suite to run: `path` itself when it is a suite file; a Harbor or
/// Terminal-Bench task directory, a folder of them or a SWE-bench JSONL
/// is imported first (as `saheeli import` would, with its defaults) into
/// `<state_dir>/imports/`, its problems printed.
fn imported_suite(cfg: &Config, path: &Path) -> anyhow::Result<PathBuf> {
    let is_suite = path.is_file() && path.extension().is_some_and(|e| e == "yaml" || e == "yml");
    if is_suite {
        return Ok(path.to_path_buf());
    }
    let out = cfg
        .state_dir()
        .join("imports")
        .join(TaskId::new().to_string());
    let opts = crate::eval::import::Options::default();
    let (suite, problems) = crate::eval::import::import_to(&[path.to_path_buf()], &opts, &out)
        .with_context(|| {
            format!(
                "`{}` is not a suite file (.yaml), so it was read as a benchmark to import",
                path.display()
            )
        })?;
    for line in crate::eval::import::problem_lines(&problems) {
        eprintln!("{line}");
    }
    eprintln!("imported `{}` as {}", path.display(), suite.display());
    Ok(suite)
}

/// A suite file's text and the SHA-256 of its bytes.
fn read_suite(path: &Path) -> anyhow::Result<(String, String)> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading suite `{}`", path.display()))?;
    let digest = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let text = String::from_utf8(bytes).map_err(|_| {
        anyhow::anyhow!(
            "{}: not valid UTF-8; save the suite as UTF-8",
            path.display()
        )
    })?;
    Ok((text, digest))
}

/// Takes the run for this process, waiting for the hold of a process that
/// died to lapse; refused while another live process holds it.
async fn hold(store: &mut Store, run_id: &str) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + HOLD + BEAT;
    loop {
        let now = now_ms();
        if store.hold_eval_run(run_id, now, now + HOLD.as_millis() as i64)? {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!("eval run `{run_id}` is being run by another `saheeli eval` process");
        }
        tokio::time::sleep(BEAT / 2).await;
    }
}

/// Renews the hold until `stop`.
async fn beat(cfg: Config, run_id: String, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(BEAT) => {}
        }
        let (cfg, id) = (cfg.clone(), run_id.clone());
        let _ = tokio::task::spawn_blocking(move || {
            open_store(&cfg)
                .and_then(|mut s| Ok(s.beat_eval_run(&id, now_ms() + HOLD.as_millis() as i64)?))
        })
        .await;
    }
}

/// Queues a task for every case and sample (`samples` × `--repeat`: its
/// `runs`) that has none; returns how many.
async fn submit_missing(
    cfg: &Config,
    store: &mut Store,
    run_id: &str,
    specs: &[(String, u32, TaskSpec)],
    suite_path: &Path,
) -> anyhow::Result<usize> {
    let links = store.eval_links(run_id)?;
    let mut n = 0;
    for (case_id, runs, spec) in specs {
        for r in 1..=*runs {
            if links.iter().any(|l| &l.case_id == case_id && l.repeat == r) {
                continue;
            }
            let id = TaskId::new();
            let tar = match &spec.workspace {
                Some(ws) => {
                    let (cfg, ws) = (cfg.clone(), ws.clone());
                    let inc = spec.workspace_include_ignored;
                    let bounds = crate::inputs::Bounds::of_prompt(suite_path, false)?;
                    Some(
                        tokio::task::spawn_blocking(move || {
                            crate::inputs::pack(&cfg, &ws, &bounds, id, inc)
                        })
                        .await
                        .context("packing thread panicked")?
                        .with_context(|| {
                            format!(
                                "{}: case `{case_id}`: packing its workspace",
                                suite_path.display()
                            )
                        })?,
                    )
                }
                None => None,
            };
            if let Err(e) = store.submit_eval_task(id, spec, run_id, case_id, r) {
                if let Some(t) = tar {
                    let _ = std::fs::remove_file(t);
                }
                return Err(e.into());
            }
            n += 1;
        }
    }
    Ok(n)
}

/// Serves (unless `no_serve`) and shows progress until every case's task
/// has ended (true) or the user interrupted (false).
async fn follow_and_serve(
    cfg: &Config,
    run: &EvalRunRow,
    suite: &Suite,
    opts: &RunOptions,
    no_serve: bool,
) -> anyhow::Result<bool> {
    let (drain, stop) = signals();
    let done = CancellationToken::new();
    let watcher = tokio::spawn(super::eval_progress::watch(
        cfg.clone(),
        super::eval_progress::Watched {
            run_id: run.id.clone(),
            suite: suite.clone(),
            repeat: opts.repeat,
            infra_retries: opts.infra_retries,
        },
        done.clone(),
        drain.clone(),
    ));
    if no_serve {
        tokio::select! {
            _ = done.cancelled() => {}
            _ = drain.cancelled() => {}
        }
    } else {
        let ctx = context(cfg).await?;
        // The image is here (or, on a swarm, pulled on every node ahead).
        ctx.engine.check_image().await?;
        // The loop drains once every case has ended (or on Ctrl-C).
        let ending = {
            let (done, drain) = (done.clone(), drain.clone());
            tokio::spawn(async move {
                done.cancelled().await;
                drain.cancel();
            })
        };
        let served = reconciler::run(
            ctx,
            ServeOptions {
                drain: false,
                only: None,
            },
            drain.clone(),
            stop,
        )
        .await;
        ending.abort();
        served?;
    }
    // Let the watcher see the last endings.
    drain.cancel();
    let all = watcher.await.context("progress task panicked")??;
    Ok(all)
}

/// Scores the run, writes its reports, records its end; the exit code
/// says whether the pass rate reached the threshold.
fn finish(
    cfg: &Config,
    store: &mut Store,
    run: &EvalRunRow,
    suite: &Suite,
    repeat: u32,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let ok_state = |rate: f64| rate + 1e-9 >= suite.pass_threshold.0;
    let mut report = eval::gather(store, run, suite, repeat)?;
    let state = if ok_state(report.pass_rate) {
        "passed"
    } else {
        "failed"
    };
    store.end_eval_run(&run.id, state, report.pass_rate)?;
    // Read back, so the report carries the recorded end.
    let ended = store.eval_run(&run.id)?.context("the eval run vanished")?;
    report.ended = ended.ended_at.map(eval::rfc3339);
    report.wall_ms = ended.ended_at.map(|e| e - ended.started_at);
    let dir = PathBuf::from(&run.report_dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating `{}`", dir.display()))?;
    let json_text = serde_json::to_string_pretty(&report)?;
    std::fs::write(dir.join("report.json"), &json_text)
        .with_context(|| format!("writing `{}`", dir.join("report.json").display()))?;
    std::fs::write(dir.join("report.html"), eval::render(&report))
        .with_context(|| format!("writing `{}`", dir.join("report.html").display()))?;
    let _ = cfg;
    super::eval_progress::print_summary(&report, &json_text, state, &dir, json);
    Ok(if state == "passed" {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
