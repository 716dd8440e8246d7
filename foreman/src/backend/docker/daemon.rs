//! Reaching the Docker daemon, and waiting for it to come back.

use std::time::Duration;

use anyhow::Context;
use bollard::Docker;

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
