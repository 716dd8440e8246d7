//! `saheeli gc`: remove what ended tasks left behind.

use std::process::ExitCode;

use crate::cli::GcArgs;
use crate::config::Config;
use crate::docker;

use super::*;

pub(crate) async fn gc(cfg: &Config, args: GcArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(cfg)?;
    let d = docker::connect().await?;
    let (containers, volumes) = docker::labelled(&d).await?;
    // Only tasks this database knows to be over: other databases on the
    // same daemon (other projects, tests) keep theirs.
    let ended = |id: &str| {
        store
            .get(id)
            .ok()
            .flatten()
            .is_some_and(|t| t.state.is_terminal())
    };
    let mut removed = 0;
    for (cid, task) in containers.iter().filter(|(_, t)| ended(t)) {
        println!("container {} (task {task})", &cid[..12.min(cid.len())]);
        if !args.dry_run {
            docker::remove_container(&d, cid).await?;
        }
        removed += 1;
    }
    for (name, task) in volumes.iter().filter(|(_, t)| ended(t)) {
        println!("volume {name} (task {task})");
        if !args.dry_run {
            docker::remove_volume(&d, name).await?;
        }
        removed += 1;
    }
    // Workspace images whose volume is already gone.
    for (id, mnt) in crate::disk::present(&cfg.state_dir()) {
        let task = id.to_string();
        if volumes.iter().any(|(_, t)| *t == task) || !ended(&task) {
            continue;
        }
        println!("workspace image {} (task {task})", mnt.display());
        if !args.dry_run {
            crate::disk::destroy(&mnt)?;
        }
        removed += 1;
    }
    eprintln!(
        "{} {removed} leftover containers, volumes and workspace images",
        if args.dry_run {
            "would remove"
        } else {
            "removed"
        }
    );
    Ok(ExitCode::SUCCESS)
}
