//! The agent's own session an attempt kept (issue 51), checked on this
//! host before its retry is queued: the manifest, and the session file it
//! names there, whole and under the cap, reached through no link. What
//! the servo wrote there was the agent's doing, so it is read as hostile.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use saheeli_protocol::agent_session::{self as kept, Kind, Manifest};

use super::read::open_regular;

/// The directory of the session kept in the collected workspace
/// `results` (to pack for the retry) and its session id; else why it
/// cannot be restored.
pub(crate) fn check_kept(results: &Path, kind: Kind) -> Result<(PathBuf, String), String> {
    let dir = results.join(kept::KEPT);
    real_dirs(results, Path::new(kept::KEPT))?;
    let bytes = read(&dir.join(kept::MANIFEST), kept::MAX_MANIFEST)?
        .ok_or("the agent kept no session (no manifest)")?;
    let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| format!("its manifest: {e}"))?;
    if m.agent != kind {
        return Err(format!("the kept session is {}'s", m.agent.as_str()));
    }
    m.valid()?;
    if m.refused.contains(&m.file) {
        return Err(format!(
            "its session file `{}` was refused: over {} bytes",
            m.file,
            kept::MAX_FILE
        ));
    }
    let file = Path::new(kept::HOME).join(&m.file);
    if let Some(parent) = file.parent() {
        real_dirs(&dir, parent)?;
    }
    let bytes = read(&dir.join(&file), kept::MAX_FILE)?
        .ok_or_else(|| format!("its session file `{}` is not there", m.file))?;
    kept::check(kind, &m.id, &bytes).map_err(|e| format!("`{}`: {e}", m.file))?;
    Ok((dir, m.id))
}

/// Each directory from `base` down `rel` is one, not a link.
fn real_dirs(base: &Path, rel: &Path) -> Result<(), String> {
    let mut at = base.to_path_buf();
    for c in rel.components() {
        let Component::Normal(c) = c else {
            return Err(format!("`{}` is not a plain path", rel.display()));
        };
        at.push(c);
        match at.symlink_metadata() {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("`{}` is a link or not a directory", at.display())),
            Err(_) => return Err(format!("`{}` is not there", at.display())),
        }
    }
    Ok(())
}

/// A regular file's bytes (never through a link); refused over `max`.
fn read(path: &Path, max: u64) -> Result<Option<Vec<u8>>, String> {
    let Some(f) = open_regular(path).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > max {
        return Err(format!(
            "`{}` is {len} bytes, over the cap of {max}: refused",
            path.display()
        ));
    }
    let mut bytes = Vec::new();
    f.take(max)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading `{}`: {e}", path.display()))?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0190f3a2-1111-7222-8333-444455556666";

    /// A collected workspace whose Claude Code session was kept.
    fn results() -> tempfile::TempDir {
        let r = tempfile::tempdir().unwrap();
        let dir = r.path().join(kept::KEPT);
        let file = dir.join(kept::HOME).join(Kind::claude_file(ID));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(
            &file,
            format!("{{\"type\":\"user\",\"sessionId\":\"{ID}\"}}\n"),
        )
        .unwrap();
        let m = Manifest {
            agent: Kind::ClaudeCode,
            id: ID.into(),
            file: Kind::claude_file(ID),
            refused: vec![],
        };
        std::fs::write(dir.join(kept::MANIFEST), serde_json::to_vec(&m).unwrap()).unwrap();
        r
    }

    #[test]
    fn a_whole_session_is_found() {
        let r = results();
        let (dir, id) = check_kept(r.path(), Kind::ClaudeCode).unwrap();
        assert_eq!((dir, id.as_str()), (r.path().join(kept::KEPT), ID));
        assert!(
            check_kept(r.path(), Kind::Codex).is_err(),
            "another agent's"
        );
    }

    #[test]
    fn removed_corrupted_linked_or_oversize_is_incomplete() {
        let file = |r: &tempfile::TempDir| {
            r.path()
                .join(kept::KEPT)
                .join(kept::HOME)
                .join(Kind::claude_file(ID))
        };
        let r = results();
        std::fs::remove_file(file(&r)).unwrap();
        let why = check_kept(r.path(), Kind::ClaudeCode).unwrap_err();
        assert!(why.contains("not there"), "{why}");

        let r = results();
        std::fs::write(file(&r), "{\"type\":\"user\",\"sessi\n").unwrap();
        let why = check_kept(r.path(), Kind::ClaudeCode).unwrap_err();
        assert!(why.contains("not JSON"), "{why}");

        let r = results();
        let outside = tempfile::tempdir().unwrap();
        std::fs::copy(file(&r), outside.path().join("s.jsonl")).unwrap();
        std::fs::remove_file(file(&r)).unwrap();
        std::os::unix::fs::symlink(outside.path().join("s.jsonl"), file(&r)).unwrap();
        assert!(check_kept(r.path(), Kind::ClaudeCode).is_err(), "a link");

        let r = results();
        let projects = r
            .path()
            .join(kept::KEPT)
            .join(kept::HOME)
            .join(".claude/projects");
        std::fs::rename(&projects, outside.path().join("projects")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("projects"), &projects).unwrap();
        let why = check_kept(r.path(), Kind::ClaudeCode).unwrap_err();
        assert!(why.contains("link"), "{why}");

        let r = results();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(file(&r))
            .unwrap();
        f.set_len(kept::MAX_FILE + 1).unwrap();
        let why = check_kept(r.path(), Kind::ClaudeCode).unwrap_err();
        assert!(why.contains("over the cap"), "{why}");
    }
}
