//! Freezing a servo's container while its task waits (issue 51): Docker's
//! pause, which puts every process of the container in the cgroup
//! freezer. A frozen process uses no CPU and answers nothing; its memory
//! stays where it is (the same RSS: freezing gives none of it back).

use anyhow::Context;
use bollard::errors::Error as DockerError;

use super::Docker;
use super::timed::{DockerOp, timed};

/// Freezes every process of `container`. One already frozen is not an error.
pub(crate) async fn pause(docker: &Docker, container: &str) -> anyhow::Result<()> {
    timed(DockerOp::Pause, async {
        match docker.pause_container(container).await {
            Ok(()) => Ok(()),
            Err(DockerError::DockerResponseServerError { message, .. })
                if message.contains("already paused") =>
            {
                Ok(())
            }
            Err(e) => Err(e).context("freezing the servo container"),
        }
    })
    .await
}

/// Thaws `container`. One that is not frozen (or gone) is not an error:
/// a thaw only has to leave the servo free to run.
pub(crate) async fn unpause(docker: &Docker, container: &str) -> anyhow::Result<()> {
    timed(DockerOp::Unpause, async {
        match docker.unpause_container(container).await {
            Ok(())
            | Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(()),
            Err(DockerError::DockerResponseServerError { message, .. })
                if message.contains("not paused") || message.contains("is not running") =>
            {
                Ok(())
            }
            Err(e) => Err(e).context("thawing the servo container"),
        }
    })
    .await
}
