//! A task's job service: one completion, never restarted, labelled
//! `saheeli.task=<id>`, hardened as far as Swarm (API 1.41) can say.
//!
//! Mapped from the local backend: cap-drop ALL but the three the
//! separation needs (`docker::container::CONTAINER_CAPS`), read-only
//! rootfs, tmpfs /tmp, memory/CPU/pids limits, init, /workspace a named
//! volume (node-local, labelled), and the servo separated from its agent
//! as on one host (`SAHEELI_PRIVSEP=1`: it starts as root, becomes the
//! servo's uid and runs every tool as the agent's). The gateway token is a
//! secret file readable by the servo's uid only, so the agent can neither
//! read it nor reach the gateway with it; the workspace travels through
//! `servo pack`/`servo unpack` run as the agent, the servo's own files
//! (session, audit log, `.saheeli/`) through the servo. Not expressible on 20.10:
//! `no-new-privileges` (ContainerSpec.Privileges.NoNewPrivileges arrived
//! with API 1.46; 20.10 drops it) — what stands in: the image has no
//! setuid or setgid file (the Dockerfile strips every such bit), so no
//! `exec` can give the agent's processes a capability; and `network: none` (Swarm rejects
//! it): the servo joins only the configured overlay, whose one way out is
//! the gateway's address (nodes of the test swarm have no default route),
//! or, with `swarm.network: none`, no network at all (`relay`).

use std::collections::HashMap;

use anyhow::Context;
use base64::Engine;
use bollard::Docker;
use bollard::models::{
    EndpointSpec, EndpointSpecModeEnum, Limit, Mount, MountTmpfsOptions, MountType,
    MountVolumeOptions, NetworkAttachmentConfig, SecretSpec, ServiceSpec, ServiceSpecMode,
    ServiceSpecModeReplicatedJob, TaskSpec, TaskSpecContainerSpec, TaskSpecContainerSpecFile,
    TaskSpecContainerSpecPrivileges, TaskSpecContainerSpecSecrets, TaskSpecResources,
    TaskSpecRestartPolicy, TaskSpecRestartPolicyConditionEnum,
};
use saheeli_protocol::{TaskId, paths, remote};

use super::LaunchObjects;
use crate::backend::docker::TASK_LABEL;

/// What a job service needs: who it is, its image, resources and way
/// to its gateway.
pub(crate) struct ServicePlan<'a> {
    pub job: Job,
    pub image: &'a str,
    pub network: &'a str,
    /// `http://addr:port` of the gateway, as the servo reaches it.
    pub gateway_url: String,
    pub token: &'a str,
    /// The task's `env:` (a warm job's comes with its claim: none here).
    pub env: Vec<String>,
    pub memory: u64,
    pub cpus: f64,
    pub pids: i64,
    pub stop_grace: std::time::Duration,
}

/// Whose job a service is.
pub(crate) enum Job {
    /// One launch (`suffix`: names, the `saheeli.launch` label) of task `id`.
    Task { id: TaskId, suffix: String },
    /// A warm job (issue 53): no task yet, its pool's labels instead.
    Warm {
        slot: TaskId,
        labels: HashMap<String, String>,
    },
}

impl Job {
    /// The service's (and its workspace volume's) name.
    pub fn name(&self) -> String {
        match self {
            Job::Task { id, suffix } => super::service_name(*id, suffix),
            Job::Warm { slot, .. } => super::warm_name(*slot),
        }
    }

    /// The labels on everything it makes.
    fn labels(&self) -> HashMap<String, String> {
        match self {
            Job::Task { id, .. } => labels(*id),
            Job::Warm { labels, .. } => labels.clone(),
        }
    }

    /// The id it calls its gateway as.
    fn caller(&self) -> TaskId {
        match self {
            Job::Task { id, .. } | Job::Warm { slot: id, .. } => *id,
        }
    }

    /// Its token secret's name.
    pub fn secret_name(&self) -> String {
        match self {
            Job::Task { id, suffix } => format!("saheeli-token-{id}-{suffix}"),
            Job::Warm { slot, .. } => super::warm_name(*slot),
        }
    }
}

impl<'a> ServicePlan<'a> {
    /// The plan of launch `suffix` of task `id`.
    #[allow(clippy::too_many_arguments)]
    pub fn task(
        id: TaskId,
        suffix: &str,
        spec: &crate::spec::TaskSpec,
        image: &'a str,
        network: &'a str,
        gateway_url: String,
        token: &'a str,
        stop_grace: std::time::Duration,
    ) -> ServicePlan<'a> {
        ServicePlan {
            job: Job::Task {
                id,
                suffix: suffix.to_string(),
            },
            image,
            network,
            gateway_url,
            token,
            env: spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            memory: spec.memory,
            cpus: spec.cpus,
            pids: spec.pids,
            stop_grace,
        }
    }
}

/// The label naming a task's launch (its token is derived from it).
pub(crate) const LAUNCH_LABEL: &str = "saheeli.launch";

/// The service and secret created for a task.
#[derive(Clone, Debug)]
pub(crate) struct Launched {
    pub service_id: String,
    /// Everything this launch makes, by id and name.
    pub objects: LaunchObjects,
}

fn labels(id: TaskId) -> HashMap<String, String> {
    HashMap::from([(TASK_LABEL.to_string(), id.to_string())])
}

/// Creates the token secret, then the job service that mounts it.
pub(crate) async fn create_service(d: &Docker, plan: &ServicePlan<'_>) -> anyhow::Result<Launched> {
    let caller = plan.job.caller();
    let secret_name = plan.job.secret_name();
    let secret = d
        .create_secret(SecretSpec {
            name: Some(secret_name.clone()),
            labels: Some(plan.job.labels()),
            data: Some(base64::engine::general_purpose::STANDARD.encode(plan.token)),
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating the gateway secret `{secret_name}`"))?;
    let spec = service_spec(plan, &secret.id, &secret_name);
    match d.create_service(spec, None).await {
        Ok(created) => {
            let service_id = created.id.unwrap_or_default();
            let objects = match &plan.job {
                Job::Task { id, suffix } => LaunchObjects::of(*id, &service_id, suffix),
                Job::Warm { slot, .. } => LaunchObjects::warm(caller, *slot, &service_id),
            };
            Ok(Launched {
                objects: LaunchObjects {
                    secret: secret.id,
                    ..objects
                },
                service_id,
            })
        }
        Err(e) => {
            let _ = d.delete_secret(&secret.id).await;
            Err(e).with_context(|| {
                format!(
                    "creating the job service `{}` from image `{}`",
                    plan.job.name(),
                    plan.image
                )
            })
        }
    }
}

impl LaunchObjects {
    /// A launch's objects from its service and suffix (the secret by name).
    pub(crate) fn of(id: TaskId, service: &str, suffix: &str) -> LaunchObjects {
        LaunchObjects {
            task: id,
            service: service.to_string(),
            secret: format!("saheeli-token-{id}-{suffix}"),
            name: super::service_name(id, suffix),
            slot: None,
        }
    }

    /// A warm job's objects (`id`: the task claiming it, or the slot
    /// itself while idle), the service by id or name.
    pub(crate) fn warm(id: TaskId, slot: TaskId, service: &str) -> LaunchObjects {
        LaunchObjects {
            task: id,
            service: service.to_string(),
            secret: super::warm_name(slot),
            name: super::warm_name(slot),
            slot: Some(slot),
        }
    }
}

/// The job service's spec (pure: checked by unit tests).
pub(crate) fn service_spec(
    plan: &ServicePlan<'_>,
    secret_id: &str,
    secret_name: &str,
) -> ServiceSpec {
    let name = plan.job.name();
    let job_labels = plan.job.labels();
    let no_network = plan.network == super::relay::NONE;
    let gateway_addr = plan.gateway_url.trim_start_matches("http://");
    let gateway = if no_network {
        format!("unix:{}", saheeli_protocol::remote::relay::SOCKET)
    } else {
        plan.gateway_url.clone()
    };
    let mut env = plan.env.clone();
    if matches!(plan.job, Job::Warm { .. }) {
        env.push(format!("{}=1", saheeli_protocol::remote::warm::WARM_ENV));
    }
    env.extend([
        "HOME=/tmp".to_string(),
        format!("SAHEELI_GATEWAY={gateway}"),
        format!("{}={}", remote::TOKEN_FILE_ENV, remote::TOKEN_FILE),
        format!("{}={}", remote::TASK_ID_ENV, plan.job.caller()),
        format!("{}=1", saheeli_protocol::uids::PRIVSEP_ENV),
    ]);
    let memory = i64::try_from(plan.memory).unwrap_or(i64::MAX);
    let mut mounts = vec![
        Mount {
            target: Some(paths::WORKSPACE.into()),
            source: Some(name.clone()),
            typ: Some(MountType::VOLUME),
            volume_options: Some(MountVolumeOptions {
                labels: Some(job_labels.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        Mount {
            target: Some("/tmp".into()),
            typ: Some(MountType::TMPFS),
            tmpfs_options: Some(MountTmpfsOptions {
                size_bytes: Some(256 << 20),
                mode: Some(0o1777),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    if no_network {
        mounts.push(super::relay::job_mount(gateway_addr));
    }
    let token_file = remote::TOKEN_FILE
        .rsplit('/')
        .next()
        .unwrap_or("saheeli-gateway-token");
    let container = TaskSpecContainerSpec {
        image: Some(plan.image.to_string()),
        labels: Some(job_labels.clone()),
        env: Some(env),
        dir: Some(paths::WORKSPACE.into()),
        // Root with three capabilities: the servo separates itself from its
        // agent before anything else (`privsep` in the servo).
        user: Some("0:0".into()),
        read_only: Some(true),
        init: Some(true),
        capability_drop: Some(vec!["ALL".into()]),
        capability_add: Some(
            crate::backend::docker::CONTAINER_CAPS
                .iter()
                .map(|c| c.to_string())
                .collect(),
        ),
        // Sent for engines that know it (API 1.46+); 20.10 ignores it.
        privileges: Some(TaskSpecContainerSpecPrivileges {
            no_new_privileges: Some(true),
            ..Default::default()
        }),
        stop_signal: Some("SIGTERM".into()),
        stop_grace_period: Some(plan.stop_grace.as_nanos().min(i64::MAX as u128) as i64),
        mounts: Some(mounts),
        secrets: Some(vec![TaskSpecContainerSpecSecrets {
            file: Some(TaskSpecContainerSpecFile {
                name: Some(token_file.into()),
                // The servo's alone: the agent must not hold the token.
                uid: Some(saheeli_protocol::uids::SERVO.to_string()),
                gid: Some(saheeli_protocol::uids::SERVO.to_string()),
                mode: Some(0o400),
            }),
            secret_id: Some(secret_id.into()),
            secret_name: Some(secret_name.into()),
        }]),
        ..Default::default()
    };
    let mut service_labels = job_labels;
    if let Job::Task { suffix, .. } = &plan.job {
        service_labels.insert(LAUNCH_LABEL.into(), suffix.clone());
    }
    ServiceSpec {
        name: Some(name),
        labels: Some(service_labels),
        mode: Some(ServiceSpecMode {
            replicated_job: Some(ServiceSpecModeReplicatedJob {
                max_concurrent: Some(1),
                total_completions: Some(1),
            }),
            ..Default::default()
        }),
        task_template: Some(TaskSpec {
            container_spec: Some(container),
            resources: Some(TaskSpecResources {
                limits: Some(Limit {
                    nano_cpus: Some((plan.cpus * 1e9) as i64),
                    memory_bytes: Some(memory),
                    pids: Some(plan.pids),
                }),
                ..Default::default()
            }),
            restart_policy: Some(TaskSpecRestartPolicy {
                condition: Some(TaskSpecRestartPolicyConditionEnum::NONE),
                max_attempts: Some(0),
                ..Default::default()
            }),
            // `none`: no attachment at all (Swarm has no `none` network).
            networks: (!no_network).then(|| {
                vec![NetworkAttachmentConfig {
                    target: Some(plan.network.to_string()),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
        // Nothing connects to a job: no virtual IP, so no load-balancer
        // rules programmed on every node for each task.
        endpoint_spec: Some(EndpointSpec {
            mode: Some(EndpointSpecModeEnum::DNSRR),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_service_is_one_hardened_completion_with_its_secret() {
        let id = TaskId::new();
        let cfg = crate::config::Config {
            source: None,
            base_dir: "/tmp".into(),
            file: Default::default(),
            set_keys: Default::default(),
        };
        let d = tempfile::tempdir().unwrap();
        let prompt = d.path().join("p.md");
        // A replay model: no provider key needed to build the spec.
        std::fs::write(&prompt, "---\nmodel: replay:r.json\n---\nNow.\n").unwrap();
        std::fs::write(
            d.path().join("r.json"),
            r#"{"turns": [{"content": "done"}]}"#,
        )
        .unwrap();
        let spec = crate::spec::TaskSpec::from_prompt(&cfg, &prompt, &[]).unwrap();
        let plan = ServicePlan::task(
            id,
            "abcd",
            &spec,
            "10.0.0.1:5000/saheeli-servo@sha256:00",
            "jobs",
            "http://10.0.0.1:7070".into(),
            "t",
            std::time::Duration::from_secs(3),
        );
        let none = ServicePlan {
            network: super::super::relay::NONE,
            gateway_url: plan.gateway_url.clone(),
            ..plan
        };
        let n = service_spec(&none, "sid", "sname");
        let nt = n.task_template.unwrap();
        assert!(nt.networks.is_none(), "`none`: no attachment at all");
        let nc = nt.container_spec.unwrap();
        assert!(
            nc.env
                .unwrap()
                .contains(&"SAHEELI_GATEWAY=unix:/run/saheeli-relay/gateway.sock".to_string())
        );
        let relay = nc.mounts.unwrap().pop().unwrap();
        assert_eq!(
            (relay.target.as_deref(), relay.read_only),
            (Some("/run/saheeli-relay"), Some(true))
        );
        assert_eq!(
            relay.source.unwrap(),
            super::super::relay::relay_name("10.0.0.1:7070")
        );
        let plan = ServicePlan {
            network: "jobs",
            gateway_url: "http://10.0.0.1:7070".into(),
            ..none
        };
        let s = service_spec(&plan, "sid", "sname");
        assert_eq!(s.labels.as_ref().unwrap()[LAUNCH_LABEL], "abcd");
        let job = s.mode.unwrap().replicated_job.unwrap();
        assert_eq!(
            (job.max_concurrent, job.total_completions),
            (Some(1), Some(1))
        );
        let t = s.task_template.unwrap();
        assert_eq!(
            t.restart_policy.unwrap().condition,
            Some(TaskSpecRestartPolicyConditionEnum::NONE)
        );
        let c = t.container_spec.unwrap();
        assert_eq!(c.capability_drop, Some(vec!["ALL".to_string()]));
        assert_eq!((c.read_only, c.init), (Some(true), Some(true)));
        assert_eq!(c.user.as_deref(), Some("0:0"));
        assert_eq!(
            c.capability_add,
            Some(vec![
                "CAP_SETUID".to_string(),
                "CAP_SETGID".to_string(),
                "CAP_KILL".to_string()
            ])
        );
        let secret = &c.secrets.as_ref().unwrap()[0];
        let file = secret.file.as_ref().unwrap();
        assert_eq!((file.uid.as_deref(), file.mode), (Some("999"), Some(0o400)));
        assert_eq!(c.labels.unwrap()[TASK_LABEL], id.to_string());
        let env = c.env.unwrap();
        assert!(env.iter().all(|e| !e.contains("t\n") && e != "t"));
        assert!(env.contains(&"SAHEELI_PRIVSEP=1".to_string()));
        assert!(env.contains(&format!(
            "{}={}",
            remote::TOKEN_FILE_ENV,
            remote::TOKEN_FILE
        )));
        assert_eq!(c.secrets.unwrap()[0].secret_id.as_deref(), Some("sid"));
        let limits = t.resources.unwrap().limits.unwrap();
        assert_eq!(limits.pids, Some(spec.pids));
    }
}
