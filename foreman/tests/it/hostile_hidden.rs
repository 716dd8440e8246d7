//! Hidden tests stay hidden after a failed verify with retries (issue 49).
//! The check runs the agent's code (the module its tests import) in the
//! verify container, where the tests are bound at /tests; that code can
//! write into /workspace. A check the agent gets its workspace back after
//! sees the workspace through a throwaway copy-on-write view, so what it
//! wrote is gone when the agent works again; the last attempt checks the
//! workspace itself. Nothing of the copy outlives the task, also when the
//! foreman is killed mid-check.

use std::path::Path;

use serde_json::{Value, json};

use crate::util::{Saheeli, leftovers, require_docker, script};

/// A word only the hidden tests hold.
const MARKER: &str = "HIDDEN-COPY-MARKER-51c9";

const NOTES: &str = "my notes\n";

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

/// Mount points on this host below the project's checks' copies.
fn copy_mounts(s: &Saheeli) -> Vec<String> {
    let checks = s.path().join(".saheeli/checks");
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(checks.to_str().unwrap()))
        .map(String::from)
        .collect()
}

/// Nothing of a check's copy is left: no mount, no directory or image.
fn assert_no_copy(s: &Saheeli, id: &str) {
    assert_eq!(copy_mounts(s), Vec::<String>::new());
    let dir = s.path().join(".saheeli/checks").join(id);
    assert!(!dir.exists(), "`{}` is left", dir.display());
    assert_eq!(leftovers(id), Vec::<String>::new());
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            out.extend(walk(&e.path()));
        } else if ft.is_file() {
            out.push(e.path());
        }
    }
    out
}

/// The agent's first submission: a module that, imported by the hidden
/// test, copies every file of /tests into /workspace and appends them to
/// the agent's notes; it prints only how many it took (the feedback quotes
/// the check's output, which is not what is tested here).
const THIEF: &str = "import glob, os, shutil\n\
    taken = 0\n\
    for p in glob.glob('/tests/**', recursive=True):\n\
    \x20   if os.path.isfile(p):\n\
    \x20       shutil.copy(p, '/workspace/stolen-' + os.path.basename(p))\n\
    \x20       with open('/workspace/notes.txt', 'a') as out, open(p) as t:\n\
    \x20           out.write(t.read())\n\
    \x20       taken += 1\n\
    print('took', taken, 'files')\n\
    def add(a, b):\n\
    \x20   return a - b\n";

const FIXED: &str = "def add(a, b):\n    return a + b\n";

/// A failed first attempt whose checked code copied the hidden tests into
/// /workspace: the agent, searching its workspace, its home and everything
/// else it can read (its session and audit log are in /workspace), finds
/// nothing of them; its notes are as it left them; a correct solution then
/// passes the last attempt; nothing of the check's copy is left.
fn the_tests_copied_by_a_failed_check_never_reach_the_agent(config: &str, warm: bool) {
    require_docker();
    let s = Saheeli::with_config(config);
    s.write("proj/solution.py", "def add(a, b):\n    return 0\n");
    s.write("proj/notes.txt", NOTES);
    s.write(
        "tests/test_add.py",
        &format!(
            "# {MARKER}\nimport sys\nsys.path.insert(0, '/workspace')\nimport solution\n\
             assert solution.add(2, 3) == 5, 'add(2, 3) is not 5'\nprint('passed')\n"
        ),
    );
    // The marker spelled so that the command itself does not hold it.
    let (a, b) = MARKER.split_at(10);
    let search = format!(
        "grep -rl '{a}''{b}' / --exclude-dir=proc --exclude-dir=sys 2>/dev/null \
         > /tmp/found.txt; cp /tmp/found.txt /workspace/found.txt; \
         ls -A /workspace > /workspace/listing.txt; echo searched"
    );
    s.write(
        "s.json",
        &script(&[
            (
                "create_file",
                json!({"path": "solution.py", "content": THIEF}),
            ),
            ("task_complete", json!({"message": "done"})),
            ("execute_shell", json!({ "command": search })),
            (
                "create_file",
                json!({"path": "solution.py", "content": FIXED}),
            ),
            ("task_complete", json!({"message": "fixed"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\ntimeout: 3m\nworkspace: proj\nverify_retries: 1\n\
         verify: { files: tests/, run: python3 /tests/test_add.py }\n---\nFix `add`.\n",
    );
    let t = if warm {
        run_warm(&s, "p.md")
    } else {
        run(&s, "p.md", 0)
    };
    assert_eq!(t["state"], "complete", "{t}");
    let dir = std::path::PathBuf::from(t["results"].as_str().unwrap());
    // The theft ran in the first check.
    let v1 = std::fs::read_to_string(dir.join(".saheeli/verify-1.log")).unwrap();
    assert!(v1.contains("took 1 files"), "{v1}");
    let v2 = std::fs::read_to_string(dir.join(".saheeli/verify-2.log")).unwrap();
    assert!(v2.contains("passed"), "{v2}");
    // What the agent found after the failed attempt: nothing.
    let found = std::fs::read_to_string(dir.join("found.txt")).unwrap();
    assert_eq!(found, "", "the agent found the hidden tests in these files");
    let listing = std::fs::read_to_string(dir.join("listing.txt")).unwrap();
    assert!(!listing.contains("stolen-"), "{listing}");
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
        NOTES
    );
    // Everything that came home but the foreman's own records of the
    // checks (report.md, verify-N.log) is what the agent could see.
    for p in walk(&dir) {
        let shown = p.to_string_lossy();
        if shown.contains("/.saheeli/verify-") || shown.ends_with("/report.md") {
            continue;
        }
        assert!(!shown.contains("stolen-"), "{shown}");
        let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
        assert!(!text.contains(MARKER), "{shown} holds the hidden tests");
    }
    assert_no_copy(&s, t["id"].as_str().unwrap());
}

#[test]
fn hidden_tests_copied_into_the_workspace_by_a_failed_check_never_reach_the_agent() {
    the_tests_copied_by_a_failed_check_never_reach_the_agent("", false);
}

/// The same with the workspace a Docker volume (no size limit): the copy's
/// lower layer is the volume's directory.
#[test]
fn hidden_tests_copied_into_a_volume_workspace_never_reach_the_agent() {
    the_tests_copied_by_a_failed_check_never_reach_the_agent(
        "limits: { disk_enforcement: off }\n",
        false,
    );
}

/// The same in a warm servo (issue 28): its workspace is its slot's image.
#[test]
fn hidden_tests_copied_into_a_warm_servos_workspace_never_reach_the_agent() {
    the_tests_copied_by_a_failed_check_never_reach_the_agent(
        "pool:\n  - { size: 1, max_idle: 10m }\n",
        true,
    );
}

/// Serves `prompt` once the pool has its warm servo, until the task ends:
/// the task, which ran in the warm servo.
fn run_warm(s: &Saheeli, prompt: &str) -> Value {
    use sha2::Digest;
    let db = s.path().join("saheeli.db");
    let digest = sha2::Sha256::digest(db.as_os_str().as_encoded_bytes());
    let pool: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let mut serving = s
        .cmd(&["serve"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for("a warm servo", || {
        let o = std::process::Command::new("docker")
            .args([
                "ps",
                "-q",
                "--filter",
                &format!("label=saheeli.pool={pool}"),
            ])
            .output()
            .unwrap();
        !o.stdout.is_empty()
    });
    let id = s.submit(prompt);
    wait_for("the task to end", || {
        let t = s.task(&id);
        let state = t["state"].as_str().unwrap_or("");
        ["complete", "incomplete", "failed", "cancelled"].contains(&state)
    });
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(serving.id() as i32, libc::SIGINT) };
    assert!(serving.wait().unwrap().success());
    let t = s.task(&id);
    let running = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["to"] == "running")
        .and_then(|e| e["detail"].as_str())
        .unwrap_or("")
        .to_string();
    assert!(running.contains("warm"), "not run warm: {running}");
    t
}

/// Ids of the task's containers with `filter` (`docker ps -aq`).
fn containers(id: &str, filter: &str) -> Vec<String> {
    let task = format!("label=saheeli.task={id}");
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &task, "--filter", filter])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let (t, limit) = (
        std::time::Instant::now(),
        std::time::Duration::from_secs(60),
    );
    while !done() {
        assert!(t.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A foreman killed mid-check on a copy leaves the copy mounted, the
/// task's container paused and the verify container; the foreman that
/// adopts the task removes all three before the task runs again, the
/// attempt is asked again and passes, and what the first check wrote is
/// not in the workspace.
#[test]
fn a_foreman_killed_mid_check_on_a_copy_leaves_nothing_its_successor_does_not_undo() {
    require_docker();
    let s = Saheeli::with_config("lease: 2s\n");
    s.write("proj/README", "x\n");
    s.write("tests/test.sh", "touch /workspace/.began\nsleep 120\n");
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\ntimeout: 2m\nworkspace: proj\nverify_retries: 1\n\
         verify: { files: tests/, run: sh /tests/test.sh }\n---\nGo.\n",
    );
    let id = s.submit("p.md");
    let serve = |s: &Saheeli| {
        s.cmd(&["serve", "--drain"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut first = serve(&s);
    wait_for("the check's copy mounted", || copy_mounts(&s).len() == 2);
    wait_for("the verify container", || {
        containers(&id, "label=saheeli.role=verify").len() == 1
    });
    let verify = containers(&id, "label=saheeli.role=verify");
    wait_for("the hidden test to start", || {
        std::process::Command::new("docker")
            .args(["exec", &verify[0], "test", "-e", "/workspace/.began"])
            .status()
            .is_ok_and(|s| s.success())
    });
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(containers(&id, "status=paused").len(), 1);
    assert_eq!(copy_mounts(&s).len(), 2, "the dead foreman's copy");
    // The next run of the hidden test passes.
    s.write("tests/test.sh", "echo second run\n");
    let status = serve(&s).wait().unwrap();
    assert!(status.success(), "{status}");
    let t = s.task(&id);
    assert_eq!(t["state"], "complete", "{t:#}");
    let dir = s.path().join("results").join(&id);
    let v = std::fs::read_to_string(dir.join(".saheeli/verify-1.log")).unwrap();
    assert!(v.contains("second run"), "{v}");
    assert!(
        !dir.join(".began").exists(),
        "the first check wrote through"
    );
    assert_no_copy(&s, &id);
}

/// A check's copy as a crash leaves it: the overlay of a workspace
/// mounted under `<state_dir>/checks/<id>/`, made by hand here.
fn leave_a_copy(s: &Saheeli, id: &str, lower: &Path) {
    let dir = s.path().join(".saheeli/checks").join(id);
    for d in ["upper/u", "upper/w", "merged"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        dir.join("upper/u").display(),
        dir.join("upper/w").display()
    );
    let merged = dir.join("merged");
    let st = std::process::Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &options])
        .arg(&merged)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(merged.join("stolen"), MARKER).unwrap();
    assert_eq!(copy_mounts(s).len(), 1);
}

/// `saheeli gc` removes the copy an ended task's check left (listed by
/// `--dry-run` first), and keeps a live task's.
#[test]
fn gc_removes_a_checks_copy_an_ended_task_left_and_keeps_a_live_ones() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "t.json",
        &script(&[("task_complete", json!({"message": "x"}))]),
    );
    s.write("t.md", "---\nmodel: replay:t.json\n---\nGo.\n");
    let ended = s.submit("t.md");
    s.expect(&["task", "cancel", &ended], 0);
    let queued = s.submit("t.md");
    let lower = s.path().join("lower");
    std::fs::create_dir_all(&lower).unwrap();
    std::fs::write(lower.join("kept"), "mine").unwrap();
    leave_a_copy(&s, &ended, &lower);
    let dry = s.expect(&["gc", "--dry-run"], 0);
    assert!(
        dry.contains(&format!("copy of a workspace (task {ended})")),
        "{dry}"
    );
    assert_eq!(copy_mounts(&s).len(), 1, "a dry run removes nothing");
    s.expect(&["gc"], 0);
    assert_no_copy(&s, &ended);
    assert_eq!(std::fs::read_to_string(lower.join("kept")).unwrap(), "mine");
    assert!(!lower.join("stolen").exists());
    // A live task's copy is its check's: kept.
    leave_a_copy(&s, &queued, &lower);
    s.expect(&["gc"], 0);
    assert_eq!(copy_mounts(&s).len(), 1);
    s.expect(&["task", "cancel", &queued], 0);
    s.expect(&["gc"], 0);
    assert_no_copy(&s, &queued);
}

/// The sweeper of `serve` removes the copy an ended task's check left.
#[test]
fn the_sweeper_removes_a_checks_copy_an_ended_task_left() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "t.json",
        &script(&[("task_complete", json!({"message": "x"}))]),
    );
    s.write("t.md", "---\nmodel: replay:t.json\n---\nGo.\n");
    let ended = s.submit("t.md");
    s.expect(&["task", "cancel", &ended], 0);
    let lower = s.path().join("lower");
    std::fs::create_dir_all(&lower).unwrap();
    leave_a_copy(&s, &ended, &lower);
    // The sweep runs beside the loop (a drain may end before it does).
    let mut serving = s
        .cmd(&["serve"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Its directory goes last.
    let dir = s.path().join(".saheeli/checks").join(&ended);
    wait_for("the sweep", || !dir.exists());
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(serving.id() as i32, libc::SIGINT) };
    assert!(serving.wait().unwrap().success());
    assert_no_copy(&s, &ended);
}
