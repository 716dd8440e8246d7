//! Third-party agents in the servo (issue 25), with the real CLI from the
//! Python package index (mini-swe-agent, installed in its agent image by
//! `saheeli build-servo --agent mini-swe-agent`; scripts/test.sh builds
//! it) against the fake LLM's OpenAI wire format: the task completes with
//! the agent's file in the results, the real key is nowhere in the
//! container, a `kill -9` of the foreman goes unnoticed, and a failing
//! agent ends `agent_failed`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, leftovers, require_docker};

/// The mini-swe-agent image the tests run.
fn mini_image() -> String {
    std::env::var("SAHEELI_TEST_MINI_IMAGE")
        .unwrap_or_else(|_| "saheeli-servo-mini-swe-agent-test:latest".into())
}

/// Fails (never skips) without the agent image.
pub(crate) fn require_mini() {
    require_docker();
    let img = Command::new("docker")
        .args(["image", "inspect", &mini_image()])
        .output()
        .unwrap();
    assert!(
        img.status.success(),
        "agent image `{}` is missing: scripts/test.sh builds it with \
         `saheeli build-servo --agent mini-swe-agent --tag {}`",
        mini_image(),
        mini_image()
    );
}

const KEY: &str = "sk-real-key-i25-Q7vXw2LmP9";

pub(crate) fn project(llm: &FakeLlm) -> Saheeli {
    Saheeli::with_config(&format!("agents:\n  mini-swe-agent: {}\n", mini_image()))
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", &llm.base_url())
}

fn messages(body: &Value) -> usize {
    body["messages"].as_array().map_or(0, Vec::len)
}

fn bash(command: &str) -> Reply {
    Reply::Tools(
        vec![("bash".into(), json!({ "command": command }))],
        (120, 15),
    )
}

/// The script: by the conversation's length, so a call repeated after a
/// crash gets the same turn. Turn one creates a file and runs a command
/// (and records every environment the agent's shell can read); turn two
/// submits.
pub(crate) fn turns(
    slow_second: Option<Duration>,
) -> impl Fn(&Value) -> Option<Reply> + Send + 'static {
    move |body| {
        Some(match messages(body) {
            0..=2 => bash(
                "echo hello from mini > hello.txt && wc -c hello.txt && \
                 (env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done) \
                 > seen-env.txt 2>/dev/null; true",
            ),
            _ => {
                let done =
                    bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo wrote hello.txt");
                match slow_second {
                    Some(d) => Reply::Slow(d, Box::new(done)),
                    None => done,
                }
            }
        })
    }
}

const PROMPT: &str = "---\nmodel: gpt-test\nagent: mini-swe-agent\ntimeout: 5m\n---\nWrite hello.txt, then check it.\n";

/// Every file below `dir`, links not followed.
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(files(&e.path()));
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    out
}

fn assert_no_key_in(dir: &Path) {
    for f in files(dir) {
        let bytes = std::fs::read(&f).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(KEY),
            "the real key is in `{}`",
            f.display()
        );
    }
}

#[test]
fn mini_swe_agent_completes_and_never_sees_the_key() {
    require_mini();
    let llm = FakeLlm::start_matching(vec![], turns(Some(Duration::from_secs(3))));
    let s = project(&llm);
    s.write("p.md", PROMPT);
    let mut run = s
        .cmd(&["run", "p.md", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // While the second call is held: the container's own configuration.
    assert!(
        wait_for(Duration::from_secs(120), || llm.seen_count() >= 2),
        "the agent made no second call; seen {}",
        llm.seen_count()
    );
    let tasks = s.tasks();
    let id = tasks[0]["id"].as_str().unwrap().to_string();
    let ps = Command::new("docker")
        .args(["ps", "-q", "--filter", &format!("label=saheeli.task={id}")])
        .output()
        .unwrap();
    let cid = String::from_utf8_lossy(&ps.stdout).trim().to_string();
    assert!(!cid.is_empty(), "no running container for {id}");
    let inspect = Command::new("docker")
        .args(["inspect", &cid])
        .output()
        .unwrap();
    let inspect = String::from_utf8_lossy(&inspect.stdout);
    crate::util::assert_runs_image(&inspect, &mini_image());
    assert!(!inspect.contains(KEY), "the key is in docker inspect");

    let out = std::mem::take(&mut run.stdout).unwrap();
    let code = run.wait().unwrap();
    let t: Value = serde_json::from_reader(out).unwrap();
    assert_eq!(code.code(), Some(0), "{t}");
    assert_eq!(t["state"], "complete", "{t}");
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("hello.txt")).unwrap(),
        "hello from mini\n"
    );
    let completion: Value =
        serde_json::from_slice(&std::fs::read(results.join("complete.json")).unwrap()).unwrap();
    assert_eq!(completion["message"], "wrote hello.txt", "{completion}");
    // The agent's home came back: its trajectory holds the shell's output.
    let traj = std::fs::read_to_string(results.join(".saheeli/agent/trajectory.json")).unwrap();
    assert!(traj.contains("16 hello.txt"), "{traj}");
    // The agent's shell read every environment it could, the servo's
    // included where allowed: the placeholder is there, the key is not.
    let env = std::fs::read_to_string(results.join("seen-env.txt")).unwrap();
    assert!(
        env.contains("OPENAI_API_KEY=sk-saheeli-placeholder"),
        "{env}"
    );
    assert_no_key_in(results);
    // The provider saw the real key, from the gateway only, and the model
    // the task named; never the placeholder.
    let seen = llm.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for call in &seen {
        assert_eq!(
            call.authorization.as_deref(),
            Some(&*format!("Bearer {KEY}"))
        );
        assert_eq!(call.body["model"], "gpt-test");
        assert_eq!(call.body["tools"][0]["function"]["name"], "bash");
    }
    assert!(leftovers(&id).is_empty(), "{:?}", leftovers(&id));
}

fn serve(s: &Saheeli) -> Child {
    s.cmd(&["serve", "--drain"])
        .env("RUST_LOG", "saheeli=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn a_foreman_killed_mid_call_goes_unnoticed_by_the_agent() {
    require_mini();
    let llm = FakeLlm::start_matching(vec![], turns(Some(Duration::from_secs(4))));
    let s = project(&llm);
    s.write("p.md", PROMPT);
    let id = s.submit("p.md");
    let mut first = serve(&s);
    assert!(
        wait_for(Duration::from_secs(120), || llm.seen_count() >= 2),
        "the agent made no second call"
    );
    first.kill().unwrap(); // SIGKILL, the second call in flight
    first.wait().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let mut second = serve(&s);
    assert!(
        wait_for(Duration::from_secs(240), || {
            let state = s.task(&id)["state"].as_str().unwrap_or("").to_string();
            !matches!(state.as_str(), "queued" | "starting" | "running")
        }),
        "the task did not end"
    );
    second.wait().unwrap();
    let t = s.task(&id);
    assert_eq!(t["state"], "complete", "{t}");
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("hello.txt")).unwrap(),
        "hello from mini\n"
    );
    assert_eq!(s.tasks().len(), 1, "one task, completed once");
    assert!(leftovers(&id).is_empty(), "{:?}", leftovers(&id));
}

#[test]
fn an_agent_that_exits_non_zero_ends_agent_failed() {
    require_mini();
    let llm = FakeLlm::start(vec![]);
    let s = project(&llm);
    // A custom command in the agent image: it sees the prompt file and
    // the loopback URL, prints, and fails.
    s.write(
        "p.md",
        "---\nmodel: gpt-test\nagent:\n  command: [sh, -c, 'test -s \"$1\" && echo \"$OPENAI_BASE_URL\" > url.txt && exit 3', sh, '{prompt_file}']\n  api: openai-chat\n  image: IMAGE\n---\nFail on purpose.\n"
            .replace("IMAGE", &mini_image())
            .as_str(),
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 1);
    assert_eq!(t["state"], "incomplete", "{t}");
    assert_eq!(t["reason"], "agent_failed", "{t}");
    let results = Path::new(t["results"].as_str().unwrap());
    let url = std::fs::read_to_string(results.join("url.txt")).unwrap();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.trim_end().ends_with("/v1"),
        "{url}"
    );
    let id = t["id"].as_str().unwrap();
    let audit = std::fs::read_to_string(results.join(format!("servo-{id}-audit.log"))).unwrap();
    assert!(audit.contains("exited with code 3"), "{audit}");
    assert!(llm.seen().is_empty());
}

#[test]
fn agents_are_checked_at_submit() {
    let llm = FakeLlm::start(vec![]);
    let s = project(&llm).env("ANTHROPIC_API_KEY", "sk-ant-test");
    // (front-matter, what the error names)
    let cases = [
        ("agent: claude\n", "unknown agent `claude`"),
        ("agent: claude-code\n", "needs an Anthropic provider"),
        (
            "model: claude-sonnet-4-5\nagent: aider\n",
            "needs an OpenAI-compatible provider",
        ),
        ("agent: codex\n", "saheeli build-servo --agent codex"),
        (
            "agent: { command: [], api: openai-chat }\n",
            "`agent.command` is empty",
        ),
    ];
    for (fm, want) in cases {
        let fm = if fm.contains("model:") {
            fm.to_string()
        } else {
            format!("model: gpt-test\n{fm}")
        };
        s.write("bad.md", &format!("---\n{fm}---\nx\n"));
        let err = s.expect_err(&["task", "submit", "--prompt", "bad.md"], 2);
        assert!(err.contains(want) && err.contains("bad.md"), "{fm}: {err}");
    }
    crate::util::assert_nothing_queued(&s);
}
