//! A builder that runs the servo on a temporary workspace (in the manner
//! of just's `Test`), and a fake gateway on `127.0.0.1:0` or a unix socket.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use saheeli_protocol::{AuditEvent, Completion, ReplayScript, ServoTask, Session, TaskId};
use serde_json::{Value, json};

pub struct Servo {
    dir: tempfile::TempDir,
    task: ServoTask,
    prompt: String,
    env: Vec<(String, String)>,
    write_files: bool,
}

impl Servo {
    /// A task played from a replay script (YAML).
    pub fn replay(script: &str) -> Servo {
        let mut s = Servo::model("replay:script.yaml");
        s.task.replay = Some(ReplayScript::parse(script).unwrap());
        s
    }

    /// A task for a model behind the gateway.
    pub fn model(model: &str) -> Servo {
        Servo {
            dir: tempfile::tempdir().unwrap(),
            task: ServoTask {
                task_id: TaskId::new(),
                title: "t".into(),
                model: model.into(),
                max_steps: 10,
                max_tokens: None,
                timeout_s: 60,
                deadline_ms: None,
                max_output_bytes: 4096,
                request_timeout_s: None,
                egress: false,
                gates: vec![],
                pause_on_tool_error: false,
                inbox_on_call: false,
                snapshots: false,
                plan_only: false,
                park_after_ms: None,
                tools: None,
                capabilities: vec![],
                delegate: None,
                steps: vec![],
                verify: false,
                replay: None,
                context: Default::default(),
                agent: None,
                stop_grace_ms: None,
                resume: None,
            },
            prompt: "Do it.\n".into(),
            env: Vec::new(),
            write_files: true,
        }
    }

    /// Prepares the workspace (its directory, the task's id) before the run.
    pub fn before(self, f: impl FnOnce(&Path, TaskId)) -> Servo {
        f(self.dir.path(), self.task.task_id);
        self
    }

    pub fn max_steps(mut self, n: u32) -> Servo {
        self.task.max_steps = n;
        self
    }

    pub fn timeout_s(mut self, n: u64) -> Servo {
        self.task.timeout_s = n;
        self
    }

    pub fn request_timeout_s(mut self, n: u64) -> Servo {
        self.task.request_timeout_s = Some(n);
        self
    }

    pub fn gateway(self, address: &str) -> Servo {
        self.env("SAHEELI_GATEWAY", address)
    }

    pub fn env(mut self, key: &str, value: &str) -> Servo {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Passes the task and prompt in `SAHEELI_LAUNCH` instead of as files.
    pub fn launch_in_env(mut self) -> Servo {
        let launch = saheeli_protocol::Launch {
            task: self.task.clone(),
            prompt: self.prompt.clone(),
            env: Default::default(),
        };
        self.write_files = false;
        self.env(
            saheeli_protocol::LAUNCH_ENV,
            &serde_json::to_string(&launch).unwrap(),
        )
    }

    pub fn spawn(self) -> (Child, Workspace) {
        if self.write_files {
            std::fs::create_dir(self.dir.path().join(".saheeli")).unwrap();
            std::fs::write(
                self.dir.path().join(".saheeli/task.json"),
                serde_json::to_vec(&self.task).unwrap(),
            )
            .unwrap();
            std::fs::write(self.dir.path().join("prompt.md"), &self.prompt).unwrap();
        }
        let child = Command::new(env!("CARGO_BIN_EXE_servo"))
            .env("SAHEELI_WORKSPACE", self.dir.path())
            .env_remove("SAHEELI_GATEWAY")
            .env_remove(saheeli_protocol::LAUNCH_ENV)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let ws = Workspace {
            dir: self.dir,
            id: self.task.task_id,
            code: None,
            stderr: String::new(),
            elapsed: Duration::ZERO,
        };
        (child, ws)
    }

    pub fn run(self) -> Workspace {
        let started = Instant::now();
        let (child, mut ws) = self.spawn();
        let out = child.wait_with_output().unwrap();
        ws.code = out.status.code();
        ws.stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        ws.elapsed = started.elapsed();
        ws
    }
}

/// A finished (or running) servo's workspace.
pub struct Workspace {
    dir: tempfile::TempDir,
    pub id: TaskId,
    pub code: Option<i32>,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Workspace {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn completion(&self) -> Option<Completion> {
        let bytes = std::fs::read(self.path("complete.json")).ok()?;
        Some(serde_json::from_slice(&bytes).expect("complete.json parses as a Completion"))
    }

    /// Every line of the audit log, each parsed as an [`AuditEvent`].
    pub fn audit(&self) -> Vec<AuditEvent> {
        std::fs::read_to_string(self.path(&format!("servo-{}-audit.log", self.id)))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    pub fn outcome(&self) -> String {
        match self.audit().last() {
            Some(AuditEvent::Finish { outcome, .. }) => outcome.clone(),
            other => panic!("the audit log does not end with Finish: {other:?}"),
        }
    }

    pub fn session(&self) -> Session {
        let bytes = std::fs::read(self.path(&format!("servo-{}-session.json", self.id))).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// All message texts of the session, for `contains` checks.
    pub fn conversation(&self) -> String {
        serde_json::to_string(&self.session().messages).unwrap()
    }
}

/// One answer of the fake gateway.
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Reply {
        Reply::raw(status, &body.to_string())
    }

    pub fn raw(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    pub fn error(status: u16, kind: &str, message: &str) -> Reply {
        Reply::json(status, json!({"error": {"message": message, "type": kind}}))
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// A chat completion calling one tool, as OpenAI sends it.
    pub fn tool_call(id: &str, name: &str, arguments: Value, usage: (u64, u64)) -> Reply {
        Reply::json(
            200,
            json!({
                "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": null, "refusal": null,
                        "tool_calls": [{"id": id, "type": "function",
                            "function": {"name": name, "arguments": arguments.to_string()}}]}}],
                "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1,
                    "total_tokens": usage.0 + usage.1}
            }),
        )
    }
}

/// One request the fake received.
pub struct Request {
    pub at: Instant,
    pub head: String,
    pub body: Value,
}

/// A fake gateway: answers requests, one per connection, with the scripted
/// replies in order (then 503s), and keeps what it was sent.
pub struct Fake {
    pub address: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Fake {
    pub fn tcp(replies: Vec<Reply>) -> Fake {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        Fake::serve(address, replies, move || {
            listener
                .accept()
                .map(|(s, _)| Box::new(s) as Box<dyn Stream>)
        })
    }

    pub fn unix(socket: &Path, replies: Vec<Reply>) -> Fake {
        let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
        let address = format!("unix:{}", socket.display());
        Fake::serve(address, replies, move || {
            listener
                .accept()
                .map(|(s, _)| Box::new(s) as Box<dyn Stream>)
        })
    }

    fn serve(
        address: String,
        replies: Vec<Reply>,
        mut accept: impl FnMut() -> std::io::Result<Box<dyn Stream>> + Send + 'static,
    ) -> Fake {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            let mut replies = replies.into_iter();
            while let Ok(mut stream) = accept() {
                let Some(request) = read_request(&mut stream) else {
                    continue;
                };
                // The servo looks at its inbox before each LLM call: an
                // empty one, neither scripted nor counted.
                if request.head.starts_with("GET /saheeli/v1/inbox") {
                    let empty = Reply::json(200, json!({"notes": [], "pause": false}));
                    let _ = write_reply(&mut stream, &empty);
                    continue;
                }
                // The model's live text (issue 29): this fake serves none.
                if request.head.starts_with("GET /saheeli/v1/live") {
                    let none = Reply::error(404, "not_found", "no live lines here");
                    let _ = write_reply(&mut stream, &none);
                    continue;
                }
                seen.lock().unwrap().push(request);
                let reply = replies.next().unwrap_or_else(|| {
                    Reply::error(503, "upstream_unavailable", "the fake has no more replies")
                });
                let _ = write_reply(&mut stream, &reply);
            }
        });
        Fake { address, requests }
    }

    pub fn requests(&self) -> std::sync::MutexGuard<'_, Vec<Request>> {
        self.requests.lock().unwrap()
    }
}

pub trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A minimal HTTP/1.1 request reader: head, then `content-length` bytes.
fn read_request(stream: &mut Box<dyn Stream>) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let at = Instant::now();
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
    Some(Request { at, head, body })
}

fn write_reply(stream: &mut Box<dyn Stream>, reply: &Reply) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (k, v) in &reply.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&reply.body);
    stream.write_all(out.as_bytes())?;
    stream.flush()
}
