//! The agents' images (`agents:`) pulled onto every node that takes jobs
//! when `serve` starts, so that the first agent task on a node does not
//! wait for its pull (6–15 s for Codex's ≈ 380 MB on the test swarm).
//! The servo's own image needs no such thing: the relay or the overlay's
//! keeper, a global service of that image, has every node pull it.
//!
//! In the background, through each node's engine (as removals and
//! `verify` reach it), one image after another per node, nodes at once: a
//! task claimed meanwhile is never held up by it (its node shares the
//! pull under way). A node that is drained takes no job and pulls
//! nothing; one that cannot be reached, or whose pull fails, is logged
//! and pulls on its first task as before.

use std::time::Instant;

use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::StreamExt;
use tracing::{info, warn};

use crate::config::Config;

/// The agents' images the nodes pull from the swarm's registry (those
/// outside it are refused at submit), each once.
pub(crate) fn agent_images(cfg: &Config) -> Vec<String> {
    let mut images: Vec<String> = cfg
        .file
        .agents
        .values()
        .filter(|i| cfg.file.outside_swarm_registry(i).is_none())
        .cloned()
        .collect();
    images.sort();
    images.dedup();
    images
}

/// Pulls `images` onto every node that takes jobs; returns when all are
/// done (or failed, logged).
pub(crate) async fn pull_everywhere(
    manager: Docker,
    manager_addr: super::Endpoint,
    images: Vec<String>,
) {
    if images.is_empty() {
        return;
    }
    let t0 = Instant::now();
    let nodes = super::nodes::active_node_engines(&manager, &manager_addr).await;
    let pulls = nodes.iter().map(|(node, d)| {
        let images = &images;
        async move {
            for image in images {
                let t = Instant::now();
                match pull(d, image).await {
                    Ok(pulled) => info!(
                        %node, %image, pulled,
                        ms = t.elapsed().as_millis() as u64,
                        "agent image on node"
                    ),
                    Err(e) => warn!(
                        %node, %image, error = %format!("{e:#}"),
                        "agent image not pulled; the node pulls it on its first task"
                    ),
                }
            }
        }
    });
    futures_util::future::join_all(pulls).await;
    info!(
        nodes = nodes.len(),
        images = images.len(),
        ms = t0.elapsed().as_millis() as u64,
        "agent images on every node"
    );
}

/// Pulls `image` (a registry reference by digest) unless the engine has
/// it; whether it pulled.
async fn pull(d: &Docker, image: &str) -> anyhow::Result<bool> {
    if d.inspect_image(image).await.is_ok() {
        return Ok(false);
    }
    let opts = CreateImageOptionsBuilder::default()
        .from_image(image)
        .build();
    let mut progress = Box::pin(d.create_image(Some(opts), None, None));
    while let Some(step) = progress.next().await {
        step?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(yaml: &str) -> Config {
        Config {
            source: None,
            base_dir: "/tmp".into(),
            file: serde_yaml::from_str(yaml).unwrap(),
            set_keys: Default::default(),
        }
    }

    /// Only the agents' images in the swarm's registry are pulled, each
    /// once.
    #[test]
    fn the_nodes_pull_each_agent_image_of_the_swarm_s_registry_once() {
        let swarm = "backend: swarm\nswarm: { manager: 'tcp://10.0.0.11:2375', \
                     registry: '10.0.0.1:5000', network: none, gateway_listen: '10.0.0.1:7070' }\n";
        let agents = "agents:\n  codex: 10.0.0.1:5000/saheeli-servo-codex@sha256:aa\n  \
                      aider: 10.0.0.1:5000/saheeli-servo-codex@sha256:aa\n  \
                      claude-code: saheeli-servo-claude-code:latest\n";
        assert_eq!(
            agent_images(&cfg(&format!("{swarm}{agents}"))),
            ["10.0.0.1:5000/saheeli-servo-codex@sha256:aa"]
        );
    }
}
