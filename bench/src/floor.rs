//! The physical floor: what the same Docker API costs with no Saheeli in
//! between. `true` in the base image, network none, created, started,
//! waited for and removed.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::Context;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{RemoveContainerOptionsBuilder, WaitContainerOptionsBuilder};
use futures_util::StreamExt;

/// The label the bench puts on its raw containers, to clean up by.
pub const LABEL: &str = "saheeli.bench";

/// Milliseconds for create+start, and for the whole create…remove cycle.
pub struct Cycle {
    pub create_start_ms: f64,
    pub total_ms: f64,
}

fn body(image: &str, cmd: &[&str]) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(image.into()),
        cmd: Some(cmd.iter().map(|s| s.to_string()).collect()),
        labels: Some(HashMap::from([(LABEL.to_string(), "1".to_string())])),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// One create+start+wait+remove of `cmd`.
pub async fn cycle(docker: &Docker, image: &str, cmd: &[&str]) -> anyhow::Result<Cycle> {
    let t0 = Instant::now();
    let c = docker
        .create_container(None, body(image, cmd))
        .await
        .with_context(|| format!("creating a container from `{image}`"))?;
    docker
        .start_container(&c.id, None)
        .await
        .context("starting")?;
    let create_start_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let opts = WaitContainerOptionsBuilder::default()
        .condition("not-running")
        .build();
    let mut wait = docker.wait_container(&c.id, Some(opts));
    match wait.next().await {
        Some(Ok(_)) | Some(Err(bollard::errors::Error::DockerContainerWaitError { .. })) => {}
        Some(Err(e)) => return Err(e).context("waiting"),
        None => anyhow::bail!("wait stream ended early"),
    }
    let rm = RemoveContainerOptionsBuilder::default().force(true).build();
    docker
        .remove_container(&c.id, Some(rm))
        .await
        .context("removing")?;
    Ok(Cycle {
        create_start_ms,
        total_ms: t0.elapsed().as_secs_f64() * 1000.0,
    })
}

/// `n` cycles, `concurrency` at a time; wall-clock milliseconds.
pub async fn concurrent(
    docker: &Docker,
    image: &str,
    n: usize,
    concurrency: usize,
) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let results: Vec<anyhow::Result<Cycle>> = futures_util::stream::iter(0..n)
        .map(|_| cycle(docker, image, &["true"]))
        .buffer_unordered(concurrency)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1000.0)
}

/// Removes anything the bench left (after an interrupted run).
pub async fn clean(docker: &Docker) {
    let opts = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&HashMap::from([("label", vec![LABEL])]))
        .build();
    if let Ok(list) = docker.list_containers(Some(opts)).await {
        for c in list.into_iter().filter_map(|c| c.id) {
            let rm = RemoveContainerOptionsBuilder::default().force(true).build();
            let _ = docker.remove_container(&c, Some(rm)).await;
        }
    }
}
