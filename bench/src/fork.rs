//! Snapshots and forks (issue 51). A replay task on a 100 MB workspace
//! (1,000 files of 100 KB) whose 10 steps each write one small file, run
//! with `snapshots: every`:
//!
//! - a snapshot's cost per step: the time the foreman logs for each
//!   (`snapshot kept … took_ms`), step 0 (everything copied) apart from the
//!   later ones (what the step changed copied, the rest hard-linked), and
//!   the disk all of them hold (each inode once) per step;
//! - the choices it was measured against, on the same workspace: a whole
//!   copy of the tree per step (`cp -a`), and a copy of the task's
//!   workspace image (a loop-mounted ext4 image as `resources.disk` makes;
//!   `cp --sparse=always`: the host's ext4 has no copy-on-write clone);
//! - a fork at step 5 (`task fork --at-step 5`, then `serve --drain` to
//!   its end) against a cold launch of the same task (`run`, to its end).
//!   Target: the fork within 1.5× the cold launch.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::env::{Env, progress};
use crate::project::Project;
use crate::stats::{Figure, median};

const FILES: usize = 1000;
const FILE_BYTES: usize = 100_000;
const STEPS: usize = 10;

pub async fn fork(env: &Env) -> anyhow::Result<Vec<Figure>> {
    progress(
        "fork: snapshots at every step of a 100 MB workspace, a fork at step 5 against a cold launch",
    );
    let p = Project::new(env, 2)?;
    let result = measure(&p);
    p.cleanup(env).await;
    result
}

fn measure(p: &Project) -> anyhow::Result<Vec<Figure>> {
    let ws = p.path().join("ws");
    std::fs::create_dir_all(&ws)?;
    for i in 0..FILES {
        let bytes: Vec<u8> = (0..FILE_BYTES).map(|_| fastrand_byte()).collect();
        std::fs::write(ws.join(format!("f{i}")), bytes)?;
    }
    let mut turns: Vec<Value> = (0..STEPS)
        .map(|i| {
            json!({"tool_calls": [{"name": "create_file",
                   "arguments": {"path": format!("s{i}.txt"), "content": "x"}}]})
        })
        .collect();
    turns.push(json!({"tool_calls": [{"name": "task_complete", "arguments": {"message": "ok"}}]}));
    std::fs::write(
        p.path().join("steps.json"),
        serde_json::to_vec(&json!({ "turns": turns }))?,
    )?;
    for (name, extra) in [("plain", ""), ("snap", "snapshots: every\n")] {
        std::fs::write(
            p.path().join(format!("{name}.md")),
            format!(
                "---\nmodel: replay:steps.json\nworkspace: ws\ntimeout: 30m\n{extra}---\nBenchmark.\n"
            ),
        )?;
    }
    let (mut cold, mut fork, mut first, mut later, mut disk) =
        (vec![], vec![], vec![], vec![], vec![]);
    for round in 0..3 {
        // Cold: the same task launched from its submitted workspace.
        let t0 = Instant::now();
        p.ok(&["run", "plain.md", "--json"])?;
        cold.push(t0.elapsed().as_secs_f64() * 1000.0);
        // Kept at every step: the foreman's own timing of each snapshot.
        let out = p
            .cmd(&["run", "snap.md", "--json"])
            .env("RUST_LOG", "saheeli=info")
            .output()?;
        let log = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            bail!("the snapshotted task failed (round {round}): {log}");
        }
        let task: Value = serde_json::from_slice(&out.stdout)?;
        let id = task["id"].as_str().context("no id")?.to_string();
        let took = snapshot_times(&log);
        if took.len() != STEPS + 1 {
            bail!("{} snapshots logged, not {}: {log}", took.len(), STEPS + 1);
        }
        first.push(took[0]);
        later.extend_from_slice(&took[1..]);
        let dir = p.path().join(".saheeli/snapshots").join(&id);
        let (all, step0) = (disk_use(&dir), disk_use(&dir.join("step-000000")));
        disk.push((all - step0) as f64 / STEPS as f64 / 1e6);
        // A fork at step 5, to its end.
        let t0 = Instant::now();
        p.ok(&["task", "fork", &id, "--at-step", "5"])?;
        p.ok(&["serve", "--drain"])?;
        fork.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let (whole, image) = alternatives(p, &ws)?;
    let cold_ms = median(&cold);
    Ok(vec![
        Figure::new(
            "snapshot per step (after the first), 100 MB workspace",
            "ms",
            &later,
        )
        .detail("the first snapshot (step 0: all copied)", median(&first))
        .detail("a whole copy of the tree (cp -a)", whole)
        .detail(
            "a copy of the sparse workspace image (cp --sparse=always)",
            image,
        )
        .detail("disk per step after the first, MB", median(&disk))
        .note("a step that writes one small file: only it is copied, 1,000 files hard-linked"),
        Figure::new("fork at step 5 → its end, 100 MB workspace", "ms", &fork).against(
            "a cold launch of the same task (run → end)",
            cold_ms,
            1.5,
        ),
    ])
}

fn fastrand_byte() -> u8 {
    use std::cell::Cell;
    thread_local!(static S: Cell<u64> = const { Cell::new(0x9E37_79B9_7F4A_7C15) });
    S.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x as u8
    })
}

/// The `took_ms` of every "snapshot kept" line, in order.
fn snapshot_times(log: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.contains("snapshot kept"))
        .filter_map(|l| {
            l.split("took_ms=")
                .nth(1)?
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// Allocated bytes under `dir`, each inode once (`du` would say the same).
fn disk_use(dir: &Path) -> u64 {
    let mut seen = HashSet::new();
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(list) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in list.flatten() {
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            if m.is_dir() {
                stack.push(e.path());
            }
            if seen.insert(m.ino()) {
                total += m.blocks() * 512;
            }
        }
    }
    total
}

/// The two other ways, on the same 100 MB: a whole copy of the tree, and
/// a copy of an ext4 image holding it (median of 3, ms).
fn alternatives(p: &Project, ws: &Path) -> anyhow::Result<(f64, f64)> {
    let sh = |cmd: &str| -> anyhow::Result<()> {
        let st = Command::new("sh")
            .args(["-c", cmd])
            .current_dir(p.path())
            .status()?;
        if !st.success() {
            bail!("`{cmd}` failed");
        }
        Ok(())
    };
    let timed = |cmd: &str| -> anyhow::Result<f64> {
        sh("sync")?;
        let t0 = Instant::now();
        sh(cmd)?;
        sh("sync")?;
        Ok(t0.elapsed().as_secs_f64() * 1000.0)
    };
    let mut whole = vec![];
    for i in 0..3 {
        whole.push(timed(&format!("cp -a {} copy{i}", ws.display()))?);
        sh(&format!("rm -rf copy{i}"))?;
    }
    sh("truncate -s 2G img && mkfs.ext4 -q -F img && mkdir -p mnt && mount -o loop img mnt")?;
    let filled = sh(&format!("cp -a {}/. mnt/ && umount mnt", ws.display()));
    if filled.is_err() {
        let _ = sh("umount mnt");
        filled?;
    }
    let mut image = vec![];
    for i in 0..3 {
        image.push(timed(&format!("cp --sparse=always img img{i}"))?);
        sh(&format!("rm -f img{i}"))?;
    }
    sh("rm -f img")?;
    Ok((median(&whole), median(&image)))
}
