use std::os::unix::fs::symlink;

use super::*;

const ID: &str = "0190f3a2-1111-7222-8333-444455556666";

/// A Claude Code home with one session of two turns.
fn claude_home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".claude/projects/-workspace");
    fs::create_dir_all(&dir).unwrap();
    let lines = format!(
        "{{\"type\":\"user\",\"sessionId\":\"{ID}\"}}\n{{\"type\":\"assistant\",\"sessionId\":\"{ID}\"}}\n"
    );
    fs::write(dir.join(format!("{ID}.jsonl")), lines).unwrap();
    home
}

#[test]
fn a_kept_session_is_restored_into_a_new_home() {
    let home = claude_home();
    let ws = tempfile::tempdir().unwrap();
    let m = keep(Kind::ClaudeCode, home.path(), ws.path(), Some(ID)).unwrap();
    assert_eq!(m.file, Kind::claude_file(ID));
    assert!(m.refused.is_empty());
    // Kept again with nothing changed: the same.
    assert_eq!(
        keep(Kind::ClaudeCode, home.path(), ws.path(), Some(ID)).unwrap(),
        m
    );
    let fresh = tempfile::tempdir().unwrap();
    assert_eq!(
        restore_into(Kind::ClaudeCode, ws.path(), fresh.path()).unwrap(),
        ID
    );
    assert!(fresh.path().join(Kind::claude_file(ID)).is_file());
}

#[test]
fn links_are_not_followed_on_keep_or_restore() {
    let home = claude_home();
    let dir = home.path().join(".claude/projects/-workspace");
    symlink("/etc/passwd", dir.join("passwd.jsonl")).unwrap();
    symlink("/etc", dir.join("etc")).unwrap();
    let ws = tempfile::tempdir().unwrap();
    keep(Kind::ClaudeCode, home.path(), ws.path(), Some(ID)).unwrap();
    let kept_dir = ws.path().join("home/.claude/projects/-workspace");
    assert!(kept_dir.join(format!("{ID}.jsonl")).is_file());
    assert!(kept_dir.join("passwd.jsonl").symlink_metadata().is_err());
    assert!(kept_dir.join("etc").symlink_metadata().is_err());
    // A link planted in the kept copy is not restored either.
    symlink("/etc/shadow", kept_dir.join("shadow.jsonl")).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    restore_into(Kind::ClaudeCode, ws.path(), fresh.path()).unwrap();
    let restored = fresh.path().join(".claude/projects/-workspace");
    assert!(restored.join("shadow.jsonl").symlink_metadata().is_err());
    // The session file itself a link: incomplete, never read through.
    let own = kept_dir.join(format!("{ID}.jsonl"));
    fs::remove_file(&own).unwrap();
    symlink("/etc/passwd", &own).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let why = restore_into(Kind::ClaudeCode, ws.path(), fresh.path()).unwrap_err();
    assert!(why.contains("session file"), "{why}");
}

#[test]
fn an_oversize_session_file_is_refused() {
    let home = claude_home();
    let file = home.path().join(Kind::claude_file(ID));
    // Sparse: over the cap without using the disk.
    fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(kept::MAX_FILE + 1)
        .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let m = keep(Kind::ClaudeCode, home.path(), ws.path(), Some(ID)).unwrap();
    assert_eq!(m.refused, [Kind::claude_file(ID)]);
    assert!(!ws.path().join("home").join(Kind::claude_file(ID)).exists());
    let fresh = tempfile::tempdir().unwrap();
    let why = restore_into(Kind::ClaudeCode, ws.path(), fresh.path()).unwrap_err();
    assert!(why.contains("session file"), "{why}");
}

#[test]
fn a_codex_session_is_found_by_its_rollout() {
    let home = tempfile::tempdir().unwrap();
    let day = home.path().join(".codex/sessions/2026/12/05");
    fs::create_dir_all(&day).unwrap();
    let meta = format!(
        "{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"{ID}\"}}}}\n{{\"type\":\"response_item\"}}\n"
    );
    fs::write(
        day.join(format!("rollout-2026-12-05T21-46-12-{ID}.jsonl")),
        meta,
    )
    .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let m = keep(Kind::Codex, home.path(), ws.path(), None).unwrap();
    assert_eq!(m.id, ID);
    let fresh = tempfile::tempdir().unwrap();
    // The servo's config is in the new home already: kept as it is.
    fs::create_dir_all(fresh.path().join(".codex")).unwrap();
    fs::write(fresh.path().join(".codex/config.toml"), "x").unwrap();
    assert_eq!(
        restore_into(Kind::Codex, ws.path(), fresh.path()).unwrap(),
        ID
    );
    assert_eq!(
        fs::read_to_string(fresh.path().join(".codex/config.toml")).unwrap(),
        "x"
    );
    // A corrupted session: incomplete.
    fs::write(ws.path().join("home").join(&m.file), "not json\n").unwrap();
    let fresh = tempfile::tempdir().unwrap();
    assert!(restore_into(Kind::Codex, ws.path(), fresh.path()).is_err());
}
