//! A verify attempt's commands in its verify container (`verify`): the
//! tree made what `changes.patch` delivers, `verify_files` put back as
//! submitted, then each command until one fails, its reward read in the
//! same exec.

use bollard::Docker;
use saheeli_protocol::verify::{Check, CheckKind};

use super::verify::{OUTPUT_CAP, not_run};
use super::verify_hidden;
use super::verify_link::VerifyLink;
use super::verify_tree;
use crate::backend::docker;
use crate::inputs;

/// Makes the verify container's /workspace what `changes.patch` delivers
/// and refuses what shadows the commands (`verify_tree`), restores
/// `verify_files`, then runs each command until one fails.
pub(super) async fn checks_in(
    d: &Docker,
    (container, host): (&str, Option<&std::path::Path>),
    link: &VerifyLink,
    commands: &[String],
    attempt: u32,
    ledger: Option<&[u8]>,
) -> Vec<Check> {
    let first = commands[0].as_str();
    let t0 = std::time::Instant::now();
    let prepared = verify_tree::prepare(
        d,
        container,
        host,
        &link.submitted,
        &link.files,
        link.max_workspace,
    );
    match tokio::time::timeout(link.timeout, prepared).await {
        Ok(Ok(None)) => {}
        Ok(Ok(Some(why))) => return vec![not_run(attempt, CheckKind::Verify, first, why)],
        Err(_) => {
            let why = format!(
                "the workspace could not be read within `verify_timeout` ({}), so nothing was run",
                humantime::format_duration(link.timeout)
            );
            return vec![not_run(attempt, CheckKind::Verify, first, why)];
        }
        Ok(Err(e)) => {
            let why = format!("the tree to verify could not be made, so nothing was run: {e:#}");
            return vec![not_run(attempt, CheckKind::Verify, first, why)];
        }
    }
    if !link.files.is_empty()
        && let Err(e) = restore(d, link, container).await
    {
        let why = format!("`verify_files` could not be restored, so nothing was run: {e:#}");
        return vec![not_run(attempt, CheckKind::Verify, first, why)];
    }
    if let Some(json) = ledger
        && let Err(e) = super::verify_egress::give(d, container, json).await
    {
        let why =
            format!("the egress ledger could not be given to verify, so nothing was run: {e:#}");
        return vec![not_run(attempt, CheckKind::Verify, first, why)];
    }
    let prepare_ms = t0.elapsed().as_millis() as u64;
    let mut checks = Vec::new();
    // A graded check reads its reward in the command's own exec, once the
    // command ended: what the last command run left.
    let paths = verify_hidden::reward_paths(link.reward.as_deref());
    let mut printed = None;
    for command in commands {
        let ran = if link.grades() {
            let after = (
                verify_hidden::READ_FIRST,
                &paths[..],
                verify_hidden::READ_FIRST_CAP,
            );
            let ran =
                docker::exec_shell_then(d, container, command, link.timeout, OUTPUT_CAP, after)
                    .await;
            ran.map(|(r, p)| {
                printed = Some(p);
                r
            })
        } else {
            docker::exec_shell(d, container, command, link.timeout, OUTPUT_CAP).await
        };
        let check = match ran {
            Ok(r) => Check {
                attempt,
                kind: CheckKind::Verify,
                command: command.clone(),
                exit_code: r.exit_code,
                duration_ms: r.duration.as_millis() as u64,
                passed: r.exit_code == Some(0),
                output: r.output,
                limited: false,
                findings: Vec::new(),
                graded: None,
            },
            Err(e) => {
                printed = None;
                not_run(
                    attempt,
                    CheckKind::Verify,
                    command,
                    format!("could not be run: {e:#}"),
                )
            }
        };
        let passed = check.passed;
        checks.push(check);
        if !passed {
            break;
        }
    }
    let run_ms = t0.elapsed().as_millis() as u64 - prepare_ms;
    match printed {
        Some(p) => verify_hidden::grade_printed(&p, link.pass_reward, &mut checks),
        None if link.grades() => {
            let reward = link.reward.as_deref();
            verify_hidden::grade(d, container, reward, link.pass_reward, &mut checks).await;
        }
        None => {}
    }
    let grade_ms = t0.elapsed().as_millis() as u64 - prepare_ms - run_ms;
    tracing::debug!(attempt, prepare_ms, run_ms, grade_ms, "verify checks");
    checks
}

/// Puts `verify_files` back as submitted, in the verify container: what
/// is at those paths now (and a link or file where one of their
/// directories goes) is removed by the servo's user, then the submitted
/// entries are uploaded.
async fn restore(d: &Docker, link: &VerifyLink, container: &str) -> anyhow::Result<()> {
    let (paths, parents) = inputs::workspace_args(&link.files);
    if !parents.is_empty() {
        let mut argv = vec!["find".to_string()];
        argv.extend(parents);
        argv.extend(["-maxdepth", "0", "!", "-type", "d", "-delete"].map(String::from));
        // Parents that are missing are fine: the upload makes them.
        docker::exec_quiet(d, container, argv).await?;
    }
    let mut argv = vec!["rm".to_string(), "-rf".into(), "--".into()];
    argv.extend(paths);
    let ran = docker::exec_quiet(d, container, argv).await?;
    if ran.exit_code != Some(0) {
        anyhow::bail!(
            "removing what is at those paths failed: {}",
            ran.output.trim()
        );
    }
    let (submitted, files) = (link.submitted.clone(), link.files.clone());
    let tar =
        tokio::task::spawn_blocking(move || inputs::restore_tar(&submitted, &files)).await??;
    docker::upload(d, container, tar.into()).await
}
