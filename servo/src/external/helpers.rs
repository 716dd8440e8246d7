//! Two helpers the servo starts as the agent's user (the servo's uid may
//! neither signal the agent's processes nor should it walk the agent's
//! files): `servo signal TERM|KILL PGID` and `servo collect-home SRC DST
//! MAX_BYTES`, which copies the agent's home into the workspace, regular
//! files and directories only (links and devices are skipped, never
//! followed), stopping at `MAX_BYTES` and [`MAX_FILES`].

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::ExitCode;

/// Files copied at most; a home holding more is cut, saying so.
pub(crate) const MAX_FILES: usize = 20_000;
/// Directory depth walked at most.
const MAX_DEPTH: usize = 32;

/// `servo signal TERM|KILL PGID`: signals a process group.
pub(crate) fn signal_main(mut argv: impl Iterator<Item = String>) -> ExitCode {
    let sig = match argv.next().as_deref() {
        Some("TERM") => libc::SIGTERM,
        Some("KILL") => libc::SIGKILL,
        other => {
            eprintln!("servo signal: expected TERM or KILL, got {other:?}");
            return ExitCode::from(2);
        }
    };
    let Some(pgid) = argv
        .next()
        .and_then(|p| p.parse::<i32>().ok())
        .filter(|p| *p > 1)
    else {
        eprintln!("servo signal: expected a process group id above 1");
        return ExitCode::from(2);
    };
    // SAFETY: kill only sends a signal.
    let rc = unsafe { libc::kill(-pgid, sig) };
    ExitCode::from(if rc == 0 { 0 } else { 1 })
}

/// What a copy did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Copied {
    pub files: usize,
    pub bytes: u64,
    pub skipped: usize,
    pub cut: bool,
}

/// `servo collect-home SRC DST MAX_BYTES`.
pub(crate) fn collect_main(mut argv: impl Iterator<Item = String>) -> ExitCode {
    let (Some(src), Some(dst), Some(max)) = (argv.next(), argv.next(), argv.next()) else {
        eprintln!("servo collect-home: expected SRC DST MAX_BYTES");
        return ExitCode::from(2);
    };
    let Ok(max) = max.parse::<u64>() else {
        eprintln!("servo collect-home: MAX_BYTES `{max}` is not a number");
        return ExitCode::from(2);
    };
    let mut c = Copied::default();
    copy_tree(Path::new(&src), Path::new(&dst), max, 0, &mut c);
    if c.cut {
        let _ = fs::write(
            Path::new(&dst).join("SAHEELI-CUT.txt"),
            format!(
                "The agent's home was cut at {max} bytes or {MAX_FILES} files: {} files, {} bytes copied, {} entries skipped.\n",
                c.files, c.bytes, c.skipped
            ),
        );
    }
    println!("{} {} {} {}", c.files, c.bytes, c.skipped, c.cut);
    ExitCode::SUCCESS
}

/// Copies `src` into the existing directory `dst`.
pub(crate) fn copy_tree(src: &Path, dst: &Path, max: u64, depth: usize, c: &mut Copied) {
    let Ok(entries) = fs::read_dir(src) else {
        c.skipped += 1;
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if c.cut {
            return;
        }
        let Ok(meta) = e.path().symlink_metadata() else {
            c.skipped += 1;
            continue;
        };
        let to = dst.join(e.file_name());
        if meta.is_dir() {
            if depth >= MAX_DEPTH || fs::create_dir(&to).is_err() {
                c.skipped += 1;
                continue;
            }
            copy_tree(&e.path(), &to, max, depth + 1, c);
        } else if meta.is_file() {
            if c.files >= MAX_FILES || c.bytes + meta.len() > max {
                c.cut = true;
                return;
            }
            match copy_file(&e.path(), &to, max - c.bytes) {
                Ok(n) => {
                    c.files += 1;
                    c.bytes += n;
                }
                Err(_) => c.skipped += 1,
            }
        } else {
            // Links, sockets, fifos, devices: never followed nor copied.
            c.skipped += 1;
        }
    }
}

fn copy_file(from: &Path, to: &Path, left: u64) -> std::io::Result<u64> {
    let src = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(from)?;
    if !src.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut dst = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(to)?;
    let mut buf = Vec::new();
    src.take(left).read_to_end(&mut buf)?;
    dst.write_all(&buf)?;
    Ok(buf.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_skipped_and_the_cap_holds() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        fs::create_dir(src.path().join("d")).unwrap();
        fs::write(src.path().join("d/a.txt"), "aaaa").unwrap();
        fs::write(src.path().join("b.txt"), "bb").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("link")).unwrap();
        std::os::unix::fs::symlink("/etc", src.path().join("dirlink")).unwrap();
        let mut c = Copied::default();
        copy_tree(src.path(), dst.path(), 1 << 20, 0, &mut c);
        assert_eq!((c.files, c.bytes, c.skipped, c.cut), (2, 6, 2, false));
        assert_eq!(
            fs::read_to_string(dst.path().join("d/a.txt")).unwrap(),
            "aaaa"
        );
        assert!(!dst.path().join("link").exists());
        assert!(!dst.path().join("dirlink").exists());

        let small = tempfile::tempdir().unwrap();
        let mut c = Copied::default();
        copy_tree(src.path(), small.path(), 3, 0, &mut c);
        assert!(c.cut, "{c:?}");
        assert!(c.bytes <= 3, "{c:?}");
    }
}
