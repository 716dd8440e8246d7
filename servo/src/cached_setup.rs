//! A cached set-up unpacked by the servo (issue 50): when the foreman
//! bound the host's copy of a cached set-up's tar into the container
//! ([`saheeli_protocol::setup::TAR_PATH`], named by `SAHEELI_SETUP_TAR`),
//! the servo opens it (never through a link, a plain file only) and hands
//! it as stdin to `servo unpack-setup`, started as the agent's user: the
//! files are the agent's, as the set-up made them, and the unpacker is
//! the hardened one (`unpack`), capped at what the file holds.
//!
//! A cold servo starts the unpack first and waits for it just before its
//! agent starts, so it runs beside the rest of the servo's start; a warm
//! one unpacks while it waits for a claim.

use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Instant;

use saheeli_protocol::setup;

use crate::privsep::Mode;
use crate::unpack::{Caps, Existing};

/// The workspace's start under way: the image's seed being copied, then
/// a cached set-up unpacked over it; or either alone.
pub(crate) struct Pending {
    child: tokio::process::Child,
    /// What `child` does, for its error.
    doing: Doing,
    started: Instant,
    /// A cached set-up to unpack once the seed is in.
    then: Option<Setup>,
}

#[derive(Clone, Copy)]
enum Doing {
    Seed,
    Setup,
}

/// A cached set-up's tar, opened, and where it goes.
struct Setup {
    file: std::fs::File,
    len: u64,
    root: PathBuf,
    mode: Mode,
}

/// Whether this container was given a cached set-up to unpack.
pub(crate) fn given() -> bool {
    std::env::var_os(setup::TAR_ENV).is_some()
}

/// Starts filling the fresh workspace `root`: the image's seed when the
/// foreman asked for it (`seed`), then the cached set-up, when there is
/// one.
pub(crate) fn begin(root: &Path, mode: Mode) -> Result<Option<Pending>, String> {
    let set_up = open(root, mode)?;
    if let Some(src) = crate::seed::given() {
        let child = crate::seed::spawn(&src, root, mode)?;
        return Ok(Some(Pending {
            child,
            doing: Doing::Seed,
            started: Instant::now(),
            then: set_up,
        }));
    }
    set_up.map(unpack).transpose()
}

/// The cached set-up's tar, opened (never through a link, a plain file
/// only), when this container was given one.
fn open(root: &Path, mode: Mode) -> Result<Option<Setup>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(path) = std::env::var_os(setup::TAR_ENV) else {
        return Ok(None);
    };
    let path = Path::new(&path);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("opening the cached set-up `{}`: {e}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("reading the cached set-up `{}`: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "the cached set-up `{}` is not a file",
            path.display()
        ));
    }
    Ok(Some(Setup {
        file,
        len: meta.len(),
        root: root.to_path_buf(),
        mode,
    }))
}

/// Starts the set-up's unpacker.
fn unpack(s: Setup) -> Result<Pending, String> {
    // Nothing unpacked can hold more bytes than the tar does (a sparse
    // file, which could, is refused).
    let mut cmd = crate::remote::agent_helper("unpack-setup", &s.root);
    cmd.arg(s.len.to_string())
        .stdin(Stdio::from(s.file))
        .stdout(Stdio::null());
    let started = Instant::now();
    let child = crate::privsep::spawn(s.mode, &mut cmd)
        .map_err(|e| format!("starting the cached set-up's unpacker: {e}"))?;
    Ok(Pending {
        child,
        doing: Doing::Setup,
        started,
        then: None,
    })
}

impl Pending {
    /// Waits for the start to end (the seed, then the set-up).
    pub async fn done(self) -> Result<(), String> {
        let mut p = self;
        loop {
            p.wait_one().await?;
            match p.then.take() {
                Some(s) => p = unpack(s)?,
                None => return Ok(()),
            }
        }
    }

    async fn wait_one(&mut self) -> Result<(), String> {
        let status = self
            .child
            .wait()
            .await
            .map_err(|e| format!("waiting for the workspace's start: {e}"))?;
        let ms = self.started.elapsed().as_secs_f64() * 1000.0;
        match (self.doing, status.success()) {
            (Doing::Seed, true) => tracing::info!(ms, "the image's working directory copied"),
            (Doing::Setup, true) => tracing::info!(ms, "cached set-up unpacked"),
            (Doing::Seed, false) => {
                return Err(format!(
                    "the task image's working directory could not be copied into the workspace \
                     (its copier exited with {status})"
                ));
            }
            (Doing::Setup, false) => {
                return Err(format!(
                    "the cached set-up could not be unpacked into the workspace (its unpacker exited with {status})"
                ));
            }
        }
        Ok(())
    }
}

/// Waits for the unpack `pending`, if one was begun.
pub(crate) async fn settled(pending: Option<Pending>) -> Result<(), String> {
    match pending {
        Some(p) => p.done().await,
        None => Ok(()),
    }
}

/// What of a cached set-up is unpacked: not the servo's own files, not
/// the launch's prompt (the task's own wins), not the workspace itself.
pub(crate) fn kept(p: &Path) -> bool {
    !crate::remote::servo_owned(p) && !crate::remote::is_root(p) && p != Path::new("prompt.md")
}

/// `servo unpack-setup DIR MAX_BYTES`: a cached set-up's tar from stdin
/// into DIR, as the agent's user.
pub(crate) fn unpack_main(mut argv: impl Iterator<Item = String>) -> ExitCode {
    let (Some(dir), Some(max_bytes)) = (argv.next(), argv.next().and_then(|b| b.parse().ok()))
    else {
        eprintln!("servo unpack-setup: usage: servo unpack-setup DIR MAX_BYTES");
        return ExitCode::from(2);
    };
    let caps = Caps {
        max_bytes,
        max_entries: setup::MAX_ENTRIES,
    };
    let stdin = std::io::BufReader::with_capacity(256 * 1024, std::io::stdin().lock());
    match crate::unpack::unpack(stdin, Path::new(&dir), caps, Existing::Replace, kept) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("servo unpack-setup: {e}");
            ExitCode::from(1)
        }
    }
}
