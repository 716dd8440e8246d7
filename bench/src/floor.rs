//! The floors: what the same Docker API costs with no Saheeli in between.
//!
//! - **raw**: `true` in the base image, network none: create, start, wait,
//!   remove. This is the floor the targets are ratios to.
//! - **hardened**: the Docker calls Saheeli makes for one task, in the same
//!   order and with the same container options (image check, labelled
//!   volume, a named container with all capabilities dropped, read-only
//!   rootfs, /tmp tmpfs, limits, init, uid 1000, the launch JSON in its
//!   environment; then wait, OOM check, collection of /workspace as the
//!   foreman does it by default (from the volume's directory when the
//!   daemon is local and it is readable, else the archive API), removal of
//!   container and volume found by label), with `true` as the entrypoint
//!   instead of the servo. The gap between raw and hardened is what the
//!   sandbox costs Docker; the gap between hardened and Saheeli is the
//!   foreman and the servo.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::Context;
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, MountVolumeOptions, VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    ListContainersOptionsBuilder, ListVolumesOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveVolumeOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;

use crate::env::{BENCH_LABEL, Env, bench_label_value};

/// Milliseconds since the start, lap by lap.
struct Laps {
    t0: Instant,
    last: f64,
    laps: Vec<(&'static str, f64)>,
}

impl Laps {
    fn new() -> Laps {
        Laps {
            t0: Instant::now(),
            last: 0.0,
            laps: Vec::new(),
        }
    }

    fn total(&self) -> f64 {
        self.t0.elapsed().as_secs_f64() * 1000.0
    }

    fn lap(&mut self, name: &'static str) {
        let now = self.total();
        self.laps.push((name, now - self.last));
        self.last = now;
    }
}

/// Milliseconds for create+start, and for the whole cycle.
pub struct Cycle {
    /// Until the create call returned (for hardened: image check and
    /// volume included).
    pub create_ms: f64,
    pub create_start_ms: f64,
    pub total_ms: f64,
    /// Each Docker call's share, in order.
    pub laps: Vec<(&'static str, f64)>,
    /// The container's id.
    pub id: String,
}

fn labels() -> HashMap<String, String> {
    HashMap::from([(BENCH_LABEL.to_string(), bench_label_value())])
}

fn raw_body(image: &str) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(image.into()),
        cmd: Some(vec!["true".into()]),
        labels: Some(labels()),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub async fn wait(env: &Env, id: &str) -> anyhow::Result<()> {
    let opts = WaitContainerOptionsBuilder::default()
        .condition("not-running")
        .build();
    match env.docker.wait_container(id, Some(opts)).next().await {
        Some(Ok(_)) | Some(Err(bollard::errors::Error::DockerContainerWaitError { .. })) => Ok(()),
        Some(Err(e)) => Err(e).context("waiting for a container"),
        None => anyhow::bail!("the wait stream ended early"),
    }
}

pub async fn remove(env: &Env, id: &str) -> anyhow::Result<()> {
    let rm = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    env.docker
        .remove_container(id, Some(rm))
        .await
        .context("removing a container")?;
    env.removed_container(id);
    Ok(())
}

/// One raw create+start+wait+remove of `true` in the base image.
pub async fn raw_cycle(env: &Env) -> anyhow::Result<Cycle> {
    raw_cycle_of(env, raw_body(&env.base)).await
}

/// One raw create+start+wait+remove of `sleep SECS` in the base image: a
/// container that lives as long as a task waiting on its LLM.
pub async fn raw_sleeper(env: &Env, secs: f64) -> anyhow::Result<Cycle> {
    let mut body = raw_body(&env.base);
    body.cmd = Some(vec!["sleep".into(), format!("{secs:.3}")]);
    raw_cycle_of(env, body).await
}

async fn raw_cycle_of(env: &Env, body: ContainerCreateBody) -> anyhow::Result<Cycle> {
    let mut laps = Laps::new();
    let c = env
        .docker
        .create_container(None, body)
        .await
        .with_context(|| format!("creating a container from `{}`", env.base))?;
    env.created_container(&c.id);
    laps.lap("create");
    let create_ms = laps.total();
    env.docker
        .start_container(&c.id, None)
        .await
        .context("starting")?;
    laps.lap("start");
    let create_start_ms = laps.total();
    wait(env, &c.id).await?;
    laps.lap("wait");
    remove(env, &c.id).await?;
    laps.lap("remove");
    Ok(Cycle {
        create_ms,
        create_start_ms,
        total_ms: laps.total(),
        laps: laps.laps,
        id: c.id,
    })
}

/// A launch JSON of the size Saheeli puts in a servo's environment.
fn launch_env() -> String {
    let filler = "x".repeat(700);
    format!("SAHEELI_LAUNCH={{\"task\":{{\"filler\":\"{filler}\"}},\"prompt\":\"Benchmark.\"}}")
}

/// A labelled volume for a hardened container.
pub async fn create_volume(env: &Env, name: &str) -> anyhow::Result<()> {
    env.docker
        .create_volume(VolumeCreateRequest {
            name: Some(name.into()),
            labels: Some(labels()),
            ..Default::default()
        })
        .await
        .context("creating a volume")?;
    env.created_volume(name);
    Ok(())
}

/// The container Saheeli creates for a task (its options, image and
/// user), running `entrypoint` instead of the servo.
pub fn hardened_body(env: &Env, volume: &str, entrypoint: Vec<String>) -> ContainerCreateBody {
    let host_config = HostConfig {
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        privileged: Some(false),
        readonly_rootfs: Some(true),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_string(),
            "rw,nosuid,nodev,size=256m".to_string(),
        )])),
        memory: Some(2 << 30),
        memory_swap: Some(2 << 30),
        nano_cpus: Some(1_000_000_000),
        pids_limit: Some(512),
        init: Some(true),
        network_mode: Some("none".into()),
        mounts: Some(vec![Mount {
            target: Some("/workspace".into()),
            source: Some(volume.into()),
            typ: Some(MountType::VOLUME),
            volume_options: Some(MountVolumeOptions {
                labels: Some(labels()),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(env.image.clone()),
        entrypoint: Some(entrypoint),
        user: Some("1000:1000".into()),
        working_dir: Some("/workspace".into()),
        env: Some(vec!["HOME=/tmp".into(), launch_env()]),
        labels: Some(labels()),
        network_disabled: Some(true),
        stop_signal: Some("SIGTERM".into()),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// Saheeli's Docker calls for one task, with `true` instead of the servo.
/// `full` goes on past start: wait, OOM check, download, removals.
pub async fn hardened_cycle(env: &Env, full: bool) -> anyhow::Result<Cycle> {
    let d = &env.docker;
    let name = format!("saheeli-bench-{}", uuid::Uuid::now_v7());
    let mut laps = Laps::new();
    d.inspect_image(&env.image)
        .await
        .with_context(|| format!("inspecting `{}`", env.image))?;
    laps.lap("image check");
    create_volume(env, &name).await?;
    laps.lap("volume create");
    let body = hardened_body(env, &name, vec!["true".into()]);
    let opts = CreateContainerOptionsBuilder::default().name(&name).build();
    let c = d
        .create_container(Some(opts), body)
        .await
        .context("creating a hardened container")?;
    env.created_container(&c.id);
    laps.lap("create");
    let create_ms = laps.total();
    d.start_container(&c.id, None)
        .await
        .context("starting a hardened container")?;
    laps.lap("start");
    let create_start_ms = laps.total();
    if !full {
        remove(env, &c.id).await?;
        remove_volume(env, &name).await?;
        return Ok(Cycle {
            create_ms,
            create_start_ms,
            total_ms: laps.total(),
            laps: laps.laps,
            id: c.id,
        });
    }
    wait(env, &c.id).await?;
    laps.lap("wait");
    let _ = d.inspect_container(&c.id, None).await;
    laps.lap("inspect (OOM)");
    // As the foreman collects by default: from the volume's directory when
    // the daemon is local and it is readable, else through the archive API.
    let local = std::env::var("DOCKER_HOST").map_or(true, |h| h.starts_with("unix://"));
    let dir = match local {
        true => d
            .inspect_volume(&name)
            .await
            .ok()
            .map(|v| std::path::PathBuf::from(v.mountpoint))
            .filter(|p| std::fs::read_dir(p).is_ok()),
        false => None,
    };
    match dir {
        Some(dir) => {
            read_tree(&dir).context("reading the volume directory")?;
            laps.lap("collect (volume directory)");
        }
        None => {
            let opts = DownloadFromContainerOptionsBuilder::default()
                .path("/workspace")
                .build();
            let mut tar = d.download_from_container(&c.id, Some(opts));
            while let Some(chunk) = tar.next().await {
                chunk.context("downloading /workspace")?;
            }
            laps.lap("collect (archive API)");
        }
    }
    let filter = format!("{BENCH_LABEL}={}", bench_label_value());
    let filters = HashMap::from([("label", vec![filter.as_str()]), ("name", vec![&name])]);
    let list = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    d.list_containers(Some(list)).await?;
    remove(env, &c.id).await?;
    laps.lap("list + remove container");
    let filters = HashMap::from([("label", vec![filter.as_str()]), ("name", vec![&name])]);
    let list = ListVolumesOptionsBuilder::default()
        .filters(&filters)
        .build();
    d.list_volumes(Some(list)).await?;
    remove_volume(env, &name).await?;
    laps.lap("list + remove volume");
    Ok(Cycle {
        create_ms,
        create_start_ms,
        total_ms: laps.total(),
        laps: laps.laps,
        id: c.id,
    })
}

pub async fn remove_volume(env: &Env, name: &str) -> anyhow::Result<()> {
    let opts = RemoveVolumeOptionsBuilder::default().force(true).build();
    env.docker
        .remove_volume(name, Some(opts))
        .await
        .context("removing a volume")?;
    env.removed_volume(name);
    Ok(())
}

/// Reads every file below `dir` (what a local collection reads).
fn read_tree(dir: &std::path::Path) -> std::io::Result<u64> {
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let ft = entry.file_type()?;
        if ft.is_dir() {
            bytes += read_tree(&entry.path())?;
        } else if ft.is_file() {
            bytes += std::fs::read(entry.path())?.len() as u64;
        }
    }
    Ok(bytes)
}

/// What a burst of cycles took.
pub struct Burst {
    pub wall_ms: f64,
    /// The median of each Docker call, in order.
    pub calls: Vec<(&'static str, f64)>,
    /// The containers' ids (their events are recorded).
    pub ids: Vec<String>,
}

/// `n` raw (or full hardened) cycles, `concurrency` at a time.
pub async fn burst(
    env: &Env,
    hardened: bool,
    n: usize,
    concurrency: usize,
) -> anyhow::Result<Burst> {
    let t0 = Instant::now();
    let results: Vec<anyhow::Result<Cycle>> = futures_util::stream::iter(0..n)
        .map(|_| async move {
            if hardened {
                hardened_cycle(env, true).await
            } else {
                raw_cycle(env).await
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let wall_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let mut by_call: Vec<(&'static str, Vec<f64>)> = Vec::new();
    let mut ids = Vec::new();
    for r in results {
        let cycle = r?;
        for (name, ms) in cycle.laps {
            match by_call.iter_mut().find(|(n, _)| *n == name) {
                Some((_, xs)) => xs.push(ms),
                None => by_call.push((name, vec![ms])),
            }
        }
        ids.push(cycle.id);
    }
    let calls = by_call
        .into_iter()
        .map(|(name, xs)| (name, crate::stats::median(&xs)))
        .collect();
    Ok(Burst {
        wall_ms,
        calls,
        ids,
    })
}
