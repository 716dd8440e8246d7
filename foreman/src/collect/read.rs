//! Reading files of a collected workspace. Everything in it was made by the
//! agent: `complete.json` or the audit log may be a link to `/dev/zero` or
//! `/proc/self/environ`, a FIFO, or a gigabyte without a newline. So a file
//! is opened without following links (`O_NOFOLLOW`, and `O_NONBLOCK` so a
//! FIFO cannot block the open), must be a regular file once open (`fstat`
//! on the handle, not the path), and is read under a cap.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use saheeli_protocol::{AuditEvent, Completion, TaskId, Usage, paths};

/// Why a collected file was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("`{0}` is a symbolic link made in the workspace; it is not followed")]
    Link(PathBuf),
    #[error("`{0}` is not a regular file; it is not read")]
    NotRegular(PathBuf),
    #[error("reading `{path}`: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// Opens `path` for reading when it is a regular file (None when absent).
/// A link is refused by the kernel (`ELOOP`), never followed.
pub(crate) fn open_regular(path: &Path) -> Result<Option<File>, ReadError> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(ReadError::Link(path.to_path_buf()));
        }
        Err(source) => {
            return Err(ReadError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let meta = file.metadata().map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(path.to_path_buf()));
    }
    Ok(Some(file))
}

/// The lines of a hostile text file, each at most `max_line` bytes (longer
/// ones are reported as [`Line::TooLong`] without being held), and at most
/// `max_total` bytes in all (then [`Line::Truncated`] ends the iteration).
pub(crate) struct CappedLines<R> {
    reader: BufReader<io::Take<R>>,
    max_line: usize,
    /// The end (or the cap) was reached.
    done: bool,
    /// The cap cut the file: [`Line::Truncated`] is still to be returned.
    truncated: bool,
}

/// One line of a [`CappedLines`] file.
#[derive(Debug, PartialEq)]
pub(crate) enum Line {
    Text(String),
    /// A line longer than the cap, with its length.
    TooLong(u64),
    /// The file goes on past the total cap; nothing more is read.
    Truncated,
}

impl<R: Read> CappedLines<R> {
    pub fn new(reader: R, max_line: usize, max_total: u64) -> Self {
        CappedLines {
            reader: BufReader::with_capacity(64 * 1024, reader.take(max_total)),
            max_line,
            done: false,
            truncated: false,
        }
    }

    fn next_line(&mut self) -> io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut len = 0u64;
        let mut any = false;
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                if self.reader.get_ref().limit() == 0 {
                    // The cap, not the end of the file: is there more?
                    let mut probe = [0u8; 1];
                    let inner = self.reader.get_mut().get_mut();
                    self.truncated = inner.read(&mut probe)? > 0;
                }
                self.done = true;
                break;
            }
            any = true;
            let (chunk, used, end) = match memchr::memchr(b'\n', buf) {
                Some(i) => (&buf[..i], i + 1, true),
                None => (buf, buf.len(), false),
            };
            len += chunk.len() as u64;
            if len <= self.max_line as u64 {
                line.extend_from_slice(chunk);
            } else {
                line = Vec::new();
            }
            self.reader.consume(used);
            if end {
                break;
            }
        }
        if !any {
            return Ok(std::mem::take(&mut self.truncated).then_some(Line::Truncated));
        }
        if len > self.max_line as u64 {
            return Ok(Some(Line::TooLong(len)));
        }
        Ok(Some(Line::Text(
            String::from_utf8_lossy(&line).into_owned(),
        )))
    }
}

impl<R: Read> Iterator for CappedLines<R> {
    type Item = io::Result<Line>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return std::mem::take(&mut self.truncated).then_some(Ok(Line::Truncated));
        }
        self.next_line().transpose()
    }
}

/// The longest audit line read (a tool call carries its arguments, e.g. a
/// whole file for `create_file`).
pub(crate) const MAX_AUDIT_LINE: usize = 4 << 20;
/// How much of an audit log is read at most.
pub(crate) const MAX_AUDIT_LOG: u64 = 256 << 20;

/// The audit log of a collected workspace as capped lines (None when absent).
pub(crate) fn audit_lines(dir: &Path, id: TaskId) -> Result<Option<CappedLines<File>>, ReadError> {
    Ok(open_regular(&dir.join(paths::audit_log(&id)))?
        .map(|f| CappedLines::new(f, MAX_AUDIT_LINE, MAX_AUDIT_LOG)))
}

/// Why the servo gave up, as it left it in a collected workspace
/// ([`paths::SERVO_ERROR`]): at most [`paths::MAX_SERVO_ERROR`] bytes, on
/// one line, control characters replaced; None when absent or not a
/// plain file reached without a link.
pub(crate) fn servo_error(dir: &Path) -> Option<String> {
    let rel = Path::new(paths::SERVO_ERROR);
    let (parent, name) = (rel.parent()?, rel.file_name()?);
    let file = crate::collect::Dir::open(dir)
        .and_then(|d| d.walk(parent, false))
        .and_then(|d| d.open_file(name))
        .ok()?;
    let mut bytes = Vec::new();
    file.take(paths::MAX_SERVO_ERROR as u64)
        .read_to_end(&mut bytes)
        .ok()?;
    let text: String = String::from_utf8_lossy(&bytes)
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    (!text.is_empty()).then_some(text)
}

/// The `complete.json` in a collected workspace, when present and valid for `id`.
pub(crate) fn read_completion(dir: &Path, id: TaskId) -> Result<Option<Completion>, String> {
    const MAX: u64 = 1 << 20;
    let path = dir.join("complete.json");
    let file = match open_regular(&path) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(None),
        Err(ReadError::NotRegular(_) | ReadError::Link(_)) => {
            return Err("complete.json is not a regular file".into());
        }
        Err(e) => return Err(format!("complete.json unreadable: {e}")),
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > MAX {
        return Err(format!("complete.json is too large ({size} bytes)"));
    }
    let mut text = String::new();
    file.take(MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("complete.json unreadable: {e}"))?;
    if text.len() as u64 > MAX {
        return Err(format!("complete.json is too large (over {MAX} bytes)"));
    }
    let c: Completion =
        serde_json::from_str(&text).map_err(|e| format!("complete.json is invalid: {e}"))?;
    if c.task_id != id {
        return Err(format!(
            "complete.json names task {} instead of {id}",
            c.task_id
        ));
    }
    Ok(Some(c))
}

/// What a collected audit log says about its run.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct AuditTotals {
    pub steps: u32,
    pub usage: Usage,
    /// The servo's own word for how it ended (its `finish` event), when
    /// it got to write one.
    pub outcome: Option<String>,
    /// The servo's `compacted` events (issue 26).
    pub compactions: u32,
    /// Its `finish` event's detail (a third-party agent's exit code and
    /// last words), on one line, capped at [`MAX_FINISH_DETAIL`] bytes.
    pub detail: Option<String>,
}

/// The longest `finish` detail kept for the task's own detail.
pub(crate) const MAX_FINISH_DETAIL: usize = 2048;

/// `text` on one line (control characters become spaces), cut at `max`
/// bytes on a character boundary.
fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.trim().chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > max {
            out.push('…');
            break;
        }
        out.push(c);
    }
    out
}

/// Steps, token usage and the servo's outcome from the audit log of a
/// collected workspace (zero when there is none). Blocking: call it from a
/// blocking thread.
pub(crate) fn audit_totals(dir: &Path, id: TaskId) -> Result<AuditTotals, ReadError> {
    let mut steps = 0;
    let mut usage = Usage::default();
    let mut compactions = 0;
    let Some(lines) = audit_lines(dir, id)? else {
        return Ok(AuditTotals::default());
    };
    for line in lines {
        let line = line.map_err(|source| ReadError::Io {
            path: dir.join(paths::audit_log(&id)),
            source,
        })?;
        let Line::Text(line) = line else { continue };
        match serde_json::from_str::<AuditEvent>(&line) {
            Ok(AuditEvent::LlmCall { step, usage: u, .. }) => {
                steps = steps.max(step);
                usage.add(u);
            }
            Ok(AuditEvent::Compacted { .. }) => compactions += 1,
            Ok(AuditEvent::Finish {
                steps: s,
                usage: u,
                outcome,
                detail,
                ..
            }) => {
                return Ok(AuditTotals {
                    steps: s,
                    usage: u,
                    outcome: Some(outcome),
                    compactions,
                    detail: detail
                        .map(|d| one_line(&d, MAX_FINISH_DETAIL))
                        .filter(|d| !d.is_empty()),
                });
            }
            _ => {}
        }
    }
    Ok(AuditTotals {
        steps,
        usage,
        outcome: None,
        compactions,
        detail: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// The servo's reason is read capped, on one line, and never through
    /// a link the agent could have left in its place.
    #[test]
    fn the_servos_reason_is_capped_and_never_read_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(servo_error(d.path()), None);
        fs::create_dir(d.path().join(".saheeli")).unwrap();
        let file = d.path().join(paths::SERVO_ERROR);
        fs::write(&file, "GET /launch failed:\nconnection refused\x1b[31m\n").unwrap();
        assert_eq!(
            servo_error(d.path()).unwrap(),
            "GET /launch failed: connection refused [31m"
        );
        fs::write(&file, "x".repeat(10 << 10)).unwrap();
        assert_eq!(servo_error(d.path()).unwrap().len(), paths::MAX_SERVO_ERROR);
        // A link at the file, or at its directory, is not followed.
        let elsewhere = tempfile::tempdir().unwrap();
        fs::create_dir(elsewhere.path().join(".saheeli")).unwrap();
        fs::write(elsewhere.path().join(paths::SERVO_ERROR), "host secret").unwrap();
        fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join(paths::SERVO_ERROR), &file).unwrap();
        assert_eq!(servo_error(d.path()), None);
        // Nor one to a device, nor a FIFO (which would block a plain open).
        fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
        assert_eq!(servo_error(d.path()), None);
        fs::remove_file(&file).unwrap();
        let fifo = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(servo_error(d.path()), None);
        fs::remove_file(&file).unwrap();
        fs::remove_dir(d.path().join(".saheeli")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join(".saheeli"), d.path().join(".saheeli"))
            .unwrap();
        assert_eq!(servo_error(d.path()), None);
    }

    #[test]
    fn completion_must_match_the_task() {
        let d = tempfile::tempdir().unwrap();
        let id = TaskId::new();
        assert_eq!(read_completion(d.path(), id), Ok(None));
        fs::write(d.path().join("complete.json"), "not json").unwrap();
        assert!(
            read_completion(d.path(), id)
                .unwrap_err()
                .contains("invalid")
        );
        let other = Completion {
            task_id: TaskId::new(),
            message: "m".into(),
            steps: 1,
            usage: Usage::default(),
            finished_at: "2026-01-01T00:00:00Z".into(),
            verification: vec![],
        };
        fs::write(
            d.path().join("complete.json"),
            serde_json::to_string(&other).unwrap(),
        )
        .unwrap();
        assert!(
            read_completion(d.path(), id)
                .unwrap_err()
                .contains("names task")
        );
    }

    #[test]
    fn links_fifos_and_devices_are_not_read() {
        let d = tempfile::tempdir().unwrap();
        let id = TaskId::new();
        let log = d.path().join(paths::audit_log(&id));
        for target in ["/dev/zero", "/proc/self/environ"] {
            let _ = fs::remove_file(&log);
            std::os::unix::fs::symlink(target, &log).unwrap();
            assert!(matches!(
                audit_totals(d.path(), id),
                Err(ReadError::Link(_))
            ));
            assert!(matches!(audit_lines(d.path(), id), Err(ReadError::Link(_))));
            std::os::unix::fs::symlink(target, d.path().join("complete.json")).unwrap();
            assert!(read_completion(d.path(), id).is_err());
            fs::remove_file(d.path().join("complete.json")).unwrap();
        }
        fs::remove_file(&log).unwrap();
        let c = std::ffi::CString::new(log.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        // Returns at once: no writer is waited for.
        assert!(matches!(
            audit_totals(d.path(), id),
            Err(ReadError::NotRegular(_))
        ));
    }

    /// A third-party agent's last words reach the task's detail on one
    /// line and capped (they are the agent's text).
    #[test]
    fn the_finish_detail_is_one_capped_line() {
        let d = tempfile::tempdir().unwrap();
        let id = TaskId::new();
        let finish = |detail: &str| AuditEvent::Finish {
            ts: "t".into(),
            outcome: "agent_failed".into(),
            steps: 0,
            usage: Usage::default(),
            detail: Some(detail.into()),
            timings: None,
        };
        let line =
            serde_json::to_string(&finish("agent exited with code 7;\x1b[2J boom\n")).unwrap();
        fs::write(d.path().join(paths::audit_log(&id)), format!("{line}\n")).unwrap();
        let t = audit_totals(d.path(), id).unwrap();
        assert_eq!(
            t.detail.as_deref(),
            Some("agent exited with code 7; [2J boom")
        );
        let long = serde_json::to_string(&finish(&"é".repeat(MAX_FINISH_DETAIL))).unwrap();
        fs::write(d.path().join(paths::audit_log(&id)), format!("{long}\n")).unwrap();
        let t = audit_totals(d.path(), id).unwrap();
        let cut = t.detail.unwrap();
        assert!(
            cut.len() <= MAX_FINISH_DETAIL + 3 && cut.ends_with('…'),
            "{}",
            cut.len()
        );
    }

    #[test]
    fn lines_are_capped_one_by_one_and_in_all() {
        let text = format!("short\n{}\nlast", "x".repeat(100));
        let lines: Vec<Line> = CappedLines::new(text.as_bytes(), 10, 1 << 20)
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            lines,
            vec![
                Line::Text("short".into()),
                Line::TooLong(100),
                Line::Text("last".into())
            ]
        );
        // An endless source stops at the total cap.
        let lines: Vec<Line> = CappedLines::new(io::repeat(b'a'), 10, 1000)
            .map(Result::unwrap)
            .collect();
        assert_eq!(lines, vec![Line::TooLong(1000), Line::Truncated]);
        let exact: Vec<Line> = CappedLines::new(&b"ab\n"[..], 10, 3)
            .map(Result::unwrap)
            .collect();
        assert_eq!(exact, vec![Line::Text("ab".into())]);
    }
}
