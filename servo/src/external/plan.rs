//! How each agent CLI is started: its command line in non-interactive
//! mode, its environment (a placeholder key, the loopback base URL, its
//! telemetry and auto-update off), the config files it reads from its
//! home, and where its final answer is found. A pure function of the
//! task, so every agent's line is checked here ([`plan`]).

use std::path::{Path, PathBuf};

use saheeli_protocol::{Agent, AgentName};

use super::proxy::PLACEHOLDER_KEY;

/// Where the agents are installed in their images (`agents/Dockerfile`).
pub(crate) const AGENT_BIN: &str = "/opt/agent/bin";

/// The name Saheeli's MCP server is registered under: its tools are
/// `mcp__saheeli__ask_user` and so on to Claude Code.
pub(crate) const MCP_SERVER: &str = "saheeli";

/// A prompt longer than this is not put on the command line (Linux caps
/// one argument at 128 KiB): the agent is told to read prompt.md instead.
const MAX_PROMPT_ARG: usize = 64 * 1024;

/// What the servo needs to start one agent.
pub(crate) struct Inputs<'a> {
    pub agent: &'a Agent,
    /// The task's model (the gateway forces it whatever the agent sends).
    pub model: &'a str,
    /// The loopback listener's port.
    pub port: u16,
    /// The agent's home, in the task's /tmp.
    pub home: &'a Path,
    /// The prompt's path inside the container.
    pub prompt_file: &'a Path,
    pub prompt: &'a str,
    /// The servo's own executable (`servo mcp` is registered with the
    /// agents that speak MCP).
    pub servo: &'a Path,
}

/// Where an agent leaves its final answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// mini-swe-agent's trajectory file: `info.submission` (and
    /// `info.exit_status`, which must be `Submitted`).
    MiniTrajectory(PathBuf),
    /// Claude Code's `--output-format json` on stdout: `result`.
    ClaudeJson,
    /// A file holding the last message (Codex's `--output-last-message`).
    File(PathBuf),
    /// The last lines the agent printed.
    StdoutTail,
}

/// One agent's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub program: String,
    pub args: Vec<String>,
    /// Set on top of the container's environment (from which every
    /// `SAHEELI_*` variable is removed).
    pub env: Vec<(String, String)>,
    /// Files written into the home before the agent starts.
    pub files: Vec<(PathBuf, String)>,
    pub answer: Answer,
}

/// The prompt as an argument, or a pointer to prompt.md when too long.
fn prompt_arg(i: &Inputs) -> String {
    if i.prompt.len() <= MAX_PROMPT_ARG {
        i.prompt.to_string()
    } else {
        format!(
            "Your task is described in {}; read it first, then do it.",
            i.prompt_file.display()
        )
    }
}

fn s(v: &str) -> String {
    v.to_string()
}

/// A TOML basic string (JSON's escaping is valid TOML).
fn toml_str(v: &str) -> String {
    serde_json::to_string(v).expect("strings serialize")
}

/// The start of `i.agent`; None for the built-in loop.
pub(crate) fn plan(i: &Inputs) -> Option<Plan> {
    let home = i.home.display().to_string();
    let openai_base = format!("http://127.0.0.1:{}/v1", i.port);
    let anthropic_base = format!("http://127.0.0.1:{}", i.port);
    let servo = i.servo.display().to_string();
    let mcp_args = vec![s("mcp"), s("--url"), anthropic_base.clone()];
    let mut env = vec![
        (s("HOME"), home.clone()),
        (
            s("PATH"),
            format!("{AGENT_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        ),
        // Whatever the agent's SDK reads, it finds the placeholder and the
        // loopback listener, never a real key or a real host.
        (s("OPENAI_API_KEY"), s(PLACEHOLDER_KEY)),
        (s("OPENAI_BASE_URL"), openai_base.clone()),
        (s("ANTHROPIC_API_KEY"), s(PLACEHOLDER_KEY)),
        (s("ANTHROPIC_BASE_URL"), anthropic_base),
        (s("NO_COLOR"), s("1")),
    ];
    let named = match i.agent {
        Agent::Named(n) => *n,
        Agent::Custom(c) => {
            let file = i.prompt_file.display().to_string();
            let args: Vec<String> = c
                .command
                .iter()
                .skip(1)
                .map(|a| a.replace("{prompt_file}", &file))
                .collect();
            env.push((s("SAHEELI_AGENT_MODEL"), s(i.model)));
            return Some(Plan {
                program: c.command.first()?.replace("{prompt_file}", &file),
                args,
                env,
                files: Vec::new(),
                answer: Answer::StdoutTail,
            });
        }
    };
    let plan = match named {
        AgentName::Saheeli => return None,
        AgentName::MiniSweAgent => {
            let traj = i.home.join("trajectory.json");
            env.extend([
                (s("MSWEA_CONFIGURED"), s("1")),
                (s("MSWEA_SILENT_STARTUP"), s("1")),
                (s("MSWEA_COST_TRACKING"), s("ignore_errors")),
                (
                    s("MSWEA_GLOBAL_CONFIG_DIR"),
                    format!("{home}/.config/mini-swe-agent"),
                ),
                (s("LITELLM_LOCAL_MODEL_COST_MAP"), s("True")),
                (s("LITELLM_TELEMETRY"), s("False")),
            ]);
            Plan {
                program: s("mini"),
                args: vec![
                    s("-y"),
                    s("--exit-immediately"),
                    s("-o"),
                    traj.display().to_string(),
                    s("-c"),
                    s("mini.yaml"),
                    s("-c"),
                    format!("model.model_name=openai/{}", i.model),
                    s("-c"),
                    format!("model.model_kwargs.api_base={openai_base}"),
                    s("-c"),
                    format!("model.model_kwargs.api_key={PLACEHOLDER_KEY}"),
                    s("-c"),
                    s("model.cost_tracking=ignore_errors"),
                    s("-c"),
                    s("environment.environment_class=local"),
                    s("-c"),
                    s("environment.cwd=/workspace"),
                    s("-t"),
                    prompt_arg(i),
                ],
                env,
                files: Vec::new(),
                answer: Answer::MiniTrajectory(traj),
            }
        }
        AgentName::Aider => {
            env.extend([
                (s("AIDER_ANALYTICS"), s("false")),
                // litellm's price table from its wheel, not fetched.
                (s("LITELLM_LOCAL_MODEL_COST_MAP"), s("True")),
                (s("LITELLM_TELEMETRY"), s("False")),
            ]);
            Plan {
                program: s("aider"),
                args: vec![
                    s("--model"),
                    format!("openai/{}", i.model),
                    s("--openai-api-base"),
                    openai_base,
                    s("--openai-api-key"),
                    s(PLACEHOLDER_KEY),
                    s("--message-file"),
                    i.prompt_file.display().to_string(),
                    s("--yes-always"),
                    s("--no-stream"),
                    s("--no-git"),
                    s("--no-auto-commits"),
                    s("--no-check-update"),
                    s("--analytics-disable"),
                    s("--no-show-model-warnings"),
                    s("--no-pretty"),
                    s("--no-fancy-input"),
                ],
                env,
                files: Vec::new(),
                answer: Answer::StdoutTail,
            }
        }
        AgentName::ClaudeCode => {
            env.extend([
                (s("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), s("1")),
                (s("DISABLE_AUTOUPDATER"), s("1")),
                (s("DISABLE_TELEMETRY"), s("1")),
                (s("DISABLE_ERROR_REPORTING"), s("1")),
                // Its background work (titles, summaries) uses the task's
                // model too: the gateway refuses any other.
                (s("ANTHROPIC_SMALL_FAST_MODEL"), s(i.model)),
                (s("ANTHROPIC_DEFAULT_HAIKU_MODEL"), s(i.model)),
            ]);
            let mcp = i.home.join("saheeli-mcp.json");
            let config = serde_json::json!({"mcpServers": {(MCP_SERVER): {
                "type": "stdio", "command": servo, "args": mcp_args, "env": {}}}});
            Plan {
                program: s("claude"),
                args: vec![
                    s("-p"),
                    prompt_arg(i),
                    s("--model"),
                    s(i.model),
                    s("--dangerously-skip-permissions"),
                    s("--output-format"),
                    s("json"),
                    s("--mcp-config"),
                    mcp.display().to_string(),
                    s("--strict-mcp-config"),
                ],
                env,
                files: vec![(mcp, config.to_string())],
                answer: Answer::ClaudeJson,
            }
        }
        AgentName::Codex => {
            let codex_home = i.home.join(".codex");
            let last = i.home.join("codex-last-message.txt");
            env.extend([
                (s("CODEX_HOME"), codex_home.display().to_string()),
                (s("SAHEELI_PLACEHOLDER_KEY"), s(PLACEHOLDER_KEY)),
            ]);
            let config = format!(
                "model = {}\nmodel_provider = \"saheeli\"\napproval_policy = \"never\"\n\
                 sandbox_mode = \"danger-full-access\"\ncheck_for_update_on_startup = false\n\
                 web_search = \"disabled\"\n\n\
                 [model_providers.saheeli]\nname = \"saheeli\"\nbase_url = {}\n\
                 env_key = \"SAHEELI_PLACEHOLDER_KEY\"\nwire_api = \"responses\"\n\n\
                 [features]\nplugins = false\nremote_plugin = false\napps = false\n\
                 multi_agent = false\n\n\
                 [analytics]\nenabled = false\n\n[otel]\nexporter = \"none\"\n\n\
                 [mcp_servers.{MCP_SERVER}]\ncommand = {}\nargs = {}\n",
                toml_str(i.model),
                toml_str(&openai_base),
                toml_str(&servo),
                serde_json::to_string(&mcp_args).expect("strings serialize"),
            );
            Plan {
                program: s("codex"),
                args: vec![
                    s("exec"),
                    s("--skip-git-repo-check"),
                    s("--json"),
                    s("--output-last-message"),
                    last.display().to_string(),
                    prompt_arg(i),
                ],
                env,
                files: vec![(codex_home.join("config.toml"), config)],
                answer: Answer::File(last),
            }
        }
    };
    Some(plan)
}

#[cfg(test)]
mod tests {
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
                assert_eq!(n, AgentName::Saheeli);
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
}
