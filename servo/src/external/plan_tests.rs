//! Each agent's start: its program, arguments, environment and files.

use super::*;
use saheeli_protocol::{AgentApi, CustomAgent};

fn inputs<'a>(agent: &'a Agent, prompt: &'a str) -> Inputs<'a> {
    Inputs {
        agent,
        model: "m-1",
        port: 4242,
        home: Path::new("/tmp/agent"),
        prompt_file: Path::new("/workspace/prompt.md"),
        prompt,
        servo: Path::new("/usr/local/bin/servo"),
        session: Session::New("0190f3a2-1111-7222-8333-444455556666"),
    }
}

fn env<'a>(p: &'a Plan, k: &str) -> Option<&'a str> {
    p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

#[test]
fn every_agent_gets_the_placeholder_and_the_loopback_url() {
    for n in AgentName::ALL {
        let agent = Agent::Named(n);
        let Some(p) = plan(&inputs(&agent, "do it")) else {
            assert!(matches!(n, AgentName::Saheeli | AgentName::Oracle), "{n}");
            continue;
        };
        assert_eq!(env(&p, "OPENAI_API_KEY"), Some(PLACEHOLDER_KEY), "{n}");
        assert_eq!(
            env(&p, "ANTHROPIC_BASE_URL"),
            Some("http://127.0.0.1:4242"),
            "{n}"
        );
        assert_eq!(
            env(&p, "OPENAI_BASE_URL"),
            Some("http://127.0.0.1:4242/v1"),
            "{n}"
        );
        assert_eq!(env(&p, "HOME"), Some("/tmp/agent"), "{n}");
        assert!(env(&p, "PATH").unwrap().starts_with(AGENT_BIN), "{n}");
    }
}

#[test]
fn each_agent_runs_in_its_batch_mode() {
    // (agent, program, arguments that must be there, answer)
    let cases: &[(AgentName, &str, &[&str], Answer)] = &[
        (
            AgentName::MiniSweAgent,
            "mini",
            &[
                "-y",
                "--exit-immediately",
                "model.model_name=openai/m-1",
                "-t",
                "do it",
            ],
            Answer::MiniTrajectory("/tmp/agent/trajectory.json".into()),
        ),
        (
            AgentName::Aider,
            "aider",
            &[
                "--yes-always",
                "--no-stream",
                "--message-file",
                "/workspace/prompt.md",
            ],
            Answer::StdoutTail,
        ),
        (
            AgentName::ClaudeCode,
            "claude",
            &["-p", "do it", "--dangerously-skip-permissions", "json"],
            Answer::ClaudeJson,
        ),
        (
            AgentName::Codex,
            "codex",
            &["exec", "--skip-git-repo-check", "--json", "do it"],
            Answer::File("/tmp/agent/codex-last-message.txt".into()),
        ),
    ];
    for (n, program, must, answer) in cases {
        let agent = Agent::Named(*n);
        let p = plan(&inputs(&agent, "do it")).unwrap();
        assert_eq!(p.program, *program);
        for m in *must {
            assert!(
                p.args.iter().any(|a| a == m),
                "{n}: `{m}` missing from {:?}",
                p.args
            );
        }
        assert_eq!(&p.answer, answer, "{n}");
    }
}

#[test]
fn telemetry_and_updates_are_off() {
    let claude = plan(&inputs(&Agent::Named(AgentName::ClaudeCode), "x")).unwrap();
    for k in [
        "DISABLE_AUTOUPDATER",
        "DISABLE_TELEMETRY",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    ] {
        assert_eq!(env(&claude, k), Some("1"), "{k}");
    }
    let codex = plan(&inputs(&Agent::Named(AgentName::Codex), "x")).unwrap();
    let (path, config) = &codex.files[0];
    assert_eq!(path, Path::new("/tmp/agent/.codex/config.toml"));
    for line in [
        "check_for_update_on_startup = false",
        "base_url = \"http://127.0.0.1:4242/v1\"",
        "wire_api = \"responses\"",
        "plugins = false",
        "[analytics]\nenabled = false",
        "exporter = \"none\"",
    ] {
        assert!(config.contains(line), "{line} in {config}");
    }
    for line in ["web_search = \"disabled\"", "multi_agent = false"] {
        assert!(config.contains(line), "{line} in {config}");
    }
    let aider = plan(&inputs(&Agent::Named(AgentName::Aider), "x")).unwrap();
    assert!(aider.args.contains(&s("--analytics-disable")));
    assert!(aider.args.contains(&s("--no-check-update")));
}

#[test]
fn claude_code_and_codex_get_saheeli_s_mcp_server() {
    let claude = plan(&inputs(&Agent::Named(AgentName::ClaudeCode), "x")).unwrap();
    let at = claude
        .args
        .iter()
        .position(|a| a == "--mcp-config")
        .unwrap();
    let (path, json) = &claude.files[0];
    assert_eq!(claude.args[at + 1], path.display().to_string());
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let server = &v["mcpServers"]["saheeli"];
    assert_eq!(server["command"], "/usr/local/bin/servo");
    assert_eq!(
        server["args"],
        serde_json::json!(["mcp", "--url", "http://127.0.0.1:4242"])
    );
    let codex = plan(&inputs(&Agent::Named(AgentName::Codex), "x")).unwrap();
    let config = &codex.files[0].1;
    assert!(
        config.contains(
            "[mcp_servers.saheeli]\ncommand = \"/usr/local/bin/servo\"\n\
             args = [\"mcp\",\"--url\",\"http://127.0.0.1:4242\"]"
        ),
        "{config}"
    );
}

#[test]
fn a_model_name_cannot_break_the_codex_config() {
    let agent = Agent::Named(AgentName::Codex);
    let mut i = inputs(&agent, "x");
    i.model = "m\"\n[otel]\nexporter = \"otlp\"";
    let p = plan(&i).unwrap();
    // Escaped into one TOML string: no line of its own starts a table or a key.
    let config = &p.files[0].1;
    let lines: Vec<&str> = config
        .lines()
        .filter(|l| l.starts_with("[otel]") || l.starts_with("exporter"))
        .collect();
    assert_eq!(lines, ["[otel]", "exporter = \"none\""], "{config}");
}

#[test]
fn a_custom_command_gets_the_prompt_file() {
    let agent = Agent::Custom(CustomAgent {
        command: vec![s("my-agent"), s("--task={prompt_file}"), s("-v")],
        api: AgentApi::OpenaiChat,
        image: None,
    });
    let p = plan(&inputs(&agent, "x")).unwrap();
    assert_eq!(p.program, "my-agent");
    assert_eq!(p.args, vec![s("--task=/workspace/prompt.md"), s("-v")]);
    assert_eq!(env(&p, "SAHEELI_AGENT_MODEL"), Some("m-1"));
}

#[test]
fn a_long_prompt_is_read_from_its_file() {
    let long = "x".repeat(MAX_PROMPT_ARG + 1);
    let agent = Agent::Named(AgentName::MiniSweAgent);
    let p = plan(&inputs(&agent, &long)).unwrap();
    let last = p.args.last().unwrap();
    assert!(
        last.contains("/workspace/prompt.md") && last.len() < 200,
        "{last}"
    );
}

#[test]
fn claude_code_and_codex_resume_their_own_session() {
    const ID: &str = "0190f3a2-1111-7222-8333-444455556666";
    let claude = Agent::Named(AgentName::ClaudeCode);
    let p = plan(&inputs(&claude, "go on")).unwrap();
    assert!(
        p.args.ends_with(&["--session-id".into(), ID.into()]),
        "{:?}",
        p.args
    );
    let mut i = inputs(&claude, "go on");
    i.session = Session::Resume(ID);
    let p = plan(&i).unwrap();
    assert!(
        p.args.ends_with(&["--resume".into(), ID.into()]),
        "{:?}",
        p.args
    );
    let codex = Agent::Named(AgentName::Codex);
    let mut i = inputs(&codex, "go on");
    i.session = Session::Resume(ID);
    let p = plan(&i).unwrap();
    assert_eq!(&p.args[..2], ["exec", "resume"]);
    assert!(
        p.args.ends_with(&[ID.into(), "go on".into()]),
        "{:?}",
        p.args
    );
}
