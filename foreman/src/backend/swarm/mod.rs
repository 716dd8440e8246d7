//! Docker Swarm: a `replicated-job` service per task, on whichever node
//! the swarm picks, reached through the manager's API.
//!
//! The servo cannot mount the foreman's socket on another host, so it
//! reaches its gateway over TCP (`door::Hub`) with a token delivered as
//! a Swarm secret mounted into that task only, fetches its launch and
//! workspace from there and uploads its workspace there at the end.
//! Nothing is ever read from a node's disk by path.
//!
//! # Layout
//!
//! - `service`: the hardened job service and its secret (what Swarm can
//!   express of the local backend's hardening, and what stands in).
//! - `observe`: Swarm's task states onto what the reconciler needs
//!   (a pure mapping), the node a task runs on, nodes that are Down;
//!   `board`: one look at every watched job for all their watchers.
//! - `overlay`: an idle container on every node keeping the overlay's
//!   sandbox up between tasks (and the image pulled there); `relay`:
//!   `swarm.network: none`, jobs with no network, reaching the gateway
//!   through a relay on their node.
//! - `push`: `build-servo --push`, the image into the swarm's registry;
//!   `prepull`: the agents' images onto every node when `serve` starts.
//! - `endpoint`, `tls`: reaching the manager's and each node's engine
//!   API, plain or over TLS (`swarm.tls`).
//! - `nodes`: reaching each node's engine, to remove what Docker 20.10
//!   leaves behind when a job service is removed (moby/moby#44312).
//! - `locate`: a launch's running servo (node, engine, container), for
//!   `verify`, OOM detection and live logs.
//! - `engine`, `watch`, `collect`, `find`: the swarm as an engine (what
//!   the supervisor asks of it: launch, phases, stop, the upload, adopt).
//! - `pool`, `keep`: warm jobs (issue 53): claimed by `prepare`, kept
//!   warm in the background, removed on stop; what a stopped foreman's
//!   pool left.

mod capabilities;
pub(crate) use capabilities::CAPABILITIES;
mod board;
mod collect;
mod endpoint;
mod engine;
mod find;
mod keep;
mod locate;
mod nodes;
mod observe;
mod overlay;
mod pool;
mod prepull;
mod push;
mod relay;
mod service;
mod tls;
mod watch;

pub(crate) use collect::SwarmLeftovers;
pub(crate) use endpoint::Endpoint;
pub(crate) use engine::{Swarm, SwarmParts};
pub(crate) use keep::{remove_warm_job, warm_jobs};
pub(crate) use locate::{locate, oom_killed, service_name};
pub(crate) use nodes::{
    LaunchObjects, Object, leftovers, node_engine, remove_launch, remove_objects, remove_task,
    swarm_objects,
};
pub(crate) use observe::{Phase, observe};
pub(crate) use pool::{slot_of_name, warm_name};
pub(crate) use push::push;
pub(crate) use service::{LAUNCH_LABEL, ServicePlan, create_service};
pub(crate) use watch::SwarmPhases;

use anyhow::Context;

/// The key tokens are derived from: 32 random bytes in
/// `<state_dir>/swarm-token.key` (0600), made once, so that a foreman
/// that restarts can still recognise the servos it adopts.
pub(crate) fn token_key(state_dir: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = state_dir.join("swarm-token.key");
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating `{}`", state_dir.display()))?;
    // Written whole under a name of its own, then linked into place (a
    // link never replaces): foremen starting at once never read a key
    // another is still writing, and all keep the first one linked.
    let tmp = state_dir.join(format!(
        ".swarm-token.key.{}",
        uuid::Uuid::new_v4().simple()
    ));
    let mut key = uuid::Uuid::new_v4().as_bytes().to_vec();
    key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&key))
        .and_then(|()| std::fs::hard_link(&tmp, &path));
    let _ = std::fs::remove_file(&tmp);
    match written {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let key =
                std::fs::read(&path).with_context(|| format!("reading `{}`", path.display()))?;
            anyhow::ensure!(
                key.len() == 32,
                "`{}` is not a 32-byte key; remove it",
                path.display()
            );
            Ok(key)
        }
        Err(e) => Err(e).with_context(|| format!("creating `{}`", path.display())),
    }
}

/// The gateway token of one launch of a task: HMAC-SHA256 over the task id
/// and the launch's suffix, hex. Another launch of the same task (after a
/// node was lost) has another token, so a servo left on a lost node is
/// refused.
pub(crate) fn token(key: &[u8], id: saheeli_protocol::TaskId, suffix: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(id.to_string().as_bytes());
    mac.update(b"/");
    mac.update(suffix.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Foremen starting at once (two `serve` on one database) all get the
    /// one key linked first, never a key half written.
    #[test]
    fn foremen_starting_at_once_share_one_whole_key() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let keys: Vec<Vec<u8>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|_| s.spawn(|| token_key(dir.path()).unwrap()))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert!(keys.iter().all(|k| k.len() == 32 && *k == keys[0]));
            let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
            assert_eq!(names.len(), 1, "no temporary file is left");
        }
    }

    /// A foreman that restarts reads the same key and derives the same
    /// token for a launch, so the adopted servo's upload is accepted;
    /// another launch of the task gets another token.
    #[test]
    fn a_restarted_foreman_derives_the_same_token_for_the_same_launch() {
        let dir = tempfile::tempdir().unwrap();
        let id = saheeli_protocol::TaskId::new();
        let first = token(&token_key(dir.path()).unwrap(), id, "abcd1234");
        let again = token(&token_key(dir.path()).unwrap(), id, "abcd1234");
        assert_eq!(first, again);
        assert_eq!(first.len(), 64);
        assert_ne!(
            first,
            token(&token_key(dir.path()).unwrap(), id, "ffff0000")
        );
        let other = tempfile::tempdir().unwrap();
        assert_ne!(
            first,
            token(&token_key(other.path()).unwrap(), id, "abcd1234")
        );
    }
}
