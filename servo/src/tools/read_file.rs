//! `read_file`: a text file with line numbers, a window of it for large
//! files (`offset` is the 1-based first line, `limit` the number of lines).

use serde::Deserialize;

use super::{ToolOutput, Toolbox};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadFile {
    path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

const DEFAULT_LIMIT: usize = 2000;

/// Most bytes read from one file: a model pages through text, and a huge
/// file read whole would take the servo's memory (and time) with it.
const MAX_READ: u64 = 8 << 20;

/// Opens without blocking (a FIFO with no writer would block `open`
/// forever) and only regular files; reads at most [`MAX_READ`] bytes.
/// Returns the bytes and the file's full size.
fn read_capped(path: &std::path::Path) -> std::io::Result<Result<(Vec<u8>, u64), String>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(Err(format!("{:?}", meta.file_type())));
    }
    let mut bytes = Vec::with_capacity(meta.len().min(MAX_READ) as usize);
    file.take(MAX_READ).read_to_end(&mut bytes)?;
    Ok(Ok((bytes, meta.len())))
}

pub(crate) fn run(tb: &Toolbox, a: ReadFile) -> ToolOutput {
    let path = match tb.ws.resolve(&a.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    if path.is_dir() {
        return ToolOutput::error(format!(
            "`{}` is a directory; use list_files to see what it holds",
            a.path
        ));
    }
    let (bytes, size) = match read_capped(&path) {
        Ok(Ok(b)) => b,
        Ok(Err(kind)) => {
            return ToolOutput::error(format!(
                "`{}` is not a regular file ({kind}); read_file reads regular files only",
                a.path
            ));
        }
        Err(e) => return ToolOutput::error(format!("reading `{}`: {e}", a.path)),
    };
    let cut = size > bytes.len() as u64;
    let text = String::from_utf8_lossy(&bytes);
    let offset = a.offset.unwrap_or(1).max(1);
    let limit = a.limit.unwrap_or(DEFAULT_LIMIT).max(1);
    let total = text.lines().count();
    if total == 0 {
        return ToolOutput::ok(format!("{} is empty", tb.ws.display(&path)));
    }
    if offset > total {
        return ToolOutput::error(format!(
            "offset {offset} is past the end of `{}` ({total} lines)",
            a.path
        ));
    }
    // Whole lines up to the output limit (less room for the note), so a
    // long file is paged rather than cut in the middle.
    let room = tb.max_output.saturating_sub(if cut { 320 } else { 120 });
    let mut out = String::new();
    let mut last = offset - 1;
    for (i, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
        let numbered = format!("{:>6}\t{line}\n", i + 1);
        if !out.is_empty() && out.len() + numbered.len() > room {
            break;
        }
        out.push_str(&numbered);
        last = i + 1;
    }
    if last < total {
        out.push_str(&format!(
            "[lines {offset}-{last} of {total}; read more with offset={}]\n",
            last + 1
        ));
    }
    if cut {
        out.push_str(&format!(
            "[the file has {size} bytes; only the first {} MiB ({total} lines) can be read with \
             read_file: use execute_shell (sed -n, tail, grep) for the rest]\n",
            MAX_READ >> 20
        ));
    }
    ToolOutput::ok(out)
}

#[cfg(test)]
mod tests {
    use crate::tools::tests::toolbox;

    #[tokio::test]
    async fn offset_and_limit_select_lines() {
        let (d, tb) = toolbox();
        std::fs::write(d.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        let out = tb.dispatch("read_file", r#"{"path": "a.txt"}"#).await;
        assert_eq!(out.text, "     1\tone\n     2\ttwo\n     3\tthree\n");

        let out = tb
            .dispatch("read_file", r#"{"path": "a.txt", "offset": 2, "limit": 1}"#)
            .await;
        assert!(out.ok);
        assert_eq!(
            out.text,
            "     2\ttwo\n[lines 2-2 of 3; read more with offset=3]\n"
        );

        let out = tb
            .dispatch("read_file", r#"{"path": "a.txt", "offset": 3}"#)
            .await;
        assert_eq!(out.text, "     3\tthree\n");

        let out = tb
            .dispatch("read_file", r#"{"path": "a.txt", "offset": 9}"#)
            .await;
        assert!(!out.ok && out.text.contains("past the end of `a.txt` (3 lines)"));

        let out = tb
            .dispatch("read_file", r#"{"path": "a.txt", "offset": -1}"#)
            .await;
        assert!(
            !out.ok && out.text.contains("invalid value"),
            "{}",
            out.text
        );

        let out = tb.dispatch("read_file", r#"{"path": "nope.txt"}"#).await;
        assert!(
            !out.ok && out.text.contains("reading `nope.txt`"),
            "{}",
            out.text
        );
    }

    #[tokio::test]
    async fn long_files_are_paged_not_cut() {
        let (d, tb) = toolbox();
        let text: String = (1..=5000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(d.path().join("big.txt"), text).unwrap();
        let out = tb.dispatch("read_file", r#"{"path": "big.txt"}"#).await;
        assert!(out.ok && !out.truncated, "{}", out.text);
        assert!(out.text.len() <= 4096);
        assert!(out.text.starts_with("     1\tline 1\n"));
        assert!(
            out.text.contains("of 5000; read more with offset="),
            "{}",
            out.text
        );
    }

    /// Runs a dispatch on its own thread; None when it does not end in time
    /// (the thread is then left blocked).
    fn within(
        limit: std::time::Duration,
        tb: crate::tools::Toolbox,
        args: &'static str,
    ) -> Option<crate::tools::ToolOutput> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let _ = tx.send(rt.block_on(tb.dispatch("read_file", args)));
        });
        rx.recv_timeout(limit).ok()
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let (d, tb) = toolbox();
        let fifo = d.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a plain libc call on a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let out = within(std::time::Duration::from_secs(5), tb, r#"{"path": "pipe"}"#)
            .expect("read_file blocked on a FIFO");
        assert!(
            !out.ok && out.text.contains("not a regular file"),
            "{}",
            out.text
        );
    }

    #[test]
    fn a_huge_file_is_not_read_whole() {
        let (d, tb) = toolbox();
        // Sparse: 1 GiB of zeros after one line, no disk used.
        let f = std::fs::File::create(d.path().join("huge.bin")).unwrap();
        std::io::Write::write_all(&mut &f, b"first line\n").unwrap();
        f.set_len(1 << 30).unwrap();
        let started = std::time::Instant::now();
        let out = within(
            std::time::Duration::from_secs(20),
            tb,
            r#"{"path": "huge.bin"}"#,
        )
        .expect("read_file never returned");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(out.ok, "{}", out.text);
        assert!(
            out.text.starts_with("     1\tfirst line\n"),
            "{}",
            &out.text[..40]
        );
        assert!(out.text.contains("only the first"), "{}", out.text);
    }
}
