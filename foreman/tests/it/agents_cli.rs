//! Claude Code and Codex in the servo (issue 25), the real CLIs from
//! their pinned wheels (`saheeli build-servo --agent claude-code|codex`;
//! scripts/test.sh builds both images) against the fake LLM speaking
//! Anthropic Messages and OpenAI Responses, streamed. Each CLI runs a
//! scripted turn that makes it create a file and run a shell command in
//! /workspace (which also probes the loopback door from inside), then
//! ends. Per CLI: the task completes with the file in `results/` and the
//! real key nowhere in the container; a budget smaller than the script
//! ends the stream and the task (`incomplete` / `budget`, the ledger what
//! the fake billed); a `kill -9` of the foreman goes unnoticed. Claude
//! Code also asks a person through `servo mcp`; Codex's answer is
//! verified by `verify:` after it exits.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::human::{Serve, until};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, leftovers, require_docker};

const KEY: &str = "sk-real-key-i25-cli-R4tYu8NbV3";

/// One CLI under test.
#[derive(Clone, Copy)]
pub(crate) struct Cli {
    pub name: &'static str,
    image_env: &'static str,
    default_image: &'static str,
    pub model: &'static str,
}

pub(crate) const CLAUDE: Cli = Cli {
    name: "claude-code",
    image_env: "SAHEELI_TEST_CLAUDE_IMAGE",
    default_image: "saheeli-servo-claude-code-test:latest",
    model: "claude-test",
};

pub(crate) const AIDER: Cli = Cli {
    name: "aider",
    image_env: "SAHEELI_TEST_AIDER_IMAGE",
    default_image: "saheeli-servo-aider-test:latest",
    model: "gpt-test",
};

pub(crate) const CODEX: Cli = Cli {
    name: "codex",
    image_env: "SAHEELI_TEST_CODEX_IMAGE",
    default_image: "saheeli-servo-codex-test:latest",
    model: "gpt-test",
};

impl Cli {
    /// The same CLI on another model name.
    pub fn with_model(self, model: &'static str) -> Cli {
        Cli { model, ..self }
    }

    pub fn image(self) -> String {
        std::env::var(self.image_env).unwrap_or_else(|_| self.default_image.into())
    }

    /// Fails (never skips) without the agent image.
    pub fn require(self) {
        require_docker();
        let img = Command::new("docker")
            .args(["image", "inspect", &self.image()])
            .output()
            .unwrap();
        assert!(
            img.status.success(),
            "agent image `{}` is missing: scripts/test.sh builds it with \
             `saheeli build-servo --agent {} --tag {}`",
            self.image(),
            self.name,
            self.image()
        );
    }

    fn anthropic(self) -> bool {
        self.name == "claude-code"
    }

    /// A project whose tasks run this CLI against `llm` with the real key.
    pub fn project(self, llm: &FakeLlm) -> Saheeli {
        let s = Saheeli::with_config(&format!("agents:\n  {}: {}\n", self.name, self.image()));
        if self.anthropic() {
            s.env("ANTHROPIC_API_KEY", KEY)
                .env("ANTHROPIC_BASE_URL", &llm.anthropic_url())
        } else {
            s.env("OPENAI_API_KEY", KEY)
                .env("OPENAI_BASE_URL", &llm.base_url())
        }
    }

    pub fn prompt(self, front: &str) -> String {
        format!(
            "---\nmodel: {}\nagent: {}\ntimeout: 5m\n{front}---\nWrite hello.txt, then check it.\n",
            self.model, self.name
        )
    }

    /// The CLI's shell tool called with `command`.
    pub fn shell(self, command: &str, usage: (u64, u64)) -> Reply {
        let (tool, args) = if self.anthropic() {
            ("Bash", json!({"command": command, "description": "run it"}))
        } else {
            ("exec_command", json!({"cmd": command}))
        };
        Reply::Tools(vec![(tool.into(), args)], usage)
    }

    /// How many tool results the CLI has sent back in this request.
    pub fn results(self, body: &Value) -> usize {
        if self.anthropic() {
            body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["content"].as_array())
                .flatten()
                .filter(|b| b["type"] == "tool_result")
                .count()
        } else {
            body["input"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|i| i["type"] == "function_call_output")
                .count()
        }
    }

    fn base_env(self) -> &'static str {
        if self.anthropic() {
            "ANTHROPIC_BASE_URL"
        } else {
            "OPENAI_BASE_URL"
        }
    }

    /// Python run by the CLI's shell: from inside the container, asks the
    /// loopback door for an unknown path, the gateway's own routes and
    /// another model; prints what came back.
    fn probe(self) -> String {
        let (path, body) = if self.anthropic() {
            (
                "/v1/messages",
                r#"{"model":"claude-opus-other","max_tokens":50,"messages":[{"role":"user","content":"PROBE-OTHER-MODEL"}]}"#,
            )
        } else {
            (
                "/responses",
                r#"{"model":"gpt-other-expensive","input":"PROBE-OTHER-MODEL"}"#,
            )
        };
        format!(
            "import json,os,urllib.request as u\n\
             b=os.environ['{}']\n\
             def call(m,p,d=None):\n\
             \x20 r=u.Request(b+p,data=d and d.encode(),method=m,headers={{'content-type':'application/json','anthropic-version':'2023-06-01','x-api-key':'x','authorization':'Bearer x'}})\n\
             \x20 try:\n\
             \x20\x20 with u.urlopen(r) as f: return [f.status,json.loads(f.read())]\n\
             \x20 except Exception as e: return [getattr(e,'code',0),str(getattr(e,'read',lambda:b'')()[:300])]\n\
             print(json.dumps({{'unknown':call('POST','/models','{{}}'),'key':call('GET','/../saheeli/v1/session-key'),'other':call('POST','{path}','{body}')}}))\n",
            self.base_env()
        )
    }

    /// Turn one: make the file, read every environment the shell can,
    /// probe the door.
    pub fn first_command(self) -> String {
        format!(
            "echo hello from {} > hello.txt && wc -c hello.txt && \
             (env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; echo; done) > seen-env.txt 2>/dev/null; \
             cat > /tmp/probe.py <<'EOF'\n{}EOF\npython3 /tmp/probe.py > probe.json 2>&1; true",
            self.name,
            self.probe()
        )
    }
}

/// Whether this is the probe's own call (not a turn quoting its script).
fn is_probe(body: &Value) -> bool {
    body["messages"][0]["content"] == "PROBE-OTHER-MODEL" || body["input"] == "PROBE-OTHER-MODEL"
}

/// The usual script: a probe's request is answered with text; turn one
/// runs [`Cli::first_command`]; turn two ends with a text answer (after
/// `slow`, when given).
pub(crate) fn turns(
    cli: Cli,
    slow: Option<Duration>,
) -> impl Fn(&Value) -> Option<Reply> + Send + 'static {
    move |body| {
        if is_probe(body) {
            return Some(Reply::Text("probe answered".into(), (20, 5)));
        }
        Some(match cli.results(body) {
            0 => cli.shell(&cli.first_command(), (400, 60)),
            _ => {
                let done = Reply::Text("wrote hello.txt".into(), (500, 12));
                match slow {
                    Some(d) => Reply::Slow(d, Box::new(done)),
                    None => done,
                }
            }
        })
    }
}

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

fn container_of(id: &str) -> String {
    let ps = Command::new("docker")
        .args(["ps", "-q", "--filter", &format!("label=saheeli.task={id}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&ps.stdout).trim().to_string()
}

fn completes_and_never_sees_the_key(cli: Cli) {
    cli.require();
    let llm = FakeLlm::start_matching(vec![], turns(cli, Some(Duration::from_secs(3))));
    let s = cli.project(&llm);
    s.write("p.md", &cli.prompt(""));
    let run = s
        .cmd(&["run", "p.md", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // While the last call is held: the container's own configuration.
    assert!(
        wait_for(Duration::from_secs(180), || {
            llm.seen().iter().any(|c| cli.results(&c.body) > 0)
        }),
        "{}: the agent made no second call; seen {:?}",
        cli.name,
        llm.seen().iter().map(|c| &c.path).collect::<Vec<_>>()
    );
    let id = s.tasks()[0]["id"].as_str().unwrap().to_string();
    let cid = container_of(&id);
    assert!(!cid.is_empty(), "no running container for {id}");
    let inspect = Command::new("docker")
        .args(["inspect", &cid])
        .output()
        .unwrap();
    let inspect = String::from_utf8_lossy(&inspect.stdout);
    crate::util::assert_runs_image(&inspect, &cli.image());
    assert!(!inspect.contains(KEY), "the key is in docker inspect");

    let out = run.wait_with_output().unwrap();
    let t: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert_eq!(t["state"], "complete", "{t}");
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("hello.txt")).unwrap(),
        format!("hello from {}\n", cli.name)
    );
    let completion: Value =
        serde_json::from_slice(&std::fs::read(results.join("complete.json")).unwrap()).unwrap();
    assert_eq!(completion["message"], "wrote hello.txt", "{completion}");
    // The agent's home came back (its own transcript files in it).
    assert!(
        !files(&results.join(".saheeli/agent")).is_empty(),
        "nothing collected of the agent's home"
    );
    // Every environment the agent's shell could read: the placeholder
    // is there, the key is not, in no file of the results.
    let env = std::fs::read_to_string(results.join("seen-env.txt")).unwrap();
    assert!(env.contains("sk-saheeli-placeholder"), "{env}");
    for f in files(results) {
        let bytes = std::fs::read(&f).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(KEY),
            "the real key is in `{}`",
            f.display()
        );
    }
    // From inside: an unknown path and the gateway's own routes are
    // refused at the door, and so is a call naming another model.
    let probe = std::fs::read_to_string(results.join("probe.json")).unwrap();
    let p: Value = serde_json::from_str(probe.trim())
        .unwrap_or_else(|e| panic!("{e}: the probe printed {probe}"));
    assert_eq!(p["unknown"][0], 404, "{p}");
    assert_eq!(p["key"][0], 404, "{p}");
    assert_eq!(p["other"][0], 400, "{p}");
    assert!(
        p["other"][1]
            .as_str()
            .is_some_and(|t| t.contains("field `model`") && t.contains(cli.model)),
        "{p}"
    );
    let seen = llm.seen();
    assert!(
        !seen.iter().any(|c| is_probe(&c.body)),
        "the call naming another model reached the provider"
    );
    for call in &seen {
        assert_eq!(call.body["model"], cli.model, "{}", call.body);
        let sent = call.api_key.clone().or(call.authorization.clone());
        assert!(
            sent.as_deref().is_some_and(|k| k.ends_with(KEY)),
            "the provider got {sent:?}"
        );
    }
    assert!(leftovers(&id).is_empty(), "{:?}", leftovers(&id));
}

#[test]
fn claude_code_completes_and_never_sees_the_key() {
    completes_and_never_sees_the_key(CLAUDE);
}

#[test]
fn codex_completes_and_never_sees_the_key() {
    completes_and_never_sees_the_key(CODEX);
}

/// Turn one's stream reports more output than the budget has left: the
/// gateway ends it with the API's error event, the CLI stops, and the
/// task ends `incomplete` / `budget` with what the fake billed.
fn a_budget_smaller_than_the_script_stops_it(cli: Cli) {
    cli.require();
    let llm = FakeLlm::start_matching(vec![], move |body| {
        Some(match cli.results(body) {
            0 => cli.shell("echo never > never.txt", (1500, 60_000)),
            _ => Reply::Text("should not get here".into(), (100, 10)),
        })
    });
    let s = cli.project(&llm);
    s.write("p.md", &cli.prompt("max_tokens: 50000\n"));
    let t = s.expect_json(&["run", "p.md", "--json"], 1);
    assert_eq!(
        (t["state"].as_str(), t["reason"].as_str()),
        (Some("incomplete"), Some("budget")),
        "{t:#}"
    );
    assert!(llm.billed() > 0, "nothing was billed");
    assert_eq!(t["tokens"].as_u64(), Some(llm.billed()), "{t:#}");
    // The usage comes at the stream's end, after the tool call's block:
    // the CLI may have run that call, but it made no further one.
    assert!(
        llm.seen().iter().all(|c| cli.results(&c.body) == 0),
        "a call after the budget was spent reached the provider"
    );
}

#[test]
fn claude_code_is_stopped_by_the_budget_mid_stream() {
    a_budget_smaller_than_the_script_stops_it(CLAUDE);
}

#[test]
fn codex_is_stopped_by_the_budget_mid_stream() {
    a_budget_smaller_than_the_script_stops_it(CODEX);
}

fn a_foreman_killed_mid_call_goes_unnoticed(cli: Cli) {
    cli.require();
    let llm = FakeLlm::start_matching(vec![], turns(cli, Some(Duration::from_secs(4))));
    let s = cli.project(&llm);
    s.write("p.md", &cli.prompt(""));
    let id = s.submit("p.md");
    let first = Serve::start(&s, &["-j", "1"]);
    assert!(
        wait_for(Duration::from_secs(180), || {
            llm.seen().iter().any(|c| cli.results(&c.body) > 0)
        }),
        "{}: the agent made no second call\n{}",
        cli.name,
        first.log()
    );
    first.kill9(); // SIGKILL, the last call in flight
    let second = Serve::start(&s, &["-j", "1", "--drain"]);
    let t = until(&s, &id, &second, "ended", |t| t["finished_at"].is_string());
    assert_eq!(t["state"], "complete", "{t:#}");
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("hello.txt")).unwrap(),
        format!("hello from {}\n", cli.name)
    );
    assert_eq!(s.tasks().len(), 1, "one task, completed once");
    assert!(leftovers(&id).is_empty(), "{:?}", leftovers(&id));
}

#[test]
fn claude_code_survives_a_foreman_killed_mid_call() {
    a_foreman_killed_mid_call_goes_unnoticed(CLAUDE);
}

#[test]
fn codex_survives_a_foreman_killed_mid_call() {
    a_foreman_killed_mid_call_goes_unnoticed(CODEX);
}

/// The answer a person gave, as the last `ask_user` result carries it.
fn answered(body: &Value) -> Option<String> {
    let text = body.to_string();
    let at = text.find("answered: ")? + "answered: ".len();
    Some(
        text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect(),
    )
}

/// `ask_user` through `servo mcp`: the task waits for a person, `task
/// answer` resumes it, and the agent gets the answer as the tool's result.
#[test]
fn claude_code_asks_a_person_through_saheeli_s_mcp_server() {
    let cli = CLAUDE;
    cli.require();
    let llm = FakeLlm::start_matching(vec![], move |body| {
        Some(match cli.results(body) {
            0 => Reply::Tools(
                vec![(
                    "mcp__saheeli__ask_user".into(),
                    json!({"question": "Which colour should hello.txt name?"}),
                )],
                (300, 20),
            ),
            1 => {
                let colour = answered(body).unwrap_or_else(|| "unanswered".into());
                cli.shell(&format!("echo {colour} > colour.txt"), (400, 30))
            }
            _ => Reply::Text("wrote colour.txt".into(), (500, 10)),
        })
    });
    let s = cli.project(&llm);
    s.write("p.md", &cli.prompt(""));
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = wait_state(&s, &id, &serve, "waiting_human");
    assert_eq!(
        t["waiting_for"],
        json!({"kind": "answer", "question": "Which colour should hello.txt name?"}),
        "{t:#}"
    );
    // Registered: the CLI offered Saheeli's tools to the model.
    let first = llm.seen()[0].body.to_string();
    assert!(first.contains("mcp__saheeli__ask_user"), "not offered");
    s.expect(&["task", "answer", &id, "teal"], 0);
    let t = wait_state(&s, &id, &serve, "complete");
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("colour.txt")).unwrap(),
        "teal\n"
    );
    let completion: Value =
        serde_json::from_slice(&std::fs::read(results.join("complete.json")).unwrap()).unwrap();
    assert_eq!(completion["message"], "wrote colour.txt", "{completion}");
}

/// Waits (up to 3 minutes: a CLI starts slowly) for `state`.
pub(crate) fn wait_state(s: &Saheeli, id: &str, serve: &Serve, state: &str) -> Value {
    let mut last = Value::Null;
    let ok = wait_for(Duration::from_secs(180), || {
        last = s.task(id);
        last["state"] == state || last["finished_at"].is_string()
    });
    assert!(
        ok && last["state"] == state,
        "never `{state}`:\n{last:#}\n--- serve log\n{}",
        serve.log()
    );
    last
}

/// `verify:` after an agent: the agent exits 0, the foreman runs the
/// checks as after the built-in loop; passed, complete.json carries them;
/// failed, the task ends `verification_failed`.
#[test]
fn codex_s_work_is_verified_after_it_exits() {
    let cli = CODEX;
    cli.require();
    let llm = FakeLlm::start_matching(vec![], turns(cli, None));
    let s = cli.project(&llm);
    s.write(
        "p.md",
        &cli.prompt("verify: [\"grep -q 'hello from codex' hello.txt\"]\n"),
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(t["state"], "complete", "{t:#}");
    let results = Path::new(t["results"].as_str().unwrap());
    let completion: Value =
        serde_json::from_slice(&std::fs::read(results.join("complete.json")).unwrap()).unwrap();
    let checks = completion["verification"].as_array().unwrap();
    assert_eq!(checks.len(), 1, "{completion}");
    assert_eq!(checks[0]["passed"], true, "{completion}");

    s.write(
        "q.md",
        &cli.prompt("verify: [\"test -e missing.txt\"]\nverify_retries: 0\n"),
    );
    let t = s.expect_json(&["run", "q.md", "--json"], 1);
    assert_eq!(
        (t["state"].as_str(), t["reason"].as_str()),
        (Some("incomplete"), Some("verification_failed")),
        "{t:#}"
    );
}
