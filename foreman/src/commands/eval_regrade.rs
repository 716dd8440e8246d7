//! `saheeli eval regrade RUN [--tests DIR]` (issue 49): verification run
//! again over each result's collected workspace, without the agent, and
//! the grades shown old against new. The run itself is not changed.
//!
//! Each result's last attempt is checked in a container of its task's
//! image (the task's own, with the servo added, as it ran) on a new volume
//! holding what came home in `results/<task_id>/` (less the foreman's own
//! files: report.md, `.saheeli/`, the servo's audit log and session,
//! complete.json), with the task's hidden tests (or `--tests DIR`) at
//! /tests, its `verify:` commands, reward file and `pass_reward`.

use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use saheeli_protocol::TaskId;
use saheeli_protocol::verify::{Check, CheckKind};
use serde::Serialize;

use crate::backend::docker;
use crate::cli::EvalRegradeArgs;
use crate::config::Config;
use crate::routes::verify::OUTPUT_CAP;
use crate::routes::verify_hidden;
use crate::spec::TaskSpec;
use crate::task::TaskImage;

use super::open_existing_store;

/// One result, old against new.
#[derive(Debug, Serialize)]
struct Regraded {
    case: String,
    repeat: u32,
    task_id: String,
    old_passed: bool,
    old_reward: Option<f64>,
    new_passed: Option<bool>,
    new_reward: Option<f64>,
    /// Why it was not regraded (no results, no verify, …), or what failed.
    note: Option<String>,
}

pub(crate) async fn eval_regrade(cfg: &Config, args: EvalRegradeArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(cfg)?;
    let run = store
        .eval_run(&args.run)?
        .with_context(|| format!("no eval run `{}`; `saheeli eval list` shows them", args.run))?;
    if let Some(t) = &args.tests
        && !t.exists()
    {
        bail!("`--tests` `{}` does not exist", t.display());
    }
    let links = store.eval_links(&run.id)?;
    let d = docker::connect().await?;
    let mut out = Vec::new();
    for link in links {
        let (chain, ended) = crate::eval::last_attempt(&store, link.task_id)?;
        let last = chain.last().expect("a task has at least one attempt");
        let checks = store.verify_checks(last.id)?;
        let mut r = Regraded {
            case: link.case_id.clone(),
            repeat: link.repeat,
            task_id: last.id.to_string(),
            old_passed: last.state == crate::state::TaskState::Complete,
            old_reward: checks
                .iter()
                .rev()
                .find_map(|c| c.graded.as_ref())
                .map(|g| g.reward),
            new_passed: None,
            new_reward: None,
            note: None,
        };
        let results = last.results_path.as_ref().map(PathBuf::from);
        match (ended, results, last.spec.verify.is_empty()) {
            (false, _, _) => r.note = Some("not ended".into()),
            (_, None, _) => r.note = Some("no results were collected".into()),
            (_, _, true) => r.note = Some("the task has no `verify`".into()),
            (true, Some(dir), false) => {
                match regrade_one(cfg, &d, last.id, &last.spec, &dir, args.tests.as_deref()).await {
                    Ok((passed, reward)) => {
                        r.new_passed = Some(passed);
                        r.new_reward = reward;
                    }
                    Err(e) => r.note = Some(format!("{e:#}")),
                }
            }
        }
        out.push(r);
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&out);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(rows: &[Regraded]) {
    let shown = |p: Option<bool>, r: Option<f64>| match (p, r) {
        (None, _) => "-".to_string(),
        (Some(p), Some(r)) => format!("{} ({r})", if p { "pass" } else { "fail" }),
        (Some(p), None) => (if p { "pass" } else { "fail" }).to_string(),
    };
    let mut changed = (0, 0, 0);
    for r in rows {
        let old = shown(Some(r.old_passed), r.old_reward);
        let new = shown(r.new_passed, r.new_reward);
        let mark = match r.new_passed {
            Some(n) if n != r.old_passed => {
                changed.0 += 1;
                if n {
                    changed.1 += 1;
                } else {
                    changed.2 += 1;
                }
                "  changed"
            }
            _ => "",
        };
        let note = r
            .note
            .as_deref()
            .map(|n| format!("  ({n})"))
            .unwrap_or_default();
        outln!(
            "{} #{}: {old} -> {new}{mark}{note}",
            crate::output::clean(&r.case),
            r.repeat
        );
    }
    let mean = |f: &dyn Fn(&Regraded) -> Option<f64>| {
        let v: Vec<f64> = rows.iter().filter_map(f).collect();
        if v.is_empty() {
            "-".to_string()
        } else {
            format!("{:.3}", v.iter().sum::<f64>() / v.len() as f64)
        }
    };
    outln!(
        "regrade of {} result(s): {} changed ({} up, {} down), mean reward {} -> {}",
        rows.len(),
        changed.0,
        changed.1,
        changed.2,
        mean(&|r| r.old_reward),
        mean(&|r| r.new_reward)
    );
}

/// Verifies one collected workspace; (passed, reward).
async fn regrade_one(
    cfg: &Config,
    d: &docker::Docker,
    id: TaskId,
    spec: &TaskSpec,
    results: &Path,
    tests: Option<&Path>,
) -> anyhow::Result<(bool, Option<f64>)> {
    let agents = crate::spec::image_for(cfg, &spec.agent);
    let image = match &spec.image {
        None => agents,
        Some(i) => {
            let base = match i {
                TaskImage::Named(n) => docker::TaskBase::Named(n),
                TaskImage::Dockerfile(dir) => docker::TaskBase::Built {
                    dir,
                    map: &cfg.file.images.map,
                },
            };
            docker::task_image(d, &base, &agents, spec.workdir.as_deref()).await?
        }
    };
    let hidden: Vec<PathBuf> = match tests {
        Some(t) => vec![t.to_path_buf()],
        None => spec.verify_hidden.clone(),
    };
    let staged = cfg
        .state_dir()
        .join("regrade")
        .join(uuid::Uuid::new_v4().simple().to_string());
    let grades = !hidden.is_empty() || spec.verify_reward.is_some();
    if !hidden.is_empty() {
        let (h, to) = (hidden.clone(), staged.clone());
        tokio::task::spawn_blocking(move || verify_hidden::stage(&h, &to)).await??;
    }
    let (dir, max) = (results.to_path_buf(), cfg.file.max_results_size.0);
    let tar_path = staged.with_extension("tar");
    std::fs::create_dir_all(tar_path.parent().expect("under state_dir"))?;
    let file = std::fs::File::create(&tar_path)
        .with_context(|| format!("writing `{}`", tar_path.display()))?;
    let made = tokio::task::spawn_blocking(move || workspace_tar(&dir, max, file)).await?;
    if let Err(e) = made {
        let _ = std::fs::remove_file(&tar_path);
        let _ = std::fs::remove_dir_all(&staged);
        return Err(e);
    }
    let none = docker::VerifyNetwork::Declared(saheeli_protocol::NetworkMode::None);
    let sandbox = docker::Sandbox::of(spec, none);
    let tests_dir = (!hidden.is_empty()).then_some(staged.as_path());
    let opened = docker::RegradeBox::open(d, id, &image, &sandbox, tests_dir, &tar_path).await;
    let _ = std::fs::remove_file(&tar_path);
    let vbox = match opened {
        Ok(b) => b,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staged);
            return Err(e);
        }
    };
    let timeout = Duration::from_secs(spec.verify_timeout_s.max(1));
    let mut checks = Vec::new();
    for command in &spec.verify {
        let ran = docker::exec_shell(d, vbox.container(), command, timeout, OUTPUT_CAP).await;
        let (exit_code, output, ms) = match ran {
            Ok(r) => (r.exit_code, r.output, r.duration.as_millis() as u64),
            Err(e) => (None, format!("could not be run: {e:#}"), 0),
        };
        let passed = exit_code == Some(0);
        checks.push(Check {
            attempt: 1,
            kind: CheckKind::Verify,
            command: command.clone(),
            exit_code,
            duration_ms: ms,
            passed,
            output,
            limited: false,
            findings: Vec::new(),
            graded: None,
        });
        if !passed {
            break;
        }
    }
    if grades {
        let reward = spec.verify_reward.as_deref();
        verify_hidden::grade(d, vbox.container(), reward, spec.pass_reward, &mut checks).await;
    }
    let closed = vbox.close().await;
    let _ = std::fs::remove_dir_all(&staged);
    closed?;
    let passed = !checks.is_empty() && checks.iter().all(|c| c.passed);
    let reward = checks
        .last()
        .and_then(|c| c.graded.as_ref())
        .map(|g| g.reward);
    Ok((passed, reward))
}

/// Whether a top-level name in a results directory is the foreman's own
/// (not the agent's workspace as it was verified).
fn foremans_own(name: &str) -> bool {
    matches!(name, ".saheeli" | "report.md" | "complete.json")
        || (name.starts_with("servo-")
            && (name.ends_with("-audit.log") || name.ends_with("-session.json")))
}

/// The collected workspace as a tar for /workspace: the agent's user owns
/// every entry; links are archived as links, never followed.
/// At most `max` bytes of files (`max_results_size`: what collection
/// brought home fits), written to `out`.
fn workspace_tar<W: std::io::Write>(dir: &Path, max: u64, out: W) -> anyhow::Result<W> {
    let mut b = tar::Builder::new(out);
    b.follow_symlinks(false);
    let mut total = 0u64;
    let walk = walkdir::WalkDir::new(dir).follow_links(false).min_depth(1);
    let walk = walk
        .into_iter()
        .filter_entry(|e| e.depth() != 1 || !foremans_own(&e.file_name().to_string_lossy()));
    for e in walk {
        let e = e.with_context(|| format!("reading `{}`", dir.display()))?;
        let rel = e.path().strip_prefix(dir).expect("below the directory");
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            continue;
        }
        let meta = e.path().symlink_metadata()?;
        total += meta.len();
        if total > max {
            bail!(
                "`{}` holds more than `max_results_size` ({max} bytes)",
                dir.display()
            );
        }
        let mut h = tar::Header::new_gnu();
        h.set_metadata(&meta);
        h.set_uid(saheeli_protocol::uids::AGENT.into());
        h.set_gid(saheeli_protocol::uids::AGENT.into());
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(e.path())?;
            h.set_size(0);
            b.append_link(&mut h, rel, target)?;
        } else if meta.is_dir() {
            h.set_size(0);
            b.append_data(&mut h, rel, std::io::empty())?;
        } else if meta.is_file() {
            let f = std::fs::File::open(e.path())?;
            b.append_data(&mut h, rel, f)?;
        }
    }
    Ok(b.into_inner()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_foremans_files_are_left_out_and_links_are_kept_as_links() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        std::fs::create_dir_all(p.join(".saheeli")).unwrap();
        std::fs::create_dir_all(p.join("src")).unwrap();
        for f in [
            ".saheeli/changes.patch",
            "report.md",
            "complete.json",
            "servo-x-audit.log",
            "servo-x-session.json",
            "src/a.py",
            "prompt.md",
        ] {
            std::fs::write(p.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink("/etc/passwd", p.join("link")).unwrap();
        // A FIFO is never opened (that would wait forever): left out.
        assert!(
            std::process::Command::new("mkfifo")
                .arg(p.join("fifo"))
                .status()
                .unwrap()
                .success()
        );
        let tar = workspace_tar(p, 1 << 20, Vec::new()).unwrap();
        assert!(workspace_tar(p, 2, Vec::new()).is_err());
        // A sparse file claiming a terabyte is refused at the cap, unread.
        let huge = std::fs::File::create(p.join("src/huge")).unwrap();
        huge.set_len(1 << 40).unwrap();
        let e = workspace_tar(p, 1 << 30, Vec::new()).unwrap_err();
        assert!(e.to_string().contains("max_results_size"), "{e}");
        std::fs::remove_file(p.join("src/huge")).unwrap();
        let mut a = tar::Archive::new(tar.as_slice());
        let mut names: Vec<(String, u64, bool)> = a
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let link = e.header().entry_type().is_symlink();
                (
                    e.path().unwrap().display().to_string(),
                    e.header().uid().unwrap(),
                    link,
                )
            })
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                ("link".to_string(), 1000, true),
                ("prompt.md".to_string(), 1000, false),
                ("src".to_string(), 1000, false),
                ("src/a.py".to_string(), 1000, false),
            ]
        );
    }
}
