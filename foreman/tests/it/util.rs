//! The test builder: a temporary project directory with its own
//! config.yaml, database and results, and the real `saheeli` binary run
//! against the real Docker daemon.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

use serde_json::Value;

/// The servo image the tests run (built by `scripts/test.sh` first).
pub fn image() -> String {
    std::env::var("SAHEELI_TEST_IMAGE").unwrap_or_else(|_| "saheeli-servo:latest".into())
}

/// Fails (never skips) when Docker or the servo image is missing.
pub fn require_docker() {
    static CHECK: Once = Once::new();
    CHECK.call_once(|| {
        let info = Command::new("docker")
            .args(["info", "--format", "{{.ServerVersion}}"])
            .output();
        match info {
            Ok(o) if o.status.success() => {}
            _ => panic!(
                "Docker is not reachable: these tests need a real daemon. \
                 Run scripts/test.sh, which starts one when none answers."
            ),
        }
        let img = Command::new("docker")
            .args(["image", "inspect", &image()])
            .output()
            .unwrap();
        assert!(
            img.status.success(),
            "servo image `{}` is missing: run `saheeli build-servo` (scripts/test.sh does)",
            image()
        );
    });
}

pub struct Saheeli {
    pub dir: tempfile::TempDir,
    /// The project's `run_dir`, short for socket paths, removed with it.
    run: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Saheeli {
    /// A fresh project: config.yaml pointing at the test image, a short
    /// run_dir for sockets, concurrency 2 and a 1 s stop grace.
    pub fn new() -> Saheeli {
        Self::with_config("")
    }

    /// Like `new`, with extra top-level config lines appended.
    pub fn with_config(extra: &str) -> Saheeli {
        let dir = tempfile::Builder::new()
            .prefix("saheeli-it-")
            .tempdir()
            .unwrap();
        // Only ours (0700), as the foreman requires of a run_dir.
        let run = tempfile::Builder::new()
            .prefix("saheeli-it-run-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in("/tmp")
            .unwrap();
        let config = format!(
            "image: {}\nconcurrency: 2\nrun_dir: {}\nstop_grace: 1s\n{extra}",
            image(),
            run.path().display()
        );
        std::fs::write(dir.path().join("config.yaml"), config).unwrap();
        Saheeli {
            dir,
            run,
            env: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The `run_dir` the project's config.yaml names at first.
    pub fn run_dir(&self) -> &Path {
        self.run.path()
    }

    /// Sets an environment variable for every command run.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Writes a file below the project directory.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A `saheeli` command in the project directory, with a clean environment
    /// for the variables Saheeli reads.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_saheeli"));
        c.current_dir(self.path())
            .args(args)
            .env_remove("SAHEELI_CONFIG")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("SAHEELI_HTTP_TOKEN")
            // The log as people read it (the default off a terminal is
            // JSON lines; a test of that default removes this).
            .env("SAHEELI_LOG_FORMAT", "text")
            .env("RUST_LOG", "saheeli=info");
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// `saheeli ARGS` on a pseudo-terminal (util-linux `script`), so that
    /// it sees a terminal on stdin, stdout and stderr; `script`'s own
    /// stdin and stdout are the terminal's other end (pipe them to type
    /// and read). Its exit code is saheeli's.
    pub fn in_pty(&self, args: &[&str]) -> Command {
        let bin = env!("CARGO_BIN_EXE_saheeli");
        let line: Vec<String> = std::iter::once(bin)
            .chain(args.iter().copied())
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect();
        let saheeli = self.cmd(&[]);
        let mut c = Command::new("script");
        c.args(["-qec", &line.join(" "), "/dev/null"])
            .current_dir(self.path())
            .env("SHELL", "/bin/sh")
            .env_remove("SAHEELI_CONFIG")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL");
        for (k, v) in saheeli.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("running saheeli")
    }

    /// Runs and asserts the exit code; returns stdout.
    pub fn expect(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(code),
            "saheeli {args:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        );
        stdout
    }

    /// `serve --drain`, which must exit 0; when it does not, the failure
    /// shows every task that did not complete with its events (the last
    /// one says why, in the servo's words when it gave up).
    pub fn drain(&self) -> String {
        let out = self.run(&["serve", "--drain"]);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.code() != Some(0) {
            let unfinished: Vec<Value> = self
                .tasks()
                .into_iter()
                .filter(|t| t["state"] != "complete")
                .map(|t| self.task(t["id"].as_str().unwrap_or_default()))
                .collect();
            panic!(
                "saheeli serve --drain exited {:?}\n--- stderr\n{}\n--- tasks not complete\n{}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr),
                serde_json::to_string_pretty(&unfinished).unwrap()
            );
        }
        stdout
    }

    /// Runs, asserts the exit code (showing both streams when it differs)
    /// and returns stderr: for commands expected to fail.
    pub fn expect_err(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "saheeli {args:?}\n--- stdout\n{}\n--- stderr\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }

    /// Runs a `--json` command, asserts the exit code, parses stdout.
    pub fn expect_json(&self, args: &[&str], code: i32) -> Value {
        let out = self.expect(args, code);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("saheeli {args:?}: not JSON ({e}): {out}"))
    }

    /// `task status ID --json`.
    pub fn task(&self, id: &str) -> Value {
        serde_json::from_str(&self.expect(&["task", "status", id, "--json"], 0)).unwrap()
    }

    /// `task status --json`.
    pub fn tasks(&self) -> Vec<Value> {
        serde_json::from_str(&self.expect(&["task", "status", "--json"], 0)).unwrap()
    }

    /// `task submit --prompt FILE --json` → id.
    pub fn submit(&self, prompt: &str) -> String {
        let out = self.expect(&["task", "submit", "--prompt", prompt, "--json"], 0);
        let v: Value = serde_json::from_str(&out).unwrap();
        v["id"].as_str().unwrap().to_string()
    }
}

/// A test that fails leaves nothing running behind it: its tasks'
/// containers (a paused task's would otherwise run until its timeout),
/// their volumes, and the workspace images mounted in its project. Only
/// on a panic: a passing test's own assertions say what must be gone.
impl Drop for Saheeli {
    fn drop(&mut self) {
        // The set-ups this project cached (issue 50) are images on the
        // shared daemon: removed with the project, whatever the outcome.
        if self.path().join(".saheeli/setup-cache").is_dir() {
            let _ = self.cmd(&["cache", "prune", "--all"]).output();
        }
        if !std::thread::panicking() {
            return;
        }
        let Ok(out) = self.cmd(&["task", "status", "--json"]).output() else {
            return;
        };
        let tasks: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        for id in tasks.iter().filter_map(|t| t["id"].as_str()) {
            let label = format!("label=saheeli.task={id}");
            if let Ok(o) = Command::new("docker")
                .args(["ps", "-aq", "--filter", &label])
                .output()
            {
                for c in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("docker").args(["rm", "-f", c]).output();
                }
            }
            let _ = Command::new("docker")
                .args(["volume", "rm", "-f", &format!("saheeli-{id}")])
                .output();
        }
        let mine = self.path().join(".saheeli/workspaces");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for m in mounts.lines().filter_map(|l| l.split(' ').nth(4)) {
            if Path::new(m).starts_with(&mine) {
                let _ = Command::new("umount").args(["-l", m]).output();
            }
        }
    }
}

/// Nothing was queued: no database (read-only commands never create one)
/// or an empty one.
pub fn assert_nothing_queued(s: &Saheeli) {
    if s.path().join("saheeli.db").exists() {
        assert_eq!(s.tasks(), Vec::<Value>::new());
    }
}

/// Labelled containers and volumes left for a task, and its workspace
/// image's mount on this host (must be none).
pub fn leftovers(id: &str) -> Vec<String> {
    let label = format!("label=saheeli.task={id}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut out: Vec<String> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| {
            // A workspace image, or a check's copy of one (its overlay and
            // upper layer).
            m.ends_with(&format!("/workspaces/{id}/mnt")) || m.contains(&format!("/checks/{id}/"))
        })
        .map(String::from)
        .collect();
    for args in [
        vec!["ps", "-aq", "--filter", &label],
        vec!["volume", "ls", "-q", "--filter", &label],
    ] {
        let o = Command::new("docker").args(&args).output().unwrap();
        out.extend(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| !l.is_empty())
                .map(String::from),
        );
    }
    out
}

/// A replay script with the given tool calls, one per turn.
pub fn script(turns: &[(&str, Value)]) -> String {
    let turns: Vec<Value> = turns
        .iter()
        .map(|(name, args)| serde_json::json!({"tool_calls": [{"name": name, "arguments": args}]}))
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({ "turns": turns })).unwrap()
}

/// A prompt file using `replay:<script>` with extra front-matter lines.
pub fn replay_prompt(script_file: &str, extra: &str) -> String {
    format!("---\nmodel: replay:{script_file}\n{extra}---\nDo the scripted thing.\n")
}

/// Asserts that the container `inspect` shows (`docker inspect`'s JSON)
/// runs image `tag`: made of that image's id, and launched as `tag` (its
/// `Config.Image`, or the `saheeli.image` label when it was created by id
/// with the servo bound from a host copy).
pub fn assert_runs_image(inspect: &str, tag: &str) {
    let v: Value = serde_json::from_str(inspect).unwrap();
    let c = &v[0];
    let o = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", tag])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(c["Image"], id.as_str(), "{inspect}");
    assert!(
        c["Config"]["Image"] == tag || c["Config"]["Labels"]["saheeli.image"] == tag,
        "{inspect}"
    );
}
