//! How each agent CLI is started: its command line in non-interactive
//! mode, its environment (a placeholder key, the loopback base URL, its
//! telemetry and auto-update off), the config files it reads from its
//! home, and where its final answer is found. A pure function of the
//! task, so every agent's line is checked here ([`plan`]).

use std::path::{Path, PathBuf};

use saheeli_protocol::{Agent, AgentName, CustomAgent};

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
    /// The agent's own session (issue 51).
    pub session: Session<'a>,
}

/// Which session Claude Code or Codex runs in (the others have none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Session<'a> {
    /// A new one; Claude Code's gets this id (`--session-id`).
    New(&'a str),
    /// One restored into the home: resumed with the CLI's own option
    /// (`claude --resume ID`, `codex exec resume ID`), the prompt the
    /// foreman's note on what ended the attempt before.
    Resume(&'a str),
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
    let env = base_env(i);
    let named = match i.agent {
        Agent::Named(n) => *n,
        Agent::Custom(c) => return custom(i, c, env),
    };
    Some(match named {
        AgentName::Saheeli | AgentName::Oracle => return None,
        AgentName::MiniSweAgent => mini_swe_agent(i, env),
        AgentName::Aider => aider(i, env),
        AgentName::ClaudeCode => claude_code(i, env),
        AgentName::Codex => codex(i, env),
    })
}

/// The loopback listener as an OpenAI base URL.
fn openai_base(i: &Inputs) -> String {
    format!("http://127.0.0.1:{}/v1", i.port)
}

/// The loopback listener as an Anthropic base URL.
fn anthropic_base(i: &Inputs) -> String {
    format!("http://127.0.0.1:{}", i.port)
}

/// How an agent starts the servo's MCP server (`servo mcp`).
fn mcp_args(i: &Inputs) -> Vec<String> {
    vec![s("mcp"), s("--url"), anthropic_base(i)]
}

/// What every agent's environment has.
fn base_env(i: &Inputs) -> Vec<(String, String)> {
    vec![
        (s("HOME"), i.home.display().to_string()),
        (
            s("PATH"),
            format!("{AGENT_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        ),
        // Whatever the agent's SDK reads, it finds the placeholder and the
        // loopback listener, never a real key or a real host.
        (s("OPENAI_API_KEY"), s(PLACEHOLDER_KEY)),
        (s("OPENAI_BASE_URL"), openai_base(i)),
        (s("ANTHROPIC_API_KEY"), s(PLACEHOLDER_KEY)),
        (s("ANTHROPIC_BASE_URL"), anthropic_base(i)),
        (s("NO_COLOR"), s("1")),
    ]
}

/// A custom agent: its command, `{prompt_file}` filled in.
fn custom(i: &Inputs, c: &CustomAgent, mut env: Vec<(String, String)>) -> Option<Plan> {
    let file = i.prompt_file.display().to_string();
    let args: Vec<String> = c
        .command
        .iter()
        .skip(1)
        .map(|a| a.replace("{prompt_file}", &file))
        .collect();
    env.push((s("SAHEELI_AGENT_MODEL"), s(i.model)));
    Some(Plan {
        program: c.command.first()?.replace("{prompt_file}", &file),
        args,
        env,
        files: Vec::new(),
        answer: Answer::StdoutTail,
    })
}

fn mini_swe_agent(i: &Inputs, mut env: Vec<(String, String)>) -> Plan {
    let home = i.home.display().to_string();
    let openai_base = openai_base(i);
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

fn aider(i: &Inputs, mut env: Vec<(String, String)>) -> Plan {
    let openai_base = openai_base(i);
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

fn claude_code(i: &Inputs, mut env: Vec<(String, String)>) -> Plan {
    let servo = i.servo.display().to_string();
    let mcp_args = mcp_args(i);
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
    let session = match i.session {
        Session::New(id) => [s("--session-id"), s(id)],
        Session::Resume(id) => [s("--resume"), s(id)],
    };
    let mut args = vec![
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
    ];
    args.extend(session);
    Plan {
        program: s("claude"),
        args,
        env,
        files: vec![(mcp, config.to_string())],
        answer: Answer::ClaudeJson,
    }
}

fn codex(i: &Inputs, mut env: Vec<(String, String)>) -> Plan {
    let openai_base = openai_base(i);
    let servo = i.servo.display().to_string();
    let mcp_args = mcp_args(i);
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
    let mut args = vec![s("exec")];
    if let Session::Resume(_) = i.session {
        args.push(s("resume"));
    }
    args.extend([
        s("--skip-git-repo-check"),
        s("--json"),
        s("--output-last-message"),
        last.display().to_string(),
    ]);
    if let Session::Resume(id) = i.session {
        args.push(s(id));
    }
    args.push(prompt_arg(i));
    Plan {
        program: s("codex"),
        args,
        env,
        files: vec![(codex_home.join("config.toml"), config)],
        answer: Answer::File(last),
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
