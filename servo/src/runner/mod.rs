//! The tool runner: the workspace tools run in a process of their own, as
//! the agent's user, never in the servo.
//!
//! The servo ([`Link`]) starts `servo runner` (this same binary) through
//! [`crate::privsep::spawn`], sends it each call to a workspace tool
//! (`in_runner` in `saheeli_protocol::tools::BUILT_IN`: `execute_shell`,
//! `create_file`, `read_file`, `edit_file`, `list_files`), and reads the
//! reply. So every file the model's tools make belongs to the agent, and
//! nothing the agent runs shares the servo's uid: it cannot open the
//! gateway socket, trace the servo or touch its session. The servo's own
//! tools (`task_complete`, `ask_user`, `step_done`, capabilities) stay in
//! the servo.
//!
//! The agent can kill its runner (`kill -9 -1` from its shell does):
//! the call in flight fails saying so, and the next call starts a new
//! runner with a fresh shell.
//!
//! - `wire`: the requests and replies (JSON lines).
//! - `serve`: the runner process.

pub(crate) mod serve;
pub(crate) mod wire;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use crate::privsep::Mode;
use crate::tools::ToolOutput;
use wire::{MAX_REPLY, Reply, Request};

/// The servo's link to its runner, started at the first call and again
/// after one died.
pub(crate) struct Link {
    mode: Mode,
    exe: PathBuf,
    args: serve::Args,
    live: tokio::sync::Mutex<Option<Live>>,
    /// The next runner must tell the model its shell is new.
    fresh: std::sync::atomic::AtomicBool,
}

/// A running runner.
struct Live {
    out: mpsc::UnboundedSender<Request>,
    pending: Arc<Mutex<Pending>>,
    next: u64,
    _child: tokio::process::Child,
}

#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, oneshot::Sender<Reply>>,
    /// The reply pipe closed or carried garbage: the runner is gone.
    dead: bool,
}

impl Link {
    pub fn new(mode: Mode, root: PathBuf, max_output: usize, shell_timeout: Duration) -> Link {
        Link {
            mode,
            // The servo's own binary; in a container, /usr/local/bin/servo.
            exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/usr/local/bin/servo")),
            args: serve::Args {
                root,
                max_output,
                shell_timeout,
                agent: mode == Mode::Separated,
            },
            live: tokio::sync::Mutex::new(None),
            fresh: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn start(&self) -> std::io::Result<Live> {
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.args(self.args.to_argv())
            .current_dir(&self.args.root)
            .env_clear()
            // Nothing of the servo's own: the launch, the gateway's token
            // file, the separation flag.
            .envs(std::env::vars_os().filter(|(k, _)| {
                !k.to_str()
                    .is_some_and(|k| k.starts_with("SAHEELI_") && k != "SAHEELI_LOG")
            }))
            // A warm servo's task env (a cold one's is inherited above).
            .envs(crate::task_env::vars())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // The runner's stderr would be a door to the container's log.
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = crate::privsep::spawn(self.mode, &mut cmd)?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let pending = Arc::new(Mutex::new(Pending::default()));
        let (tx, mut rx) = mpsc::unbounded_channel::<Request>();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Some(req) = rx.recv().await {
                let mut line = serde_json::to_vec(&req).expect("requests serialize");
                line.push(b'\n');
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });
        let reader = pending.clone();
        tokio::spawn(async move {
            let mut out = BufReader::new(stdout);
            loop {
                match read_line(&mut out, MAX_REPLY).await {
                    Ok(Some(line)) => match serde_json::from_slice::<Reply>(&line) {
                        Ok(reply) => {
                            let waiter = reader.lock().unwrap().waiting.remove(&reply.id);
                            if let Some(w) = waiter {
                                let _ = w.send(reply);
                            }
                        }
                        Err(e) => {
                            warn!(error = %e, "the tool runner sent a line that is not a reply; starting a new one");
                            break;
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        warn!(error = %e, "reading the tool runner failed; starting a new one");
                        break;
                    }
                }
            }
            let mut p = reader.lock().unwrap();
            p.dead = true;
            // Dropping the senders fails every call still waiting.
            p.waiting.clear();
        });
        if self.fresh.swap(false, std::sync::atomic::Ordering::Relaxed) {
            let _ = tx.send(Request::Reset {
                id: 0,
                stop: false,
                note: true,
            });
        }
        Ok(Live {
            out: tx,
            pending,
            next: 1,
            _child: child,
        })
    }

    /// Sends `make(id)` to a live runner (starting one when needed) and
    /// waits for its reply; a drop while waiting cancels the request.
    async fn request(&self, make: impl Fn(u64) -> Request) -> Result<Reply, String> {
        let (id, rx, out, pending) = {
            let mut live = self.live.lock().await;
            if live.as_ref().is_none_or(|l| l.pending.lock().unwrap().dead) {
                if live.is_some() {
                    // The model's shell went with the runner.
                    self.fresh.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                *live = Some(
                    self.start()
                        .map_err(|e| format!("starting the tool runner: {e}"))?,
                );
            }
            let l = live.as_mut().expect("just started");
            let id = l.next;
            l.next += 1;
            let (tx, rx) = oneshot::channel();
            l.pending.lock().unwrap().waiting.insert(id, tx);
            if l.out.send(make(id)).is_err() {
                return Err("the tool runner is gone".into());
            }
            (id, rx, l.out.clone(), l.pending.clone())
        };
        let guard = CancelOnDrop {
            id,
            out,
            pending,
            done: false,
        };
        let reply = rx.await;
        let mut guard = guard;
        guard.done = true;
        reply.map_err(|_| {
            "the tool runner stopped during this call (did a command kill it, e.g. `kill -9 -1`?); \
             the next call starts a fresh shell"
                .to_string()
        })
    }

    /// Runs a workspace tool in the runner.
    pub async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        match self
            .request(|id| Request::Tool {
                id,
                name: name.to_string(),
                arguments: arguments.to_string(),
            })
            .await
        {
            Ok(reply) => reply.into_output(),
            Err(e) => ToolOutput::error(e),
        }
    }

    /// Ends the runner (and with it every process of the agent: closing its
    /// stdin makes it kill them all) and waits for it to be gone, a few
    /// seconds at most.
    pub async fn shutdown(&self) {
        let Some(live) = self.live.lock().await.take() else {
            return;
        };
        let Live {
            out,
            _child: mut child,
            ..
        } = live;
        drop(out);
        if tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .is_err()
        {
            warn!("the tool runner did not end within 5 s of its stdin closing");
        }
    }

    /// The next runner tells the model its shell is new.
    pub fn note_fresh(&self) {
        self.fresh.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Stops the agent's shell (and with `stop`, every process it has);
    /// the model hears at its next command that the shell is new. A
    /// runner not started yet only remembers to say so.
    pub async fn reset(&self, stop: bool, note: bool) {
        let started = self.live.lock().await.is_some();
        if !started {
            if note {
                self.fresh.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            return;
        }
        if let Err(e) = self.request(|id| Request::Reset { id, stop, note }).await {
            warn!(error = %e, "resetting the tool runner failed");
        }
    }
}

struct CancelOnDrop {
    id: u64,
    out: mpsc::UnboundedSender<Request>,
    pending: Arc<Mutex<Pending>>,
    done: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.done {
            self.pending.lock().unwrap().waiting.remove(&self.id);
            let _ = self.out.send(Request::Cancel { id: self.id });
        }
    }
}

/// One line of at most `max` bytes (without its newline); None at the end.
async fn read_line<R: tokio::io::AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let n = (&mut *r)
        .take(max as u64 + 1)
        .read_until(b'\n', &mut line)
        .await?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        return Ok(Some(line));
    }
    if line.len() > max {
        return Err(std::io::Error::other(format!(
            "a reply line longer than {max} bytes"
        )));
    }
    // The end of the stream without a newline.
    Ok(Some(line))
}
