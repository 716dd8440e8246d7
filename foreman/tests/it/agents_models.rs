//! Issue 47: the real CLIs on their vendors' current model names, not
//! only replay names. A model name changes what a CLI sends: Codex with
//! `gpt-5.5` offers a `tool_search` tool (its MCP tools deferred behind
//! it), which the gateway refused as provider-run, and Codex exited
//! within a second. Each CLI runs through a provider served by the fake
//! LLM on the name its pinned version defaults to, one short task each.

use std::path::Path;

use serde_json::{Value, json};

use crate::agents_cli::{CLAUDE, CODEX, Cli};
use crate::fake_llm::{FakeLlm, Reply};

fn items<'a>(body: &'a Value, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |i| i["type"] == kind)
}

/// Runs `cli` on `model` with `turns`; the task must complete with
/// `hello.txt` written. Returns what the fake provider saw.
fn completes_on(
    cli: Cli,
    turns: impl Fn(&Value) -> Option<Reply> + Send + 'static,
) -> Vec<crate::fake_llm::Seen> {
    cli.require();
    let llm = FakeLlm::start_matching(vec![], turns);
    let s = cli.project(&llm);
    s.write("p.md", &cli.prompt(""));
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    let seen = llm.seen();
    let paths: Vec<_> = seen.iter().map(|c| c.path.clone()).collect();
    assert_eq!(t["state"], "complete", "{t}\nthe provider saw {paths:?}");
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("hello.txt")).unwrap(),
        "hello\n"
    );
    for c in &seen {
        assert_eq!(c.body["model"], cli.model, "{}", c.body);
    }
    seen
}

/// Codex on `gpt-5.5`: it offers `tool_search`, which passes; the model
/// searches, Codex answers with what it loaded (its MCP tools), both
/// items go back to the provider, then a shell call and the end.
#[test]
fn codex_on_gpt_5_5_searches_its_tools_and_completes() {
    let cli = CODEX.with_model("gpt-5.5");
    let seen = completes_on(cli, move |body| {
        Some(if cli.results(body) > 0 {
            Reply::Text("wrote hello.txt".into(), (500, 12))
        } else if items(body, "tool_search_output").next().is_some() {
            cli.shell("echo hello > hello.txt", (450, 30))
        } else {
            Reply::Tools(
                vec![(
                    "tool_search".into(),
                    json!({"query": "ask a person", "limit": 5}),
                )],
                (400, 20),
            )
        })
    });
    let first = &seen[0].body;
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["type"].as_str())
        .collect();
    assert!(offered.contains(&"tool_search"), "{offered:?}");
    // The search's call and output went back as Codex wrote them.
    let after = seen
        .iter()
        .find(|c| items(&c.body, "tool_search_output").next().is_some())
        .unwrap_or_else(|| panic!("no tool_search_output reached the provider"));
    assert_eq!(items(&after.body, "tool_search_call").count(), 1);
    let loaded = items(&after.body, "tool_search_output").next().unwrap();
    assert!(loaded["tools"].is_array(), "{loaded}");
}

/// Claude Code on the name its pinned version defaults to for an API
/// key (`claude-sonnet-4-6`) and on the newest Opus it knows: every
/// request it sends (tools, betas) passes the gateway.
fn claude_code_on(model: &'static str) {
    let cli = CLAUDE.with_model(model);
    let seen = completes_on(cli, move |body| {
        Some(if cli.results(body) > 0 {
            Reply::Text("wrote hello.txt".into(), (500, 12))
        } else {
            cli.shell("echo hello > hello.txt", (400, 30))
        })
    });
    // Its features went on with it (the known ones: the rest is dropped).
    let betas: Vec<_> = seen.iter().filter_map(|c| c.beta.clone()).collect();
    assert!(
        betas.iter().any(|b| b.contains("claude-code-")),
        "{model}: anthropic-beta forwarded {betas:?}"
    );
    let tools: Vec<_> = seen[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["type"].as_str().unwrap_or("(none)").to_string())
        .collect();
    eprintln!("{model}: anthropic-beta forwarded {betas:?}; tool types {tools:?}");
}

#[test]
fn claude_code_on_its_default_model_completes() {
    claude_code_on("claude-sonnet-4-6");
}

#[test]
fn claude_code_on_the_newest_opus_completes() {
    claude_code_on("claude-opus-5-5");
}

/// mini-swe-agent (through litellm) on `gpt-5.5`: litellm shapes a
/// request for a GPT-5 model its own way; the gateway's typed chat still
/// takes it, and the task completes.
#[test]
fn mini_swe_agent_on_gpt_5_5_completes() {
    crate::agents::require_mini();
    let llm = FakeLlm::start_matching(vec![], crate::agents::turns(None));
    let s = crate::agents::project(&llm);
    s.write(
        "p.md",
        "---\nmodel: gpt-5.5\nagent: mini-swe-agent\ntimeout: 5m\n---\nWrite hello.txt.\n",
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(t["state"], "complete", "{t}");
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("hello.txt")).unwrap(),
        "hello from mini\n"
    );
    let seen = llm.seen();
    assert!(seen.len() >= 2, "{}", seen.len());
    for c in &seen {
        assert_eq!(c.body["model"], "gpt-5.5", "{}", c.body);
    }
}
