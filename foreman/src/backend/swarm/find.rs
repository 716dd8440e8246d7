//! A swarm task whose foreman stopped: its job service, found by label,
//! adoptable while its task has not ended (the token is derived from the
//! launch label, so the running servo's secret still matches). A servo
//! whose work ended while no foreman ran is still running: it keeps trying
//! its upload (`protocol::remote::UPLOAD_PATIENCE_S`), so it is adopted
//! like any other. A service gone or already ended lost its upload.

use std::sync::Arc;

use bollard::Docker;
use saheeli_protocol::TaskId;

use super::observe::Phase as Swarmed;
use super::{LAUNCH_LABEL, LaunchObjects, Object, Swarm};
use crate::backend::facts::{EngineError, Found, Servo, ServoKind};

impl Swarm {
    /// `recorded`: the container the task's row names, a warm job's
    /// (issue 53) found by it (it carries no task label).
    pub async fn find(&self, id: TaskId, recorded: Option<&str>) -> Found {
        if let Some(slot) = recorded.and_then(super::slot_of_name) {
            return self.find_warm(id, slot).await;
        }
        let services: Vec<String> = match super::swarm_objects(&self.manager, Some(id)).await {
            Ok(objects) => objects
                .into_iter()
                .filter_map(|(_, o)| match o {
                    Object::Service(s) => Some(s),
                    _ => None,
                })
                .collect(),
            Err(e) => return Found::Unknown(EngineError::of(e)),
        };
        let adoptable = match services.as_slice() {
            [one] => adoptable(&self.manager, one).await,
            _ => None,
        };
        let Some((service, suffix)) = adoptable else {
            return Found::Gone;
        };
        Found::Running(Servo {
            task: id,
            id: service.clone(),
            prepared: self.prepared(id, suffix.clone()),
            kind: ServoKind::Swarm {
                objects: LaunchObjects::of(id, &service, &suffix),
                seen: Arc::default(),
            },
        })
    }
}

impl Swarm {
    /// The warm job `slot` claimed for task `id`, while it has not ended.
    async fn find_warm(&self, id: TaskId, slot: TaskId) -> Found {
        let name = super::warm_name(slot);
        let inspected = match self.manager.inspect_service(&name, None).await {
            Ok(s) => s,
            Err(e) if is_gone(&e) => return Found::Gone,
            Err(e) => return Found::Unknown(EngineError::of(e.into())),
        };
        let labelled = inspected
            .spec
            .as_ref()
            .and_then(|s| s.labels.as_ref())
            .and_then(|l| l.get(crate::backend::docker::POOL_SLOT_LABEL))
            .is_some_and(|s| *s == slot.to_string());
        let Some(service) = inspected.id.filter(|_| labelled) else {
            return Found::Gone;
        };
        match super::observe(&self.manager, &service).await {
            Ok(o) if matches!(o.phase, Swarmed::Waiting | Swarmed::Running) => {}
            Ok(_) => return Found::Gone,
            Err(e) => return Found::Unknown(EngineError::of(e)),
        }
        Found::Running(Servo {
            task: id,
            id: name,
            prepared: self.prepared_warm(slot),
            kind: ServoKind::Swarm {
                objects: LaunchObjects::warm(id, slot, &service),
                seen: Arc::default(),
            },
        })
    }
}

fn is_gone(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// The service's id and launch suffix, when its task has not ended.
async fn adoptable(manager: &Docker, service: &str) -> Option<(String, String)> {
    let inspected = manager.inspect_service(service, None).await.ok()?;
    let suffix = inspected
        .spec
        .and_then(|s| s.labels)
        .and_then(|l| l.get(LAUNCH_LABEL).cloned())?;
    match super::observe(manager, service).await.ok()?.phase {
        Swarmed::Waiting | Swarmed::Running => Some((service.to_string(), suffix)),
        Swarmed::Exited(_) | Swarmed::Lost(_) => None,
    }
}
