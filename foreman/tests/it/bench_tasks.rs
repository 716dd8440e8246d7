//! A benchmark's task as its suite wrote it (issue 49): its own image
//! (built from its Dockerfile on the local base image, the servo added on
//! top), the agent working in `/app`, tests hidden until verify, a reward
//! file graded, and the oracle running the task's solution instead of a
//! model.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::util::{Saheeli, leftovers, require_docker, script};

/// A word only the hidden tests hold: nothing the agent can see may.
const MARKER: &str = "HIDDEN-TEST-MARKER-7f3a";

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

/// A Harbor-shaped task: `env/` (a Dockerfile whose /app holds a broken
/// `calc.py`), `tests/test.sh` (writes /logs/verifier/reward.txt, holds
/// [`MARKER`]), `solution/solve.sh` (`fix`: the fix, or anything else).
fn task(s: &Saheeli, fix: &str) {
    s.write(
        "t/env/Dockerfile",
        "FROM saheeli-base:bookworm\nWORKDIR /app\n\
         RUN printf 'def add(a, b):\\n    return a - b\\n' > /app/calc.py\n",
    );
    s.write(
        "t/tests/test.sh",
        &format!(
            "#!/bin/bash\n# {MARKER}\ncd /app\n\
             if python3 -c 'import calc; assert calc.add(2, 3) == 5'; then r=1; else r=0; fi\n\
             echo $r > /logs/verifier/reward.txt\necho \"graded: $r\"\n"
        ),
    );
    s.write("t/solution/solve.sh", &format!("#!/bin/bash\n{fix}\n"));
}

fn walk(dir: &Path) -> Vec<PathBuf> {
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

const ORACLE: &str = "---\nagent: oracle\nenvironment: { dockerfile: t/env/ }\nworkdir: /app\n\
                      solution: t/solution/\ntimeout: 3m\nverify_retries: 0\n\
                      verify: { files: t/tests/, run: bash /tests/test.sh }\n---\n\
                      Fix `add` in /app/calc.py.\n";

#[test]
fn the_oracle_solves_a_task_in_its_own_image_and_the_hidden_tests_give_reward_1() {
    require_docker();
    let s = Saheeli::new();
    task(&s, "sed -i 's/a - b/a + b/' calc.py");
    s.write("p.md", ORACLE);
    let t = run(&s, "p.md", 0);
    assert_eq!(t["state"], "complete", "{t}");
    assert_eq!(t["agent"], "oracle", "{t}");
    assert_eq!(t["reward"], 1.0, "{t}");
    let dir = results(&t);
    // The image's /app was the workspace: the fix comes home with it.
    assert_eq!(
        std::fs::read_to_string(dir.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    let log = std::fs::read_to_string(dir.join(".saheeli/verify-1.log")).unwrap();
    assert!(log.contains("graded: 1"), "{log}");
    assert!(
        log.contains("reward: 1 (from /logs/verifier/reward.txt)"),
        "{log}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("Reward on attempt 1: **1**"), "{report}");
    let id = t["id"].as_str().unwrap();
    assert!(leftovers(id).is_empty(), "{:?}", leftovers(id));
}

#[test]
fn a_wrong_solution_gets_reward_0_and_verification_failed() {
    require_docker();
    let s = Saheeli::new();
    task(&s, "echo 'not a fix' > notes.txt");
    s.write("p.md", ORACLE);
    let t = run(&s, "p.md", 1);
    assert_eq!(t["state"], "incomplete", "{t}");
    assert_eq!(t["reason"], "verification_failed", "{t}");
    assert_eq!(t["reward"], 0.0, "{t}");
    let dir = results(&t);
    assert!(dir.join("notes.txt").is_file());
    assert!(!dir.join("complete.json").exists());
}

/// The agent searches everything it can reach for the hidden tests, fails
/// verify, hears the feedback and searches again: the tests, the command
/// that runs them and their path appear nowhere it can see, nor in what
/// comes home (its audit log, its session, the workspace).
#[test]
fn the_agent_never_sees_the_hidden_tests_even_after_a_failed_verify() {
    require_docker();
    let s = Saheeli::new();
    task(&s, "true");
    // The marker spelled so that the command itself does not hold it.
    let (a, b) = MARKER.split_at(10);
    let search = format!(
        "grep -rl '{a}''{b}' / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | head; \
         ls -la /tests /logs/verifier 2>&1; echo searched"
    );
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", json!({ "command": search })),
            ("task_complete", json!({"message": "done"})),
            ("execute_shell", json!({ "command": search })),
            ("task_complete", json!({"message": "done again"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\nenvironment: { dockerfile: t/env/ }\nworkdir: /app\n\
         timeout: 3m\nverify_retries: 1\n\
         verify: { files: t/tests/, run: \"bash /tests/test.sh # RUN-LINE-SECRET\" }\n---\n\
         Fix `add` in /app/calc.py.\n",
    );
    let t = run(&s, "p.md", 1);
    assert_eq!(t["reason"], "verification_failed", "{t}");
    let dir = results(&t);
    // What the agent saw and said is in its audit log and session.
    let audit = std::fs::read_to_string(
        walk(&dir)
            .into_iter()
            .find(|p| p.to_string_lossy().ends_with("-audit.log"))
            .unwrap(),
    )
    .unwrap();
    assert!(audit.contains("searched"), "the search ran: {audit}");
    assert!(!audit.contains(MARKER), "{audit}");
    assert!(!audit.contains("RUN-LINE-SECRET"), "{audit}");
    assert!(
        audit.contains("graded: 0"),
        "the feedback quotes the output: {audit}"
    );
    // Everything that came home but the foreman's own records of the
    // checks (report.md, verify-N.log) is what the agent could see.
    let agents: String = walk(&dir)
        .into_iter()
        .filter(|p| {
            let p = p.to_string_lossy();
            !p.contains("/.saheeli/verify-") && !p.ends_with("/report.md")
        })
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    assert!(!agents.contains(MARKER), "{agents}");
    assert!(!agents.contains("RUN-LINE-SECRET"));
    // The user's own record of the checks keeps the command.
    let log = std::fs::read_to_string(dir.join(".saheeli/verify-2.log")).unwrap();
    assert!(log.contains("RUN-LINE-SECRET"), "{log}");
}

/// `image:` names an image Docker has; a reward file may be JSON with
/// several keys and a partial reward passes at `pass_reward`.
#[test]
fn a_named_image_and_a_partial_reward_at_pass_reward() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "tests/test.sh",
        "#!/bin/sh\necho '{\"reward\": 0.5, \"tests_passed\": 1}' > /logs/verifier/reward.json\n\
         echo '==== 1 passed, 1 failed in 0.01s ===='\n",
    );
    s.write("sol/solve.sh", "echo hi > out.txt\n");
    let prompt = |pass: &str| {
        format!(
            "---\nagent: oracle\nimage: saheeli-base:bookworm\nsolution: sol/\n\
             verify: {{ files: tests/, run: sh /tests/test.sh }}\nverify_retries: 0\n\
             pass_reward: {pass}\n---\nWrite out.txt.\n"
        )
    };
    s.write("half.md", &prompt("0.5"));
    let t = run(&s, "half.md", 0);
    assert_eq!(t["state"], "complete", "{t}");
    assert_eq!(t["reward"], 0.5, "{t}");
    assert_eq!(t["rewards"]["tests_passed"], 1.0, "{t}");
    assert_eq!(
        t["tests"],
        json!({"passed": 1, "failed": 1, "skipped": 0}),
        "{t}"
    );
    assert!(results(&t).join("out.txt").is_file());
    s.write("full.md", &prompt("1.0"));
    let t = run(&s, "full.md", 1);
    assert_eq!(t["reason"], "verification_failed", "{t}");
    assert_eq!(t["reward"], 0.5, "{t}");
}

#[test]
fn a_missing_image_or_solution_is_refused_at_submit_naming_it() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "a.md",
        "---\nagent: oracle\nimage: saheeli-base:bookworm\n---\nX\n",
    );
    let out = s.run(&["task", "submit", "--prompt", "a.md"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("`agent: oracle` runs the task's solution"),
        "{err}"
    );
    s.write(
        "b.md",
        "---\nenvironment: { dockerfile: nowhere/ }\n---\nX\n",
    );
    let out = s.run(&["task", "submit", "--prompt", "b.md"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`environment.dockerfile` `nowhere/` cannot be read"),
        "{err}"
    );
    s.write("c.md", "---\nworkdir: /workspace/x\n---\nX\n");
    let out = s.run(&["task", "submit", "--prompt", "c.md"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`workdir` `/workspace/x` is a path the container needs"),
        "{err}"
    );
}

/// The shipped examples (evals/benchmarks: a Harbor task and a
/// Terminal-Bench 1 task, each with its own Dockerfile on the local base
/// image) run with one command each, offline, with the oracle: imported on
/// the fly, every case passes with reward 1.
#[test]
fn the_shipped_harbor_and_terminal_bench_tasks_pass_with_the_oracle() {
    require_docker();
    let s = Saheeli::new();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../evals/benchmarks");
    let dir = dir.canonicalize().unwrap();
    let out = s.run(&[
        "eval",
        dir.to_str().unwrap(),
        "--param",
        "agent=oracle",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("runs offline until egress rules land"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = report.to_string();
    assert!(
        text.contains("harbor-hello") && text.contains("tb1-hello"),
        "{report}"
    );
    assert_eq!(report["pass_rate"], 1.0, "{report}");
}

/// A suite whose hidden test is wrong fails the right solution; `eval
/// regrade --tests` with the fixed test verifies the recorded workspace
/// again, without the agent, and flips the result (the run is unchanged).
#[test]
fn regrade_with_a_fixed_test_flips_a_result() {
    require_docker();
    let s = Saheeli::new();
    task(&s, "sed -i 's/a - b/a + b/' calc.py");
    // The wrong test expects add(2, 3) == 6.
    s.write(
        "t/tests/test.sh",
        "#!/bin/bash\ncd /app\nif python3 -c 'import calc; assert calc.add(2, 3) == 6'; then r=1; \
         else r=0; fi\necho $r > /logs/verifier/reward.txt\n",
    );
    s.write(
        "fixed/test.sh",
        "#!/bin/bash\ncd /app\nif python3 -c 'import calc; assert calc.add(2, 3) == 5'; then r=1; \
         else r=0; fi\necho $r > /logs/verifier/reward.txt\n",
    );
    s.write(
        "suite.yaml",
        "name: regrade\ncases:\n  - id: add\n    text: Fix add in /app/calc.py.\n\
         \x20   agent: oracle\n    environment: { dockerfile: t/env/ }\n    workdir: /app\n\
         \x20   solution: t/solution/\n    verify_retries: 0\n\
         \x20   verify: { files: t/tests/, run: bash /tests/test.sh }\n",
    );
    let out = s.run(&["eval", "suite.yaml", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["pass_rate"], 0.0, "{report}");
    let run = report["run_id"].as_str().unwrap();
    let out = s.run(&["eval", "regrade", run, "--tests", "fixed", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["case"], "add", "{rows}");
    assert_eq!(rows[0]["old_passed"], false, "{rows}");
    assert_eq!(rows[0]["old_reward"], 0.0, "{rows}");
    assert_eq!(rows[0]["new_passed"], true, "{rows}");
    assert_eq!(rows[0]["new_reward"], 1.0, "{rows}");
    // Without --tests, the task's own (wrong) test gives the old grade.
    let out = s.run(&["eval", "regrade", run]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("add #1: fail (0) -> fail (0)"), "{text}");
    assert!(text.contains("0 changed"), "{text}");
    // What the regrade made is gone.
    let id = rows[0]["task_id"].as_str().unwrap();
    assert!(leftovers(id).is_empty(), "{:?}", leftovers(id));
}

/// `setup:` runs before the agent on its workspace (the image's /app
/// already in it); one failing ends the task `setup_failed` (issue 50),
/// naming the command and its output, and nothing is left behind.
#[test]
fn setup_runs_before_the_agent_and_a_failing_one_fails_the_launch() {
    require_docker();
    let s = Saheeli::new();
    task(
        &s,
        "cat prepared.txt > out.txt && sed -i 's/a - b/a + b/' calc.py",
    );
    let prompt = |setup: &str| {
        format!(
            "---\nagent: oracle\nenvironment: {{ dockerfile: t/env/ }}\nworkdir: /app\n\
             solution: t/solution/\ntimeout: 3m\nverify_retries: 0\nsetup: {setup}\n\
             verify: {{ files: t/tests/, run: bash /tests/test.sh }}\n---\nFix it.\n"
        )
    };
    s.write(
        "ok.md",
        &prompt("[\"test -f calc.py\", \"echo prepared-$(id -u) > prepared.txt\"]"),
    );
    let t = run(&s, "ok.md", 0);
    assert_eq!(t["state"], "complete", "{t}");
    let dir = results(&t);
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).unwrap(),
        "prepared-1000\n"
    );
    s.write("bad.md", &prompt("\"echo broken-env >&2; exit 3\""));
    let t = run(&s, "bad.md", 1);
    assert_eq!(t["state"], "failed", "{t}");
    assert_eq!(t["reason"], "setup_failed", "{t}");
    let detail = t["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("set-up command `echo broken-env >&2; exit 3` exited with code 3"),
        "{t}"
    );
    assert!(detail.contains("broken-env"), "{t}");
    let id = t["id"].as_str().unwrap();
    assert!(leftovers(id).is_empty(), "{:?}", leftovers(id));
}

/// What the tests run is the agent's work: a reward path made a link to
/// /dev/zero or a huge file is read capped, fails to parse, and fails the
/// attempt (never passes it, never hangs the check).
#[test]
fn a_reward_file_made_a_link_to_dev_zero_fails_the_attempt() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "tests/test.sh",
        "#!/bin/sh\nln -sf /dev/zero /logs/verifier/reward.json\n",
    );
    s.write("sol/solve.sh", "true\n");
    s.write(
        "p.md",
        "---\nagent: oracle\nimage: saheeli-base:bookworm\nsolution: sol/\nverify_retries: 0\n\
         verify: { files: tests/, run: sh /tests/test.sh }\n---\nX\n",
    );
    let t = run(&s, "p.md", 1);
    assert_eq!(t["reason"], "verification_failed", "{t}");
    assert!(t.get("reward").is_none(), "nothing graded: {t}");
    let log = std::fs::read_to_string(results(&t).join(".saheeli/verify-1.log")).unwrap();
    assert!(log.contains("is not a JSON object of numbers"), "{log}");
}
