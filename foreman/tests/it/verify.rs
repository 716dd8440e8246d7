//! Verified outcomes (issue 11) on real containers: `verify` commands run
//! in the task's own container after `task_complete`, their failure fed
//! back to the model, `verify_retries`, `verify_files` restored against a
//! cheating agent, the assessor through the gateway, and the limits of the
//! verify route.

use std::path::{Path, PathBuf};

use saheeli_protocol::verify::CheckKind;
use saheeli_protocol::{AuditEvent, Completion, Session};
use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::util::{Saheeli, require_docker, script};

/// A small project with a planted bug: `add.sh` subtracts; its test says so.
const BUGGY: &str = "echo $(($1 - $2))\n";
const FIXED: &str = "echo $(($1 + $2))\n";
const TEST: &str = "out=$(sh add.sh 2 2)\n\
    if [ \"$out\" = 4 ]; then echo 'ok: add 2 2 = 4'; exit 0; fi\n\
    echo \"FAIL: add 2 2 = $out, expected 4\"; exit 1\n";

fn project(s: &Saheeli) {
    s.write("proj/add.sh", BUGGY);
    s.write("proj/tests/test.sh", TEST);
}

/// `saheeli run PROMPT --json`, asserting the exit code.
pub(crate) fn run(s: &Saheeli, prompt: &str, code: i32) -> Value {
    let out = s.run(&["run", prompt, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub(crate) fn results(t: &Value) -> PathBuf {
    PathBuf::from(t["results"].as_str().unwrap())
}

fn audit(results: &Path, id: &str) -> Vec<AuditEvent> {
    std::fs::read_to_string(results.join(format!("servo-{id}-audit.log")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn verified_events(events: &[AuditEvent]) -> Vec<(u32, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            AuditEvent::Verified {
                attempt, passed, ..
            } => Some((*attempt, *passed)),
            _ => None,
        })
        .collect()
}

fn session(results: &Path, id: &str) -> Session {
    let text = std::fs::read_to_string(results.join(format!("servo-{id}-session.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The text of every tool result the model was given.
fn tool_results(s: &Session) -> Vec<String> {
    s.messages
        .iter()
        .filter(|m| m.tool_call_id.is_some())
        .map(|m| m.content.clone().unwrap_or_default())
        .collect()
}

/// The content of every message in an OpenAI request body.
fn request_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn openai(llm: &FakeLlm) -> Saheeli {
    Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-verify-000")
        .env("OPENAI_BASE_URL", &llm.base_url())
}

#[test]
fn a_planted_bug_fails_verify_the_failure_reaches_the_model_and_the_fix_completes() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::tool("task_complete", json!({"message": "looks done"})),
        Reply::tool("create_file", json!({"path": "add.sh", "content": FIXED})),
        Reply::tool("task_complete", json!({"message": "fixed add.sh"})),
    ]);
    let s = openai(&llm);
    project(&s);
    s.write(
        "p.md",
        "---\nmodel: gpt-test\nworkspace: proj\nverify: sh tests/test.sh\nverify_files: [tests/]\n---\nFix add.sh.\n",
    );
    let t = run(&s, "p.md", 0);
    assert_eq!(t["state"], "complete", "{t}");
    let id = t["id"].as_str().unwrap();
    let dir = results(&t);
    // The request after the failed attempt carries the test's output.
    let seen = llm.seen();
    assert_eq!(seen.len(), 3);
    let second = request_text(&seen[1].body);
    assert!(second.contains("verification failed"), "{second}");
    assert!(second.contains("FAIL: add 2 2 = 0, expected 4"), "{second}");
    assert!(!request_text(&seen[0].body).contains("verification failed"));
    // Two attempts, everywhere they are recorded.
    let c: Completion =
        serde_json::from_str(&std::fs::read_to_string(dir.join("complete.json")).unwrap()).unwrap();
    let attempts: Vec<(u32, bool, Option<i64>)> = c
        .verification
        .iter()
        .map(|c| (c.attempt, c.passed, c.exit_code))
        .collect();
    assert_eq!(attempts, [(1, false, Some(1)), (2, true, Some(0))]);
    assert_eq!(c.verification[1].output, "ok: add 2 2 = 4\n");
    assert_eq!(verified_events(&audit(&dir, id)), [(1, false), (2, true)]);
    let log1 = std::fs::read_to_string(dir.join(".saheeli/verify-1.log")).unwrap();
    assert!(
        log1.starts_with("attempt 1: failed\n\n$ sh tests/test.sh\nexit 1"),
        "{log1}"
    );
    assert!(log1.contains("expected 4"), "{log1}");
    let log2 = std::fs::read_to_string(dir.join(".saheeli/verify-2.log")).unwrap();
    assert!(log2.starts_with("attempt 2: passed"), "{log2}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("## Verification\n\n2 attempts of 3 allowed; the last passed."),
        "{report}"
    );
    // The cost of a one-command check: the exec's own time.
    eprintln!(
        "verify exec time (ms): attempt 1 {}, attempt 2 {}",
        c.verification[0].duration_ms, c.verification[1].duration_ms
    );
}

#[test]
fn verify_that_never_passes_ends_verification_failed_after_the_retries() {
    require_docker();
    let s = Saheeli::new();
    project(&s);
    s.write(
        "s.json",
        &script(&[
            ("task_complete", json!({"message": "done"})),
            ("task_complete", json!({"message": "really done"})),
            ("task_complete", json!({"message": "never reached"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\nworkspace: proj\nverify: [sh tests/test.sh, 'true']\nverify_retries: 1\n---\nFix add.sh.\n",
    );
    let t = run(&s, "p.md", 1);
    assert_eq!(t["state"], "incomplete", "{t}");
    assert_eq!(t["reason"], "verification_failed", "{t}");
    let id = t["id"].as_str().unwrap();
    let dir = results(&t);
    assert!(!dir.join("complete.json").exists());
    assert_eq!(verified_events(&audit(&dir, id)), [(1, false), (2, false)]);
    assert!(dir.join(".saheeli/verify-2.log").is_file());
    assert!(!dir.join(".saheeli/verify-3.log").exists());
    // The first command failed: the second was not run.
    let log = std::fs::read_to_string(dir.join(".saheeli/verify-1.log")).unwrap();
    assert!(!log.contains("$ true"), "{log}");
    let results = tool_results(&session(&dir, id));
    assert!(
        results.last().unwrap().contains("No attempt is left"),
        "{results:?}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("2 attempts of 2 allowed; the last failed."),
        "{report}"
    );
}

#[test]
fn an_agent_editing_verify_files_is_restored_and_still_fails() {
    require_docker();
    let s = Saheeli::new();
    project(&s);
    s.write(
        "s.json",
        &script(&[
            // Cheat twice: rewrite the test, and keep rewriting it from a
            // process that left the shell's process group.
            ("create_file", json!({"path": "tests/test.sh", "content": "exit 0\n"})),
            (
                "execute_shell",
                json!({"command": "setsid sh -c 'while true; do echo \"exit 0\" > tests/test.sh; sleep 0.01; done' >/dev/null 2>&1 < /dev/null &"}),
            ),
            ("task_complete", json!({"message": "tests pass"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\nworkspace: proj\nverify: sh tests/test.sh\nverify_files: [tests/test.sh]\nverify_retries: 0\n---\nFix add.sh.\n",
    );
    let t = run(&s, "p.md", 1);
    assert_eq!(t["reason"], "verification_failed", "{t}");
    let dir = results(&t);
    let log = std::fs::read_to_string(dir.join(".saheeli/verify-1.log")).unwrap();
    assert!(log.contains("FAIL: add 2 2 = 0, expected 4"), "{log}");
    // The submitted test is what was run, and what is left.
    assert_eq!(
        std::fs::read_to_string(dir.join("tests/test.sh")).unwrap(),
        TEST
    );
}

/// Answers the assessor's calls in turn with `verdicts`, the agent's from
/// `script`.
fn with_assessor(script: Vec<Reply>, verdicts: Vec<&'static str>) -> FakeLlm {
    let verdicts = std::sync::Mutex::new(std::collections::VecDeque::from(verdicts));
    FakeLlm::start_matching(script, move |body| {
        let system = body["messages"][0]["content"].as_str().unwrap_or("");
        if !system.contains("Saheeli's assessor") {
            return None;
        }
        let v = verdicts.lock().unwrap().pop_front()?;
        Some(Reply::Text(v.to_string(), (300, 30)))
    })
}

#[test]
fn assess_not_met_feeds_back_and_met_completes_within_the_budget() {
    require_docker();
    let llm = with_assessor(
        vec![
            Reply::tool("create_file", json!({"path": "add.sh", "content": FIXED})),
            Reply::tool("task_complete", json!({"message": "fixed add"})),
            Reply::tool(
                "create_file",
                json!({"path": "tests/neg.sh", "content": "sh add.sh -1 1\n"}),
            ),
            Reply::tool(
                "task_complete",
                json!({"message": "fixed add, tested negatives"}),
            ),
        ],
        vec![
            "not json at all",
            r#"{"met": false, "feedback": "add a test for negative numbers"}"#,
            "```json\n{\"met\": true, \"feedback\": \"objective met\"}\n```",
        ],
    );
    let s = openai(&llm);
    project(&s);
    s.write(
        "p.md",
        "---\nmodel: gpt-test\nworkspace: proj\nverify: sh tests/test.sh\nassess: true\nobjective: Fix add.sh and test negative numbers.\n---\nFix add.sh.\n",
    );
    let t = run(&s, "p.md", 0);
    assert_eq!(t["state"], "complete", "{t}");
    let seen = llm.seen();
    let assessor: Vec<&Value> = seen
        .iter()
        .map(|s| &s.body)
        .filter(|b| request_text(b).contains("Saheeli's assessor"))
        .collect();
    // A malformed verdict is asked again; then not met, then met.
    assert_eq!(assessor.len(), 3);
    let first = request_text(assessor[0]);
    for part in [
        "Fix add.sh and test negative numbers.",
        "fixed add",
        "ok: add 2 2 = 4",
        "- add.sh",
        "+echo $(($1 + $2))",
    ] {
        assert!(first.contains(part), "{part}: {first}");
    }
    // The feedback reaches the agent's next request.
    let agent: Vec<String> = seen
        .iter()
        .map(|s| request_text(&s.body))
        .filter(|t| !t.contains("Saheeli's assessor"))
        .collect();
    assert_eq!(agent.len(), 4);
    assert!(
        agent[2].contains("add a test for negative numbers"),
        "{}",
        agent[2]
    );
    // The assessor's calls are in the task's tokens: 4 × 100 + 3 × 300 in.
    assert_eq!(t["input_tokens"], 1300, "{t}");
    let c: Completion =
        serde_json::from_str(&std::fs::read_to_string(results(&t).join("complete.json")).unwrap())
            .unwrap();
    let kinds: Vec<(u32, CheckKind, bool)> = c
        .verification
        .iter()
        .map(|c| (c.attempt, c.kind, c.passed))
        .collect();
    assert_eq!(
        kinds,
        [
            (1, CheckKind::Verify, true),
            (1, CheckKind::Assess, false),
            (2, CheckKind::Verify, true),
            (2, CheckKind::Assess, true),
        ]
    );
    let report = std::fs::read_to_string(results(&t).join("report.md")).unwrap();
    assert!(report.contains("The assessor on attempt 2:"), "{report}");
}

/// Posts to the verify route of a running task from the host (the agent's
/// shell cannot open the socket since issue 23): the status and answer.
fn post_verify(sock: &Path, call_id: &str) -> (u16, String) {
    crate::gateway_guard::gw(
        sock,
        "POST",
        "/saheeli/v1/verify",
        Some(&json!({"call_id": call_id, "message": "x"})),
    )
}

#[test]
fn the_verify_route_is_closed_without_verify_and_counts_attempts_on_the_foreman() {
    use crate::gateway_guard::{hold, holding, release};
    use crate::human::{Serve, until};
    require_docker();
    // Without `verify`: refused.
    let s = Saheeli::new();
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", hold("v1")),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write("p.md", "---\nmodel: replay:s.json\n---\nGo.\n");
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "v1");
    let (status, body) = post_verify(&sock, "c1");
    assert!(
        status == 403 && body.contains("has no `verify`"),
        "{status} {body}"
    );
    release(&id, "v1");
    until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    drop(serve);

    // With one attempt allowed: a direct call spends it; the servo's own
    // task_complete is then refused and the task fails verification.
    let s = Saheeli::new();
    project(&s);
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", hold("v2")),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\nworkspace: proj\nverify: sh tests/test.sh\nverify_retries: 0\n---\nGo.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "v2");
    let (status, body) = post_verify(&sock, "c1");
    assert!(
        status == 200 && body.contains("\"passed\":false"),
        "{status} {body}"
    );
    let (status, body) = post_verify(&sock, "c2");
    assert!(
        status == 409 && body.contains("no verification attempt is left"),
        "{status} {body}"
    );
    release(&id, "v2");
    let t = until(&s, &id, &serve, "ended", |t| t["state"] == "incomplete");
    assert_eq!(t["reason"], "verification_failed", "{t}");
    let outs = tool_results(&session(&results(&t), &id));
    assert!(
        outs[1].contains("verification could not run"),
        "{}",
        outs[1]
    );
}

#[test]
fn verify_settings_are_shown_by_dry_run_and_bad_ones_refused_at_submit() {
    let s = Saheeli::with_config("task:\n  verify_retries: 4\n");
    project(&s);
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\nworkspace: proj\nverify: sh tests/test.sh\nverify_files: [./tests/]\n---\nGo.\n",
    );
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    let d = s.expect_json(
        &["task", "submit", "--prompt", "p.md", "--dry-run", "--json"],
        0,
    );
    assert_eq!(d["settings"]["verify"], json!(["sh tests/test.sh"]));
    assert_eq!(d["settings"]["verify_files"], json!(["tests"]));
    assert_eq!(d["settings"]["verify_retries"], 4);
    assert_eq!(d["settings"]["verify_timeout"], "10m");
    assert_eq!(d["sources"]["verify"], "front-matter");
    assert_eq!(d["sources"]["verify_retries"], "config.yaml");
    assert_eq!(d["sources"]["assess"], "default");
    for (fm, says) in [
        (
            "verify_files: [../x]\nverify: 'true'\n",
            "p.md: `verify_files` `../x` must be a path inside the workspace",
        ),
        (
            "verify_files: [nope]\nverify: 'true'\n",
            "p.md: `verify_files` `nope` is not in the workspace",
        ),
        (
            "verify_files: [tests]\n",
            "`verify_files` is set but `verify` is not",
        ),
        ("assess: true\n", "`assess: true` needs an LLM to judge"),
        (
            "verify: {a: b}\n",
            "p.md:4: front-matter: verify: unknown field `a`, expected one of `run`, `files`, `reward`, `timeout`, `env`",
        ),
    ] {
        s.write(
            "p.md",
            &format!("---\nmodel: replay:s.json\nworkspace: proj\n{fm}---\nGo.\n"),
        );
        let err = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
        assert!(err.contains(says), "{fm}: {err}");
    }
    crate::util::assert_nothing_queued(&s);
}
