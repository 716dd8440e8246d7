//! Third-party agents and the human desk (issue 47, HOSTILE.md N13, N33):
//! a custom agent that exits 0 having said nothing ends `agent_failed`;
//! one that fails is told by its own exit code and last words in status
//! and the report, as in the audit log; a message injected into its task
//! reaches the model in the agent's next call (chat and Anthropic shapes)
//! and stays in place on the next, with a `noted` event; so it does with
//! the real Claude Code (Anthropic Messages) and Codex (Responses).
//!
//! The custom agents are small Python scripts in the servo image, calling
//! the loopback URL their servo gives them; the fake LLM shows what arrived.

use std::path::Path;

use serde_json::Value;

use crate::fake_llm::{FakeLlm, Reply};
use crate::util::{Saheeli, require_docker};

const OPENAI_KEY: &str = "sk-real-openai-i47-weak";
const ANTHROPIC_KEY: &str = "sk-ant-real-i47-weak";

/// An agent making two calls in one conversation: the second carries
/// the first's answer and a new user turn, as an agent's loop does.
const TWO_CALLS: &str = r#"
import json, os, sys, urllib.request
api = sys.argv[1]
model = os.environ["SAHEELI_AGENT_MODEL"]
def call(body):
    if api == "chat":
        url = os.environ["OPENAI_BASE_URL"] + "/chat/completions"
        h = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
    else:
        url = os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages"
        h = {"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"}
    h["content-type"] = "application/json"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=h)
    return json.load(urllib.request.urlopen(req, timeout=60))
def text(r):
    if api == "chat":
        return r["choices"][0]["message"]["content"]
    return "".join(b.get("text", "") for b in r["content"])
msgs = [{"role": "user", "content": "go"}]
if api == "chat":
    msgs.insert(0, {"role": "system", "content": "you are a test"})
body = {"model": model, "max_tokens": 100, "messages": msgs}
a = text(call(body))
msgs += [{"role": "assistant", "content": a}, {"role": "user", "content": "go on"}]
b = text(call(body))
print("answers:", a, b)
"#;

fn project(llm: &FakeLlm) -> Saheeli {
    Saheeli::new()
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("OPENAI_BASE_URL", &llm.base_url())
        .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        .env("ANTHROPIC_BASE_URL", &llm.anthropic_url())
}

/// A custom agent in the servo image: `command` (YAML flow list) speaking `api`.
fn agent_prompt(model: &str, command: &str, api: &str) -> String {
    format!(
        "---\nmodel: {model}\nworkspace: ws\nagent:\n  command: {command}\n  api: {api}\n---\nGo.\n"
    )
}

fn audit(t: &Value) -> String {
    let id = t["id"].as_str().unwrap();
    let results = Path::new(t["results"].as_str().unwrap());
    std::fs::read_to_string(results.join(format!("servo-{id}-audit.log"))).unwrap()
}

/// The detail of the audit log's `finish` event.
fn finish_detail(audit: &str) -> String {
    audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "finish")
        .and_then(|e| e["detail"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no finish detail in\n{audit}"))
}

/// HOSTILE.md N13: the docs say an agent that exits 0 with no answer
/// ends `incomplete (agent_failed)`; it ended `complete` with an empty
/// message.
#[test]
fn a_custom_agent_that_exits_0_saying_nothing_ends_agent_failed() {
    require_docker();
    let llm = FakeLlm::start(vec![]);
    let s = project(&llm);
    s.write("ws/.keep", "");
    s.write(
        "p.md",
        &agent_prompt("gpt-test", "[sh, -c, 'exit 0']", "openai-chat"),
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 1);
    assert_eq!(t["state"], "incomplete", "{t}");
    assert_eq!(t["reason"], "agent_failed", "{t}");
    let detail = t["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("exited 0 but printed nothing"), "{t}");
    assert!(llm.seen().is_empty());
}

/// Issue 47's last words: status, report.md and the dashboard (the
/// task's detail) say what the audit log says, the agent's own exit
/// code and its last lines, not the servo's exit code.
#[test]
fn a_failed_agent_s_last_words_and_exit_code_are_in_status_and_the_report() {
    require_docker();
    let llm = FakeLlm::start(vec![]);
    let s = project(&llm);
    s.write("ws/.keep", "");
    s.write(
        "p.md",
        &agent_prompt(
            "gpt-test",
            "[sh, -c, 'echo \"fatal: the flux capacitor is cracked\" >&2; exit 7']",
            "openai-chat",
        ),
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 1);
    assert_eq!(t["reason"], "agent_failed", "{t}");
    let logged = finish_detail(&audit(&t));
    assert!(
        logged.contains("exited with code 7") && logged.contains("flux capacitor is cracked"),
        "{logged}"
    );
    let id = t["id"].as_str().unwrap();
    let status = s.task(id);
    let detail = status["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("exited with code 7") && detail.contains("flux capacitor is cracked"),
        "{status}"
    );
    // One exit code, the agent's: not the servo's own (10).
    assert!(!detail.contains("exit 10"), "{detail}");
    let results = Path::new(t["results"].as_str().unwrap());
    let report = std::fs::read_to_string(results.join("report.md")).unwrap();
    assert!(
        report.contains("exited with code 7") && report.contains("flux capacitor is cracked"),
        "{report}"
    );
    let text = s.expect(&["task", "status", id], 0);
    assert!(text.contains("flux capacitor is cracked"), "{text}");
}

/// Where in a call's conversation the injected message is.
fn note_at(messages: &Value) -> Option<usize> {
    messages
        .as_array()?
        .iter()
        .position(|m| m.to_string().contains("NOTE-47-weak"))
}

/// HOSTILE.md N33: `task inject` promised delivery to a third-party
/// agent's task and the message was lost. Now the agent's next call
/// carries it as a user turn in its API's own shape, the next call after
/// that has it in the same place, and the audit log has a `noted` event.
fn inject_reaches_the_agent(api: &str, model: &str) {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::Text("heard you".into(), (40, 5)),
        Reply::Text("fine".into(), (60, 5)),
    ]);
    let s = project(&llm);
    s.write("ws/agent.py", TWO_CALLS);
    let short = if api == "anthropic" {
        "messages"
    } else {
        "chat"
    };
    s.write(
        "p.md",
        &agent_prompt(
            model,
            &format!("[python3, /workspace/agent.py, {short}]"),
            api,
        ),
    );
    let id = s.submit("p.md");
    let said = s.expect(&["task", "inject", &id, "NOTE-47-weak: use tabs"], 0);
    assert!(said.contains("agent's next LLM call"), "{said}");
    s.drain();
    let t = s.task(&id);
    assert_eq!(t["state"], "complete", "{t}");
    let seen = llm.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let (first, second) = (&seen[0].body["messages"], &seen[1].body["messages"]);
    match api {
        "anthropic" => {
            // The text joins the user turn the call ends on: turns still alternate.
            assert_eq!(first.as_array().unwrap().len(), 1, "{first}");
            assert_eq!(first[0]["role"], "user");
            assert_eq!(first[0]["content"][0]["text"], "go", "{first}");
            let note = first[0]["content"][1]["text"].as_str().unwrap();
            assert!(note.contains("NOTE-47-weak: use tabs"), "{first}");
            assert_eq!(note_at(second), Some(0), "{second}");
            assert_eq!(second[1]["role"], "assistant", "{second}");
        }
        _ => {
            assert_eq!(note_at(first), Some(2), "{first}");
            assert_eq!(first[2]["role"], "user", "{first}");
            assert!(
                first[2]["content"]
                    .as_str()
                    .unwrap()
                    .contains("A message from"),
                "{first}"
            );
            // Before the answer to the call that carried it.
            assert_eq!(note_at(second), Some(2), "{second}");
            assert_eq!(second[3]["role"], "assistant", "{second}");
            assert_eq!(second.as_array().unwrap().len(), 5, "{second}");
        }
    }
    let log = audit(&t);
    let noted: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "noted" && e["text"] == "NOTE-47-weak: use tabs")
        .collect();
    assert_eq!(noted.len(), 1, "{log}");
    let logs = s.expect(&["task", "logs", &id], 0);
    assert!(
        logs.contains("message from") && logs.contains("NOTE-47-weak"),
        "{logs}"
    );
}

#[test]
fn inject_reaches_a_custom_agent_speaking_openai_chat() {
    inject_reaches_the_agent("openai-chat", "gpt-test");
}

#[test]
fn inject_reaches_a_custom_agent_speaking_anthropic() {
    inject_reaches_the_agent("anthropic", "claude-test");
}

/// HOSTILE.md 57: the database, its `-wal` and `-shm`, the state
/// directory and the trajectories are this user's only, even when the
/// database was made world-readable before.
#[test]
fn the_database_state_dir_and_trajectories_are_private() {
    use std::os::unix::fs::PermissionsExt;
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::Text("one".into(), (40, 5)),
        Reply::Text("two".into(), (60, 5)),
    ]);
    let s = project(&llm);
    // A database left world-readable (by hand, by an older saheeli).
    let db = s.write("saheeli.db", "");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    s.write("ws/agent.py", TWO_CALLS);
    s.write(
        "p.md",
        &agent_prompt(
            "gpt-test",
            "[python3, /workspace/agent.py, chat]",
            "openai-chat",
        ),
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(t["state"], "complete", "{t}");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&db), 0o600, "saheeli.db");
    for side in ["saheeli.db-wal", "saheeli.db-shm"] {
        let p = s.path().join(side);
        if p.exists() {
            assert_eq!(mode(&p), 0o600, "{side}");
        }
    }
    let state = s.path().join(".saheeli");
    assert_eq!(mode(&state), 0o700, ".saheeli");
    let traj = state.join("trajectories");
    assert_eq!(mode(&traj), 0o700, "trajectories");
    let files: Vec<_> = std::fs::read_dir(&traj)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!files.is_empty(), "no trajectory written");
    for f in files {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
    // While a foreman has it open, the -wal is there: private too.
    let open = s.cmd(&["task", "status", "--json"]).output().unwrap();
    assert!(open.status.success());
    let wal = s.path().join("saheeli.db-wal");
    if wal.exists() {
        assert_eq!(mode(&wal), 0o600, "saheeli.db-wal");
    }
}

/// The same with a real CLI (its pinned wheel, the fake LLM streaming):
/// every call of its conversation carries the message, the first as a
/// new user text and the later ones (the CLI's own history lacks it) in
/// the same place, and it is noted once.
fn inject_reaches_a_real_cli(cli: crate::agents_cli::Cli) {
    cli.require();
    let llm = FakeLlm::start_matching(vec![], crate::agents_cli::turns(cli, None));
    let s = cli.project(&llm);
    s.write("p.md", &cli.prompt(""));
    let id = s.submit("p.md");
    s.expect(&["task", "inject", &id, "NOTE-47-weak: use tabs"], 0);
    s.drain();
    let t = s.task(&id);
    assert_eq!(t["state"], "complete", "{t}");
    let seen = llm.seen();
    let turns: Vec<&Value> = seen
        .iter()
        .map(|c| &c.body)
        .filter(|b| b.to_string().contains("Write hello.txt"))
        .collect();
    assert!(
        turns.len() >= 2,
        "{} calls of its conversation",
        turns.len()
    );
    for (i, b) in turns.iter().enumerate() {
        assert!(
            b.to_string().contains("NOTE-47-weak: use tabs"),
            "{}: call {i} of its conversation lacks the message: {b}",
            cli.name
        );
    }
    let log = audit(&t);
    let noted = log
        .lines()
        .filter(|l| l.contains("\"event\":\"noted\""))
        .count();
    assert_eq!(noted, 1, "{log}");
}

#[test]
fn inject_reaches_claude_code() {
    inject_reaches_a_real_cli(crate::agents_cli::CLAUDE);
}

#[test]
fn inject_reaches_codex() {
    inject_reaches_a_real_cli(crate::agents_cli::CODEX);
}

/// `task pause` holds a third-party agent's next LLM call (the task is
/// `paused`, nothing reaches the provider) until `task resume`; a message
/// injected meanwhile goes with that call.
#[test]
fn a_pause_holds_a_custom_agent_s_next_call_until_resumed() {
    use crate::human::{Serve, until};
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::Text("heard you".into(), (40, 5)),
        Reply::Text("fine".into(), (60, 5)),
    ]);
    let s = project(&llm);
    s.write("ws/agent.py", TWO_CALLS);
    s.write(
        "p.md",
        &agent_prompt(
            "gpt-test",
            "[python3, /workspace/agent.py, chat]",
            "openai-chat",
        ),
    );
    let id = s.submit("p.md");
    s.expect(&["task", "pause", &id], 0);
    let serve = Serve::start(&s, &[]);
    until(&s, &id, &serve, "paused", |t| t["state"] == "paused");
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(llm.seen().is_empty(), "a call went out while paused");
    s.expect(&["task", "inject", &id, "NOTE-47-weak: while paused"], 0);
    s.expect(&["task", "resume", &id], 0);
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    let seen = llm.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(note_at(&seen[0].body["messages"]), Some(2));
    let log = audit(&t);
    for event in [
        "\"event\":\"paused\"",
        "\"event\":\"resumed\"",
        "\"event\":\"noted\"",
    ] {
        assert!(log.contains(event), "{event}: {log}");
    }
}
