//! Running `git` on the host, safely (issue 52): the repository is always
//! named (`--git-dir`, never found by walking up from a directory, so a
//! `.git` the agent made is never one), no configuration but ours (no
//! system or global file, hooks to `/dev/null`, no fsmonitor, no
//! submodules), no prompt for a password, a time limit and capped output.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The longest any one git command may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(300);

/// The most of a command's stdout or stderr kept.
const MAX_OUTPUT: u64 = 16 << 20;

/// What a git command printed.
#[derive(Debug)]
pub(crate) struct Ran {
    pub ok: bool,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Ran {
    /// stdout as text, trimmed.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_string()
    }
}

/// One git command on the repository `git_dir` (bare), with `env` added
/// (an index file, the askpass helper). Fails only when git cannot be run
/// or runs out of time; `Ran::ok` says whether it succeeded.
pub(crate) fn git(
    git_dir: &Path,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
    timeout: Duration,
) -> anyhow::Result<Ran> {
    let mut cmd = Command::new("git");
    cmd.env_clear();
    for keep in ["PATH", "LANG", "SSH_AUTH_SOCK"] {
        if let Some(v) = std::env::var_os(keep) {
            cmd.env(keep, v);
        }
    }
    cmd.env("HOME", git_dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_DIR", git_dir)
        .env("GIT_CEILING_DIRECTORIES", "/")
        // ssh never asks either.
        .env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.untrackedCache=false",
            "-c",
            "submodule.recurse=false",
            // The transports a repository address may name, no other
            // (never `ext::`): `url::locate` places each.
            "-c",
            "protocol.allow=never",
            "-c",
            "protocol.file.allow=always",
            "-c",
            "protocol.https.allow=always",
            "-c",
            "protocol.http.allow=always",
            "-c",
            "protocol.ssh.allow=always",
            "-c",
            "protocol.git.allow=always",
            "-c",
            "credential.helper=",
            "-c",
            "gc.auto=0",
            "-c",
            "maintenance.auto=false",
            "-c",
            "fetch.writeCommitGraph=false",
        ])
        .args(args)
        .current_dir(git_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: a timeout ends ssh and the helpers too.
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().context("running git (is it installed?)")?;
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let read = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.by_ref().take(MAX_OUTPUT).read_to_end(&mut buf);
                // The rest is drained, so git never blocks on a full pipe.
                let _ = std::io::copy(&mut r, &mut std::io::sink());
            }
            buf
        })
    };
    let out = read(out.map(|o| Box::new(o) as Box<dyn Read + Send>));
    let err = read(err.map(|e| Box::new(e) as Box<dyn Read + Send>));
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if started.elapsed() > timeout {
            // SAFETY: kill(2) on the group this child leads.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            bail!("`git {}` took longer than {timeout:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&err.join().unwrap_or_default())
        .trim()
        .to_string();
    Ok(Ran {
        ok: status.success(),
        stdout,
        stderr,
    })
}

/// As [`git`], an error (naming the command and what git said) unless it succeeded.
pub(crate) fn git_ok(
    git_dir: &Path,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> anyhow::Result<Ran> {
    let ran = git(git_dir, args, env, TIMEOUT)?;
    if !ran.ok {
        bail!("`git {}` failed: {}", args.join(" "), ran.stderr);
    }
    Ok(ran)
}
