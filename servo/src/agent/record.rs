//! What a start leaves behind: complete.json, the sealed session file,
//! the final audit line, and the atomic write they all go through.

use std::path::Path;
use std::time::{Duration, Instant};

use saheeli_protocol::{AuditEvent, Completion, ServoExit, Session, Timings, paths};
use tracing::{info, warn};

use super::journal::EntryRef;
use super::{Agent, End};
use crate::audit::now;

impl Agent {
    pub(super) fn complete(
        &mut self,
        message: String,
        verification: Vec<saheeli_protocol::verify::Check>,
    ) -> End {
        match self.write_completion(message, verification) {
            Ok(()) => (ServoExit::Complete, None),
            Err(e) => (
                ServoExit::BadTask,
                Some(format!("writing complete.json: {e}")),
            ),
        }
    }

    pub(super) fn write_completion(
        &self,
        message: String,
        verification: Vec<saheeli_protocol::verify::Check>,
    ) -> std::io::Result<()> {
        let c = Completion {
            task_id: self.task.task_id,
            message,
            steps: self.steps,
            usage: self.usage,
            finished_at: now(),
            verification,
        };
        write_atomic(
            &self.root.join("complete.json"),
            &serde_json::to_vec_pretty(&c)?,
        )
    }

    /// Saves the session: what it gained since the last save, appended to
    /// its journal (`journal`), or the file whole (sealed, via a rename)
    /// when the journal cannot take it. The loop saves it when a turn with
    /// tool calls arrives and after every step, so a servo killed at any
    /// moment (OOM, `kill -9`) loses at most the step in progress; and
    /// whole on every exit (SIGTERM included). Its cost per step is in the
    /// bench's per-step figure ("audit and session writes").
    pub(super) fn save_session(&self) {
        self.save(false);
    }

    /// Writes the session file whole; on every exit.
    pub(super) fn save_whole(&self) {
        self.save(true);
    }

    fn save(&self, whole: bool) {
        let t0 = Instant::now();
        let steps_started: Vec<String> = self
            .tools
            .steps_started
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .collect();
        let mut journal = self.journal.borrow_mut();
        let appended = !whole
            && journal.append(
                &self.seal,
                &self.messages,
                self.compactions.len(),
                EntryRef {
                    from: 0,
                    messages: &[],
                    steps: self.steps,
                    usage: self.usage,
                    parked: self.human.parked.as_ref(),
                    active_ms: self.active().as_millis() as u64,
                    notes: &self.human.notes,
                    plan_approved: self.human.plan_approved,
                    steps_started: &steps_started,
                },
            );
        if !appended {
            let session = Session {
                task_id: self.task.task_id,
                model: self.task.model.clone(),
                steps: self.steps,
                usage: self.usage,
                messages: self.messages.clone(),
                parked: self.human.parked.clone(),
                active_ms: self.active().as_millis() as u64,
                notes: self.human.notes.clone(),
                plan_approved: self.human.plan_approved,
                steps_started,
                compactions: self.compactions.clone(),
            };
            let path = self.root.join(paths::session(&self.task.task_id));
            let (bytes, head) = self.seal.seal_head(&session);
            match write_atomic(&path, &bytes) {
                Ok(()) => journal.restart(
                    &self.root.join(paths::session_journal(&self.task.task_id)),
                    head,
                    bytes.len() as u64,
                    self.messages.len(),
                    self.compactions.len(),
                ),
                Err(e) => warn!(error = %e, "writing the session failed"),
            }
        }
        let spent = &self.clock.session;
        spent.set(spent.get() + t0.elapsed());
    }

    /// Where this start's time went, so far.
    pub(super) fn timings(&self) -> Timings {
        Timings {
            total_us: micros(self.started.elapsed()),
            llm_us: micros(self.clock.llm),
            inbox_us: micros(self.clock.inbox),
            tools_us: micros(self.clock.tools),
            writes_us: micros(self.audit.spent + self.clock.session.get()),
        }
    }

    pub(super) fn finish(mut self, exit: ServoExit, detail: Option<String>) -> ServoExit {
        self.save_whole();
        self.journal
            .get_mut()
            .remove(&self.root.join(paths::session_journal(&self.task.task_id)));
        if exit == ServoExit::Parked {
            info!(steps = self.steps, "servo parked");
            return exit;
        }
        self.audit.log(&AuditEvent::Finish {
            ts: now(),
            outcome: exit.reason().to_string(),
            steps: self.steps,
            usage: self.usage,
            detail: detail.clone(),
            timings: Some(self.timings()),
        });
        info!(
            outcome = %exit.reason(),
            steps = self.steps,
            detail = detail.as_deref().unwrap_or(""),
            "servo finished"
        );
        exit
    }
}

pub(super) fn micros(d: Duration) -> u64 {
    d.as_micros().try_into().unwrap_or(u64::MAX)
}

/// Writes via a temporary file and rename, so readers never see half a file.
/// The workspace is the agent's: the temporary name is one it cannot
/// guess, made with `O_EXCL|O_NOFOLLOW` (never through a link or into
/// something planted), and renamed over `path` (which, in a separated
/// container, the sticky workspace lets only the servo replace).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    create_atomic(path, bytes).map(drop)
}

/// `write_atomic`, keeping the file open for appending.
pub(super) fn create_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut last = None;
    for _ in 0..8 {
        let tmp = dir.join(format!(".{name}.{:016x}.tmp", fastrand::u64(..)));
        let opened = std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp);
        let mut f = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let written = f
            .write_all(bytes)
            .and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        return written.map(|()| f);
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}
