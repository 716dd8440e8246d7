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
