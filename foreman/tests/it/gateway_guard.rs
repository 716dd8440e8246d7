//! Issue 23, defence in depth: the gateway trusts nothing from the
//! container, even a compromised servo. These tests speak to a task's
//! gateway socket directly from the host (as the hostile QA did from the
//! agent's shell, which will not reach it any more) while the task's
//! servo waits in a tool call for the test to let it go on.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::human::{Serve, project, until};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, replay_prompt, require_docker, script};

/// A shell command that waits (60 s at most) until the test creates
/// `/tmp/<name>` in the container ([`release`]).
pub(crate) fn hold(name: &str) -> Value {
    json!({
        "command": format!(
            "touch /tmp/{name}.held; for i in $(seq 600); do [ -e /tmp/{name} ] && exit 0; sleep 0.1; done; exit 1"
        ),
        "timeout_s": 90
    })
}

/// Runs `args` in the task's container (its servo's, not a verify
/// container made ahead, which carries `saheeli.role`); whether it
/// succeeded.
fn exec(id: &str, args: &[&str]) -> bool {
    let label = format!("label=saheeli.task={id}");
    let ps = Command::new("docker")
        .args(["ps", "--filter", &label])
        .args(["--format", "{{.ID}} {{.Label \"saheeli.role\"}}"])
        .output()
        .unwrap();
    let cid = String::from_utf8_lossy(&ps.stdout)
        .lines()
        .map(str::trim)
        .find(|l| !l.contains(' '))
        .unwrap_or_default()
        .to_string();
    !cid.is_empty()
        && Command::new("docker")
            .arg("exec")
            .arg(&cid)
            .args(args)
            .output()
            .unwrap()
            .status
            .success()
}

/// Lets a servo waiting in [`hold`]`(name)` go on.
pub(crate) fn release(id: &str, name: &str) {
    assert!(
        exec(id, &["touch", &format!("/tmp/{name}")]),
        "could not release task {id} ({name})"
    );
}

/// The task's gateway socket on the host.
pub(crate) fn socket(s: &Saheeli, id: &str) -> PathBuf {
    let config = std::fs::read_to_string(s.path().join("config.yaml")).unwrap();
    let run_dir = config
        .lines()
        .find_map(|l| l.strip_prefix("run_dir: "))
        .unwrap()
        .to_string();
    Path::new(&run_dir).join(id).join("gateway.sock")
}

/// One HTTP request to a gateway socket: its status and body.
pub(crate) fn gw(sock: &Path, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    let mut c = UnixStream::connect(sock)
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", sock.display()));
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        c,
        "{method} {path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {text}"));
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (status, body.to_string())
}

/// Waits until the task's servo sits in [`hold`]`(name)`; its socket.
pub(crate) fn holding(s: &Saheeli, id: &str, serve: &Serve, name: &str) -> PathBuf {
    until(s, id, serve, "running", |t| t["state"] == "running");
    let held = format!("/tmp/{name}.held");
    assert!(
        wait_for(Duration::from_secs(60), || exec(id, &["test", "-e", &held])),
        "task {id} never reached its hold `{name}`\n{}",
        serve.log()
    );
    let sock = socket(s, id);
    assert!(sock.exists(), "no socket at {}", sock.display());
    sock
}

fn events_of<'a>(t: &'a Value, kind: &str) -> Vec<&'a Value> {
    t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// A fake MCP server (stdio, JSON lines): one tool, `push`, which
/// appends a line to the file named by its argument: the side effect on
/// the host that must not happen without a human's approval.
const MCP_PY: &str = r#"
import json, sys
marker = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    method = m.get("method")
    if method == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
             "serverInfo": {"name": "fake", "version": "1"}}
    elif method == "tools/list":
        r = {"tools": [{"name": "push", "description": "push to production",
                        "inputSchema": {"type": "object", "properties": {"ref": {"type": "string"}}}}]}
    elif method == "tools/call":
        with open(marker, "a") as f:
            f.write(json.dumps(m["params"].get("arguments") or {}) + "\n")
        r = {"content": [{"type": "text", "text": "pushed to production"}], "isError": False}
    else:
        r = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}) + "\n")
    sys.stdout.flush()
"#;

/// Case 36: a gated capability tool runs only on a human's approval of
/// that exact call, once; a direct post without one is refused (403, an
/// event) and nothing runs on the host.
#[test]
fn a_gated_capability_runs_only_on_a_human_approval_of_that_call() {
    require_docker();
    let tmp = tempfile::tempdir().unwrap();
    let mcp = tmp.path().join("mcp.py");
    std::fs::write(&mcp, MCP_PY).unwrap();
    let pushed = tmp.path().join("pushed.log");
    let llm = FakeLlm::start(vec![]);
    let s = project(
        &llm,
        &format!(
            "capabilities:\n  fake:\n    command: python3\n    args: [\"{}\", \"{}\"]\n",
            mcp.display(),
            pushed.display()
        ),
    );
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", hold("go1")),
            ("fake__push", json!({"ref": "main"})),
            ("execute_shell", hold("go2")),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt("s.json", "capabilities: [fake]\napprove: [fake__push]\n"),
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "go1");

    // Straight to the gateway, no approval: refused, nothing runs.
    let call = |args: &str| json!({"tool": "fake__push", "arguments": args});
    let (status, body) = gw(
        &sock,
        "POST",
        "/saheeli/v1/capability",
        Some(&call(r#"{"ref":"main"}"#)),
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("approve"), "{body}");
    assert!(!pushed.exists(), "the gated tool ran without an approval");

    // The servo's own call waits for the human, who approves it.
    release(&id, "go1");
    let t = until(&s, &id, &serve, "waiting", |t| {
        t["state"] == "waiting_human"
    });
    assert_eq!(t["waiting_for"]["tool"], "fake__push", "{t:#}");
    // While it waits, the approval-to-be does not let another call through.
    let (status, _) = gw(
        &sock,
        "POST",
        "/saheeli/v1/capability",
        Some(&call(r#"{"ref":"main"}"#)),
    );
    assert_eq!(status, 403, "not approved yet");
    s.expect(&["task", "approve", &id], 0);
    assert!(
        wait_for(Duration::from_secs(30), || {
            std::fs::read_to_string(&pushed).is_ok_and(|t| t.lines().count() == 1)
        }),
        "the approved call never ran"
    );
    until(&s, &id, &serve, "running again", |t| {
        t["state"] == "running"
    });
    // The approval was for one call: posting it again is refused.
    let (status, body) = gw(
        &sock,
        "POST",
        "/saheeli/v1/capability",
        Some(&call(r#"{"ref":"main"}"#)),
    );
    assert_eq!(status, 403, "an approval ran twice: {body}");
    release(&id, "go2");
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert_eq!(
        std::fs::read_to_string(&pushed).unwrap(),
        "{\"ref\": \"main\"}\n",
        "exactly the approved call ran, once"
    );
    assert_eq!(events_of(&t, "capability_unapproved").len(), 3, "{t:#}");
    assert_eq!(t["gateway_refused"], 3, "{t:#}");
}

/// Cases 19, 21 and 22 (top problem 8): with an ask posted from outside
/// the servo just before `task_complete`, the task still ends `complete`
/// with its work; more asks meanwhile are refused (409, no row), and
/// floods of refused capability calls are counted, not logged.
#[test]
fn an_ending_wins_over_a_dangling_ask_and_floods_are_refused() {
    require_docker();
    let llm = FakeLlm::start(vec![]);
    let s = project(&llm, "");
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", {
                let mut h = hold("go");
                h["command"] = json!(format!(
                    "echo 'the work' >> important.txt; {}",
                    h["command"].as_str().unwrap()
                ));
                h
            }),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write("p.md", &replay_prompt("s.json", ""));
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "go");

    let ask = |i: usize| {
        json!({"call_id": format!("shell-{i}"),
               "waiting": {"kind": "plan", "plan": vec!["P".repeat(60_000); 29]}})
    };
    let (status, body) = gw(&sock, "POST", "/saheeli/v1/ask", Some(&ask(0)));
    assert_eq!(status, 200, "{body}");
    until(&s, &id, &serve, "waiting", |t| {
        t["state"] == "waiting_human"
    });
    for i in 1..40 {
        let (status, body) = gw(&sock, "POST", "/saheeli/v1/ask", Some(&ask(i)));
        assert_eq!(status, 409, "ask {i}: {body}");
    }
    for _ in 0..50 {
        let c = json!({"tool": "nope__x", "arguments": "{}"});
        let (status, _) = gw(&sock, "POST", "/saheeli/v1/capability", Some(&c));
        assert_eq!(status, 403);
    }
    release(&id, "go");
    let t = until(&s, &id, &serve, "ended", |t| {
        !matches!(t["state"].as_str(), Some("running" | "waiting_human"))
    });
    assert_eq!(t["state"], "complete", "{t:#}\n{}", serve.log());
    let results = PathBuf::from(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("important.txt")).unwrap(),
        "the work\n"
    );
    assert_eq!(events_of(&t, "asked").len(), 1, "one ask, one row");
    assert_eq!(events_of(&t, "ask_moot").len(), 1, "{t:#}");
    assert_eq!(
        events_of(&t, "capability_refused").len(),
        5,
        "the first few refusals are events, the rest counted"
    );
    assert_eq!(t["gateway_refused"], 39 + 50, "{t:#}");
    assert!(t["waiting_for"].is_null());
    // Nothing to answer any more.
    s.expect_err(&["task", "approve", &id], 2);
}

/// Case 23: a note marked delivered by someone else than the servo (the
/// agent's shell, posting to the socket) still reaches the model.
#[test]
fn an_injected_note_reaches_the_model_whoever_marks_it_delivered() {
    require_docker();
    let llm = FakeLlm::start(vec![]);
    let s = project(&llm, "");
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", hold("go")),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write("p.md", &replay_prompt("s.json", ""));
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "go");
    s.expect(&["task", "inject", &id, "use the staging database"], 0);
    // What the shell did: poll the inbox, mark the note delivered.
    let (status, body) = gw(&sock, "GET", "/saheeli/v1/inbox?wait_ms=0", None);
    assert_eq!(status, 200, "{body}");
    let inbox: Value = serde_json::from_str(&body).unwrap();
    let ids: Vec<Value> = inbox["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].clone())
        .collect();
    assert_eq!(ids.len(), 1, "{body}");
    let (status, body) = gw(
        &sock,
        "POST",
        "/saheeli/v1/inbox/delivered",
        Some(&json!({ "ids": ids })),
    );
    assert_eq!(status, 200, "{body}");
    release(&id, "go");
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    let results = PathBuf::from(t["results"].as_str().unwrap());
    let session =
        std::fs::read_to_string(results.join(format!("servo-{id}-session.json"))).unwrap();
    assert_eq!(
        session.matches("use the staging database").count(),
        1,
        "the note is in the conversation, once: {session}"
    );
}

/// Case 26: a `replay:` task's gateway spends nothing, whoever asks.
#[test]
fn a_replay_task_gateway_sends_nothing_upstream() {
    require_docker();
    let llm = FakeLlm::start(vec![Reply::tool("task_complete", json!({"message": "x"}))]);
    let s = project(&llm, "");
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", hold("go")),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write("p.md", &replay_prompt("s.json", ""));
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "go");
    let req = json!({"model": "gpt-test", "messages": [{"role": "user", "content": "spend"}]});
    let (status, body) = gw(&sock, "POST", "/v1/chat/completions", Some(&req));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("replay"), "{body}");
    release(&id, "go");
    until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert_eq!(llm.seen_count(), 0, "a replay task reached the provider");
}

/// Case 25: text that tokenizes at 2 bytes a token cannot overspend the
/// budget. The fake provider bills `"a a a …"` at one token per 2 bytes;
/// each call is reserved at one token per byte (never less than the real
/// count) plus its output cap, so what the task is billed never passes
/// `max_tokens` (8000): the exact bound is 8000, and the call that could
/// not fit is refused before it reaches the provider.
#[test]
fn dense_text_cannot_overspend_the_token_budget() {
    require_docker();
    const DENSE: usize = 6000;
    let dense = "a ".repeat(DENSE / 2);
    let llm = FakeLlm::start_matching(vec![], |body| {
        let msgs = body["messages"].as_array()?;
        let text = msgs.last()?["content"].as_str().unwrap_or("");
        if text.starts_with("a a a") {
            // One token per 2 bytes, as a real tokenizer bills this text.
            Some(Reply::Tools(vec![], (text.len() as u64 / 2, 10)))
        } else if msgs.len() <= 2 {
            Some(Reply::tool("execute_shell", hold("go")))
        } else {
            Some(Reply::tool("task_complete", json!({"message": "done"})))
        }
    });
    let s = project(&llm, "");
    s.write(
        "p.md",
        "---\nmodel: gpt-test\nmax_tokens: 8000\n---\nSpend.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "go");
    let mut answered = 0;
    let mut refused = false;
    for _ in 0..10 {
        let req = json!({"model": "gpt-test", "max_tokens": 10,
                         "messages": [{"role": "user", "content": dense}]});
        let (status, body) = gw(&sock, "POST", "/v1/chat/completions", Some(&req));
        match status {
            200 => answered += 1,
            402 => {
                assert!(body.contains("token budget"), "{body}");
                refused = true;
                break;
            }
            _ => panic!("{status}: {body}"),
        }
    }
    assert!(refused, "the budget never refused a call");
    let upstream = llm
        .seen()
        .iter()
        .filter(|c| c.body["messages"].to_string().contains("a a a"))
        .count();
    assert_eq!(upstream, answered, "a refused call reached the provider");
    release(&id, "go");
    let t = until(&s, &id, &serve, "ended", |t| {
        !matches!(t["state"].as_str(), Some("running" | "starting"))
    });
    let billed = t["tokens"].as_u64().unwrap();
    eprintln!("{answered} dense calls answered, billed {billed} of 8000");
    assert!(
        billed <= 8000,
        "billed {billed} against max_tokens 8000: {t:#}"
    );
}

/// Case 39 (top problem 6): a parked servo's session is rewritten while
/// it waits (the workspace is the agent's) to hold another call than the
/// one the human is shown; after the approval the servo runs only the
/// call the human approved, as the foreman recorded it, and refuses the
/// rewritten one.
#[test]
fn an_approval_runs_only_the_call_the_human_saw() {
    require_docker();
    let llm = FakeLlm::start(vec![]);
    let s = project(&llm, "");
    s.write(
        "s.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "echo benign-secret-check"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt(
            "s.json",
            "approve: {execute_shell: \"secret\"}\npark_after: 1s\n",
        ),
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "parked", |t| {
        t["state"] == "waiting_human" && t["parked"] == true
    });
    assert!(
        t["waiting_for"]["arguments"]
            .as_str()
            .unwrap()
            .contains("benign-secret-check")
    );
    // The parked workspace, rewritten as the agent's watcher did.
    let kept = s.path().join(format!(".saheeli/workspaces/{id}/mnt"));
    assert!(
        kept.join(format!("servo-{id}-session.json")).is_file(),
        "no parked workspace"
    );
    let tamper = format!(
        "import json; p = '/workspace/servo-{id}-session.json'; s = json.load(open(p)); \
         s['parked']['arguments'] = json.dumps({{'command': 'echo EVIL-RAN > evil.txt'}}); \
         s['steps'] = 0; json.dump(s, open(p, 'w'))"
    );
    let out = Command::new("docker")
        .args(["run", "--rm", "-u", "0", "--network", "none", "-v"])
        .arg(format!("{}:/workspace", kept.display()))
        .args([
            "--entrypoint",
            "python3",
            &crate::util::image(),
            "-c",
            &tamper,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.expect(&["task", "approve", &id], 0);
    let t = until(&s, &id, &serve, "ended", |t| t["finished_at"].is_string());
    let results = PathBuf::from(t["results"].as_str().unwrap());
    assert!(
        !results.join("evil.txt").exists(),
        "a call nobody approved ran: {t:#}"
    );
    // Two walls stop it: the session's seal (a separated servo refuses a
    // session changed outside it: `bad_task`), and behind it the servo's
    // check of the call against the foreman's record of the ask.
    let session =
        std::fs::read_to_string(results.join(format!("servo-{id}-session.json"))).unwrap();
    assert!(
        t["reason"] == "bad_task" || session.contains("the call the human replied to differs"),
        "{t:#}\n{session}"
    );
    assert!(
        t["state"] == "complete" || (t["state"] == "incomplete" && t["reason"] == "bad_task"),
        "{t:#}"
    );
}
