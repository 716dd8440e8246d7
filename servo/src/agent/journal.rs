//! The session between whole saves: `servo-<id>-session.journal`, one
//! line appended per save with what the session gained since the line
//! before (new messages, and the few small fields as they now are). The
//! session file is written whole only at the start, on a compaction of
//! the conversation, when the journal has grown past it, and on every
//! exit (then the journal is removed); so a save costs what the step
//! added, not the whole conversation again, and a servo killed at any
//! moment still loses at most the step in progress.
//!
//! Each line is `<mac> <json>`: the MAC chains it to the line before, the
//! first to the session file's seal (`Seal::link`), so a line cannot be
//! changed, moved or taken from another file. A reader applies lines in
//! order and stops at the first that does not follow (a line cut by the
//! crash, or a journal older than the session file, written whole since).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use saheeli_protocol::chat::ChatMessage;
use saheeli_protocol::human::Parked;
use saheeli_protocol::{Session, Usage};
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::seal::Seal;

/// The journal is folded into the session file once it is longer than the
/// file and this: each byte is rewritten a bounded number of times.
const MIN_FOLD: u64 = 64 << 10;

/// A line as written: borrowed from the agent, nothing copied.
#[derive(Serialize)]
pub(super) struct EntryRef<'a> {
    /// How many messages the session had before these.
    pub from: usize,
    pub messages: &'a [ChatMessage],
    pub steps: u32,
    pub usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked: Option<&'a Parked>,
    pub active_ms: u64,
    pub notes: &'a [i64],
    pub plan_approved: bool,
    pub steps_started: &'a [String],
}

/// A line as read.
#[derive(Deserialize)]
struct Entry {
    from: usize,
    messages: Vec<ChatMessage>,
    steps: u32,
    usage: Usage,
    #[serde(default)]
    parked: Option<Parked>,
    active_ms: u64,
    notes: Vec<i64>,
    plan_approved: bool,
    steps_started: Vec<String>,
}

/// The journal being written.
#[derive(Debug, Default)]
pub(super) struct Journal {
    /// Open for appending; None until the session is first written whole
    /// (or after a write failed): the next save is a whole one.
    file: Option<File>,
    /// Messages in the session file and the journal so far.
    kept: usize,
    /// Compactions in the session file (a new one is written whole).
    compactions: usize,
    /// The MAC the next line chains to.
    head: String,
    /// Sizes of the session file and of the journal.
    base: u64,
    bytes: u64,
}

impl Journal {
    /// Appends what `entry` adds; false when the session must be written
    /// whole instead (no journal yet, messages taken away, a compaction,
    /// a journal grown past the file, or a failed write).
    pub fn append(
        &mut self,
        seal: &Seal,
        messages: &[ChatMessage],
        compactions: usize,
        entry: EntryRef<'_>,
    ) -> bool {
        let Some(file) = self.file.as_mut() else {
            return false;
        };
        if messages.len() < self.kept
            || compactions != self.compactions
            || self.bytes > self.base.max(MIN_FOLD)
        {
            return false;
        }
        let entry = EntryRef {
            from: self.kept,
            messages: &messages[self.kept..],
            ..entry
        };
        let body = serde_json::to_vec(&entry).expect("journal lines serialize");
        let mac = seal.link(&self.head, &body);
        let mut line = Vec::with_capacity(mac.len() + body.len() + 2);
        line.extend_from_slice(mac.as_bytes());
        line.push(b' ');
        line.extend_from_slice(&body);
        line.push(b'\n');
        if let Err(e) = file.write_all(&line) {
            warn!(error = %e, "appending to the session journal failed");
            self.file = None;
            return false;
        }
        self.kept = messages.len();
        self.head = mac;
        self.bytes += line.len() as u64;
        true
    }

    /// The session was written whole (`base` bytes, sealed `head`): the
    /// journal starts again, empty, at `path`. Made under a name nobody
    /// can guess and renamed into place (the workspace is the agent's).
    pub fn restart(
        &mut self,
        path: &Path,
        head: String,
        base: u64,
        kept: usize,
        compactions: usize,
    ) {
        *self = Journal {
            file: None,
            kept,
            compactions,
            head,
            base,
            bytes: 0,
        };
        match super::record::create_atomic(path, b"") {
            Ok(f) => self.file = Some(f),
            Err(e) => warn!(error = %e, "starting the session journal failed"),
        }
    }

    /// The last whole save ends the journal (on every exit).
    pub fn remove(&mut self, path: &Path) {
        self.file = None;
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                warn!(error = %e, "removing the session journal failed")
            }
            _ => {}
        }
    }
}

/// Applies the journal's lines to `session`, whose file's seal is `head`:
/// in order, up to the first that does not follow.
pub(super) fn apply(session: &mut Session, mut head: String, journal: &[u8], seal: &Seal) {
    for (n, line) in journal.split_inclusive(|b| *b == b'\n').enumerate() {
        // A last line without its end was cut by the crash.
        let Some(line) = line.strip_suffix(b"\n") else {
            return;
        };
        let at = line.iter().position(|b| *b == b' ').unwrap_or(line.len());
        let (mac, body) = (&line[..at], line.get(at + 1..).unwrap_or_default());
        let entry = seal
            .links(&head, body, mac)
            .then(|| serde_json::from_slice::<Entry>(body).ok())
            .flatten()
            .filter(|e| e.from == session.messages.len());
        let Some(e) = entry else {
            // The first line of a journal older than the file is expected.
            if n > 0 {
                warn!(
                    line = n + 1,
                    "the session journal stops at a line that does not follow"
                );
            }
            return;
        };
        session.messages.extend(e.messages);
        session.steps = e.steps;
        session.usage = e.usage;
        session.parked = e.parked;
        session.active_ms = e.active_ms;
        session.notes = e.notes;
        session.plan_approved = e.plan_approved;
        session.steps_started = e.steps_started;
        head = String::from_utf8_lossy(mac).into_owned();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        serde_json::from_value(serde_json::json!({
            "task_id": "0196a0b0-0000-7000-8000-000000000001",
            "model": "replay:x",
            "steps": 0,
            "usage": {"input_tokens": 0, "output_tokens": 0},
            "messages": [{"role": "user", "content": "u"}],
        }))
        .unwrap()
    }

    fn entry(steps: u32) -> EntryRef<'static> {
        EntryRef {
            from: 0,
            messages: &[],
            steps,
            usage: Usage::default(),
            parked: None,
            active_ms: 5,
            notes: &[],
            plan_approved: steps > 1,
            steps_started: &[],
        }
    }

    /// Writes a base and two appends; returns (base bytes, journal bytes).
    fn written(seal: &Seal, dir: &Path) -> (Vec<u8>, Vec<u8>) {
        let path = dir.join("j");
        let s = session();
        let (base, head) = seal.seal_head(&s);
        let mut j = Journal::default();
        j.restart(&path, head, base.len() as u64, 1, 0);
        let mut msgs = s.messages.clone();
        msgs.push(ChatMessage::user("a"));
        assert!(j.append(seal, &msgs, 0, entry(1)));
        msgs.push(ChatMessage::user("b"));
        msgs.push(ChatMessage::user("c"));
        assert!(j.append(seal, &msgs, 0, entry(2)));
        // A compaction, or messages taken away, is written whole.
        assert!(!j.append(seal, &msgs, 1, entry(2)));
        assert!(!j.append(seal, &msgs[..1], 0, entry(2)));
        (base, std::fs::read(&path).unwrap())
    }

    #[test]
    fn the_journal_brings_the_session_up_to_its_last_line() {
        let d = tempfile::tempdir().unwrap();
        for seal in [Seal::new(Some(b"k".repeat(32))), Seal::default()] {
            let (base, lines) = written(&seal, d.path());
            let (mut s, head) = seal.open_head(&base).unwrap();
            apply(&mut s, head.clone(), &lines, &seal);
            assert_eq!(s.messages.len(), 4);
            assert_eq!((s.steps, s.active_ms, s.plan_approved), (2, 5, true));
            // A last line cut by a crash: the one before holds.
            let (mut s, _) = seal.open_head(&base).unwrap();
            apply(&mut s, head.clone(), &lines[..lines.len() - 1], &seal);
            assert_eq!((s.messages.len(), s.steps), (2, 1));
        }
    }

    #[test]
    fn a_line_changed_or_out_of_place_stops_the_journal() {
        let d = tempfile::tempdir().unwrap();
        let seal = Seal::new(Some(b"k".repeat(32)));
        let (base, lines) = written(&seal, d.path());
        let (s0, head) = seal.open_head(&base).unwrap();
        let text = String::from_utf8(lines.clone()).unwrap();
        // The second line's steps changed: the first line still holds.
        let forged = text.replacen("\"steps\":2", "\"steps\":9", 1);
        let mut s = s0.clone();
        apply(&mut s, head.clone(), forged.as_bytes(), &seal);
        assert_eq!((s.messages.len(), s.steps), (2, 1));
        // The first line dropped: the second does not chain to the file.
        let second = text.lines().nth(1).unwrap().to_string() + "\n";
        let mut s = s0.clone();
        apply(&mut s, head.clone(), second.as_bytes(), &seal);
        assert_eq!(s, s0);
        // Another key's journal, or a journal older than the file: nothing.
        let other = Seal::new(Some(b"o".repeat(32)));
        let mut s = s0.clone();
        apply(&mut s, head, &lines, &other);
        assert_eq!(s, s0);
    }

    /// The workspace is the agent's: a link put in place of the journal
    /// while the servo appends does not take its lines (they go to the
    /// file it opened), and a link, a FIFO or a huge file at the journal's
    /// name is never followed, waited on or read past the cap when a park
    /// or a resume reads it back.
    #[test]
    fn an_agent_made_journal_is_not_followed_waited_on_or_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let seal = Seal::new(Some(b"k".repeat(32)));
        let path = dir.path().join("j");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"host file").unwrap();
        let s = session();
        let (base, head) = seal.seal_head(&s);
        let mut j = Journal::default();
        j.restart(&path, head, base.len() as u64, 1, 0);
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let mut msgs = s.messages.clone();
        msgs.push(ChatMessage::user("a"));
        assert!(j.append(&seal, &msgs, 0, entry(1)));
        assert_eq!(std::fs::read(&victim).unwrap(), b"host file");
        // Read back: the link is refused, not followed.
        assert!(super::super::resume::read_session_file(&path).is_err());
        // A FIFO is refused without waiting for a writer.
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates it.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(super::super::resume::read_session_file(&path).is_err());
        // A sparse file past the cap is read up to the cap only, and its
        // zeros apply nothing.
        std::fs::remove_file(&path).unwrap();
        let big = std::fs::File::create(&path).unwrap();
        big.set_len(super::super::resume::MAX_SESSION + 4096)
            .unwrap();
        let bytes = super::super::resume::read_session_file(&path)
            .unwrap()
            .unwrap();
        assert_eq!(bytes.len() as u64, super::super::resume::MAX_SESSION);
        let (mut s2, head) = seal.open_head(&base).unwrap();
        apply(&mut s2, head, &bytes, &seal);
        assert_eq!(s2.messages.len(), 1);
    }
}
