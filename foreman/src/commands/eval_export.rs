//! `saheeli eval export RUN --format harbor|rl --out PATH`: an ended run
//! as a Harbor job directory or as JSON lines for a trainer
//! (`eval::export`).

use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::cli::EvalExportArgs;
use crate::config::Config;
use crate::eval::export::{self, Format};

use super::open_existing_store;

pub(crate) fn eval_export(cfg: &Config, args: EvalExportArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(cfg)?;
    let Some(run) = store.eval_run(&args.run)? else {
        bail!(
            "no eval run with id `{}`; `saheeli eval list` shows them",
            args.run
        );
    };
    let (report, raw) = export::read_report(&run)?;
    let mut samples = export::gather(&store, &report, &raw, &crate::llm::trajectories_dir(cfg))?;
    // What the agent saw and the verifier printed never carries a key.
    for s in &mut samples {
        if let Some(t) = &s.trajectory {
            let text = crate::llm::redact_keys(cfg, &t.to_string());
            s.trajectory = serde_json::from_str(&text).ok();
        }
        if let Some(log) = &s.verify_log {
            s.verify_log = Some(crate::llm::redact_keys(cfg, log));
        }
    }
    match args.format {
        Format::Harbor => {
            let job = export::write_harbor(&report, &samples, &args.out)?;
            outln!("{}", job.display());
            eprintln!(
                "{} trial(s) of run `{}` written; `harbor view {}` shows them",
                samples.len(),
                run.id,
                args.out.display()
            );
        }
        Format::Rl => {
            let (lines, w) = export::rl_lines(&report, &samples);
            let mut text = lines.join("\n");
            if !text.is_empty() {
                text.push('\n');
            }
            if args.out.as_os_str() == "-" {
                crate::write_stdout(format_args!("{text}"));
            } else {
                std::fs::write(&args.out, text)
                    .with_context(|| format!("writing `{}`", args.out.display()))?;
                outln!("{}", args.out.display());
            }
            eprintln!(
                "{} sample(s) written; left out: {} infrastructure failure(s), {} not ended",
                w.lines, w.infra, w.unfinished
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
