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
    pub async fn find(&self, id: TaskId) -> Found {
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
