//! Unit tests of packing workspaces.

use std::path::Path;

use super::*;

fn opts() -> PackOptions {
    PackOptions {
        max_bytes: u64::MAX,
        ..Default::default()
    }
}

#[test]
fn a_secret_is_found_across_reads_and_nothing_is_left() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let secret = "sk-abcdefghijklmnopqrstuvwxyz";
    // Straddles the 8 KiB pieces tar copies in.
    let mut body = vec![b'x'; 8192 - 5];
    body.extend_from_slice(secret.as_bytes());
    std::fs::write(src.join("big.txt"), &body).unwrap();
    let dest = d.path().join("out/x.tar");
    let o = PackOptions {
        secrets: vec![("K".into(), secret.into())],
        ..opts()
    };
    let e = pack_workspace(&src, &dest, &o).unwrap_err();
    assert!(
        matches!(&e, PackError::Secret { file, var, .. } if file == Path::new("big.txt") && var == "K"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(d.path().join("out")).unwrap().count(), 0);
    // And the size cap.
    let o = PackOptions {
        max_bytes: 100,
        ..opts()
    };
    assert!(matches!(
        pack_workspace(&src, &dest, &o),
        Err(PackError::TooLarge { .. })
    ));
    assert_eq!(std::fs::read_dir(d.path().join("out")).unwrap().count(), 0);
}

#[test]
fn packs_files_dirs_and_links_as_servo_user() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/a.txt"), "a").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.join("link")).unwrap();
    // A symlink loop must not hang packing.
    std::os::unix::fs::symlink("loop", src.join("loop")).unwrap();
    let dest = d.path().join("out/x.tar");
    pack_workspace(&src, &dest, &opts()).unwrap();
    let mut ar = tar::Archive::new(std::fs::File::open(&dest).unwrap());
    let mut names = vec![];
    for e in ar.entries().unwrap() {
        let e = e.unwrap();
        assert_eq!(e.header().uid().unwrap(), AGENT_UID);
        names.push((
            e.path().unwrap().display().to_string(),
            e.header().entry_type(),
        ));
    }
    assert!(names.contains(&("sub/a.txt".into(), tar::EntryType::Regular)));
    assert!(names.contains(&("link".into(), tar::EntryType::Symlink)));
    assert!(names.contains(&("loop".into(), tar::EntryType::Symlink)));
}

#[test]
fn a_retry_brings_the_agents_kept_session_staged_with_links_as_links() {
    let results = tempfile::tempdir().unwrap();
    std::fs::write(results.path().join("work.txt"), "w").unwrap();
    let kept = results.path().join(".saheeli/agent-session");
    std::fs::create_dir_all(kept.join("home")).unwrap();
    std::fs::write(kept.join("session.json"), "{}").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", kept.join("home/p")).unwrap();
    let state = tempfile::tempdir().unwrap();
    let to = saheeli_protocol::TaskId::new();
    super::pack_resume_with(
        state.path(),
        results.path(),
        to,
        1 << 20,
        vec![],
        Some(&kept),
    )
    .unwrap();
    let tar = std::fs::File::open(super::resume_tar(state.path(), to)).unwrap();
    let mut names = vec![];
    for e in tar::Archive::new(tar).entries().unwrap() {
        let e = e.unwrap();
        let kind = e.header().entry_type();
        names.push((e.path().unwrap().display().to_string(), kind.is_symlink()));
    }
    let staged = saheeli_protocol::agent_session::STAGED;
    assert!(
        names.contains(&(format!("{staged}/session.json"), false)),
        "{names:?}"
    );
    assert!(
        names.contains(&(format!("{staged}/home/p"), true)),
        "a link stays one: {names:?}"
    );
    assert!(names.contains(&("work.txt".into(), false)), "{names:?}");
    assert!(
        !names.iter().any(|(n, _)| n.starts_with(".saheeli/")),
        "the servo's own directory stays out: {names:?}"
    );
}
