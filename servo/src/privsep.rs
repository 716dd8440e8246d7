//! The servo and the agent never share a uid.
//!
//! The foreman starts the container as root with every capability dropped
//! but `CAP_SETUID`, `CAP_SETGID` and `CAP_KILL` (the last for the
//! container's init, which forwards SIGTERM to the servo), `no-new-privileges` on, and
//! `SAHEELI_PRIVSEP=1` in the environment. Before anything else (one
//! thread, no runtime yet) [`separate`] makes this process the servo's
//! user ([`uids::SERVO`]): no supplementary groups, not dumpable (so the
//! agent can neither ptrace it nor read its `/proc` files), and with
//! `CAP_SETUID`/`CAP_SETGID` kept in its *permitted* set only (the rest
//! is dropped for good). They are
//! raised to *effective* for the instant it takes to start a process as
//! the agent's user ([`uids::AGENT`]) and lowered again; the started
//! process loses them for good at its `execve` (no file capabilities, no
//! ambient set). Nothing else is ever effective in the servo.
//!
//! What follows: the gateway socket (0600, the servo's uid) and the
//! servo's files are out of the agent's reach; the agent's processes run
//! with no capability at all and cannot signal, trace or read the servo.

use std::io;

use caps::{CapSet, Capability, CapsHashSet};
use saheeli_protocol::uids;

/// How this servo runs its agent processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Separated: agent processes run as [`uids::AGENT`].
    Separated,
    /// Not asked to separate (a servo run by hand or in tests): agent
    /// processes run as the servo's own user.
    Same,
}

/// The capabilities kept (permitted, not effective) to start agent processes.
fn spawn_caps() -> CapsHashSet {
    [Capability::CAP_SETUID, Capability::CAP_SETGID]
        .into_iter()
        .collect()
}

fn check(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    }
}

/// Becomes the servo's user when the foreman asked for separation; must run
/// before any thread is started (credentials and the keep-caps flag are
/// per thread). Returns how agent processes are to be started.
pub(crate) fn separate() -> io::Result<Mode> {
    if std::env::var(uids::PRIVSEP_ENV).ok().as_deref() != Some("1") {
        return Ok(Mode::Same);
    }
    // SAFETY: these calls only change this (single-threaded) process's
    // credentials and flags; each result is checked.
    unsafe {
        if libc::geteuid() != 0 {
            return Err(io::Error::other(format!(
                "{} is set but the servo started as uid {}, not root: the container must \
                 start as root with CAP_SETUID and CAP_SETGID (the foreman does this)",
                uids::PRIVSEP_ENV,
                libc::geteuid()
            )));
        }
        check(
            libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0),
            "prctl(PR_SET_KEEPCAPS)",
        )?;
        check(libc::setgroups(0, std::ptr::null()), "setgroups")?;
        check(
            libc::setresgid(uids::SERVO, uids::SERVO, uids::SERVO),
            "setresgid",
        )?;
        check(
            libc::setresuid(uids::SERVO, uids::SERVO, uids::SERVO),
            "setresuid",
        )?;
        check(
            libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0),
            "prctl(PR_SET_KEEPCAPS, 0)",
        )?;
        // Changing the uid already made us non-dumpable; say so anyway.
        check(
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0),
            "prctl(PR_SET_DUMPABLE)",
        )?;
    }
    let keep = spawn_caps();
    caps::clear(None, CapSet::Ambient).map_err(io::Error::other)?;
    caps::clear(None, CapSet::Inheritable).map_err(io::Error::other)?;
    caps::clear(None, CapSet::Effective).map_err(io::Error::other)?;
    caps::set(None, CapSet::Permitted, &keep).map_err(io::Error::other)?;
    Ok(Mode::Separated)
}

/// Starts `command` as the agent's user (in [`Mode::Separated`]), raising
/// `CAP_SETUID`/`CAP_SETGID` only around the fork. The child sets its
/// uid and gid before it `exec`s, which leaves it no capability.
pub(crate) fn spawn(
    mode: Mode,
    command: &mut tokio::process::Command,
) -> io::Result<tokio::process::Child> {
    if mode == Mode::Same {
        return command.spawn();
    }
    command.uid(uids::AGENT).gid(uids::AGENT);
    caps::set(None, CapSet::Effective, &spawn_caps()).map_err(io::Error::other)?;
    let child = command.spawn();
    let lowered = caps::clear(None, CapSet::Effective).map_err(io::Error::other);
    let child = child?;
    lowered?;
    Ok(child)
}
