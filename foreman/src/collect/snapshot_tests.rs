use std::os::unix::fs::MetadataExt;

use super::*;

fn ws() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("ws");
    let state = d.path().join("state");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("a.txt"), "one").unwrap();
    std::fs::write(src.join("sub/b.txt"), "two").unwrap();
    (d, src, state)
}

#[test]
fn unchanged_files_are_linked_and_changed_ones_copied() {
    let (_d, src, state) = ws();
    let id = TaskId::new();
    // Older than the margin of the first walk: linked by the second.
    std::thread::sleep(std::time::Duration::from_millis(80));
    let s0 = take(&src, &state, id, 0, None, 1 << 20).unwrap();
    assert_eq!((s0.files, s0.linked, s0.copied), (2, 0, 6));
    std::fs::write(src.join("a.txt"), "changed").unwrap();
    std::fs::write(src.join("new.txt"), "after step 0").unwrap();
    let s1 = take(&src, &state, id, 1, Some(&s0), 1 << 20).unwrap();
    assert_eq!((s1.files, s1.linked), (3, 1), "{s1:?}");
    let at0 = at_step(&state, id, 0).unwrap();
    let at1 = at_step(&state, id, 1).unwrap();
    assert_eq!(std::fs::read_to_string(at0.join("a.txt")).unwrap(), "one");
    assert_eq!(
        std::fs::read_to_string(at1.join("a.txt")).unwrap(),
        "changed"
    );
    assert!(!at0.join("new.txt").exists());
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&at0.join("sub/b.txt")), ino(&at1.join("sub/b.txt")));
    assert_ne!(ino(&at0.join("a.txt")), ino(&at1.join("a.txt")));
    assert_eq!(steps(&state, id), vec![0, 1]);
    // Taken again at the same step: replaced, never two.
    let again = take(&src, &state, id, 1, Some(&s1), 1 << 20).unwrap();
    assert_eq!(again.step, 1);
    assert_eq!(steps(&state, id), vec![0, 1]);
    remove(&state, id).unwrap();
    assert!(steps(&state, id).is_empty());
}

#[test]
fn a_link_is_kept_as_a_link_and_never_followed() {
    let (d, src, state) = ws();
    let secret = d.path().join("host-secret");
    std::fs::write(&secret, "host only").unwrap();
    std::os::unix::fs::symlink(&secret, src.join("planted")).unwrap();
    std::os::unix::fs::symlink(d.path(), src.join("up")).unwrap();
    let id = TaskId::new();
    take(&src, &state, id, 0, None, 1 << 20).unwrap();
    let at = at_step(&state, id, 0).unwrap();
    let m = std::fs::symlink_metadata(at.join("planted")).unwrap();
    assert!(m.file_type().is_symlink());
    assert_eq!(std::fs::read_link(at.join("planted")).unwrap(), secret);
    assert!(
        std::fs::symlink_metadata(at.join("up"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Nothing of the host came in through them.
    let copied: Vec<_> = walkdir::WalkDir::new(&at)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(
        !copied.iter().any(|c| c.contains("host only")),
        "{copied:?}"
    );
    // The snapshot directory is the foreman's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(task_dir(&state, id))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0);
    // A workspace root that is a link is refused.
    let other = d.path().join("ws-link");
    std::os::unix::fs::symlink(&src, &other).unwrap();
    assert!(take(&other, &state, id, 1, None, 1 << 20).is_err());
}

#[test]
fn over_the_cap_no_snapshot_is_kept() {
    let (_d, src, state) = ws();
    std::fs::write(src.join("big"), vec![7u8; 64 << 10]).unwrap();
    let id = TaskId::new();
    let err = take(&src, &state, id, 3, None, 16 << 10).unwrap_err();
    assert!(format!("{err:#}").contains("cap of a snapshot"), "{err:#}");
    assert!(at_step(&state, id, 3).is_none());
    assert!(steps(&state, id).is_empty());
}

#[test]
fn a_request_is_taken_once() {
    let (_d, _src, state) = ws();
    let id = TaskId::new();
    assert!(!take_request(&state, id));
    request(&state, id).unwrap();
    request(&state, id).unwrap();
    assert!(take_request(&state, id));
    assert!(!take_request(&state, id));
}
