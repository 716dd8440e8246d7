//! Issue 50's set-up half, on real Docker: a set-up's result cached and
//! reused (the second task skips the set-up and finds its output), a
//! changed key file missing, `maintenance:` on a hit, a failing set-up
//! ending `setup_failed` with its output in the report, set-up secrets
//! the agent never sees, and `saheeli cache ls|rm|prune` with eviction.
//!
//! Each test has its own project (state directory), so its cache images
//! (`saheeli-setup:<scope>-<key>`) are its own; each removes them at the end.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::Digest;

use crate::util::{Saheeli, leftovers, require_docker, script};

fn run(s: &Saheeli, prompt: &str, code: i32) -> Value {
    let out = s.run(&["run", prompt, "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn results(t: &Value) -> PathBuf {
    PathBuf::from(t["results"].as_str().unwrap())
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The agent: runs `command` in the workspace, then completes.
fn agent(s: &Saheeli, command: &str) {
    s.write(
        "agent.json",
        &script(&[
            ("execute_shell", json!({ "command": command })),
            ("task_complete", json!({ "message": "done" })),
        ]),
    );
}

fn cache_ls(s: &Saheeli) -> Vec<Value> {
    let v = s.expect_json(&["cache", "ls", "--json"], 0);
    v.as_array().unwrap().clone()
}

fn prune_all(s: &Saheeli) {
    s.expect(&["cache", "prune", "--all"], 0);
    assert!(cache_ls(s).is_empty());
}

/// A nonce, so a key is this test's own.
fn nonce() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

const SETUP: &str = "{ run: [\"date +%s%N > stamp.txt\", \"echo ran >> counter.txt\", \
                     \"mkdir -p .venv && echo lib-$N > .venv/lib.txt\"], \
                     key_files: [requirements.txt] }";

fn prompt(s: &Saheeli, name: &str, n: &str, extra: &str) {
    s.write(
        name,
        &format!(
            "---\nmodel: replay:agent.json\nworkspace: ws\ntimeout: 2m\n\
             setup: {}\n{extra}---\nUse what the set-up made.\n",
            SETUP.replace("$N", n)
        ),
    );
}

#[test]
fn a_second_task_with_the_same_key_reuses_the_set_up_and_a_changed_key_file_misses() {
    require_docker();
    let s = Saheeli::new();
    let n = nonce();
    s.write("ws/requirements.txt", "a==1\n");
    s.write("ws/notes.txt", "first\n");
    s.write("ws/counter.txt", "user\n");
    agent(
        &s,
        "cat .venv/lib.txt counter.txt notes.txt > seen.txt; ls maint.txt 2>&1 >> seen.txt; true",
    );
    prompt(&s, "p.md", &n, "maintenance: echo maint > maint.txt\n");

    let first = run(&s, "p.md", 0);
    assert_eq!(first["state"], "complete", "{first}");
    assert_eq!(first["setup"]["hit"], false, "{first}");
    let key = first["setup"]["key"].as_str().unwrap().to_string();
    assert!(
        first["setup"]["stored_bytes"].as_u64().unwrap() > 0,
        "{first}"
    );
    let one = results(&first);
    assert_eq!(
        read(&one, "seen.txt").lines().take(3).collect::<Vec<_>>(),
        [format!("lib-{n}").as_str(), "user", "ran"]
    );
    let stamp = read(&one, "stamp.txt");

    // The user's other file differs now: the hit must keep it.
    s.write("ws/notes.txt", "second\n");
    let second = run(&s, "p.md", 0);
    assert_eq!(second["setup"]["hit"], true, "{second}");
    assert_eq!(second["setup"]["key"], key.as_str(), "{second}");
    assert_eq!(second["setup"]["maintenance"], true, "{second}");
    let two = results(&second);
    // The set-up did not run again: its stamp is the first task's.
    assert_eq!(read(&two, "stamp.txt"), stamp);
    let seen = read(&two, "seen.txt");
    assert!(
        seen.starts_with(&format!("lib-{n}\nuser\nran\nsecond\n")),
        "{seen}"
    );
    assert!(!seen.contains("No such file"), "maintenance ran: {seen}");
    assert_eq!(read(&two, "maint.txt"), "maint\n");
    // Status and the report name the key and the hit.
    let id = second["id"].as_str().unwrap();
    let status = s.expect(&["task", "status", id], 0);
    assert!(
        status.contains(&format!("setup:     cache hit {key}")),
        "{status}"
    );
    let report = read(&two, "report.md");
    assert!(
        report.contains(&format!("Set-up: cache hit {key}")),
        "{report}"
    );

    // The hit was uploaded from the host's copy of the tar. In its place
    // now, a link to a tar of other content: never followed, the hit
    // reads the tar back from the cache's image instead.
    let copy = s.path().join(format!(".saheeli/setup-cache/{key}.tar"));
    assert!(
        std::fs::symlink_metadata(&copy).is_ok_and(|m| m.is_file()),
        "no host copy at {}",
        copy.display()
    );
    let planted = s.path().join("planted.tar");
    {
        let mut b = tar::Builder::new(std::fs::File::create(&planted).unwrap());
        let mut h = tar::Header::new_gnu();
        h.set_size(7);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, ".venv/lib.txt", &b"planted"[..])
            .unwrap();
        b.finish().unwrap();
    }
    std::fs::remove_file(&copy).unwrap();
    std::os::unix::fs::symlink(&planted, &copy).unwrap();
    let again = run(&s, "p.md", 0);
    assert_eq!(again["setup"]["hit"], true, "{again}");
    let seen = read(&results(&again), "seen.txt");
    assert!(seen.starts_with(&format!("lib-{n}\n")), "{seen}");
    std::fs::remove_file(&copy).unwrap();

    // A changed key file is another key: the set-up runs.
    s.write("ws/requirements.txt", "a==2\n");
    let third = run(&s, "p.md", 0);
    assert_eq!(third["setup"]["hit"], false, "{third}");
    assert_ne!(third["setup"]["key"], key.as_str(), "{third}");
    assert_ne!(read(&results(&third), "stamp.txt"), stamp);
    assert!(!results(&third).join("maint.txt").exists());

    let listed = cache_ls(&s);
    assert_eq!(listed.len(), 2, "{listed:?}");
    let hit = listed.iter().find(|e| e["key"] == key.as_str()).unwrap();
    assert_eq!(hit["hits"], 2, "{hit}");
    assert!(hit["last_used_ms"].is_i64(), "{hit}");
    for t in [&first, &second, &again, &third] {
        let id = t["id"].as_str().unwrap();
        assert!(leftovers(id).is_empty(), "{:?}", leftovers(id));
    }
    prune_all(&s);
    // The host's copies go with their entries.
    let copies: Vec<_> = std::fs::read_dir(s.path().join(".saheeli/setup-cache"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tar"))
        .map(|e| e.file_name())
        .collect();
    assert!(copies.is_empty(), "{copies:?}");
}

#[test]
fn a_failing_set_up_ends_setup_failed_with_its_output_in_the_report() {
    require_docker();
    let s = Saheeli::new();
    agent(&s, "true");
    s.write(
        "p.md",
        "---\nmodel: replay:agent.json\nsetup: [\"echo broken-env >&2; exit 3\"]\n---\nX\n",
    );
    let t = run(&s, "p.md", 1);
    assert_eq!(t["state"], "failed", "{t}");
    assert_eq!(t["reason"], "setup_failed", "{t}");
    let report = read(&results(&t), "report.md");
    assert!(report.contains("(reason: `setup_failed`)"), "{report}");
    assert!(report.contains("exited with code 3"), "{report}");
    assert!(report.contains("broken-env"), "{report}");
    let id = t["id"].as_str().unwrap();
    assert!(leftovers(id).is_empty(), "{:?}", leftovers(id));
    // Nothing is cached of a failed set-up.
    assert!(cache_ls(&s).is_empty());
}

#[test]
fn a_set_up_secret_reaches_the_set_up_only() {
    require_docker();
    let s = Saheeli::new();
    let secret = format!("tok-{}-x9", nonce());
    s.write(
        ".env",
        &format!("SETUP_TOKEN={secret}\nOPENAI_API_KEY=sk-test-provider-key-1\n"),
    );
    s.write("ws/keep.txt", "k\n");
    // Read in set-up, checked against its digest (the prompt, kept in the
    // database, must not hold the value); a failed check fails the set-up.
    let digest: String = sha2::Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    s.write(
        "p.md",
        &format!(
            "---\nmodel: replay:agent.json\nworkspace: ws\nsetup_env: [SETUP_TOKEN]\n\
             setup: [\"test $(printf %s \\\"$SETUP_TOKEN\\\" | sha256sum | cut -c1-64) = {digest} \
             && echo token-seen > seen-in-setup.txt\"]\n---\nX\n"
        ),
    );
    agent(
        &s,
        "env > agent-env.txt; for f in /proc/[0-9]*/environ; do cat $f 2>/dev/null | tr '\\0' '\\n'; done > proc-env.txt; \
         grep -rl SETUP_TOKEN /workspace /tmp > grep.txt 2>/dev/null; true",
    );
    let t = run(&s, "p.md", 0);
    assert_eq!(t["state"], "complete", "{t}");
    let dir = results(&t);
    assert_eq!(read(&dir, "seen-in-setup.txt"), "token-seen\n");
    assert!(
        read(&dir, "proc-env.txt").contains("PATH="),
        "the agent read its own environ"
    );
    for (name, text) in files(&dir) {
        assert!(!text.contains(&secret), "{name} holds the secret");
        assert!(!text.contains("SETUP_TOKEN="), "{name} names it set");
    }
    for db in ["saheeli.db", "saheeli.db-wal"] {
        if let Ok(bytes) = std::fs::read(s.path().join(db)) {
            assert!(
                !String::from_utf8_lossy(&bytes).contains(&secret),
                "{db} holds the secret"
            );
        }
    }
    // A name `.env` lacks is refused at submit, named.
    s.write(
        "q.md",
        "---\nmodel: replay:agent.json\nsetup_env: [NOPE_TOKEN]\nsetup: \"true\"\n---\nX\n",
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "q.md"], 2);
    assert!(
        err.contains("`NOPE_TOKEN`") && err.contains(".env"),
        "{err}"
    );
    // A provider's key is never a set-up's.
    s.write(
        "r.md",
        "---\nmodel: replay:agent.json\nsetup_env: [OPENAI_API_KEY]\nsetup: \"true\"\n---\nX\n",
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "r.md"], 2);
    assert!(
        err.contains("`OPENAI_API_KEY`") && err.contains("provider"),
        "{err}"
    );
    prune_all(&s);
}

/// Every file below `dir` (read lossily).
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            out.extend(files(&e.path()));
        } else if ft.is_file() {
            let text = String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()).into_owned();
            out.push((e.path().display().to_string(), text));
        }
    }
    out
}

#[test]
fn cache_ls_rm_prune_and_eviction_past_the_cap() {
    require_docker();
    // Each set-up writes ~300 KiB; the cap holds one of them.
    let s = Saheeli::with_config("setup_cache: { max_bytes: 500k }\n");
    let n = nonce();
    agent(&s, "true");
    let big = |name: &str, tag: &str| {
        s.write(
            name,
            &format!(
                "---\nmodel: replay:agent.json\nsetup: \"head -c 300000 /dev/urandom > blob-{tag}-{n}\"\n---\nX\n"
            ),
        );
    };
    big("a.md", "a");
    big("b.md", "b");
    let a = run(&s, "a.md", 0);
    let key_a = a["setup"]["key"].as_str().unwrap().to_string();
    assert_eq!(cache_ls(&s).len(), 1);
    let b = run(&s, "b.md", 0);
    let key_b = b["setup"]["key"].as_str().unwrap().to_string();
    // Storing b went past the cap: a, the least recently used, is gone.
    let listed = cache_ls(&s);
    let keys: Vec<&str> = listed.iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(keys, [key_b.as_str()], "{listed:?}");
    assert!(listed[0]["bytes"].as_u64().unwrap() > 300_000, "{listed:?}");
    let table = s.expect(&["cache", "ls"], 0);
    assert!(
        table.contains("KEY") && table.contains(&key_b) && table.contains("HITS"),
        "{table}"
    );

    // rm by a start of the key.
    let out = s.expect(&["cache", "rm", &key_b[..10]], 0);
    assert!(out.contains(&key_b), "{out}");
    assert!(cache_ls(&s).is_empty());
    let err = s.expect_err(&["cache", "rm", &key_a[..10]], 2);
    assert!(err.contains("no cached set-up"), "{err}");

    // prune: down to the cap (a smaller one now), then everything.
    run(&s, "a.md", 0);
    assert_eq!(cache_ls(&s).len(), 1);
    std::fs::write(
        s.path().join("config.yaml"),
        std::fs::read_to_string(s.path().join("config.yaml"))
            .unwrap()
            .replace("max_bytes: 500k", "max_bytes: 1k"),
    )
    .unwrap();
    let out = s.expect(&["cache", "prune"], 0);
    assert!(out.contains("1 cached set-ups removed"), "{out}");
    assert!(cache_ls(&s).is_empty());
    prune_all(&s);
}

/// A set-up of a small environment: a file, an executable, a link to
/// the system's interpreter (as a virtual environment holds), a stamp of
/// when it ran, and a `prompt.md` of its own (never the task's).
fn env_prompt(s: &Saheeli, name: &str, n: &str) {
    let setup = format!(
        "{{ run: [\"mkdir -p .venv/bin && echo lib-{n} > .venv/lib.txt\", \
         \"ln -s /usr/bin/python3 .venv/bin/python\", \
         \"printf '#!/bin/sh\\\\necho tool-ran\\\\n' > .venv/bin/tool && chmod 750 .venv/bin/tool\", \
         \"date +%s%N > stamp.txt\", \"echo ran >> counter.txt\", \"echo set-up > prompt.md\"], \
         key_files: [requirements.txt] }}"
    );
    s.write(
        name,
        &format!(
            "---\nmodel: replay:agent.json\nworkspace: ws\ntimeout: 2m\nsetup: {setup}\n---\n\
             Use the environment.\n"
        ),
    );
}

/// What the agent sees of the environment, in `seen.txt`: the file, the
/// tool run, the link, the tool's owner and mode, the submitted file the
/// set-up appended to, the prompt, and whether the cached set-up was
/// bound into the container for the servo to unpack.
const LOOK: &str = "{ cat .venv/lib.txt; .venv/bin/tool; readlink .venv/bin/python; \
                    stat -c '%u %a' .venv/bin/tool; cat counter.txt notes.txt prompt.md; \
                    ls /run/saheeli-setup 2>&1 | sed 's/^ls: .*/unbound/'; } > seen.txt; true";

fn seen(n: &str, bound: &str, notes: &str) -> String {
    format!(
        "lib-{n}\ntool-ran\n/usr/bin/python3\n1000 750\nuser\nran\n{notes}\nUse the environment.\n{bound}\n"
    )
}

fn bound_links(s: &Saheeli) -> Vec<String> {
    std::fs::read_dir(s.path().join(".saheeli/setup-cache"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("bound-"))
                .collect()
        })
        .unwrap_or_default()
}

/// A hit with no `maintenance:` is unpacked by the servo itself (the
/// host's copy bound in): the agent sees what a cold set-up gave it,
/// owned by the agent, modes and links kept, the task's own prompt and
/// its other files; no link of the copy is left on the host; a copy
/// replaced by a link is never bound (the hit reads the image instead).
#[test]
fn a_hit_without_maintenance_is_unpacked_by_the_servo() {
    require_docker();
    let s = Saheeli::new();
    let n = nonce();
    s.write("ws/requirements.txt", "a==1\n");
    s.write("ws/notes.txt", "first\n");
    s.write("ws/counter.txt", "user\n");
    agent(&s, LOOK);
    env_prompt(&s, "p.md", &n);
    let first = run(&s, "p.md", 0);
    assert_eq!(first["setup"]["hit"], false, "{first}");
    let key = first["setup"]["key"].as_str().unwrap().to_string();
    assert_eq!(
        read(&results(&first), "seen.txt"),
        seen(&n, "unbound", "first")
    );
    let stamp = read(&results(&first), "stamp.txt");

    s.write("ws/notes.txt", "second\n");
    let second = run(&s, "p.md", 0);
    assert_eq!(second["setup"]["hit"], true, "{second}");
    assert_eq!(second["setup"]["key"], key.as_str(), "{second}");
    let two = results(&second);
    assert_eq!(read(&two, "seen.txt"), seen(&n, "workspace.tar", "second"));
    assert_eq!(
        read(&two, "stamp.txt"),
        stamp,
        "the set-up did not run again"
    );
    assert!(bound_links(&s).is_empty(), "{:?}", bound_links(&s));

    // The copy replaced by a link: not bound, never followed; the hit is
    // read back from the cache's image (Docker unpacks it) instead.
    let copy = s.path().join(format!(".saheeli/setup-cache/{key}.tar"));
    let elsewhere = s.path().join("elsewhere.tar");
    std::fs::rename(&copy, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &copy).unwrap();
    let third = run(&s, "p.md", 0);
    assert_eq!(third["setup"]["hit"], true, "{third}");
    assert_eq!(
        read(&results(&third), "seen.txt"),
        seen(&n, "unbound", "second")
    );
    assert!(bound_links(&s).is_empty(), "{:?}", bound_links(&s));
    let hits = cache_ls(&s)[0]["hits"].clone();
    assert_eq!(hits, 2, "{hits}");
    for t in [&first, &second, &third] {
        let id = t["id"].as_str().unwrap();
        assert!(leftovers(id).is_empty(), "{:?}", leftovers(id));
    }
    prune_all(&s);
}

/// The detail of the task's move to `running` (where it ran).
fn ran_in(s: &Saheeli, id: &str) -> String {
    s.task(id)["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["to"] == "running")
        .and_then(|e| e["detail"].as_str())
        .unwrap_or("")
        .to_string()
}

fn docker_out(args: &[&str]) -> String {
    let o = std::process::Command::new("docker")
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The project's running warm servos.
fn warm_servos(s: &Saheeli) -> Vec<String> {
    let db = s.path().join("saheeli.db");
    let digest = sha2::Sha256::digest(db.as_os_str().as_encoded_bytes());
    let label: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let filter = format!("label=saheeli.pool={label}");
    docker_out(&["ps", "--filter", &filter, "--format", "{{.Names}}"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// A warm class holding a cached set-up (`setup_key:`): its servos start
/// with the environment unpacked before any claim; a task of that key is
/// served by one, skips the set-up and sees the environment as a cold
/// hit does; a task of another key, or with no set-up, starts cold.
#[test]
fn a_warm_servo_of_a_cached_set_up_serves_its_key_only() {
    use std::process::Stdio;
    require_docker();
    let s = Saheeli::new();
    let n = nonce();
    s.write("ws/requirements.txt", "a==1\n");
    s.write("ws/notes.txt", "first\n");
    s.write("ws/counter.txt", "user\n");
    agent(&s, LOOK);
    env_prompt(&s, "p.md", &n);
    env_prompt(&s, "other.md", &format!("{n}-other"));
    s.write(
        "plain.md",
        "---\nmodel: replay:agent.json\nworkspace: ws\n---\nX\n",
    );
    let first = run(&s, "p.md", 0);
    let key = first["setup"]["key"].as_str().unwrap().to_string();
    let stamp = read(&results(&first), "stamp.txt");
    let config = s.path().join("config.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "pool:\n  - {{ size: 1, setup_key: {} }}\n",
        &key[..12]
    ));
    std::fs::write(&config, text).unwrap();

    let mut serve = s
        .cmd(&["serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let wait = |what: &str, f: &mut dyn FnMut() -> bool| {
        assert!(
            crate::lifecycle::wait_for(std::time::Duration::from_secs(60), f),
            "{what}"
        );
    };
    let mut idle = Vec::new();
    wait("the pool never filled", &mut || {
        idle = warm_servos(&s);
        idle.len() == 1
    });
    // Unpacked before any task was claimed for it.
    wait("the idle servo never held the environment", &mut || {
        docker_out(&["exec", &idle[0], "cat", "/workspace/.venv/lib.txt"]) == format!("lib-{n}\n")
    });
    let ended = |id: &str| {
        let t = s.task(id);
        ["complete", "failed", "incomplete"].contains(&t["state"].as_str().unwrap_or(""))
    };
    s.write("ws/notes.txt", "second\n");
    let warm = s.submit("p.md");
    wait("the warm task never ended", &mut || ended(&warm));
    let t = s.task(&warm);
    assert_eq!(t["state"], "complete", "{t}");
    assert!(
        ran_in(&s, &warm).starts_with("warm container "),
        "{}",
        ran_in(&s, &warm)
    );
    assert_eq!(t["setup"]["hit"], true, "{t}");
    assert_eq!(t["setup"]["key"], key.as_str(), "{t}");
    let dir = PathBuf::from(t["results"].as_str().unwrap());
    assert_eq!(read(&dir, "seen.txt"), seen(&n, "workspace.tar", "second"));
    assert_eq!(
        read(&dir, "stamp.txt"),
        stamp,
        "the set-up did not run again"
    );

    // Another key, and no set-up at all: cold, beside an idle warm servo.
    wait("the pool never refilled", &mut || {
        warm_servos(&s).len() == 1
    });
    let other = s.submit("other.md");
    let plain = s.submit("plain.md");
    wait("the cold tasks never ended", &mut || {
        ended(&other) && ended(&plain)
    });
    for id in [&other, &plain] {
        assert_eq!(s.task(id)["state"], "complete", "{}", s.task(id));
        assert!(
            ran_in(&s, id).starts_with("container "),
            "{}",
            ran_in(&s, id)
        );
    }
    assert_eq!(s.task(&other)["setup"]["hit"], false);
    unsafe { libc::kill(serve.id() as i32, libc::SIGINT) };
    let _ = serve.wait();
    assert!(warm_servos(&s).is_empty());
    assert!(bound_links(&s).is_empty(), "{:?}", bound_links(&s));
    for id in [&warm, &other, &plain] {
        assert!(leftovers(id).is_empty(), "{:?}", leftovers(id));
    }
    prune_all(&s);
}

/// Container creations of the project's warm servos between two Unix
/// times (Docker's own event log, so none is missed however short-lived).
fn warm_creates(s: &Saheeli, since: f64, until: f64) -> usize {
    let db = s.path().join("saheeli.db");
    let digest = sha2::Sha256::digest(db.as_os_str().as_encoded_bytes());
    let label: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    docker_out(&[
        "events",
        "--since",
        &format!("{since:.3}"),
        "--until",
        &format!("{until:.3}"),
        "--filter",
        "type=container",
        "--filter",
        "event=create",
        "--filter",
        &format!("label=saheeli.pool={label}"),
        "--format",
        "{{.Actor.ID}}",
    ])
    .lines()
    .filter(|l| !l.is_empty())
    .count()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A warm class whose cached set-up will not unpack (its host copy
/// corrupted after it was cached): each of its servos dies idle. The pool
/// waits longer after each death (1 s, 2 s, 4 s…) rather than making the
/// next at once, a hot loop of containers on a shared daemon, and says
/// so in its log.
#[test]
fn a_warm_class_whose_set_up_will_not_unpack_backs_off() {
    require_docker();
    let s = Saheeli::new();
    let n = nonce();
    s.write("ws/requirements.txt", "a==1\n");
    agent(&s, "true");
    prompt(&s, "p.md", &n, "");
    let first = run(&s, "p.md", 0);
    let key = first["setup"]["key"].as_str().unwrap().to_string();
    let copy = s.path().join(format!(".saheeli/setup-cache/{key}.tar"));
    assert!(copy.is_file(), "{}", copy.display());
    // Not a tar: the servo's unpack fails, and the servo with it.
    std::fs::write(&copy, vec![0x5a; 64 * 1024]).unwrap();
    let config = s.path().join("config.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "pool:\n  - {{ size: 1, setup_key: {} }}\n",
        &key[..12]
    ));
    std::fs::write(&config, text).unwrap();
    let since = unix_now();
    let serve = crate::human::Serve::start(&s, &[]);
    // The window the creations are counted in.
    std::thread::sleep(std::time::Duration::from_secs(12));
    let until = unix_now();
    let log = serve.log();
    drop(serve);
    let made = warm_creates(&s, since, until);
    let died = log.matches("a warm servo died while idle").count();
    eprintln!("FIGURE warm servos made in 12 s with a corrupt set-up: {made} ({died} died idle)");
    assert!(died >= 2, "the servos did not die idle as expected:\n{log}");
    // Back-off: made at 0 s, then after pauses of ~1, ~2, ~4 s (±20 %)
    // plus each one's own start: at most 4 in 12 s. Without it, one
    // every start (about a second here).
    assert!(
        made <= 4,
        "{made} warm servos made in 12 s: the pool churns\n{log}"
    );
    let pauses: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("a warm servo died while idle"))
        .filter_map(|l| {
            l.split("pause_ms=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(
        pauses.len() >= 2 && pauses.windows(2).all(|w| w[1] > w[0]),
        "{pauses:?}\n{log}"
    );
    assert!(warm_servos(&s).is_empty());
    prune_all(&s);
}
