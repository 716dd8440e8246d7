use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

fn mounts_under(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(dir.to_str().unwrap()))
        .map(String::from)
        .collect()
}

/// What is written, appended and deleted through the copy stays in it:
/// the workspace is untouched, the copy's root has the workspace's owner
/// and mode, a capped copy fills up at its size, and removing it leaves
/// no mount and no file. Needs root (the suite runs as root).
#[test]
fn writes_through_the_copy_never_reach_the_workspace_and_the_copy_goes_whole() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "run the suite as root");
    let state = tempfile::tempdir().unwrap();
    let lower = tempfile::tempdir().unwrap();
    let ws = lower.path();
    std::fs::write(ws.join("notes.txt"), "mine\n").unwrap();
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/a.py"), "a = 1\n").unwrap();
    std::os::unix::fs::chown(ws, Some(999), Some(1000)).unwrap();
    std::fs::set_permissions(ws, std::fs::Permissions::from_mode(0o1775)).unwrap();
    for capped in [Some(32 << 20), None] {
        let id = TaskId::new();
        let merged = make(state.path(), id, ws, capped).unwrap();
        let m = std::fs::metadata(&merged).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (999, 1000, 0o1775));
        assert_eq!(
            std::fs::read_to_string(merged.join("notes.txt")).unwrap(),
            "mine\n"
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(merged.join("notes.txt"))
            .unwrap();
        std::io::Write::write_all(&mut f, b"stolen\n").unwrap();
        drop(f);
        std::fs::create_dir(merged.join("stolen")).unwrap();
        std::fs::write(merged.join("stolen/t.py"), "secret").unwrap();
        std::fs::remove_dir_all(merged.join("src")).unwrap();
        if let Some(bytes) = capped {
            let big = vec![1u8; 1 << 20];
            let mut f = std::fs::File::create(merged.join("fill")).unwrap();
            let mut written = 0u64;
            let full = loop {
                match std::io::Write::write_all(&mut f, &big) {
                    Ok(()) => written += big.len() as u64,
                    Err(e) => break e,
                }
                assert!(written <= bytes, "wrote past the copy's size");
            };
            assert_eq!(full.raw_os_error(), Some(libc::ENOSPC));
        }
        // Made again (an earlier attempt's leftover): a fresh copy.
        let again = make(state.path(), id, ws, capped).unwrap();
        assert!(!again.join("stolen").exists());
        remove(state.path(), id).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
            "mine\n"
        );
        assert!(ws.join("src/a.py").is_file() && !ws.join("stolen").exists());
        assert!(!ws.join("fill").exists());
        assert_eq!(mounts_under(state.path()), Vec::<String>::new());
        assert!(!copy_dir(state.path(), id).exists());
        assert_eq!(present(state.path()), vec![]);
        // Absent is fine.
        remove(state.path(), id).unwrap();
    }
}

/// A leftover (a foreman stopped mid-check) is found by its task and
/// removed, the overlay still mounted.
#[test]
fn a_copy_left_mounted_is_present_and_removed() {
    let state = tempfile::tempdir().unwrap();
    let lower = tempfile::tempdir().unwrap();
    let id = TaskId::new();
    make(state.path(), id, lower.path(), Some(16 << 20)).unwrap();
    assert_eq!(present(state.path()), vec![id]);
    assert_eq!(mounts_under(state.path()).len(), 2);
    remove(state.path(), id).unwrap();
    assert_eq!(mounts_under(state.path()), Vec::<String>::new());
    assert_eq!(present(state.path()), vec![]);
}
