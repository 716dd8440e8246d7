//! An agent's final answer, for complete.json's `message`. Everything
//! read here is the agent's: files are opened without following links,
//! never block (a fifo), and are read up to a cap.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::plan::Answer;

/// The longest message kept (the rest is cut, saying so).
const MAX_MESSAGE: usize = 64 * 1024;
/// The largest answer file read.
const MAX_FILE: u64 = 32 << 20;

/// The answer, or why there is none. An empty answer is none: an agent
/// that exits 0 having said nothing did not finish (HOSTILE.md N13).
pub(super) fn read(answer: &Answer, stdout: &str) -> Result<String, String> {
    let text = match answer {
        Answer::StdoutTail => last_lines(stdout, 40),
        Answer::File(p) => read_capped(p)?,
        Answer::ClaudeJson => claude(stdout)?,
        Answer::MiniTrajectory(p) => mini(&read_capped(p)?)?,
    };
    let text = text.trim();
    if text.is_empty() {
        return Err(match answer {
            Answer::StdoutTail => "printed nothing (its answer is its output)".to_string(),
            Answer::File(p) => format!("left `{}` empty", p.display()),
            Answer::ClaudeJson => "gave an empty result".to_string(),
            Answer::MiniTrajectory(_) => "gave an empty answer".to_string(),
        });
    }
    Ok(cap(text))
}

fn cap(text: &str) -> String {
    if text.len() <= MAX_MESSAGE {
        return text.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[saheeli: cut at {MAX_MESSAGE} bytes]", &text[..end])
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn read_capped(path: &Path) -> Result<String, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("left no answer in `{}` ({e})", path.display()))?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(format!("`{}` is not a regular file", path.display()));
    }
    if meta.len() > MAX_FILE {
        return Err(format!(
            "`{}` is larger than {MAX_FILE} bytes",
            path.display()
        ));
    }
    let mut buf = Vec::new();
    f.take(MAX_FILE)
        .read_to_end(&mut buf)
        .map_err(|e| format!("reading `{}`: {e}", path.display()))?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// mini-swe-agent's trajectory: `info.exit_status` must be `Submitted`;
/// the answer is `info.submission` (what followed its completion marker).
fn mini(traj: &str) -> Result<String, String> {
    let v: serde_json::Value =
        serde_json::from_str(traj).map_err(|e| format!("its trajectory is not JSON ({e})"))?;
    let status = v["info"]["exit_status"].as_str().unwrap_or("");
    if status != "Submitted" {
        return Err(format!(
            "its trajectory ends with exit_status `{status}`, not `Submitted`"
        ));
    }
    let submission = v["info"]["submission"].as_str().unwrap_or("").trim();
    Ok(if submission.is_empty() {
        "mini-swe-agent submitted (no final output)".to_string()
    } else {
        submission.to_string()
    })
}

/// Claude Code's `--output-format json`: the last line that parses, its
/// `result` (an error result is no answer).
fn claude(stdout: &str) -> Result<String, String> {
    for line in stdout.lines().rev() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line.trim()) else {
            continue;
        };
        if v["is_error"].as_bool() == Some(true) {
            return Err(format!(
                "reported an error: {}",
                v["result"].as_str().unwrap_or("(no detail)")
            ));
        }
        if let Some(r) = v["result"].as_str() {
            return Ok(r.to_string());
        }
    }
    Err("printed no JSON result".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agent_s_answer_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let traj = dir.path().join("t.json");
        std::fs::write(
            &traj,
            r#"{"info": {"exit_status": "Submitted", "submission": "made hello.txt\n"}}"#,
        )
        .unwrap();
        assert_eq!(
            read(&Answer::MiniTrajectory(traj.clone()), "").unwrap(),
            "made hello.txt"
        );
        std::fs::write(
            &traj,
            r#"{"info": {"exit_status": "LimitsExceeded", "submission": ""}}"#,
        )
        .unwrap();
        let e = read(&Answer::MiniTrajectory(traj), "").unwrap_err();
        assert!(e.contains("LimitsExceeded"), "{e}");

        let out = "noise\n{\"type\":\"result\",\"is_error\":false,\"result\":\"done it\"}\n";
        assert_eq!(read(&Answer::ClaudeJson, out).unwrap(), "done it");
        let bad = "{\"type\":\"result\",\"is_error\":true,\"result\":\"API Error\"}";
        assert!(
            read(&Answer::ClaudeJson, bad)
                .unwrap_err()
                .contains("API Error")
        );
        assert!(read(&Answer::ClaudeJson, "plain").is_err());
        // Nothing said is no answer (N13).
        let e = read(&Answer::StdoutTail, "\n  \n").unwrap_err();
        assert!(e.contains("printed nothing"), "{e}");
        let empty = r#"{"type":"result","is_error":false,"result":"  "}"#;
        assert!(read(&Answer::ClaudeJson, empty).is_err());

        let last = dir.path().join("last.txt");
        std::fs::write(&last, "  the end  ").unwrap();
        assert_eq!(read(&Answer::File(last.clone()), "").unwrap(), "the end");
        std::fs::write(&last, "\n").unwrap();
        assert!(read(&Answer::File(last), "").unwrap_err().contains("empty"));
        let many: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let tail = read(&Answer::StdoutTail, &many).unwrap();
        assert!(
            tail.starts_with("line 60") && tail.ends_with("line 99"),
            "{tail}"
        );
    }

    #[test]
    fn links_and_fifos_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
        assert!(read(&Answer::File(link), "").is_err());
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a path in our own temporary directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read(&Answer::File(fifo), "").unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn a_long_answer_is_cut() {
        let long = "é".repeat(MAX_MESSAGE);
        let m = read(&Answer::StdoutTail, &long).unwrap();
        assert!(
            m.len() < MAX_MESSAGE + 100 && m.ends_with("bytes]"),
            "{}",
            m.len()
        );
    }
}
