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
//!
//! `SAHEELI_PRIVSEP=root` (a task's `agent_user: root`): the agent's
//! processes run as uid 0 instead, gid 0, with the agent's group (1000)
//! beside it so it adds files to the sticky /workspace. Root *without a
//! capability*: before its `execve` the child clears every capability
//! set and sets no-new-privileges itself, so the `execve` (which would
//! hand root the bounding set: `CAP_SETUID`, `CAP_SETGID`, `CAP_KILL`)
//! gives it nothing. Uid 0 without `CAP_DAC_OVERRIDE` is only the owner
//! of root's files: the socket (0600, uid 999) and the servo's files stay
//! closed to it as to any other user, and without `CAP_SETUID` it can
//! never become the servo.

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

/// Whom the agent's processes run as, fixed once by [`separate`].
static ROOT_AGENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

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
    match std::env::var(uids::PRIVSEP_ENV).ok().as_deref() {
        Some("1") => {}
        Some(uids::PRIVSEP_ROOT) => ROOT_AGENT.store(true, std::sync::atomic::Ordering::Relaxed),
        _ => return Ok(Mode::Same),
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
    if ROOT_AGENT.load(std::sync::atomic::Ordering::Relaxed) {
        command.uid(0).gid(0);
        // SAFETY: only async-signal-safe system calls, after the fork.
        unsafe { command.pre_exec(root_without_caps) };
    } else {
        command.uid(uids::AGENT).gid(uids::AGENT);
    }
    caps::set(None, CapSet::Effective, &spawn_caps()).map_err(io::Error::other)?;
    let child = command.spawn();
    let lowered = caps::clear(None, CapSet::Effective).map_err(io::Error::other);
    let child = child?;
    lowered?;
    Ok(child)
}

/// In the child, after it became uid 0 (std sets the ids before this
/// hook) and before its `execve`: the agent's group beside root's, then
/// no-new-privileges and no capability in any set. Root's `execve` would
/// give it the bounding set; with no-new-privileges it keeps at most what
/// it had, which is now nothing.
fn root_without_caps() -> io::Result<()> {
    /// `struct __user_cap_header_struct` and `__user_cap_data_struct`.
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let groups: [libc::gid_t; 1] = [uids::AGENT];
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let none = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // After a fork nothing may allocate: a failure is the bare errno.
    let ok = |rc: libc::c_long| {
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // SAFETY: plain system calls on this process, arguments on the stack.
    unsafe {
        ok(libc::setgroups(1, groups.as_ptr()).into())?;
        ok(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
        ok(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
        .into())?;
        ok(libc::syscall(
            libc::SYS_capset,
            &mut header as *mut Header,
            none.as_ptr(),
        ))?;
    }
    Ok(())
}
