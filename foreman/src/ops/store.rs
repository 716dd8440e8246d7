//! Opening the task database as every command does: its directory made,
//! the file and SQLite's `-wal` and `-shm` closed to others as `file_access`
//! says.

use crate::config::Config;
use crate::config::FileAccess;
use crate::store::Store;
use anyhow::{Context, bail};
use std::path::Path;

/// Opens the database named by the config, creating its directory.
pub(crate) fn open_store(cfg: &Config) -> anyhow::Result<Store> {
    let path = cfg.database();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating database directory `{}`", dir.display()))?;
    }
    create_db_file(&path, cfg.file.file_access)?;
    let store =
        Store::open(&path).with_context(|| format!("opening database `{}`", path.display()))?;
    // One made before (by an older saheeli, by hand) is closed to others
    // as `file_access` says, and so are SQLite's `-wal` and `-shm`
    // (HOSTILE.md case 57): they hold prompts, answers and messages.
    let access = cfg.file.file_access;
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.clone().into_os_string();
        name.push(suffix);
        narrow(Path::new(&name), access.file_mode())?;
    }
    Ok(store)
}

/// Takes from `path`'s mode what `mode` does not allow (never adds to
/// it); an absent file is left absent, a link is not followed, and a file
/// of another user (a group member's `task status` under `file_access:
/// group`) is not this process's to change.
pub(crate) fn narrow(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: geteuid only reads the process's effective uid.
    let me = unsafe { libc::geteuid() };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() || m.uid() != me => return Ok(()),
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading `{}`", path.display())),
    };
    let now = meta.permissions().mode() & 0o7777;
    if now & !mode == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(now & mode))
        .with_context(|| format!("setting the mode of `{}`", path.display()))
}

/// Creates an absent database file empty, with `access`'s mode whatever
/// the umask (SQLite then gives its `-wal` and `-shm` the same mode). An
/// existing one is narrowed to that mode once opened (`open_store`).
fn create_db_file(path: &Path, access: FileAccess) -> anyhow::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(access.file_mode())
        .open(path);
    match created {
        Ok(f) => f
            .set_permissions(std::fs::Permissions::from_mode(access.file_mode()))
            .with_context(|| format!("setting the mode of database `{}`", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating database `{}`", path.display())),
    }
}

/// Opens an existing database for a command that only reads (status, logs,
/// results): never creates one, and says where it looked.
pub(crate) fn open_existing_store(cfg: &Config) -> anyhow::Result<Store> {
    let path = cfg.database();
    if !path.exists() {
        bail!(
            "no database at `{}` (from {}); run this in the project directory, or pass \
             `--config FILE`; `saheeli task submit` creates it",
            path.display(),
            cfg.describe_source()
        );
    }
    open_store(cfg)
}
