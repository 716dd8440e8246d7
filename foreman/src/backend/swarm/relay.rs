//! `swarm.network: none`: job containers with no network at all, and on
//! every node a relay to the gateway (`servo relay`) that their servos
//! reach over a unix socket.
//!
//! Attaching a container to a network is most of what a swarm node spends
//! on a short task (measured on the test swarm, 20 one-step jobs: 135 ms
//! of node engine CPU per job on the overlay, 105 on an `internal`
//! overlay, 100 on a swarm-scoped internal bridge, 60 with no network; and
//! the jobs ended 2.4× sooner). With no network there is no way out of
//! the job to anywhere: stricter than the overlay, whose one way out is
//! the gateway's address.
//!
//! The relay is a `global` service, `saheeli-relay-<8 hex>` (named after
//! the gateway's address, so foremen of different gateways keep their own),
//! on each node's own network (`host`), running `servo relay` as root with
//! no capability but `CAP_CHOWN`, read-only, 64 MiB. Its socket lies in the
//! node-local volume of the same name: the relay mounts it at
//! `/relay`, each job read-only at `/run/saheeli-relay`. The socket is the
//! servo's user's, mode 0600: the agent cannot connect to it; the servo's
//! requests carry the task's token, as on the overlay.
//!
//! A job container with no network joins its engine's default bridge when
//! there is one, so every node's engine must have none (`"bridge": "none"`
//! in daemon.json). `serve` checks the nodes it can reach and refuses to
//! start when one has a default bridge; a servo that finds any interface
//! but loopback refuses to run its task (a node that joins later).

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::{
    Limit, Mount, MountType, MountVolumeOptions, NetworkAttachmentConfig, ServiceSpec,
    ServiceSpecMode, TaskSpec, TaskSpecContainerSpec, TaskSpecContainerSpecPrivileges,
    TaskSpecResources,
};
use saheeli_protocol::remote::relay;

use crate::backend::docker::ROLE_LABEL;

/// `swarm.network`'s value for jobs with no network.
pub(crate) const NONE: &str = "none";

/// The relay's `saheeli.role`.
pub(crate) const RELAY_ROLE: &str = "relay";

/// The relay's service and volume name for the gateway at `gateway`
/// (`host:port`).
pub(crate) fn relay_name(gateway: &str) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(gateway.as_bytes());
    let hex: String = hash[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("saheeli-relay-{hex}")
}

/// The relay's volume of `gateway` mounted at `target` (nothing of the
/// image copied into it).
fn volume(gateway: &str, target: &str, read_only: bool) -> Mount {
    Mount {
        target: Some(target.into()),
        source: Some(relay_name(gateway)),
        typ: Some(MountType::VOLUME),
        read_only: Some(read_only),
        volume_options: Some(MountVolumeOptions {
            no_copy: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A job's mount of the relay's volume (read-only).
pub(crate) fn job_mount(gateway: &str) -> Mount {
    volume(gateway, relay::DIR, true)
}

/// The relay's spec (pure), for the gateway at `gateway` (`host:port`).
pub(crate) fn relay_spec(image: &str, gateway: &str) -> ServiceSpec {
    let labels = HashMap::from([(ROLE_LABEL.to_string(), RELAY_ROLE.to_string())]);
    ServiceSpec {
        name: Some(relay_name(gateway)),
        labels: Some(labels.clone()),
        mode: Some(ServiceSpecMode {
            global: Some(Default::default()),
            ..Default::default()
        }),
        task_template: Some(TaskSpec {
            container_spec: Some(TaskSpecContainerSpec {
                image: Some(image.to_string()),
                labels: Some(labels),
                command: Some(vec![
                    "servo".into(),
                    "relay".into(),
                    format!("{}/{}", relay::KEEPER_DIR, relay::SOCKET_NAME),
                    gateway.to_string(),
                ]),
                user: Some("0:0".into()),
                read_only: Some(true),
                init: Some(true),
                capability_drop: Some(vec!["ALL".into()]),
                capability_add: Some(vec!["CAP_CHOWN".into()]),
                privileges: Some(TaskSpecContainerSpecPrivileges {
                    no_new_privileges: Some(true),
                    ..Default::default()
                }),
                mounts: Some(vec![volume(gateway, relay::KEEPER_DIR, false)]),
                ..Default::default()
            }),
            resources: Some(TaskSpecResources {
                limits: Some(Limit {
                    nano_cpus: None,
                    memory_bytes: Some(64 << 20),
                    pids: Some(16),
                }),
                ..Default::default()
            }),
            networks: Some(vec![NetworkAttachmentConfig {
                target: Some("host".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Makes the relay of `gateway` on every node, or brings it to `image`.
pub(crate) async fn keep(manager: &Docker, image: &str, gateway: &str) -> anyhow::Result<()> {
    super::overlay::ensure(manager, relay_spec(image, gateway), "gateway relay").await
}

/// The nodes (by hostname) whose engine has a default bridge, which a job
/// with no network would join; nodes that cannot be reached are left to
/// their servos' own check.
pub(crate) async fn nodes_with_a_bridge(
    manager: &Docker,
    manager_addr: &super::Endpoint,
) -> Vec<String> {
    let mut bridged = Vec::new();
    for (name, engine) in super::nodes::node_engines(manager, manager_addr).await {
        if engine
            .inspect_network(
                "bridge",
                None::<bollard::query_parameters::InspectNetworkOptions>,
            )
            .await
            .is_ok()
        {
            bridged.push(name);
        }
    }
    bridged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_is_global_on_the_nodes_network_with_chown_alone() {
        let s = relay_spec("reg/servo@sha256:00", "10.0.0.1:7070");
        let name = s.name.clone().unwrap();
        assert_eq!(name, relay_name("10.0.0.1:7070"));
        assert_ne!(name, relay_name("10.0.0.1:7071"));
        assert!(s.mode.unwrap().global.is_some());
        let t = s.task_template.unwrap();
        assert_eq!(t.networks.unwrap()[0].target.as_deref(), Some("host"));
        let c = t.container_spec.unwrap();
        assert_eq!(c.capability_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(c.capability_add, Some(vec!["CAP_CHOWN".to_string()]));
        assert_eq!(c.read_only, Some(true));
        assert_eq!(
            c.command.unwrap(),
            ["servo", "relay", "/relay/gateway.sock", "10.0.0.1:7070"]
        );
        assert!(!c.labels.unwrap().contains_key("saheeli.task"));
        let m = &c.mounts.unwrap()[0];
        assert_eq!(m.source.as_deref(), Some(name.as_str()));
        let job = job_mount("10.0.0.1:7070");
        assert_eq!(job.source.as_deref(), Some(name.as_str()));
        assert_eq!(job.read_only, Some(true));
    }
}
