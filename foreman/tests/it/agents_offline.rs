//! The README's offline agent examples (issue 25):
//! `prompts/agents/claude-code-hello.md` and `codex-hello.md` run the real
//! CLIs in their images with a `replay:` script, no key and no provider:
//! the gateway answers each CLI's own API from the script (streamed, as
//! the CLIs ask), and the task ends `complete` with the file made by the
//! CLI's own tools in `results/`, every LLM call counted.

use std::path::Path;

use serde_json::Value;

use crate::agents_cli::{AIDER, CLAUDE, CODEX, Cli, wait_state};
use crate::human::Serve;
use crate::util::{Saheeli, leftovers};

fn runs_its_offline_example(cli: Cli) {
    cli.require();
    let s = Saheeli::with_config(&format!("agents:\n  {}: {}\n", cli.name, cli.image()));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dir = s.path().join("prompts/agents");
    std::fs::create_dir_all(&dir).unwrap();
    for ext in ["md", "replay.yaml"] {
        let name = format!("{}-hello.{ext}", cli.name);
        std::fs::copy(repo.join("prompts/agents").join(&name), dir.join(&name)).unwrap();
    }
    let prompt = format!("prompts/agents/{}-hello.md", cli.name);
    let t = s.expect_json(&["run", &prompt, "--json"], 0);
    assert_eq!(t["state"], "complete", "{t:#}");
    assert_eq!(t["agent"], cli.name, "{t:#}");
    assert_eq!(t["steps"], 3, "one LLM call per turn of the script: {t:#}");
    assert!(t["input_tokens"].as_i64().unwrap() > 0, "{t:#}");
    let results = Path::new(t["results"].as_str().unwrap());
    let hello = std::fs::read_to_string(results.join("hello.txt")).unwrap();
    assert!(hello.starts_with("Hello from "), "{hello}");
    let completion: Value =
        serde_json::from_slice(&std::fs::read(results.join("complete.json")).unwrap()).unwrap();
    assert_eq!(
        completion["message"], "Wrote hello.txt with a greeting and showed it from the shell.",
        "{completion}"
    );
    // The shell's answer reached the CLI: its second request carried it.
    let trajectory = s.run(&["task", "trajectory", t["id"].as_str().unwrap()]);
    let text = String::from_utf8_lossy(&trajectory.stdout);
    assert!(
        text.matches("Hello from ").count() >= 2,
        "the shell's output is not in what the gateway saw: {text}"
    );
    let id = t["id"].as_str().unwrap();
    assert!(leftovers(id).is_empty(), "{:?}", leftovers(id));
}

#[test]
fn claude_code_runs_its_offline_example() {
    runs_its_offline_example(CLAUDE);
}

#[test]
fn codex_runs_its_offline_example() {
    runs_its_offline_example(CODEX);
}

/// aider (issue 25's fourth CLI): non-streamed chat completions, no tool
/// calls: its edits are in the reply's text, in its `whole` edit format
/// (the file's name, then its whole content fenced). One turn, then aider
/// exits with its message answered.
#[test]
fn aider_runs_offline_and_its_edit_lands_in_the_results() {
    AIDER.require();
    let s = Saheeli::with_config(&format!("agents:\n  aider: {}\n", AIDER.image()));
    s.write(
        "aider.replay.yaml",
        "turns:\n\
         \x20 - content: \"I will create the file.\\n\\nhello.txt\\n```\\nHello from aider in a Saheeli servo!\\n```\\n\"\n",
    );
    s.write(
        "p.md",
        "---\nagent: aider\nmodel: replay:aider.replay.yaml\nmax_steps: 5\ntimeout: 5m\n---\n\
         Create hello.txt with a greeting.\n",
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(t["state"], "complete", "{t:#}");
    assert_eq!(t["agent"], "aider", "{t:#}");
    assert!(t["steps"].as_i64().unwrap() >= 1, "{t:#}");
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("hello.txt")).unwrap(),
        "Hello from aider in a Saheeli servo!\n"
    );
    let id = t["id"].as_str().unwrap();
    assert!(leftovers(id).is_empty(), "{:?}", leftovers(id));
}

/// Codex asks a person through Saheeli's MCP server (`servo mcp`, offered
/// to the model in Codex's `mcp__saheeli` namespace): the task waits,
/// `task answer` resumes it, and the answer is the tool's result in
/// Codex's next request.
#[test]
fn codex_asks_a_person_through_saheeli_s_mcp_server() {
    let cli = CODEX;
    cli.require();
    let s = Saheeli::with_config(&format!("agents:\n  codex: {}\n", cli.image()));
    s.write(
        "ask.replay.yaml",
        "turns:\n\
         \x20 - tool_calls:\n\
         \x20     - { name: ask_user, arguments: { question: \"Which colour should it be?\" } }\n\
         \x20 - content: The person chose a colour.\n",
    );
    s.write(
        "p.md",
        "---\nagent: codex\nmodel: replay:ask.replay.yaml\nmax_steps: 5\ntimeout: 5m\n---\n\
         Ask which colour to use.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = wait_state(&s, &id, &serve, "waiting_human");
    assert_eq!(
        t["waiting_for"],
        serde_json::json!({"kind": "answer", "question": "Which colour should it be?"}),
        "{t:#}"
    );
    s.expect(&["task", "answer", &id, "teal"], 0);
    let t = wait_state(&s, &id, &serve, "complete");
    let completion: Value = serde_json::from_slice(
        &std::fs::read(Path::new(t["results"].as_str().unwrap()).join("complete.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        completion["message"], "The person chose a colour.",
        "{completion}"
    );
    let trajectory = s.run(&["task", "trajectory", &id]);
    let text = String::from_utf8_lossy(&trajectory.stdout);
    assert!(
        text.contains("answered: teal"),
        "the answer never reached Codex: {text}"
    );
}

/// Claude Code marks a template step done through Saheeli's MCP server
/// (`mcp__saheeli__step_done`): the step is `completed` with the agent's
/// evidence in status, as for the built-in loop.
#[test]
fn claude_code_marks_a_step_done_through_saheeli_s_mcp_server() {
    let cli = CLAUDE;
    cli.require();
    let s = Saheeli::with_config(&format!("agents:\n  claude-code: {}\n", cli.image()));
    s.write(
        "steps.replay.yaml",
        "turns:\n\
         \x20 - tool_calls:\n\
         \x20     - name: Bash\n\
         \x20       arguments: { command: \"echo hi > hi.txt\", description: \"write it\" }\n\
         \x20 - tool_calls:\n\
         \x20     - name: mcp__saheeli__step_done\n\
         \x20       arguments: { name: write, evidence: \"hi.txt holds hi\" }\n\
         \x20 - content: Wrote hi.txt and marked the step done.\n",
    );
    s.write(
        "p.md",
        "---\nagent: claude-code\nmodel: replay:steps.replay.yaml\nmax_steps: 6\ntimeout: 5m\n\
         steps:\n  - { name: write, description: Write hi.txt }\n---\nWrite hi.txt.\n",
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(t["state"], "complete", "{t:#}");
    let id = t["id"].as_str().unwrap();
    let t = s.task(id);
    let step = &t["template_steps"][0];
    assert_eq!(step["name"], "write", "{t:#}");
    assert_eq!(step["state"], "completed", "{t:#}");
    assert_eq!(step["evidence"], "hi.txt holds hi", "{t:#}");
}
