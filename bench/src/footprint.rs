//! Collection against `docker cp`, and the footprint figures: foreman
//! memory with a long queue, `task status` with a big database, binary and
//! image sizes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::measure::Env;
use crate::project::{Project, rss_mb};
use crate::stats::{Figure, median};

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

fn fill_command(files: usize) -> String {
    format!(
        "python3 -c \"import os; os.makedirs('data', exist_ok=True); b = os.urandom(10000); \
         [open('data/f%d' % i, 'wb').write(b) for i in range({files})]\""
    )
}

/// The foreman's collection time (from its own event detail) against
/// `docker cp` of the same amount of data from a stopped container.
pub async fn collection(env: &Env) -> anyhow::Result<Figure> {
    let files = env.sizes.collect_files;
    let mb = files * 10_000 / 1_000_000;
    progress(&format!(
        "collection: {mb} MB in {files} files, saheeli vs docker cp"
    ));
    let p = Project::new(&env.saheeli, &env.image, 8)?;
    let prompt = p.replay_prompt(
        "fill",
        &[
            (
                "execute_shell",
                json!({"command": fill_command(files), "timeout_s": 600}),
            ),
            ("task_complete", json!({"message": "ok"})),
        ],
    )?;
    let mut ours = Vec::new();
    for _ in 0..env.sizes.collect_runs {
        let (_, task) = p.timed_run(&prompt)?;
        let id = task["id"].as_str().context("no id")?;
        let detail: Value = serde_json::from_str(&p.ok(&["task", "status", id, "--json"])?)?;
        let text = detail["events"]
            .as_array()
            .and_then(|e| e.last())
            .and_then(|e| e["detail"].as_str())
            .unwrap_or_default()
            .to_string();
        let ms = text
            .split(" ms into ")
            .next()
            .and_then(|s| s.rsplit(" in ").next())
            .and_then(|s| s.parse::<f64>().ok())
            .with_context(|| format!("no collection time in `{text}`"))?;
        ours.push(ms);
        std::fs::remove_dir_all(task["results"].as_str().unwrap_or("/nonexistent")).ok();
    }

    // The same data in a stopped container's volume, copied out with `docker cp`.
    let volume = format!("saheeli-bench-{}", std::process::id());
    let body = ContainerCreateBody {
        image: Some(env.base.clone()),
        cmd: Some(vec![
            "bash".into(),
            "-c".into(),
            format!("cd /workspace && {}", fill_command(files)),
        ]),
        labels: Some(HashMap::from([(
            crate::floor::LABEL.to_string(),
            "1".to_string(),
        )])),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            mounts: Some(vec![Mount {
                target: Some("/workspace".into()),
                source: Some(volume.clone()),
                typ: Some(MountType::VOLUME),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let c = env.docker.create_container(None, body).await?;
    env.docker.start_container(&c.id, None).await?;
    let _ = env.docker.wait_container(&c.id, None).next().await;
    let mut cp = Vec::new();
    for _ in 0..env.sizes.collect_runs.max(3) {
        let dest = tempfile::tempdir()?;
        let t0 = Instant::now();
        let st = std::process::Command::new("docker")
            .args(["cp", &format!("{}:/workspace", c.id)])
            .arg(dest.path().join("ws"))
            .status()?;
        if !st.success() {
            bail!("docker cp failed");
        }
        cp.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let rm = bollard::query_parameters::RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    env.docker.remove_container(&c.id, Some(rm)).await?;
    let _ = env
        .docker
        .remove_volume(
            &volume,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await;
    Ok(Figure::new(&format!("collection: {mb} MB in {files} files"), "ms", &ours)
        .against("docker cp", median(&cp), 1.0)
        .note("saheeli: streamed, checked and extracted by the foreman (its own timing); docker cp: the CLI, same data"))
}

/// Foreman RSS while serving 8 tasks with many more queued.
pub async fn foreman_rss(env: &Env) -> anyhow::Result<Figure> {
    let queued = env.sizes.queued;
    progress(&format!(
        "footprint: foreman memory with {queued} queued and 8 running"
    ));
    let p = Project::new(&env.saheeli, &env.image, 8)?;
    let prompt = p.replay_prompt(
        "sleep",
        &[
            (
                "execute_shell",
                json!({"command": "sleep 20", "timeout_s": 60}),
            ),
            ("task_complete", json!({"message": "ok"})),
        ],
    )?;
    let first = p.submit(&prompt)?;
    p.clone_queued(&first, queued + 8 - 1)?;
    let mut serve = p
        .cmd(&["serve", "--drain", "-j", "8"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let db = rusqlite::Connection::open(p.path().join("saheeli.db"))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let running: i64 = db.query_row(
            "SELECT COUNT(*) FROM tasks WHERE state = 'running'",
            [],
            |r| r.get(0),
        )?;
        if running >= 8 {
            break;
        }
        if Instant::now() > deadline {
            bail!("8 tasks never ran at once");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut rss = Vec::new();
    let mut peak: f64 = 0.0;
    for _ in 0..5 {
        let (now, hwm) = rss_mb(serve.id())?;
        rss.push(now);
        peak = peak.max(hwm);
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    // Wind down: cancel everything, let the foreman stop and collect the 8.
    db.execute(
        "UPDATE tasks SET state = 'cancelled' WHERE state = 'queued'",
        [],
    )?;
    db.execute(
        "UPDATE tasks SET cancel_requested = 1 WHERE state IN ('starting', 'running')",
        [],
    )?;
    let _ = serve.wait();
    Ok(Figure::new(
        &format!("foreman RSS, {queued} queued + 8 running"),
        "MB",
        &rss,
    )
    .at_most(30.0)
    .note(format!("peak (VmHWM) {peak:.1} MB")))
}

/// `task status` (table and --json, 50 newest) with a big database.
pub async fn status_latency(env: &Env) -> anyhow::Result<(Figure, Figure)> {
    let rows = env.sizes.status_rows;
    progress(&format!(
        "footprint: `task status` with {rows} tasks in the database"
    ));
    let p = Project::new(&env.saheeli, &env.image, 8)?;
    let prompt = p.replay_prompt("one", &[("task_complete", json!({"message": "ok"}))])?;
    let first = p.submit(&prompt)?;
    p.clone_queued(&first, rows - 1)?;
    let time = |args: &[&str]| -> anyhow::Result<Vec<f64>> {
        let mut xs = Vec::new();
        p.ok(args)?; // warm the page cache
        for _ in 0..7 {
            let t0 = Instant::now();
            p.ok(args)?;
            xs.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(xs)
    };
    let table = time(&["task", "status"])?;
    let json = time(&["task", "status", "--json"])?;
    Ok((
        Figure::new(&format!("task status (table), {rows} tasks"), "ms", &table).at_most(100.0),
        Figure::new(&format!("task status --json, {rows} tasks"), "ms", &json).at_most(100.0),
    ))
}

/// The stripped servo binary, and what the image adds to its base.
pub async fn sizes(env: &Env, servo: &std::path::Path) -> anyhow::Result<(Figure, Figure)> {
    let bin = std::fs::metadata(servo)
        .with_context(|| {
            format!(
                "reading `{}` (build it with cargo build --release)",
                servo.display()
            )
        })?
        .len() as f64
        / 1e6;
    let size = |img: &str| {
        let d = env.docker.clone();
        let img = img.to_string();
        async move {
            d.inspect_image(&img)
                .await
                .ok()
                .and_then(|i| i.size)
                .unwrap_or(0) as f64
                / 1e6
        }
    };
    let over = size(&env.image).await - size(&env.base).await;
    Ok((
        Figure::new("servo binary (release, stripped)", "MB", &[bin]).at_most(12.0),
        Figure::new("servo image over its base", "MB", &[over])
            .note(format!("base `{}`", env.base)),
    ))
}
