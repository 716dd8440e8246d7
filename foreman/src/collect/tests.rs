//! Unit tests of collection on real files and archives.

use super::*;
use std::fs;
use std::path::Path;

fn header(path: &str, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    // Bypass tar's own path checks: we are the hostile side here.
    let name = &mut h.as_old_mut().name;
    name[..path.len()].copy_from_slice(path.as_bytes());
    h.set_cksum();
    h
}

pub(super) fn archive(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, kind, data, link) in entries {
        let mut h = header(path, *kind, data.len() as u64);
        if let Some(l) = link {
            h.set_link_name(l).unwrap();
            h.set_cksum();
        }
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap()
}

#[test]
fn extracts_normal_workspace() {
    let d = tempfile::tempdir().unwrap();
    let tar = archive(&[
        ("workspace/", tar::EntryType::Directory, b"", None),
        ("workspace/a/b.txt", tar::EntryType::Regular, b"hi", None),
        (
            "workspace/link",
            tar::EntryType::Symlink,
            b"",
            Some("a/b.txt"),
        ),
    ]);
    let dest = d.path().join("results/t1");
    let c = extract(&tar[..], &dest, &[], u64::MAX).unwrap();
    assert_eq!(c.files, 1);
    assert_eq!(fs::read_to_string(dest.join("a/b.txt")).unwrap(), "hi");
    assert_eq!(fs::read_to_string(dest.join("link")).unwrap(), "hi");
    assert_eq!(
        super::results::partial_dirs(&d.path().join("results")),
        0,
        "a .partial directory was left"
    );
}

#[test]
fn hostile_entries_stay_inside() {
    let d = tempfile::tempdir().unwrap();
    let dest = d.path().join("r/t");
    let tar = archive(&[
        (
            "workspace/../../escape.txt",
            tar::EntryType::Regular,
            b"x",
            None,
        ),
        ("/etc/evil", tar::EntryType::Regular, b"x", None),
        ("workspace/out", tar::EntryType::Symlink, b"", Some("/")),
        (
            "workspace/out/tmp/through-link",
            tar::EntryType::Regular,
            b"x",
            None,
        ),
        ("workspace/dev", tar::EntryType::Char, b"", None),
        (
            "workspace/hard",
            tar::EntryType::Link,
            b"",
            Some("/etc/passwd"),
        ),
    ]);
    let c = extract(&tar[..], &dest, &[], u64::MAX).unwrap();
    assert!(!d.path().join("escape.txt").exists());
    assert!(!d.path().join("r/escape.txt").exists());
    assert!(!Path::new("/tmp/through-link").exists());
    // The write under `out/` went into a real directory, and the
    // symlink was then not created over it.
    assert!(dest.join("out/tmp/through-link").is_file());
    assert!(!dest.join("out").is_symlink());
    assert!(!dest.join("dev").exists());
    assert!(!dest.join("hard").exists());
    assert_eq!(c.skipped.len(), 4, "{:?}", c.skipped);
}

#[test]
fn secrets_are_redacted_before_results_are_final() {
    let d = tempfile::tempdir().unwrap();
    let secret = "sk-live-abcdefghijklmnop";
    let big = format!("{}{secret}{}", "x".repeat((1 << 20) - 5), "y".repeat(100));
    let tar = archive(&[
        (
            "workspace/log.txt",
            tar::EntryType::Regular,
            format!("key={secret} and {secret}\n").as_bytes(),
            None,
        ),
        (
            "workspace/big.bin",
            tar::EntryType::Regular,
            big.as_bytes(),
            None,
        ),
        (
            "workspace/clean.txt",
            tar::EntryType::Regular,
            b"nothing here",
            None,
        ),
    ]);
    let dest = d.path().join("r/t");
    let secrets = vec![("OPENAI_API_KEY".to_string(), secret.to_string())];
    let c = extract(&tar[..], &dest, &secrets, u64::MAX).unwrap();
    assert_eq!(c.redacted, vec!["OPENAI_API_KEY in 2 files".to_string()]);
    assert_eq!(
        fs::read_to_string(dest.join("log.txt")).unwrap(),
        "key=[REDACTED:OPENAI_API_KEY] and [REDACTED:OPENAI_API_KEY]\n"
    );
    assert!(
        !fs::read_to_string(dest.join("big.bin"))
            .unwrap()
            .contains(secret)
    );
    assert_eq!(
        fs::read_to_string(dest.join("clean.txt")).unwrap(),
        "nothing here"
    );
}

#[test]
fn the_size_cap_stops_collection_and_marks_it() {
    let d = tempfile::tempdir().unwrap();
    let tar = archive(&[
        ("workspace/a", tar::EntryType::Regular, &[b'a'; 600], None),
        ("workspace/b", tar::EntryType::Regular, &[b'b'; 600], None),
        ("workspace/c", tar::EntryType::Regular, &[b'c'; 10], None),
    ]);
    let dest = d.path().join("r/t");
    let c = extract(&tar[..], &dest, &[], 1000).unwrap();
    assert!(c.truncated);
    assert_eq!((c.files, c.bytes), (1, 600));
    assert!(dest.join("a").is_file() && !dest.join("b").exists());
    assert!(dest.join(TRUNCATED_MARKER).is_file());
}

#[test]
fn a_file_over_a_directory_is_skipped_not_fatal() {
    let d = tempfile::tempdir().unwrap();
    let tar = archive(&[
        ("workspace/x/", tar::EntryType::Directory, b"", None),
        ("workspace/x", tar::EntryType::Regular, b"file", None),
        ("workspace/y", tar::EntryType::Regular, b"fine", None),
    ]);
    let dest = d.path().join("r/t");
    let c = extract(&tar[..], &dest, &[], u64::MAX).unwrap();
    assert_eq!(c.skipped.len(), 1, "{:?}", c.skipped);
    assert_eq!(fs::read_to_string(dest.join("y")).unwrap(), "fine");
}
