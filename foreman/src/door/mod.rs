//! The per-task door of the gateway: how a servo reaches its task's
//! routes. A unix socket in a directory mounted into the container
//! (`socket`), a warm servo's socket claimed for a task (`warm`, issue 28),
//! or a route of one TCP listener shared by token for servos on other
//! hosts (`remote`: the Swarm's hub, with the workspace in and out).
//! The door serves the `Router` it is given and knows nothing of what is
//! behind it; `backend` may use it, nothing else at its layer.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

pub(crate) mod remote;
mod slots;
pub(crate) mod socket;
pub(crate) mod warm;

pub(crate) use remote::{Hub, RemoteTask, Uploaded};
use saheeli_protocol::TaskId;
pub(crate) use socket::{Served, Sockets};
pub(crate) use warm::{WarmSocket, WarmTask};

/// A request's head must reach the gateway within this, and a connection
/// left idle is closed after it: longer than the servo's HTTP client keeps
/// an idle connection (90 s), so the client always closes first.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(120);

/// Binds `<dir>/gateway.sock` (0600 for the servo's user, or its container's).
pub(crate) fn bind(dir: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    bind_named(dir, "gateway.sock")
}

/// Binds `<dir>/<name>` as [`bind`] does: the egress proxies' sockets
/// (issue 50) sit beside the gateway's.
pub(crate) fn bind_named(dir: &Path, name: &str) -> anyhow::Result<tokio::net::UnixListener> {
    let sock = dir.join(name);
    if sock.as_os_str().len() > 107 {
        anyhow::bail!(
            "gateway socket path `{}` is longer than 107 bytes; set a shorter `run_dir` in config.yaml",
            sock.display()
        );
    }
    socket::remove_stale_socket(&sock)?;
    let listener = tokio::net::UnixListener::bind(&sock)
        .with_context(|| format!("listening on `{}`", sock.display()))?;
    socket::secure_socket(&sock)?;
    Ok(listener)
}

/// Where a remote servo's workspace arrives: its task's route of the hub.
/// A task reached by a socket has none (its workspace is copied out of
/// its container instead).
#[derive(Clone)]
pub(crate) struct UploadFrom {
    pub hub: Hub,
    pub task_id: TaskId,
}

impl UploadFrom {
    /// The task's upload once finished, waiting up to `patience` for it.
    pub(crate) async fn wait(&self, patience: Duration) -> Option<Uploaded> {
        self.hub.uploaded(self.task_id, patience).await
    }
}
