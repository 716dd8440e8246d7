use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

/// One entry with its name written as is (the tar crate's own setters
/// refuse `..` and absolute paths: a hostile tar does not).
fn entry(out: &mut Vec<u8>, name: &str, kind: tar::EntryType, mode: u32, data: &[u8], link: &str) {
    let mut h = tar::Header::new_gnu();
    {
        let gnu = h.as_gnu_mut().unwrap();
        gnu.name[..name.len()].copy_from_slice(name.as_bytes());
        gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
    }
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(data.len() as u64);
    h.set_mtime(1_700_000_000);
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

fn end(mut out: Vec<u8>) -> Vec<u8> {
    out.extend_from_slice(&[0; 1024]);
    out
}

fn file(out: &mut Vec<u8>, name: &str, data: &[u8]) {
    entry(out, name, tar::EntryType::Regular, 0o644, data, "");
}

fn all(_: &Path) -> bool {
    true
}

fn run(tar: &[u8], root: &Path, existing: Existing) -> io::Result<Unpacked> {
    unpack(tar, root, Caps::NONE, existing, all)
}

#[test]
fn files_directories_links_modes_and_times_are_unpacked() {
    let ws = tempfile::tempdir().unwrap();
    let mut t = Vec::new();
    entry(&mut t, ".venv/", tar::EntryType::Directory, 0o755, b"", "");
    entry(
        &mut t,
        ".venv/bin/",
        tar::EntryType::Directory,
        0o755,
        b"",
        "",
    );
    entry(
        &mut t,
        ".venv/bin/tool",
        tar::EntryType::Regular,
        0o755,
        b"#!/bin/sh\n",
        "",
    );
    // A virtual environment's interpreter names the system's: made as is.
    entry(
        &mut t,
        ".venv/bin/python",
        tar::EntryType::Symlink,
        0o777,
        b"",
        "/usr/bin/python3",
    );
    entry(
        &mut t,
        ".venv/lib/deep/m.py",
        tar::EntryType::Regular,
        0o600,
        b"x = 1\n",
        "",
    );
    entry(
        &mut t,
        ".venv/same.py",
        tar::EntryType::Link,
        0o600,
        b"",
        ".venv/lib/deep/m.py",
    );
    entry(&mut t, "ro/", tar::EntryType::Directory, 0o555, b"", "");
    file(&mut t, "ro/inside.txt", b"in a read-only directory\n");
    entry(&mut t, "dev", tar::EntryType::Char, 0o644, b"", "");
    entry(&mut t, "fifo", tar::EntryType::Fifo, 0o644, b"", "");
    let done = run(&end(t), ws.path(), Existing::Replace).unwrap();
    assert_eq!(done.entries, 8, "{done:?}");
    assert_eq!(done.left_out, 2, "devices and FIFOs: {done:?}");
    let p = ws.path();
    assert_eq!(
        std::fs::read_to_string(p.join(".venv/bin/tool")).unwrap(),
        "#!/bin/sh\n"
    );
    let meta = std::fs::metadata(p.join(".venv/bin/tool")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
    assert_eq!(meta.mtime(), 1_700_000_000);
    assert_eq!(
        std::fs::read_link(p.join(".venv/bin/python")).unwrap(),
        Path::new("/usr/bin/python3")
    );
    let m = std::fs::metadata(p.join(".venv/lib/deep/m.py")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o600);
    assert_eq!(
        m.ino(),
        std::fs::metadata(p.join(".venv/same.py")).unwrap().ino()
    );
    assert_eq!(
        std::fs::metadata(p.join("ro"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o555
    );
    assert!(p.join("ro/inside.txt").is_file());
    assert!(!p.join("dev").exists() && !p.join("fifo").exists());
}

#[test]
fn absolute_paths_and_dotdot_are_refused() {
    let outer = tempfile::tempdir().unwrap();
    let ws = outer.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    for name in ["/abs.txt", "../escape.txt", "a/../../escape.txt"] {
        let mut t = Vec::new();
        file(&mut t, name, b"no");
        let e = run(&end(t), &ws, Existing::Replace).unwrap_err();
        assert!(e.to_string().contains("refusing"), "{name}: {e}");
    }
    let mut t = Vec::new();
    entry(&mut t, "hl", tar::EntryType::Link, 0o644, b"", "../outside");
    assert!(run(&end(t), &ws, Existing::Replace).is_err());
    assert!(!outer.path().join("escape.txt").exists());
    assert!(!Path::new("/abs.txt").exists());
}

#[test]
fn nothing_is_written_through_a_link() {
    let outer = tempfile::tempdir().unwrap();
    let (ws, away) = (outer.path().join("ws"), outer.path().join("away"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&away).unwrap();
    // A link the tar makes, then an entry through it.
    let mut t = Vec::new();
    entry(
        &mut t,
        "out",
        tar::EntryType::Symlink,
        0o777,
        b"",
        away.to_str().unwrap(),
    );
    file(&mut t, "out/planted.txt", b"no");
    let e = run(&end(t), &ws, Existing::Replace).unwrap_err();
    assert!(e.to_string().contains("link"), "{e}");
    // A link the workspace holds already, on the way or at the name.
    std::fs::remove_file(ws.join("out")).unwrap();
    std::os::unix::fs::symlink(&away, ws.join("lib")).unwrap();
    let mut t = Vec::new();
    file(&mut t, "lib/planted.txt", b"no");
    assert!(run(&end(t), &ws, Existing::Replace).is_err());
    std::fs::write(away.join("target.txt"), "theirs").unwrap();
    std::os::unix::fs::symlink(away.join("target.txt"), ws.join("name.txt")).unwrap();
    let mut t = Vec::new();
    file(&mut t, "name.txt", b"mine");
    run(&end(t), &ws, Existing::Replace).unwrap();
    assert_eq!(
        std::fs::read_to_string(away.join("target.txt")).unwrap(),
        "theirs"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("name.txt")).unwrap(),
        "mine"
    );
    assert_eq!(std::fs::read_dir(&away).unwrap().count(), 1);
}

#[test]
fn bytes_and_entries_are_capped_and_sparse_files_refused() {
    let ws = tempfile::tempdir().unwrap();
    let mut t = Vec::new();
    file(&mut t, "a", &[1; 600]);
    file(&mut t, "b", &[2; 600]);
    let t = end(t);
    let caps = |max_bytes, max_entries| Caps {
        max_bytes,
        max_entries,
    };
    assert!(unpack(&t[..], ws.path(), caps(1000, 10), Existing::Replace, all).is_err());
    assert!(unpack(&t[..], ws.path(), caps(10_000, 1), Existing::Replace, all).is_err());
    let done = unpack(&t[..], ws.path(), caps(1200, 2), Existing::Replace, all).unwrap();
    assert_eq!((done.entries, done.bytes), (2, 1200));
    let mut t = Vec::new();
    entry(&mut t, "sparse", tar::EntryType::GNUSparse, 0o644, b"", "");
    assert!(run(&end(t), ws.path(), Existing::Replace).is_err());
}

#[test]
fn replace_overwrites_and_keep_keeps_what_is_there() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("env.txt"), "set-up's").unwrap();
    std::fs::write(ws.path().join("other.txt"), "old").unwrap();
    let mut t = Vec::new();
    file(&mut t, "env.txt", b"submitted");
    file(&mut t, "new.txt", b"submitted");
    let t = end(t);
    let done = run(&t, ws.path(), Existing::Keep).unwrap();
    assert_eq!((done.entries, done.left_out), (1, 1));
    let read = |n: &str| std::fs::read_to_string(ws.path().join(n)).unwrap();
    assert_eq!(read("env.txt"), "set-up's");
    assert_eq!(read("new.txt"), "submitted");
    run(&t, ws.path(), Existing::Replace).unwrap();
    assert_eq!(read("env.txt"), "submitted");
    assert_eq!(read("other.txt"), "old");
}

#[test]
fn what_keep_leaves_out_is_not_written() {
    let ws = tempfile::tempdir().unwrap();
    let mut t = Vec::new();
    file(&mut t, "prompt.md", b"not the task's");
    file(&mut t, "ok.txt", b"yes");
    let done = unpack(&end(t)[..], ws.path(), Caps::NONE, Existing::Replace, |p| {
        p != Path::new("prompt.md")
    })
    .unwrap();
    assert_eq!((done.entries, done.left_out), (1, 1));
    assert!(!ws.path().join("prompt.md").exists());
}
