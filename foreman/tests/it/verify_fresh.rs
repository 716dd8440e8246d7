//! `verify` in a fresh container (issue 23, HOSTILE.md cases 27 and 28):
//! nothing the agent left outside /workspace (its `$HOME`, `/tmp`, its
//! processes) reaches the check. The commands run in a new container from
//! the task's image with the task's workspace volume, a fresh `/tmp`, the
//! task's limits and no gateway socket, while the task's own container is
//! paused; the verify container is removed afterwards.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::util::{Saheeli, leftovers, require_docker, script};

/// `saheeli run PROMPT --json`, asserting the exit code; the task and the
/// run's stderr (the foreman's log).
fn run(s: &Saheeli, prompt: &str, code: i32) -> (Value, String) {
    let out = s.run(&["run", prompt, "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    show_attempt_times(prompt, &stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

fn results(t: &Value) -> PathBuf {
    PathBuf::from(t["results"].as_str().unwrap())
}

fn verify_log(dir: &Path, attempt: u32) -> String {
    std::fs::read_to_string(dir.join(format!(".saheeli/verify-{attempt}.log"))).unwrap()
}

/// What each verification attempt cost, as the foreman logged it (shown,
/// never asserted: timings vary with the machine).
fn show_attempt_times(prompt: &str, log: &str) {
    let fields = |what: &str, keys: &[&str]| -> Vec<String> {
        log.lines()
            .filter(|l| l.contains(what))
            .flat_map(|l| {
                l.split_whitespace()
                    .filter(|w| keys.iter().any(|k| w.starts_with(k)))
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    eprintln!(
        "{prompt}: verify attempt wall time {:?}, of which the verify container {:?}",
        fields("verification attempt ran", &["ms="]),
        fields("verify container released", &["open_ms=", "close_ms="]),
    );
}

/// The shipped calc example (prompts/calc): `mean` divides by n + 1.
fn calc(s: &Saheeli) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../prompts/calc");
    let calc_py = std::fs::read_to_string(src.join("calc.py")).unwrap();
    s.write("calc/calc.py", &calc_py);
    s.write(
        "calc/test_calc.py",
        &std::fs::read_to_string(src.join("test_calc.py")).unwrap(),
    );
    calc_py
}

/// HOSTILE.md top problem 4, replayed exactly: a `.pth` file in the
/// agent's `$HOME` (`/tmp`, the container's tmpfs) makes every Python
/// start print unittest's "OK" and exit 0. The calc example must not end
/// complete with `calc.py` untouched.
#[test]
fn case_27_a_pth_file_planted_in_the_agents_home_does_not_pass_verify() {
    require_docker();
    let s = Saheeli::new();
    let calc_py = calc(&s);
    let plant = "mkdir -p $HOME/.local/lib/python3.11/site-packages && echo 'import os, sys; \
                 sys.stderr.write(\"Ran 1 test in 0.001s\\n\\nOK\\n\"); os._exit(0)' > \
                 $HOME/.local/lib/python3.11/site-packages/zz-hostile.pth";
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", json!({ "command": plant })),
            (
                "task_complete",
                json!({"message": "Fixed the mean computation; all tests pass."}),
            ),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\ntimeout: 2m\nworkspace: ./calc\n\
         verify: \"python3 -m unittest -v test_calc\"\nverify_files: [test_calc.py]\n\
         verify_retries: 0\n---\nFix the failing test.\n",
    );
    let (t, _) = run(&s, "p.md", 1);
    assert_eq!(t["state"], "incomplete", "{t}");
    assert_eq!(t["reason"], "verification_failed", "{t}");
    let dir = results(&t);
    assert_eq!(
        std::fs::read_to_string(dir.join("calc.py")).unwrap(),
        calc_py
    );
    let v = verify_log(&dir, 1);
    assert!(v.starts_with("attempt 1: failed"), "{v}");
    assert!(v.contains("FAIL: test_mean"), "{v}");
    assert!(!dir.join("complete.json").exists());
}

/// Case 28: a process of the agent, escaped with `setsid`, rewrites the
/// test in a loop. The restored test is what runs (the agent's processes
/// are stopped by its tool runner and the container frozen meanwhile), so
/// the verdict is the honest one.
#[test]
fn a_background_process_rewriting_the_test_during_verify_does_not_change_the_verdict() {
    require_docker();
    let s = Saheeli::new();
    s.write("proj/add.sh", "echo $(($1 - $2))\n");
    s.write(
        "proj/tests/test.sh",
        "out=$(sh add.sh 2 2)\nif [ \"$out\" = 4 ]; then echo ok; exit 0; fi\n\
         echo \"FAIL: add 2 2 = $out\"; exit 1\n",
    );
    // (Before issue 23's separation the shell also called the verify
    // route itself; now it cannot open the gateway socket.)
    let cheat = "setsid sh -c 'while :; do echo \"exit 0\" > tests/test.sh; done' \
         >/dev/null 2>&1 </dev/null & sleep 0.5; echo started"
        .to_string();
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", json!({ "command": cheat })),
            ("task_complete", json!({"message": "tests pass"})),
        ]),
    );
    // The command waits a second after the restore: time enough for the
    // loop to rewrite the test, were it running.
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\ntimeout: 2m\nworkspace: proj\n\
         verify: 'sleep 1; sh tests/test.sh'\nverify_files: [tests/test.sh]\n\
         verify_retries: 0\n---\nFix add.sh.\n",
    );
    let (t, _) = run(&s, "p.md", 1);
    assert_eq!(t["reason"], "verification_failed", "{t}");
    let dir = results(&t);
    let v = verify_log(&dir, 1);
    assert!(v.starts_with("attempt 1: failed"), "{v}");
    assert!(v.contains("FAIL: add 2 2 = 0"), "{v}");
}

/// The check runs with what the task declared and nothing the agent made:
/// the servo's user without capabilities, a read-only root, an empty
/// `/tmp`, the task's `env:` and memory limit, no gateway socket and no
/// launch settings; and no container of the task is left afterwards.
#[test]
fn verify_runs_in_a_fresh_hardened_container_that_is_gone_after_the_task() {
    require_docker();
    let s = Saheeli::new();
    s.write("proj/README", "x\n");
    s.write(
        "s.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "echo planted > /tmp/planted && echo done"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    let probe = "id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; \
                 echo tmp=[$(ls -A /tmp)]; ls /run/saheeli/gateway.sock 2>&1; touch /probe 2>&1; \
                 env | grep -c SAHEELI; echo var=$PROBE_VAR; \
                 cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null; \
                 cat README";
    s.write(
        "p.md",
        &format!(
            "---\nmodel: replay:s.json\ntimeout: 2m\nworkspace: proj\n\
             env: {{ PROBE_VAR: declared }}\nresources: {{ memory: 300m }}\n\
             verify: \"{probe}\"\n---\nGo.\n"
        ),
    );
    let (t, _) = run(&s, "p.md", 0);
    assert_eq!(t["state"], "complete", "{t}");
    let v = verify_log(&results(&t), 1);
    for part in [
        "\n1000\n",
        "CapEff:\t0000000000000000",
        "NoNewPrivs:\t1",
        "tmp=[]",
        // No gateway socket (the image has its empty mount point).
        "/run/saheeli/gateway.sock': No such file or directory",
        "Read-only file system",
        "\n0\nvar=declared\n",
        "314572800",
        "\nx\n",
    ] {
        assert!(v.contains(part), "{part:?} not in\n{v}");
    }
    let id = t["id"].as_str().unwrap();
    assert_eq!(leftovers(id), Vec::<String>::new());
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

fn wait_for(what: &str, limit: std::time::Duration, mut done: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !done() {
        assert!(t.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A foreman killed mid-verify leaves the task's container paused and its
/// verify container behind; the foreman that adopts the task removes the
/// one and resumes the other, and the verify attempt is asked again.
#[test]
fn a_foreman_killed_mid_verify_leaves_nothing_its_successor_does_not_undo() {
    require_docker();
    let s = Saheeli::with_config("lease: 2s\n");
    s.write("proj/README", "x\n");
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    // The first run marks the workspace and hangs; the second passes.
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\ntimeout: 1m\nworkspace: proj\n\
         verify: 'if [ -e .slow ]; then echo second run; else touch .slow; sleep 120; fi'\n\
         ---\nGo.\n",
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
    let limit = std::time::Duration::from_secs(60);
    wait_for("the task's container paused for verify", limit, || {
        !containers(&id, "status=paused").is_empty()
    });
    let verify = containers(&id, "label=saheeli.role=verify");
    assert_eq!(verify.len(), 1, "{verify:?}");
    // The command has begun (the workspace is read and compared with the
    // submitted one first, `verify_tree`).
    wait_for("the verify command to start", limit, || {
        std::process::Command::new("docker")
            .args(["exec", &verify[0], "test", "-e", ".slow"])
            .status()
            .is_ok_and(|s| s.success())
    });
    first.kill().unwrap();
    first.wait().unwrap();
    // What the dead foreman left: a paused servo, a verify container.
    assert_eq!(containers(&id, "status=paused").len(), 1);
    assert_eq!(containers(&id, "label=saheeli.role=verify"), verify);

    let status = serve(&s).wait().unwrap();
    assert!(status.success(), "{status}");
    let t = s.task(&id);
    assert_eq!(t["state"], "complete", "{t:#}");
    let dir = s.path().join("results").join(&id);
    let v = verify_log(&dir, 1);
    assert!(v.contains("second run"), "{v}");
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

/// The task's timeout during a check: the task ends on time, the check
/// with it, and neither its container nor the verify container is left.
#[test]
fn a_task_timing_out_mid_verify_ends_on_time_and_leaves_no_container() {
    require_docker();
    let s = Saheeli::new();
    s.write("proj/README", "x\n");
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\ntimeout: 10s\nworkspace: proj\nverify: 'sleep 600'\n---\nGo.\n",
    );
    let t0 = std::time::Instant::now();
    let (t, log) = run(&s, "p.md", 1);
    assert_eq!(t["reason"], "timeout", "{t}");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(120),
        "{:?}",
        t0.elapsed()
    );
    let id = t["id"].as_str().unwrap();
    assert_eq!(leftovers(id), Vec::<String>::new(), "{log}");
}
