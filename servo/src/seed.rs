//! A task image's seed (issue 49): what the task's own image held at
//! `workdir:` (kept at [`saheeli_protocol::setup::SEED_DIR`] by the layer
//! the foreman builds over it) is copied into a fresh workspace as the
//! servo starts, by the agent's own helper (`servo copy-seed`): the files
//! are the agent's, and it runs beside the rest of the servo's start
//! instead of the foreman reading the seed out of the image and Docker
//! unpacking it before the start.
//!
//! The helper walks the seed (links stored as links, never followed;
//! FIFOs, sockets and devices left out) into a pipe, and the hardened
//! unpacker (`unpack`) writes it: nothing lands through a link, bytes and
//! entries are capped. What the workspace holds already (the submitted
//! workspace, uploaded before the start) stays, as it did when the seed
//! was unpacked first and the submitted workspace over it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};

use saheeli_protocol::setup;

use crate::privsep::Mode;
use crate::unpack::{Caps, Existing};

/// The seed to copy, when the foreman asked for one and the image has it
/// (a directory, not a link).
pub(crate) fn given() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os(setup::SEED_ENV)?);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    meta.is_dir().then_some(path)
}

/// Starts `servo copy-seed SRC ROOT` as the agent's user.
pub(crate) fn spawn(src: &Path, root: &Path, mode: Mode) -> Result<tokio::process::Child, String> {
    let mut cmd = crate::remote::agent_helper("copy-seed", root);
    cmd.arg(src).stdin(Stdio::null()).stdout(Stdio::null());
    crate::privsep::spawn(mode, &mut cmd)
        .map_err(|e| format!("starting the copy of the image's working directory: {e}"))
}

/// `servo copy-seed DIR SRC`: the seed SRC into the workspace DIR, as the
/// agent's user.
pub(crate) fn copy_main(mut argv: impl Iterator<Item = String>) -> ExitCode {
    let (Some(dir), Some(src)) = (argv.next(), argv.next()) else {
        eprintln!("servo copy-seed: usage: servo copy-seed DIR SRC");
        return ExitCode::from(2);
    };
    match copy(Path::new(&src), Path::new(&dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("servo copy-seed: {e}");
            ExitCode::from(1)
        }
    }
}

/// Copies the tree `src` into `dir`, keeping what `dir` holds.
pub(crate) fn copy(src: &Path, dir: &Path) -> std::io::Result<()> {
    let (reader, writer) = std::io::pipe()?;
    let from = src.to_path_buf();
    let packer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut b = tar::Builder::new(std::io::BufWriter::with_capacity(256 * 1024, writer));
        b.follow_symlinks(false);
        crate::remote::append_tree(&mut b, &from, Path::new(""), &|_| true)?;
        b.into_inner()?.flush()
    });
    let caps = Caps {
        max_bytes: setup::MAX_SEED_BYTES,
        max_entries: setup::MAX_ENTRIES,
    };
    let reader = std::io::BufReader::with_capacity(256 * 1024, reader);
    let unpacked =
        crate::unpack::unpack(reader, dir, caps, Existing::Keep, crate::cached_setup::kept);
    // The reader is gone: a packer still writing ends on a broken pipe.
    let packed = packer
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the seed's reader panicked")));
    unpacked?;
    packed.map_err(|e| std::io::Error::new(e.kind(), format!("reading `{}`: {e}", src.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_is_copied_links_as_links_and_the_workspace_wins() {
        let src = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("pkg/sub")).unwrap();
        std::fs::write(src.path().join("calc.py"), "seed\n").unwrap();
        std::fs::write(src.path().join("pkg/sub/x.txt"), "x\n").unwrap();
        std::fs::write(src.path().join("kept.txt"), "seed\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("link")).unwrap();
        std::fs::write(src.path().join("prompt.md"), "not the task's\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let run = src.path().join("run.sh");
        std::fs::write(&run, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        // What the workspace holds already stays.
        std::fs::write(dir.path().join("kept.txt"), "submitted\n").unwrap();
        std::fs::write(dir.path().join("prompt.md"), "the task's\n").unwrap();
        copy(src.path(), dir.path()).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        assert_eq!(read("calc.py"), "seed\n");
        assert_eq!(read("pkg/sub/x.txt"), "x\n");
        assert_eq!(read("kept.txt"), "submitted\n");
        assert_eq!(read("prompt.md"), "the task's\n");
        let link = dir.path().join("link");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("/etc/passwd"));
        let mode = std::fs::metadata(dir.path().join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
    }

    #[test]
    fn a_link_in_the_workspace_is_never_written_through() {
        let src = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("d")).unwrap();
        std::fs::write(src.path().join("d/f"), "seed\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("d")).unwrap();
        assert!(copy(src.path(), dir.path()).is_err());
        assert!(!outside.path().join("f").exists());
    }

    #[test]
    fn a_seed_that_is_not_there_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = copy(Path::new("/nonexistent-seed"), dir.path()).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-seed"), "{e}");
    }
}
