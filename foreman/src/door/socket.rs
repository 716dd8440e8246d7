//! Where a task's gateway socket lives, and who may reach it.
//!
//! `run_dir` belongs to the foreman's user with mode 0700, so no other host
//! user can enter it, plant a task directory in it or reach a socket below
//! it; one owned by someone else, or open to group or others, is refused.
//! Each task's directory is made fresh at launch (what a dead foreman left
//! is removed first; links are never followed) and reused on adoption: the
//! running container's bind mount holds that very directory. The container
//! reaches its socket through the mount, which does not pass through
//! `run_dir`; the socket is 0600 and owned by the servo's uid when the
//! foreman can give it away (root), else open to the container's users
//! (then the agent's shell can reach it too, and only the gateway's own
//! checks stand: `serve` says so when it starts).

use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use axum::Router;
use saheeli_protocol::TaskId;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::config::Config;
use crate::listen::{FdBudget, GATEWAY_CONNECTIONS, open_files_limit};

/// The uid (and gid) the servo runs as in its container; the agent's
/// processes run as another (`protocol::uids`) and cannot open the socket.
pub(crate) const SERVO_UID: u32 = saheeli_protocol::uids::SERVO;

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Where the task sockets live and how many connections each serves:
/// settled once when `serve` starts (a planted run directory, or an
/// open-files limit too low for a fixed `concurrency`, stops it before
/// any task).
#[derive(Clone, Debug)]
pub(crate) struct Sockets {
    pub run_dir: PathBuf,
    /// Each task gateway's connection cap (`listen::FdBudget`; `serve`
    /// logs it).
    pub connections: usize,
}

/// A task's socket being served: its directory, and how to stop it.
pub(crate) struct Served {
    pub dir: PathBuf,
    pub stop: CancellationToken,
    pub server: tokio::task::JoinHandle<()>,
}

impl Sockets {
    pub fn from_config(cfg: &Config) -> anyhow::Result<Sockets> {
        let run_dir = cfg.run_dir();
        prepare_run_dir(&run_dir)?;
        if euid() != 0 {
            warn!(
                "serve is not running as root: the gateway sockets cannot be given to the \
                 servo's uid alone, so a task's own shell can reach its gateway; the gateway \
                 still checks every request, but run serve as root for the full separation"
            );
        }
        Ok(Sockets {
            run_dir,
            connections: connections(cfg)?,
        })
    }

    /// Serves `app` on `<run_dir>/<task_id>/gateway.sock`: a fresh
    /// directory, or (`adopt`) the one a running servo's container has
    /// mounted.
    pub fn serve(&self, task_id: TaskId, app: Router, adopt: bool) -> anyhow::Result<Served> {
        let dir = task_dir(&self.run_dir, &task_id.to_string(), adopt)?;
        let listener = match super::bind(&dir) {
            Ok(l) => l,
            Err(e) => {
                // A fresh directory is ours to remove (an adopted one is
                // the running container's mount): no failed launch leaves
                // its directory behind.
                if !adopt && let Err(rm) = std::fs::remove_dir_all(&dir) {
                    warn!(task_id = %task_id, dir = %dir.display(), error = %rm, "removing the gateway directory of a failed launch");
                }
                return Err(e);
            }
        };
        let stop = CancellationToken::new();
        let doors = crate::listen::Doors {
            name: "gateway",
            task_id: Some(task_id),
            max_connections: self.connections,
            header_timeout: super::HEADER_TIMEOUT,
        };
        let server = tokio::spawn(crate::listen::serve(listener, app, doors, stop.clone()));
        Ok(Served { dir, stop, server })
    }
}

/// Each task gateway's connection cap under this process's open-files
/// limit: every task's gateway at its cap and the dashboard at its own
/// must leave `listen::FD_RESERVE` descriptors for launches. Lowered to
/// fit with a warning; a fixed `concurrency` that cannot fit is refused.
fn connections(cfg: &Config) -> anyhow::Result<usize> {
    use crate::config::Concurrency;
    let limit = open_files_limit();
    let web = cfg.file.http.max_connections;
    let (tasks, fixed) = match cfg.file.concurrency {
        Concurrency::Fixed(n) => (n, true),
        Concurrency::Auto => (crate::config::AUTO_CEILING, false),
    };
    let budget = match FdBudget::new(limit, tasks, web) {
        Ok(b) => b,
        Err(e) if fixed => bail!("{e}"),
        Err(e) => {
            warn!(
                "{e} (with `concurrency: auto`, counted at its ceiling of {tasks} tasks); each gateway keeps 4 connections"
            );
            FdBudget {
                limit,
                per_gateway: 4,
            }
        }
    };
    if budget.per_gateway < GATEWAY_CONNECTIONS {
        warn!(
            limit,
            tasks,
            per_gateway = budget.per_gateway,
            "the open-files limit is low: each task's gateway takes fewer connections than the usual {GATEWAY_CONNECTIONS}"
        );
    }
    Ok(budget.per_gateway)
}

/// Creates `run_dir` (0700) when absent; refuses one that is a link, not
/// ours, or open to others.
pub(crate) fn prepare_run_dir(run_dir: &Path) -> anyhow::Result<()> {
    if let Some(parent) = run_dir.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating `{}`", parent.display()))?;
    }
    match DirBuilder::new().mode(0o700).create(run_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(e).with_context(|| {
                format!("creating the gateway run directory `{}`", run_dir.display())
            });
        }
    }
    let meta = std::fs::symlink_metadata(run_dir)
        .with_context(|| format!("inspecting `{}`", run_dir.display()))?;
    let shown = run_dir.display();
    if !meta.file_type().is_dir() {
        bail!(
            "gateway run directory `{shown}` is not a directory (a link?); remove it, or set \
             another `run_dir` in config.yaml"
        );
    }
    if meta.uid() != euid() {
        bail!(
            "gateway run directory `{shown}` is owned by uid {}, not by this user (uid {}): \
             another user could reach the task sockets in it; remove it, or set another \
             `run_dir` in config.yaml",
            meta.uid(),
            euid()
        );
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "gateway run directory `{shown}` has mode {mode:o}, open to other users; \
             `chmod 700 {shown}`, or set another `run_dir` in config.yaml"
        );
    }
    Ok(())
}

/// A task's socket directory: made fresh (`adopt` false) or reused for a
/// running servo whose mount holds it (`adopt` true).
pub(crate) fn task_dir(run_dir: &Path, task: &str, adopt: bool) -> anyhow::Result<PathBuf> {
    prepare_run_dir(run_dir)?;
    let dir = run_dir.join(task);
    match std::fs::symlink_metadata(&dir) {
        Ok(meta) => {
            // Only this user can write in run_dir, so what is there was
            // made by a foreman; still, never follow a link.
            if !meta.file_type().is_dir() || ![euid(), SERVO_UID].contains(&meta.uid()) {
                bail!(
                    "gateway directory `{}` exists and was not made by Saheeli; remove it",
                    dir.display()
                );
            }
            if adopt {
                return Ok(dir);
            }
            // Left by a foreman that died before its servo started.
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("removing the stale `{}`", dir.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("inspecting `{}`", dir.display())),
    }
    // Traverse only: the container's user needs to reach the socket inside.
    DirBuilder::new()
        .mode(0o711)
        .create(&dir)
        .with_context(|| format!("creating gateway directory `{}`", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))
        .with_context(|| format!("setting permissions on `{}`", dir.display()))?;
    Ok(dir)
}

/// Gives a freshly bound socket to the servo's user (0600) when this
/// process may, else opens it to the container's user (the 0700 run_dir
/// keeps other host users out).
pub(crate) fn secure_socket(sock: &Path) -> anyhow::Result<()> {
    let mode = if euid() == 0 {
        std::os::unix::fs::chown(sock, Some(SERVO_UID), Some(SERVO_UID))
            .with_context(|| format!("giving `{}` to uid {SERVO_UID}", sock.display()))?;
        0o600
    } else {
        0o666
    };
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting permissions on `{}`", sock.display()))
}

/// Removes a socket file a dead gateway left (only a socket: nothing else).
pub(crate) fn remove_stale_socket(sock: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(sock) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(sock)
            .with_context(|| format!("removing the stale socket `{}`", sock.display())),
        Ok(_) => bail!("`{}` exists and is not a socket; remove it", sock.display()),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_dir_is_made_private_and_loose_ones_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let run = d.path().join("run");
        prepare_run_dir(&run).unwrap();
        let mode = std::fs::metadata(&run).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = prepare_run_dir(&run).unwrap_err().to_string();
        assert!(e.contains("mode 755") && e.contains("chmod 700"), "{e}");
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&run, &link).unwrap();
        let e = prepare_run_dir(&link).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        // A task directory is fresh at launch, kept on adoption.
        let t = task_dir(&run, "t1", false).unwrap();
        std::fs::write(t.join("old"), "x").unwrap();
        assert!(task_dir(&run, "t1", true).unwrap().join("old").exists());
        assert!(!task_dir(&run, "t1", false).unwrap().join("old").exists());
        std::os::unix::fs::symlink("/etc", run.join("t2")).unwrap();
        assert!(task_dir(&run, "t2", false).is_err());
        assert!(task_dir(&run, "t2", true).is_err());
    }
}
