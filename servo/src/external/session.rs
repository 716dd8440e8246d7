//! The agent's own session kept with the task's, and restored for a retry
//! from the session (issue 51; `saheeli_protocol::agent_session`).
//!
//! Two helpers run as the agent's user (its files are its own, 0600):
//! `servo keep-session KIND HOME DST [ID]` copies the home's session
//! directory into the workspace's [`kept::KEPT`], only what changed, each
//! file replaced whole (a kill mid-copy leaves the copy before), links
//! and devices skipped, a file over [`kept::MAX_FILE`] refused and named
//! in the manifest; `servo restore-session KIND STAGED HOME` copies a
//! retry's [`kept::STAGED`] copy into the new home the same way, then
//! checks the session file the manifest names is there and whole. The
//! servo runs the first before each model call the agent makes
//! ([`Keeper`]) and once at the end, the second before the agent starts
//! ([`restore`]).

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use saheeli_protocol::agent_session::{self as kept, Kind, Manifest};
use tracing::{info, warn};

use crate::privsep::Mode;

/// Directory depth walked at most.
const MAX_DEPTH: usize = 16;
/// Files kept at most.
const MAX_FILES: usize = 10_000;

/// `servo keep-session KIND HOME DST [ID]`.
pub(crate) fn keep_main(mut argv: impl Iterator<Item = String>) -> ExitCode {
    let (Some(kind), Some(home), Some(dst)) = (argv.next(), argv.next(), argv.next()) else {
        eprintln!("servo keep-session: expected KIND HOME DST [ID]");
        return ExitCode::from(2);
    };
    let Some(kind) = Kind::parse(&kind) else {
        eprintln!("servo keep-session: unknown agent `{kind}`");
        return ExitCode::from(2);
    };
    match keep(
        kind,
        Path::new(&home),
        Path::new(&dst),
        argv.next().as_deref(),
    ) {
        Ok(m) => {
            println!("kept {} (refused {})", m.file, m.refused.len());
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("not kept: {why}");
            ExitCode::from(1)
        }
    }
}

/// One regular file of the session directory, relative to it.
struct Found {
    rel: PathBuf,
    len: u64,
    mtime: (i64, i64),
}

/// The regular files below `dir` (links, devices and FIFOs skipped, never
/// followed), sorted by path.
fn walk(dir: &Path, rel: &Path, depth: usize, out: &mut Vec<Found>) {
    let Ok(entries) = fs::read_dir(dir.join(rel)) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if out.len() >= MAX_FILES {
            return;
        }
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        let rel = rel.join(e.file_name());
        if meta.is_dir() && depth < MAX_DEPTH {
            walk(dir, &rel, depth + 1, out);
        } else if meta.is_file() {
            out.push(Found {
                rel,
                len: meta.len(),
                mtime: (meta.mtime(), meta.mtime_nsec()),
            });
        }
    }
}

/// Copies the session directory of `home` into `dst` (what changed), and
/// writes the manifest; `id`: Claude Code's session id (Codex's is in its
/// rollout file's name).
pub(crate) fn keep(
    kind: Kind,
    home: &Path,
    dst: &Path,
    id: Option<&str>,
) -> Result<Manifest, String> {
    let src = home.join(kind.dir());
    let mut found = Vec::new();
    walk(&src, Path::new(""), 0, &mut found);
    let into = dst.join(kept::HOME).join(kind.dir());
    let (mut total, mut refused, mut files) = (0u64, Vec::new(), Vec::new());
    for f in &found {
        let to = into.join(&f.rel);
        let name = Path::new(kind.dir()).join(&f.rel).display().to_string();
        if f.len > kept::MAX_FILE || total + f.len > kept::MAX_TOTAL {
            let _ = fs::remove_file(&to);
            refused.push(name);
            continue;
        }
        total += f.len;
        files.push(name);
        let same = to.symlink_metadata().is_ok_and(|m| {
            m.is_file() && m.len() == f.len && (m.mtime(), m.mtime_nsec()) >= f.mtime
        });
        if same {
            continue;
        }
        if let Some(dir) = to.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("creating `{}`: {e}", dir.display()))?;
        }
        if let Err(e) = replace(&src.join(&f.rel), &to, kept::MAX_FILE) {
            warn!(file = %f.rel.display(), error = %e, "a session file was not kept");
        }
    }
    let (id, file) = match kind {
        Kind::ClaudeCode => {
            let id = id.ok_or("no session id given")?.to_string();
            let file = Kind::claude_file(&id);
            (id, file)
        }
        Kind::Codex => {
            // The newest rollout (its name starts with its time).
            let newest = found
                .iter()
                .filter_map(|f| {
                    let name = f.rel.file_name()?.to_str()?;
                    let id = name.strip_prefix("rollout-")?.strip_suffix(".jsonl")?;
                    (id.len() > 36).then(|| (name.to_string(), f, id[id.len() - 36..].to_string()))
                })
                .max_by(|a, b| a.0.cmp(&b.0))
                .ok_or("no rollout file yet")?;
            let file = Path::new(kind.dir())
                .join(&newest.1.rel)
                .display()
                .to_string();
            (newest.2, file)
        }
    };
    let m = Manifest {
        agent: kind,
        id,
        file,
        refused,
    };
    let json = serde_json::to_vec_pretty(&m).map_err(|e| e.to_string())?;
    write_new(&dst.join(kept::MANIFEST), &json)
        .map_err(|e| format!("writing the manifest: {e}"))?;
    Ok(m)
}

/// Writes `bytes` at `path` whole: a temporary file renamed over it.
/// Readable by the servo's user: on a swarm the servo packs `.saheeli/`
/// itself for the upload (a file only the agent could read cut it short).
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("saheeli-tmp");
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(bytes)?;
    fs::rename(&tmp, path)
}

/// Copies the regular file `from` (never through a link, at most `max`
/// bytes) over `to`, whole.
fn replace(from: &Path, to: &Path, max: u64) -> std::io::Result<u64> {
    let bytes = read_capped(from, max)?;
    write_new(to, &bytes)?;
    Ok(bytes.len() as u64)
}

/// A regular file's bytes, never through a link nor waited on; refused
/// when over `max`.
pub(crate) fn read_capped(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > max {
        return Err(std::io::Error::other(format!(
            "{} bytes, over the cap of {max}",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    f.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::other(format!(
            "over the cap of {max} bytes"
        )));
    }
    Ok(bytes)
}

/// `servo restore-session KIND STAGED HOME`: prints `restored ID` or
/// `incomplete WHY`; the staged copy is removed either way.
pub(crate) fn restore_main(mut argv: impl Iterator<Item = String>) -> ExitCode {
    let (Some(kind), Some(staged), Some(home)) = (argv.next(), argv.next(), argv.next()) else {
        eprintln!("servo restore-session: expected KIND STAGED HOME");
        return ExitCode::from(2);
    };
    let Some(kind) = Kind::parse(&kind) else {
        eprintln!("servo restore-session: unknown agent `{kind}`");
        return ExitCode::from(2);
    };
    let r = restore_into(kind, Path::new(&staged), Path::new(&home));
    let _ = fs::remove_dir_all(&staged);
    match r {
        Ok(id) => println!("restored {id}"),
        Err(why) => println!("incomplete {}", why.replace('\n', " ")),
    }
    ExitCode::SUCCESS
}

/// Restores the staged copy into `home`; returns the session id.
pub(crate) fn restore_into(kind: Kind, staged: &Path, home: &Path) -> Result<String, String> {
    let bytes = read_capped(&staged.join(kept::MANIFEST), kept::MAX_MANIFEST)
        .map_err(|e| format!("its manifest: {e}"))?;
    let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| format!("its manifest: {e}"))?;
    if m.agent != kind {
        return Err(format!(
            "it is {}'s, not {}'s",
            m.agent.as_str(),
            kind.as_str()
        ));
    }
    m.valid()?;
    let src = staged.join(kept::HOME).join(kind.dir());
    let mut found = Vec::new();
    walk(&src, Path::new(""), 0, &mut found);
    let mut total = 0u64;
    for f in &found {
        if f.len > kept::MAX_FILE || total + f.len > kept::MAX_TOTAL {
            continue;
        }
        let to = home.join(kind.dir()).join(&f.rel);
        if let Some(dir) = to.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("creating `{}`: {e}", dir.display()))?;
        }
        total += replace(&src.join(&f.rel), &to, kept::MAX_FILE)
            .map_err(|e| format!("restoring `{}`: {e}", f.rel.display()))?;
    }
    let session = read_capped(&home.join(&m.file), kept::MAX_FILE)
        .map_err(|e| format!("its session file `{}`: {e}", m.file))?;
    kept::check(kind, &m.id, &session).map_err(|e| format!("`{}`: {e}", m.file))?;
    Ok(m.id)
}

/// Keeps the agent's session in the workspace, one copy at a time.
pub(crate) struct Keeper {
    kind: Kind,
    home: PathBuf,
    dst: PathBuf,
    /// Claude Code's session id.
    id: Option<String>,
    mode: Mode,
    busy: tokio::sync::Mutex<()>,
}

impl Keeper {
    /// A keeper into `root`'s [`kept::KEPT`] (made here, open to the
    /// agent's helper); None when it cannot be made.
    pub fn new(
        kind: Kind,
        home: &Path,
        root: &Path,
        id: Option<String>,
        mode: Mode,
    ) -> Option<Keeper> {
        let dst = root.join(kept::KEPT);
        match fs::create_dir(&dst) {
            Ok(()) => super::open_up(&dst),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                warn!(error = %e, dir = %dst.display(), "the agent's session is not kept");
                return None;
            }
        }
        Some(Keeper {
            kind,
            home: home.to_path_buf(),
            dst,
            id,
            mode,
            busy: tokio::sync::Mutex::new(()),
        })
    }

    /// Copies what changed (through the agent's helper); `late`: while a
    /// call is out (said in the log).
    pub async fn keep(&self, late: bool) {
        let _one = self.busy.lock().await;
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/usr/local/bin/servo"));
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("keep-session")
            .arg(self.kind.as_str())
            .arg(&self.home)
            .arg(&self.dst)
            .args(self.id.as_deref())
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        match crate::privsep::spawn(self.mode, &mut cmd) {
            Ok(c) => {
                match tokio::time::timeout(Duration::from_secs(30), c.wait_with_output()).await {
                    Ok(Ok(out)) => {
                        let said = String::from_utf8_lossy(&out.stdout);
                        match late {
                            true => {
                                info!(said = %said.trim(), "agent session kept again, its call still out")
                            }
                            false => info!(said = %said.trim(), "agent session kept"),
                        }
                    }
                    _ => warn!("keeping the agent's session failed or took over 30 s"),
                }
            }
            Err(e) => warn!(error = %e, "could not keep the agent's session"),
        }
    }
}

/// Restores a retry's staged session into `home` (through the agent's
/// helper): None when the workspace brought none, else the session id or
/// why it is incomplete.
pub(crate) async fn restore(
    kind: Kind,
    root: &Path,
    home: &Path,
    mode: Mode,
) -> Option<Result<String, String>> {
    let staged = root.join(kept::STAGED);
    if !staged.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        return None;
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/usr/local/bin/servo"));
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("restore-session")
        .arg(kind.as_str())
        .arg(&staged)
        .arg(home)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let said = match crate::privsep::spawn(mode, &mut cmd) {
        Ok(c) => match tokio::time::timeout(Duration::from_secs(60), c.wait_with_output()).await {
            Ok(Ok(out)) => String::from_utf8_lossy(&out.stdout).trim().to_string(),
            _ => "incomplete the restore failed or took over 60 s".into(),
        },
        Err(e) => format!("incomplete the restore helper did not start: {e}"),
    };
    Some(match said.split_once(' ') {
        Some(("restored", id)) if kept::is_id(id) => Ok(id.to_string()),
        Some(("incomplete", why)) => Err(why.chars().take(400).collect()),
        _ => Err(format!(
            "the restore said `{}`",
            said.chars().take(200).collect::<String>()
        )),
    })
}

/// The session id the last keep recorded (a resumed Claude Code keeps
/// the id it was resumed with).
pub(crate) fn last_session_id(root: &Path) -> Option<String> {
    use saheeli_protocol::agent_session as kept;
    let bytes = read_capped(
        &root.join(kept::KEPT).join(kept::MANIFEST),
        kept::MAX_MANIFEST,
    )
    .ok()?;
    let m: kept::Manifest = serde_json::from_slice(&bytes).ok()?;
    kept::is_id(&m.id).then_some(m.id)
}

/// What a retry's agent starts with: the session restored (Claude Code
/// and Codex going on from the session), and its prompt: the foreman's
/// note alone when it resumes its own conversation, else the note before
/// the task (it starts over, and says so, to the agent and, through
/// `own`, to the retry's trail).
pub(crate) async fn resumed(
    task: &saheeli_protocol::ServoTask,
    agent: &saheeli_protocol::Agent,
    root: &Path,
    home: &Path,
    mode: Mode,
    prompt: &str,
    own: &super::own::Own,
) -> (Option<String>, String) {
    use saheeli_protocol::attempt::RetryFrom;
    let Some(resume) = &task.resume else {
        return (None, prompt.to_string());
    };
    let kind = saheeli_protocol::agent_session::Kind::of(agent);
    let mut note = resume.note.clone();
    if let Some(kind) = kind {
        match restore(kind, root, home, mode).await {
            Some(Ok(id)) if resume.mode == RetryFrom::Session => {
                info!(session = %id, agent = %agent.label(), "the agent's own session restored");
                return (Some(id), note);
            }
            Some(Ok(_)) | None => {}
            Some(Err(why)) => {
                warn!(%why, "restore_incomplete: the agent's own session cannot be restored; it starts over");
                own.restore_incomplete(&why).await;
                note.push_str(&format!(
                    " (restore_incomplete: your own session could not be restored ({why}): \
                     this attempt starts over with a fresh conversation.)"
                ));
            }
        }
    }
    (None, format!("{note}\n\n---\n\n{prompt}"))
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
