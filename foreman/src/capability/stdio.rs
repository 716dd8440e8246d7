//! A capability server over stdio: its process, and a cap on one message.
//!
//! rmcp drops a line over 16 MiB and waits on, so a server that answers
//! with a larger result held the call until its timeout (120 s). Here a
//! message past [`MAX_MESSAGE`] ends the connection at once: the call
//! fails within moments, saying why, and the server is started again on
//! the next call.

use std::io;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The most one message from a server may hold. A tool result goes to the
/// model (whose context is far smaller) and through the foreman's memory:
/// 4 MiB is already more than any model reads.
pub(super) const MAX_MESSAGE: usize = 4 << 20;

/// A started server: its pipes, its process (killed when dropped) and
/// whether it sent a message over the cap.
pub(super) struct Started {
    pub read: CappedLines,
    pub write: ChildStdin,
    pub child: Child,
    pub over: Arc<AtomicBool>,
}

/// Starts `cmd` with piped stdin and stdout, stderr discarded.
pub(super) fn spawn(mut cmd: Command) -> io::Result<Started> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let (Some(stdout), Some(write)) = (child.stdout.take(), child.stdin.take()) else {
        return Err(io::Error::other("the server's pipes were not made"));
    };
    let over = Arc::new(AtomicBool::new(false));
    Ok(Started {
        read: CappedLines {
            inner: stdout,
            line: 0,
            over: over.clone(),
        },
        write,
        child,
        over,
    })
}

/// The server's stdout, failing once a line (one JSON-RPC message) passes
/// [`MAX_MESSAGE`] bytes.
pub(super) struct CappedLines {
    inner: ChildStdout,
    /// Bytes since the last newline.
    line: usize,
    over: Arc<AtomicBool>,
}

impl AsyncRead for CappedLines {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        let new = &buf.filled()[before..];
        this.line = match memchr::memrchr(b'\n', new) {
            Some(i) => new.len() - i - 1,
            None => this.line + new.len(),
        };
        if this.line > MAX_MESSAGE {
            this.over.store(true, Ordering::Relaxed);
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a message over {} MiB", MAX_MESSAGE >> 20),
            )));
        }
        Poll::Ready(Ok(()))
    }
}
