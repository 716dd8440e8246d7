//! Scoring an ended case: its task's state against the expected one
//! (`complete` unless `expect.state` says otherwise; a task with `verify`
//! completes only when it passed), then each `expect.files` entry and the
//! completion message. The collected workspace is the agent's: files are
//! opened relative to directory handles without following any link, and
//! read under a cap.

use std::io::Read;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::suite::Expect;
use crate::state::TaskState;

/// The most of an expected file that is read.
pub(crate) const MAX_EXPECT_FILE: u64 = 1 << 20;

/// A case's verdict: passed, the fraction of its checks that held, and
/// a line per check saying how it went (`pass: …` or `fail: …`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Score {
    pub passed: bool,
    pub score: f64,
    pub why: Vec<String>,
    /// Whether the task ended in the expected state (else an expectation failed).
    pub state_ok: bool,
}

/// Scores a case whose task ended in `state`; `results` is its collected
/// workspace (None when nothing was collected), `message` its completion
/// message.
pub(crate) fn score(
    expect: &Expect,
    state: TaskState,
    reason: Option<&str>,
    results: Option<&Path>,
    message: Option<&str>,
) -> Score {
    let mut checks: Vec<(bool, String)> = Vec::new();
    let want = expect.state.map(|s| s.0).unwrap_or(TaskState::Complete);
    let ended = match reason {
        Some(r) if r != state.as_str() => format!("{state} ({r})"),
        _ => state.to_string(),
    };
    let state_ok = state == want;
    checks.push((
        state_ok,
        if state_ok {
            format!("ended {ended}")
        } else {
            format!("ended {ended}, expected {want}")
        },
    ));
    for (path, pattern) in &expect.files {
        let p = &path.0;
        let re = pattern.0.as_str();
        checks.push(match results {
            None => (false, format!("`{p}`: no results were collected")),
            Some(dir) => match read_below(dir, p) {
                Ok(text) if pattern.0.is_match(&text) => (true, format!("`{p}` matches `{re}`")),
                Ok(_) => (false, format!("`{p}` does not match `{re}`")),
                Err(why) => (false, format!("`{p}`: {why}")),
            },
        });
    }
    if let Some(pattern) = &expect.message {
        let re = pattern.0.as_str();
        checks.push(match message {
            Some(m) if pattern.0.is_match(m) => (true, format!("the message matches `{re}`")),
            Some(_) => (false, format!("the message does not match `{re}`")),
            None => (false, "no completion message".to_string()),
        });
    }
    let held = checks.iter().filter(|(ok, _)| *ok).count();
    Score {
        passed: held == checks.len(),
        score: held as f64 / checks.len() as f64,
        why: checks
            .into_iter()
            .map(|(ok, w)| format!("{}: {w}", if ok { "pass" } else { "fail" }))
            .collect(),
        state_ok,
    }
}

/// The text of `rel` below `dir`, every component opened without
/// following links; at most [`MAX_EXPECT_FILE`] bytes.
pub(crate) fn read_below(dir: &Path, rel: &str) -> Result<String, String> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open(dir, dir_flags, Mode::empty())
        .map_err(|e| format!("the results directory cannot be opened ({e})"))?;
    let parts: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
    let Some((last, parents)) = parts.split_last() else {
        return Err("an empty path".into());
    };
    let refused = |e: rustix::io::Errno| match e {
        rustix::io::Errno::NOENT => "does not exist".to_string(),
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
            "is or goes through a symbolic link or a file; links are not followed".to_string()
        }
        e => format!("cannot be opened ({e})"),
    };
    for part in parents {
        fd = rustix::fs::openat(&fd, *part, dir_flags, Mode::empty()).map_err(refused)?;
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file =
        std::fs::File::from(rustix::fs::openat(&fd, *last, flags, Mode::empty()).map_err(refused)?);
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot be read ({e})"))?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    if meta.len() > MAX_EXPECT_FILE {
        return Err(format!(
            "is {} bytes, over the {MAX_EXPECT_FILE} bytes an expectation reads",
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_EXPECT_FILE)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read ({e})"))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::expect::{FileKey, Pattern};

    fn expect(files: &[(&str, &str)], message: Option<&str>) -> Expect {
        Expect {
            state: None,
            files: files
                .iter()
                .map(|(p, r)| {
                    (
                        FileKey(p.to_string()),
                        Pattern(regex::Regex::new(r).unwrap()),
                    )
                })
                .collect(),
            message: message.map(|m| Pattern(regex::Regex::new(m).unwrap())),
        }
    }

    #[test]
    fn files_and_message_are_checked_and_links_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("out.txt"), "ok: 4\n").unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/deep.txt"), "deep").unwrap();
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("key"), "ok secret").unwrap();
        std::os::unix::fs::symlink(secret.path().join("key"), d.path().join("link.txt")).unwrap();
        std::os::unix::fs::symlink(secret.path(), d.path().join("ldir")).unwrap();
        let ok = score(
            &expect(&[("out.txt", "^ok"), ("sub/deep.txt", "")], Some("fixed")),
            TaskState::Complete,
            Some("complete"),
            Some(d.path()),
            Some("I fixed it"),
        );
        assert!(ok.passed, "{ok:?}");
        assert_eq!(ok.score, 1.0);
        for bad in ["link.txt", "ldir/key", "missing.txt"] {
            let s = score(
                &expect(&[(bad, "ok")], None),
                TaskState::Complete,
                None,
                Some(d.path()),
                None,
            );
            assert!(!s.passed, "{bad}: {s:?}");
            assert_eq!(s.score, 0.5);
        }
        // A FIFO is refused at once (never waited on), and a file past the
        // cap is refused without being read.
        let fifo = std::ffi::CString::new(
            d.path()
                .join("pipe.txt")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: a valid C string; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let big = std::fs::File::create(d.path().join("big.txt")).unwrap();
        big.set_len(MAX_EXPECT_FILE + 1).unwrap();
        for (bad, why) in [("pipe.txt", "not a regular file"), ("big.txt", "over the")] {
            let err = read_below(d.path(), bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let wrong = score(
            &expect(&[("out.txt", "^fail")], Some("fixed")),
            TaskState::Incomplete,
            Some("max_steps"),
            Some(d.path()),
            Some("gave up"),
        );
        assert!(!wrong.passed && !wrong.state_ok);
        assert_eq!(wrong.score, 0.0);
        assert_eq!(
            wrong.why[0],
            "fail: ended incomplete (max_steps), expected complete"
        );
    }
}
