//! `saheeli gc`: remove what ended tasks left behind.

use std::process::ExitCode;

use crate::backend::docker;
use crate::cli::GcArgs;
use crate::config::Config;

use super::open_existing_store;

pub(crate) async fn gc(cfg: &Config, args: GcArgs) -> anyhow::Result<ExitCode> {
    if let (crate::config::BackendKind::Swarm, Some(swarm)) = (cfg.file.backend, &cfg.file.swarm) {
        return gc_swarm(cfg, swarm, args).await;
    }
    // The cached task images belong to no project: with no database
    // here, `--images` still removes them.
    if args.images && !cfg.database().exists() {
        let d = docker::connect().await?;
        let verb = if args.dry_run {
            "would remove"
        } else {
            "removed"
        };
        task_images(&d, args.dry_run, verb).await?;
        return Ok(ExitCode::SUCCESS);
    }
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
        outln!("container {} (task {task})", &cid[..12.min(cid.len())]);
        if !args.dry_run {
            docker::remove_container(&d, cid).await?;
        }
        removed += 1;
    }
    // Checks' copies of workspaces (a foreman stopped mid-check), after the
    // verify containers binding them, before the workspaces they are a
    // view of.
    for id in crate::backend::disk::check_copy::present(&cfg.state_dir()) {
        let task = id.to_string();
        if !ended(&task) {
            continue;
        }
        outln!("check's copy of a workspace (task {task})");
        if !args.dry_run {
            crate::backend::disk::check_copy::remove(&cfg.state_dir(), id)?;
        }
        removed += 1;
    }
    for (name, task) in volumes.iter().filter(|(_, t)| ended(t)) {
        outln!("volume {name} (task {task})");
        if !args.dry_run {
            docker::remove_volume(&d, name).await?;
        }
        removed += 1;
    }
    // Workspace images (bound straight into a task's container; through a
    // volume, listed above, by a foreman before issue 28's cut).
    for (id, mnt) in crate::backend::disk::present(&cfg.state_dir()) {
        let task = id.to_string();
        if volumes.iter().any(|(_, t)| *t == task) || !ended(&task) {
            continue;
        }
        outln!("workspace image {} (task {task})", mnt.display());
        if !args.dry_run {
            crate::backend::disk::destroy(&mnt)?;
        }
        removed += 1;
    }
    // Snapshots (issue 51) of tasks that ended, or that this database
    // does not know: an ended task's are kept for `task fork --at-step`
    // until gc.
    let state_dir = cfg.state_dir();
    let known = |id: saheeli_protocol::TaskId| store.get(&id.to_string()).ok().flatten().is_some();
    let mut gone =
        crate::collect::snapshot::leftovers(&state_dir, &|id| known(id) && !ended(&id.to_string()));
    gone.sort();
    for id in gone {
        let steps = crate::collect::snapshot::steps(&state_dir, id).len();
        let bytes = crate::collect::snapshot::disk_use(&state_dir, id);
        outln!("snapshots of task {id} ({steps} steps, {bytes} bytes)");
        if !args.dry_run {
            crate::collect::snapshot::remove(&state_dir, id)?;
        }
        removed += 1;
    }
    // Warm servos (issue 28) this database's foremen made that no task
    // that has not ended claimed: idle ones (a serving foreman's pool
    // makes new ones) and what a stopped foreman left.
    let db = docker::pool_db(&cfg.database());
    let (warm, warm_volumes) = docker::pool_labelled(&d, &db).await?;
    let mut names: Vec<String> = warm
        .into_iter()
        .chain(warm_volumes)
        .map(|o| o.name)
        .collect();
    // Slot workspaces whose container is gone (a minute old at least: a
    // serving foreman makes the directory just before the container).
    names.extend(
        crate::backend::disk::present_slots(&cfg.state_dir())
            .into_iter()
            .filter(|(_, _, age)| *age >= crate::backend::ORPHAN_SLOT_AGE)
            .filter_map(|(slot, _, _)| crate::backend::slot_of(&slot)),
    );
    names.sort();
    names.dedup();
    for name in names {
        if store.container_in_use(&name)? {
            continue;
        }
        outln!("warm servo {name}");
        if !args.dry_run {
            crate::backend::remove_warm(&d, cfg, &name, true).await;
        }
        removed += 1;
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    eprintln!(
        "{verb} {removed} leftover containers, volumes, workspace images, snapshots and idle warm servos"
    );
    if args.images {
        task_images(&d, args.dry_run, verb).await?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--images`: the cached task images no container uses (issue 49).
async fn task_images(d: &docker::Docker, dry_run: bool, verb: &str) -> anyhow::Result<()> {
    let unused = docker::unused_task_images(d).await?;
    let mut bytes = 0;
    for image in &unused {
        outln!("image {} ({})", image.tag, crate::text::bytes(image.bytes));
        if !dry_run {
            docker::remove_tag(d, &image.tag).await?;
        }
        bytes += image.bytes;
    }
    eprintln!(
        "{verb} {} cached task images ({} in all, less what they share)",
        unused.len(),
        crate::text::bytes(bytes)
    );
    Ok(())
}

/// `saheeli gc` on a swarm: job services and secrets (through the
/// manager), task containers and volumes on every reachable node, of tasks
/// this database knows to be over.
async fn gc_swarm(
    cfg: &Config,
    swarm: &crate::config::SwarmConfig,
    args: GcArgs,
) -> anyhow::Result<ExitCode> {
    use crate::backend::swarm::{self, Object};
    let store = open_existing_store(cfg)?;
    let manager_addr = swarm::Endpoint::manager(cfg, swarm)?;
    let manager = manager_addr.connect().await?;
    let (engines, objects) = swarm::leftovers(&manager, &manager_addr).await?;
    let ended: Vec<_> = objects
        .into_iter()
        .filter(|(t, _)| {
            store
                .get(&t.to_string())
                .ok()
                .flatten()
                .is_some_and(|t| t.state.is_terminal())
        })
        .collect();
    for (task, o) in &ended {
        match o {
            Object::Service(s) => outln!("service {} (task {task})", &s[..12.min(s.len())]),
            Object::Secret(s) => outln!("secret {} (task {task})", &s[..12.min(s.len())]),
            Object::Container(n, c) => {
                outln!("container {} on {n} (task {task})", &c[..12.min(c.len())])
            }
            Object::Volume(n, v) => outln!("volume {v} on {n} (task {task})"),
        }
    }
    let failed = if args.dry_run {
        0
    } else {
        swarm::remove_objects(&manager, &engines, &ended).await
    };
    // Warm jobs (issue 53) this database's foremen made that no task that
    // has not ended claimed: idle ones (a serving foreman's pool makes new
    // ones) and what a stopped foreman left.
    let db = crate::backend::docker::pool_db(&cfg.database());
    let mut kept = 0;
    for (name, _) in swarm::warm_jobs(&manager, &manager_addr, &db).await? {
        let Some(slot) = swarm::slot_of_name(&name) else {
            continue;
        };
        if store.container_in_use(&name)? {
            continue;
        }
        outln!("warm job {name}");
        if !args.dry_run {
            swarm::remove_warm_job(&manager, &manager_addr, slot).await;
        }
        kept += 1;
    }
    // Workspaces kept for parked tasks that have ended since.
    for id in crate::inputs::parked_tasks(&cfg.state_dir()) {
        let over = store
            .get(&id.to_string())
            .ok()
            .flatten()
            .is_none_or(|t| t.state.is_terminal());
        if over {
            let dir = crate::inputs::parked_dir(&cfg.state_dir(), id);
            outln!("parked workspace {} (task {id})", dir.display());
            if !args.dry_run {
                crate::inputs::remove_parked(&cfg.state_dir(), id).await;
            }
            kept += 1;
        }
    }
    eprintln!(
        "{} {} swarm leftovers{}",
        if args.dry_run {
            "would remove"
        } else {
            "removed"
        },
        ended.len() - failed + kept,
        if failed > 0 {
            format!(" ({failed} not removable now)")
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}
