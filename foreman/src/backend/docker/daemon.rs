//! Reaching the Docker daemon, and waiting for it to come back.

use std::time::Duration;

use anyhow::Context;
use bollard::Docker;

use crate::fault::DaemonFault;

/// Connects to the local daemon (honouring `DOCKER_HOST`) and negotiates the API version.
pub(crate) async fn connect() -> anyhow::Result<Docker> {
    let hint = connect_hint();
    let hint = hint.as_str();
    let docker = Docker::connect_with_local_defaults()
        .with_context(|| format!("connecting to Docker: {hint}"))?;
    let docker = docker
        .negotiate_version()
        .await
        .with_context(|| format!("connecting to Docker: {hint}"))?;
    docker
        .ping()
        .await
        .with_context(|| format!("pinging Docker: {hint}"))?;
    Ok(docker)
}

/// Why connecting may fail, for the error: a socket we may not open is not
/// a daemon that is down.
fn connect_hint() -> String {
    let socket = match std::env::var("DOCKER_HOST") {
        Ok(h) if !h.is_empty() => match h.strip_prefix("unix://") {
            Some(p) => p.to_string(),
            None => return format!("is the Docker daemon at `{h}` (DOCKER_HOST) running?"),
        },
        _ => "/var/run/docker.sock".to_string(),
    };
    match std::os::unix::net::UnixStream::connect(&socket) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => format!(
            "permission denied on the Docker socket `{socket}`: this user may not use Docker; \
             add it to the `docker` group (`sudo usermod -aG docker $USER`, then log in \
             again) or run saheeli as root"
        ),
        _ => format!(
            "is the Docker daemon running? (`docker info` should answer on `{socket}`; \
             `scripts/setup.sh docker` starts one)"
        ),
    }
}

/// After a Docker error: pings with backoff until the daemon answers again
/// (it may be restarting), for up to `limit`. Returns whether it did.
pub(crate) async fn await_daemon(docker: &Docker, limit: Duration) -> bool {
    let started = std::time::Instant::now();
    let mut wait = Duration::from_millis(250);
    loop {
        if docker.ping().await.is_ok() {
            return true;
        }
        if started.elapsed() + wait > limit {
            return false;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

/// The daemon's part in an error from a Docker call, if it was the daemon's
/// fault. A 4xx (a bad request, a missing image) is the task's, not the
/// daemon's; errors that never reached Docker are not the daemon's either.
pub(crate) fn daemon_fault(err: &anyhow::Error) -> Option<DaemonFault> {
    use bollard::errors::Error as E;
    let e = err.chain().find_map(|c| c.downcast_ref::<E>())?;
    match e {
        E::DockerResponseServerError { status_code, .. } if *status_code >= 500 => {
            Some(DaemonFault::ServerError)
        }
        E::RequestTimeoutError => Some(DaemonFault::Timeout),
        E::IOError { .. }
        | E::HyperResponseError { .. }
        | E::HyperLegacyError { .. }
        | E::HttpClientError { .. }
        | E::SocketNotFoundError(_) => Some(DaemonFault::Unreachable),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::errors::Error as E;

    fn wrapped(e: E) -> anyhow::Error {
        anyhow::Error::new(e).context("starting the servo container")
    }

    #[test]
    fn only_the_daemons_own_failures_are_its_fault() {
        let server = |status_code| E::DockerResponseServerError {
            status_code,
            message: "boom".into(),
        };
        assert_eq!(
            daemon_fault(&wrapped(server(500))),
            Some(DaemonFault::ServerError)
        );
        assert_eq!(daemon_fault(&wrapped(server(404))), None);
        assert_eq!(daemon_fault(&wrapped(server(409))), None);
        assert_eq!(
            daemon_fault(&wrapped(E::RequestTimeoutError)),
            Some(DaemonFault::Timeout)
        );
        let io = E::IOError {
            err: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        assert_eq!(daemon_fault(&wrapped(io)), Some(DaemonFault::Unreachable));
        assert_eq!(
            daemon_fault(&wrapped(E::SocketNotFoundError("/x".into()))),
            Some(DaemonFault::Unreachable)
        );
        assert_eq!(daemon_fault(&anyhow::anyhow!("gateway socket")), None);
    }
}
