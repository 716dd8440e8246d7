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
    // Four refused entries, and the link `out` not made over the directory.
    assert_eq!(c.skipped.len(), 5, "{:?}", c.skipped);
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

/// A directory the test owns outside the results, with a victim file in it.
fn victim(d: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let outside = d.join("outside");
    fs::create_dir(&outside).unwrap();
    let victim = outside.join("victim");
    fs::write(&victim, "keep").unwrap();
    (outside, victim)
}

fn assert_untouched(outside: &Path, victim: &Path) {
    assert_eq!(fs::read_to_string(victim).unwrap(), "keep");
    let names: Vec<_> = fs::read_dir(outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["victim"], "something was made outside the results");
}

#[test]
fn hostile_case_42_an_entry_below_an_earlier_link_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let (outside, victim) = victim(d.path());
    let out = outside.to_str().unwrap();
    let tar = archive(&[
        ("workspace/a", tar::EntryType::Symlink, b"", Some(out)),
        (
            "workspace/a/planted",
            tar::EntryType::Symlink,
            b"",
            Some("/etc/passwd"),
        ),
        ("workspace/b", tar::EntryType::Symlink, b"", Some(out)),
        ("workspace/b/file", tar::EntryType::Regular, b"x", None),
        ("workspace/c", tar::EntryType::Symlink, b"", Some(out)),
        ("workspace/c/", tar::EntryType::Directory, b"", None),
    ]);
    let dest = d.path().join("r/t");
    let c = extract(&tar[..], &dest, &[], u64::MAX).unwrap();
    assert_untouched(&outside, &victim);
    // `a` is kept as the agent's link (inert); `a/planted` was refused.
    assert!(dest.join("a").is_symlink());
    assert!(
        c.skipped
            .iter()
            .any(|s| s.starts_with("a/planted:") && s.contains("not made")),
        "{:?}",
        c.skipped
    );
    // A file or directory collected first keeps its place from a later link.
    assert!(dest.join("b/file").is_file() && dest.join("c").is_dir());
}

#[test]
fn hostile_case_40_the_truncation_marker_is_not_written_through_a_link() {
    for archive_path in [true, false] {
        let d = tempfile::tempdir().unwrap();
        let (outside, victim) = victim(d.path());
        let gone = outside.join("created");
        let vol = d.path().join("vol");
        fs::create_dir(&vol).unwrap();
        std::os::unix::fs::symlink(&victim, vol.join(TRUNCATED_MARKER)).unwrap();
        std::os::unix::fs::symlink(&gone, vol.join("another")).unwrap();
        fs::write(vol.join("zz_big"), vec![b'x'; 5000]).unwrap();
        let dest = d.path().join("r/t");
        let c = if archive_path {
            let tar = archive(&[
                (
                    "workspace/RESULTS_TRUNCATED.txt",
                    tar::EntryType::Symlink,
                    b"",
                    Some(victim.to_str().unwrap()),
                ),
                (
                    "workspace/zz_big",
                    tar::EntryType::Regular,
                    &[b'x'; 5000],
                    None,
                ),
            ]);
            extract(&tar[..], &dest, &[], 1000).unwrap()
        } else {
            copy_volume(&vol, &dest, &[], 1000).unwrap()
        };
        assert!(c.truncated);
        assert_untouched(&outside, &victim);
        let marker = dest.join(TRUNCATED_MARKER);
        assert!(!marker.is_symlink() && marker.is_file(), "{archive_path}");
        assert!(fs::read_to_string(marker).unwrap().contains("size cap"));
    }
}

#[test]
fn hostile_case_41_redaction_writes_no_file_through_a_link() {
    let d = tempfile::tempdir().unwrap();
    let (outside, victim) = victim(d.path());
    let vol = d.path().join("vol");
    fs::create_dir_all(vol.join("sub")).unwrap();
    let secret = "sk-no-key-required";
    for dir in [vol.clone(), vol.join("sub")] {
        fs::write(dir.join("leak.txt"), format!("<text> # {secret}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir.join("leak.txt"), fs::Permissions::from_mode(0o777)).unwrap();
        // The names the old code wrote to, each a link out.
        std::os::unix::fs::symlink(&victim, dir.join("leak.saheeli-redacting")).unwrap();
        std::os::unix::fs::symlink(outside.join("new"), dir.join("leak.txt.saheeli-redacting"))
            .unwrap();
    }
    let secrets = vec![("OPENAI_API_KEY".to_string(), secret.to_string())];
    let dest = d.path().join("r/t");
    let c = copy_volume(&vol, &dest, &secrets, u64::MAX).unwrap();
    assert_eq!(c.redacted, ["OPENAI_API_KEY in 2 files"]);
    assert_untouched(&outside, &victim);
    for dir in [dest.clone(), dest.join("sub")] {
        assert_eq!(
            fs::read_to_string(dir.join("leak.txt")).unwrap(),
            "<text> # [REDACTED:OPENAI_API_KEY]\n"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::symlink_metadata(dir.join("leak.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o777);
        assert!(dir.join("leak.saheeli-redacting").is_symlink());
        // No temporary file is left.
        let names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }
}

#[test]
fn hostile_case_11_a_sparse_file_costs_what_it_occupies() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let d = tempfile::tempdir().unwrap();
    let vol = d.path().join("vol");
    fs::create_dir(&vol).unwrap();
    let len = 3u64 << 30;
    let f = fs::File::create_new(vol.join("sparse")).unwrap();
    f.set_len(len).unwrap();
    f.write_all_at(b"data in the middle", len / 2).unwrap();
    drop(f);
    // The cap is far below the length, far above what it occupies.
    let dest = d.path().join("r/t");
    let c = copy_volume(&vol, &dest, &[], 1 << 20).unwrap();
    assert!(!c.truncated, "{c:?}");
    assert!(!dest.join(TRUNCATED_MARKER).exists());
    assert!(c.bytes < 1 << 20, "{} bytes counted", c.bytes);
    let meta = fs::metadata(dest.join("sparse")).unwrap();
    assert_eq!(meta.len(), len);
    assert!(
        meta.blocks() * 512 < 1 << 20,
        "{} blocks on the host",
        meta.blocks()
    );
    let mut b = [0u8; 18];
    fs::File::open(dest.join("sparse"))
        .unwrap()
        .read_exact_at(&mut b, len / 2)
        .unwrap();
    assert_eq!(&b, b"data in the middle");
}
