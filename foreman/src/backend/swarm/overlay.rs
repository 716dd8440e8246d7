//! One idle container of the servo image on every node, on the servos'
//! overlay: a `global` service, `saheeli-overlay-<network>`, made (or
//! brought to the configured image) when `serve` starts.
//!
//! A node tears its sandbox of an overlay down when the last container on
//! it leaves, and sets it up again for the next: measured on the test
//! swarm, 10 set-ups and tear-downs in 50 one-step tasks at concurrency
//! 12. A container that stays keeps the sandbox, and it pulls the image
//! on every node before the first task needs it. It runs `sleep` as
//! nobody: no capability, read-only, 16 MiB, 8 processes; it carries no
//! `saheeli.task` label (no task's leftover; `docker service rm` removes
//! it).

use std::collections::HashMap;

use anyhow::Context;
use bollard::Docker;
use bollard::models::{
    Limit, NetworkAttachmentConfig, ServiceSpec, ServiceSpecMode, TaskSpec, TaskSpecContainerSpec,
    TaskSpecResources,
};
use bollard::query_parameters::UpdateServiceOptionsBuilder;
use tracing::info;

use crate::backend::docker::ROLE_LABEL;

/// Its `saheeli.role`.
pub(crate) const OVERLAY_ROLE: &str = "overlay";

/// The keeper's spec (pure).
pub(crate) fn keeper_spec(image: &str, network: &str) -> ServiceSpec {
    let labels = HashMap::from([(ROLE_LABEL.to_string(), OVERLAY_ROLE.to_string())]);
    ServiceSpec {
        name: Some(format!("saheeli-overlay-{network}")),
        labels: Some(labels.clone()),
        mode: Some(ServiceSpecMode {
            global: Some(Default::default()),
            ..Default::default()
        }),
        task_template: Some(TaskSpec {
            container_spec: Some(TaskSpecContainerSpec {
                image: Some(image.to_string()),
                labels: Some(labels),
                command: Some(vec!["sleep".into(), "infinity".into()]),
                user: Some("65534:65534".into()),
                read_only: Some(true),
                init: Some(true),
                capability_drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            resources: Some(TaskSpecResources {
                limits: Some(Limit {
                    nano_cpus: Some(10_000_000),
                    memory_bytes: Some(16 << 20),
                    pids: Some(8),
                }),
                ..Default::default()
            }),
            networks: Some(vec![NetworkAttachmentConfig {
                target: Some(network.to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        endpoint_spec: Some(bollard::models::EndpointSpec {
            mode: Some(bollard::models::EndpointSpecModeEnum::DNSRR),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Makes the keeper of `network`, or brings it to `image`.
pub(crate) async fn keep(manager: &Docker, image: &str, network: &str) -> anyhow::Result<()> {
    ensure(manager, keeper_spec(image, network), "overlay keeper").await
}

/// Makes the global service `spec` names, or updates it to `spec` when its
/// image or command differ (`what` names it in logs and errors).
pub(super) async fn ensure(manager: &Docker, spec: ServiceSpec, what: &str) -> anyhow::Result<()> {
    let name = spec.name.clone().unwrap_or_default();
    let wanted = |s: &ServiceSpec| {
        s.task_template
            .as_ref()
            .and_then(|t| t.container_spec.as_ref())
            .map(|c| (c.image.clone(), c.command.clone()))
    };
    match manager.inspect_service(&name, None).await {
        Ok(s) => {
            if s.spec.as_ref().and_then(wanted) == wanted(&spec) {
                return Ok(());
            }
            let version = s.version.and_then(|v| v.index).unwrap_or(0);
            let opts = UpdateServiceOptionsBuilder::default()
                .version(version as i32)
                .build();
            manager
                .update_service(&name, spec, opts, None)
                .await
                .with_context(|| format!("updating the {what} `{name}`"))?;
            info!(service = %name, "{what} updated");
        }
        Err(_) => match manager.create_service(spec, None).await {
            Ok(_) => info!(service = %name, "{what} created on every node"),
            // Another foreman made it meanwhile.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => {}
            Err(e) => {
                return Err(e).with_context(|| format!("creating the {what} `{name}`"));
            }
        },
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_keeper_is_global_idle_and_unprivileged() {
        let s = super::keeper_spec("reg/servo@sha256:00", "jobs");
        assert_eq!(s.name.as_deref(), Some("saheeli-overlay-jobs"));
        assert!(s.mode.unwrap().global.is_some());
        let t = s.task_template.unwrap();
        let c = t.container_spec.unwrap();
        assert_eq!(c.capability_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(c.user.as_deref(), Some("65534:65534"));
        assert_eq!(c.read_only, Some(true));
        assert!(!c.labels.unwrap().contains_key("saheeli.task"));
        assert_eq!(t.networks.unwrap()[0].target.as_deref(), Some("jobs"));
    }
}
