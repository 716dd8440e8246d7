//! The command line, as clap derives it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod cache;
mod definitions;
mod eval;
mod fork;
mod steps;

pub(crate) use cache::CacheCommand;
pub(crate) use definitions::DefinitionsCommand;
pub(crate) use eval::{
    EvalCommand, EvalCompareArgs, EvalExportArgs, EvalListArgs, EvalRegradeArgs,
};
pub(crate) use fork::{FollowUpArgs, ForkArgs, SnapshotArgs};
pub(crate) use steps::{BreakpointArgs, StepArgs, StepOverrideArgs};

/// Run coding agents at scale, safely: each task in its own hardened servo container.
#[derive(Debug, Parser)]
#[command(name = "saheeli", version, propagate_version = true)]
pub(crate) struct Cli {
    /// config.yaml to use (default: ./config.yaml when present, else built-in defaults).
    #[arg(long, global = true, env = "SAHEELI_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Log more (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// The foreman's own log on stderr: `text`, or `json` (one object per line, for log shippers). Default: text when stderr is a terminal, json otherwise.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "SAHEELI_LOG_FORMAT",
        hide_env_values = true,
        value_name = "FORMAT"
    )]
    pub log_format: Option<LogFormat>,

    #[command(subcommand)]
    pub command: Command,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    // Lines for people: `INFO message key=value`. (Plain comments: doc
    // comments here would turn every `--help` into the long form.)
    Text,
    // JSON lines: `timestamp`, `level`, `message` and each field.
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Build the servo image from the repository's Dockerfile through the Docker API.
    BuildServo(BuildServoArgs),
    /// Submit, inspect and manage tasks.
    #[command(subcommand)]
    Task(TaskCommand),
    /// Run queued tasks up to the concurrency limit; collect their results.
    Serve(ServeArgs),
    /// Submit one prompt and serve until that task ends; print where its results are.
    Run(RunArgs),
    /// Remove Saheeli containers and volumes whose task has ended (orphans of a crash).
    Gc(GcArgs),
    /// Print Prometheus metrics once (OpenMetrics text), read from the database.
    Metrics,
    /// Run an evaluation suite: every case as a task, scored; a JSON and an HTML report.
    Eval(EvalArgs),
    /// Write a suite from Harbor or Terminal-Bench task directories or SWE-bench instances.
    Import(ImportArgs),
    /// Call each configured provider once with a tiny tool-calling request; print what works and the fix for what does not.
    Doctor(DoctorArgs),
    /// The cached results of tasks' `setup:` (images `saheeli-setup:SCOPE-KEY`): list, remove, prune.
    #[command(subcommand)]
    Cache(CacheCommand),
    /// The definitions read from Git (`serve --definitions`): the commit in use, what changed, what was rejected.
    #[command(subcommand)]
    Definitions(DefinitionsCommand),
}

/// `saheeli import SRC... --out DIR`.
#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// Task directories, folders of them (datasets), or SWE-bench instances (`*.jsonl`).
    #[arg(value_name = "SRC", required = true)]
    pub srcs: Vec<PathBuf>,
    /// The suite directory to write: `DIR/suite.yaml` and what the tasks need generated.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The format of every SRC (default: `task.toml` → harbor, `task.yaml` → tb1, `*.jsonl` → swebench).
    #[arg(long, value_enum)]
    pub format: Option<crate::eval::import::Format>,
    /// SWE-bench: the folder of local clones, `DIR/<owner>__<name>` or `DIR/<name>`.
    #[arg(long, value_name = "DIR")]
    pub repos: Option<PathBuf>,
    /// SWE-bench: the test command of instances without `test_cmd` (default: `python3 -m pytest -rA`).
    #[arg(long, value_name = "CMD")]
    pub test_cmd: Option<String>,
    /// SWE-bench: the image of instances without `image` (default: SWE-bench's `sweb.eval.x86_64.<id>:latest`).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// The suite's name (default: the first SRC's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Write into a non-empty --out: suite.yaml and the imported cases' folders are replaced.
    #[arg(long)]
    pub force: bool,
}

/// `saheeli doctor [--model MODEL]...`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The model to try on the provider it goes to (repeatable; default: config's `model`, else the first the server lists).
    #[arg(long, value_name = "MODEL")]
    pub model: Vec<String>,
    /// Print only the engines' capability table (what `backend: docker` and `backend: swarm` can run), calling no provider.
    #[arg(long)]
    pub capabilities: bool,
}

/// `saheeli eval SUITE.yaml`, `eval --resume RUN_ID`, `eval compare`, `eval list`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct EvalArgs {
    #[command(subcommand)]
    pub command: Option<EvalCommand>,
    /// The suite file (YAML: `name`, `pass_threshold`, `defaults`, `cases`), or a Harbor or Terminal-Bench task directory, a folder of them or a SWE-bench JSONL, imported first.
    #[arg(value_name = "SUITE", required_unless_present = "resume")]
    pub suite: Option<PathBuf>,
    /// Finish an interrupted run: submit only the cases without a task; finished ones are kept.
    #[arg(long, value_name = "RUN_ID", conflicts_with_all = ["suite", "repeat", "model", "params", "out", "infra_retries"])]
    pub resume: Option<String>,
    /// How many tasks run at once (overrides `concurrency` from config.yaml): a number, or `auto`.
    #[arg(long, short = 'j')]
    pub concurrency: Option<crate::config::Concurrency>,
    /// Run each case this many times (epochs); the report gives pass@1 and each case's pass fraction.
    #[arg(long, value_name = "K")]
    pub repeat: Option<u32>,
    /// Submit a result the platform failed (an `infra` failure: a Docker error, an image that could not be made, a lost servo) again, up to N times (default 2; 0: never); the report keeps the last. Infra failures are never scored.
    #[arg(long, value_name = "N")]
    pub infra_retries: Option<u32>,
    /// Use this model for every case (compare models on the same suite).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// A template parameter or front-matter key for every case (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Print the report (report.json's object) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Where the report goes (default: `results/eval-<run_id>/`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Do not run tasks here: a running `saheeli serve` does; wait for them.
    #[arg(long)]
    pub no_serve: bool,
    /// SUITE is the name of a suite in the definitions in use (`evals/SUITE.yaml`; `serve --definitions`).
    #[arg(long, conflicts_with = "resume")]
    pub from_definitions: bool,
}

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Only list what would be removed.
    #[arg(long)]
    pub dry_run: bool,
    /// Also remove the cached task images no container uses (`saheeli-env:*`, `saheeli-task:*`, of every project on this Docker); a task that needs one builds it again.
    #[arg(long)]
    pub images: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BuildServoArgs {
    /// Image tag (default: `image` from config.yaml).
    #[arg(long, short = 't')]
    pub tag: Option<String>,
    /// Do not use the build cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Use this servo binary instead of building one with cargo.
    #[arg(long, value_name = "PATH")]
    pub servo_bin: Option<PathBuf>,
    /// Directory holding the Dockerfile (default: beside config.yaml, else the current directory).
    #[arg(long, value_name = "DIR")]
    pub context: Option<PathBuf>,
    /// Build on the swarm's manager, tag `<swarm.registry>/saheeli-servo:<content digest>` (an
    /// agent's: `saheeli-servo-NAME`) and push; prints the reference for `image:` (`agents:`).
    #[arg(long)]
    pub push: bool,
    /// Build an agent image instead (`claude-code`, `codex`, `mini-swe-agent`, `aider`, or
    /// `all`): the servo image (`image:`) with the agent installed from its pinned wheels,
    /// tagged as config.yaml's `agents:` says (default `saheeli-servo-NAME:<version>`).
    #[arg(long, value_name = "NAME", conflicts_with = "servo_bin")]
    pub agent: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TaskCommand {
    /// Validate a prompt file and queue it; prints the task id.
    Submit(SubmitArgs),
    /// A table of tasks, or one task in detail.
    Status(StatusArgs),
    /// The servo's audit trail.
    Logs(LogsArgs),
    /// Where a task's results are, or copy them elsewhere.
    Results(ResultsArgs),
    /// The changes an ended task made to its workspace, as a patch for `git apply`.
    Diff(IdArgs),
    /// The report of an ended task (report.md): outcome, tool calls, usage, files changed.
    Report(IdArgs),
    /// What the gateway saw of a third-party agent's LLM calls, as one JSON document.
    Trajectory(TrajectoryArgs),
    /// Cancel a queued or running task.
    Cancel(IdArgs),
    /// Queue the same prompt again as a new task.
    Retry(RetryArgs),
    /// New tasks going on from a task's conversation and workspace at a step (another model, a note).
    Fork(ForkArgs),
    /// Keep a running task's workspace and conversation at its next step (`snapshots: on_request`).
    Snapshot(SnapshotArgs),
    /// Review feedback on a delivered branch: a new task on the branch's head that delivers to it.
    FollowUp(FollowUpArgs),
    /// Answer the question a task waits on (its `ask_user` call).
    Answer(TextArgs),
    /// Approve the tool call or plan a task waits on.
    Approve(ApproveArgs),
    /// Deny the tool call (it is skipped) or reject the plan (the model replans).
    Deny(DenyArgs),
    /// Give the model a message it reads before its next LLM call.
    Inject(TextArgs),
    /// Pause a task before its next LLM call (it holds no slot while paused).
    Pause(IdArgs),
    /// Resume a paused task, or unblock a blocked one without an answer.
    Resume(IdArgs),
    /// Set or clear a breakpoint before or after one of a task's template steps.
    Breakpoint(BreakpointArgs),
    /// Step through: go on until the next template step ends, then pause.
    Step(StepArgs),
    /// Mark a template step done or skipped by hand; the model is told, who and why are recorded.
    StepOverride(StepOverrideArgs),
    /// Follow a task live and steer it from the terminal (answer, approve, deny, inject, pause, resume, cancel).
    Attach(IdArgs),
    /// Set the outcome of an ended task by hand; who, when and why are recorded.
    Override(OverrideArgs),
}

#[derive(Debug, Args)]
pub(crate) struct TextArgs {
    pub id: String,
    /// The text (several words are joined with spaces).
    #[arg(required = true, num_args = 1..)]
    pub text: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    pub id: String,
    /// A note the model reads with the approval.
    #[arg(long)]
    pub note: Option<String>,
    /// Approve as NAME, recorded as who approved (default: your user name); a step's
    /// `approve: { from: [...] }` counts only those it names.
    #[arg(long = "as", value_name = "NAME")]
    pub as_name: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct DenyArgs {
    pub id: String,
    /// Why: the model is told (for a plan, it is the feedback it replans with).
    #[arg(long)]
    pub reason: String,
    /// Deny as NAME (default: your user name); a step's `approve: { from: [...] }` counts
    /// only those it names.
    #[arg(long = "as", value_name = "NAME")]
    pub as_name: Option<String>,
}

#[derive(Debug, Default, Args)]
pub(crate) struct PromptArgs {
    /// Give a template parameter its value, or override a front-matter key (repeatable), e.g. `--param max_steps=10`.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Higher runs first (default: the front-matter's `priority:`, else 0).
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i64>,
    /// Run it as this kind of worker (config.yaml `agent_types:`): the type's agent, model,
    /// image, budgets and tools are its defaults, under the front-matter's own.
    #[arg(long, value_name = "NAME")]
    pub agent_type: Option<String>,
    /// Accept a `workspace:` outside the prompt file's directory tree.
    #[arg(long)]
    pub allow_workspace_outside: bool,
    /// Nobody will answer (CI): `ask_user` gets an immediate "decide
    /// yourself", approval gates follow `no_human_gates` (default deny).
    #[arg(long)]
    pub no_human: bool,
    /// Run the agent only until it has proposed a plan (`propose_plan`);
    /// the task ends complete with the plan, acting on nothing.
    #[arg(long)]
    pub plan_only: bool,
    /// Check everything and print the effective task (each setting and where it came
    /// from, the tools, the image); queue and start nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl PromptArgs {
    /// `--param` with `--agent-type NAME` as `agent_type=NAME` last (it
    /// wins over the front-matter's).
    pub fn params(&self) -> Vec<String> {
        let mut params = self.params.clone();
        params.extend(self.agent_type.iter().map(|t| format!("agent_type={t}")));
        params
    }

    /// What a submit asks besides the prompt, as `ops` takes it.
    pub fn submit(&self) -> crate::ops::Submit {
        crate::ops::Submit {
            params: self.params(),
            priority: self.priority,
            allow_workspace_outside: self.allow_workspace_outside,
            no_human: self.no_human,
            plan_only: self.plan_only,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// The prompt file (Markdown with optional YAML front-matter).
    #[arg(long, short, value_name = "FILE", required_unless_present = "template")]
    pub prompt: Option<PathBuf>,
    /// A template of the definitions in use (`serve --definitions`), by name, instead of a file.
    #[arg(long, value_name = "NAME", conflicts_with = "prompt")]
    pub template: Option<String>,
    #[command(flatten)]
    pub prompt_args: PromptArgs,
    /// Print `{"id": …}` instead of the bare id (with `--dry-run`: the effective task).
    #[arg(long)]
    pub json: bool,
    /// Wait until the task ends (someone must be running `saheeli serve`).
    #[arg(long, conflicts_with = "dry_run")]
    pub wait: bool,
    /// Submit it as a child of task ID: cancelled with it, shown in its
    /// tree, its budget carved out of the parent's.
    #[arg(long, value_name = "ID", conflicts_with = "dry_run")]
    pub parent: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// A task id or a unique prefix of one.
    pub id: Option<String>,
    #[arg(long)]
    pub json: bool,
    /// Redraw every second until interrupted (or until the task ends).
    #[arg(long)]
    pub watch: bool,
    /// Parent and child tasks as a tree: ID's whole tree from its root
    /// (without ID: the trees of the newest tasks).
    #[arg(long)]
    pub tree: bool,
    /// How many tasks the table shows, newest first.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// With an ID: how many of its events to show, the newest (the JSON
    /// gives `events_total`, and `events_before` when older ones exist).
    #[arg(long, value_name = "N", default_value_t = crate::ops::EVENTS_SHOWN,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub events: usize,
    /// With an ID: show the events older than event SEQ (`seq` in the JSON).
    #[arg(long, value_name = "SEQ")]
    pub events_before: Option<i64>,
}

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    pub id: String,
    /// Keep printing new lines until the task ends.
    #[arg(long, short)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ResultsArgs {
    pub id: String,
    /// Copy the results directory here (as DIR/<ID>); symbolic links in it are left out
    #[arg(long, value_name = "DIR")]
    pub dest: Option<PathBuf>,
    /// With --dest: copy symbolic links as links (they point wherever the agent chose)
    #[arg(long, requires = "dest")]
    pub links: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct IdArgs {
    /// A task id, a unique prefix of one, or its last digits (as tables show them).
    pub id: String,
}

#[derive(Debug, Args)]
pub(crate) struct RetryArgs {
    pub id: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct OverrideArgs {
    /// A task that ended complete, incomplete or failed.
    pub id: String,
    /// The outcome it gets (`task status` keeps showing what it was).
    #[arg(long, value_enum)]
    pub state: OverrideState,
    /// Why; recorded with your user name and the time.
    #[arg(long)]
    pub reason: String,
    /// Print the task as `task status ID --json` does.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct TrajectoryArgs {
    /// A task id, a unique prefix of one, or its last digits (as tables show them).
    pub id: String,
    /// `atif`: Harbor's Agent Trajectory Interchange Format; `openai`: OpenAI chat messages.
    #[arg(long, value_enum, default_value_t = TrajectoryFormat::Atif)]
    pub format: TrajectoryFormat,
}

/// The formats `task trajectory` writes.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum TrajectoryFormat {
    Atif,
    Openai,
}

/// The outcomes `task override` may set.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum OverrideState {
    Complete,
    Incomplete,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Exit when nothing is queued or running (for CI). Exit code 1 when any task did not complete.
    #[arg(long)]
    pub drain: bool,
    /// Override `concurrency` from config.yaml: a number of tasks, or `auto`.
    #[arg(long, short = 'j')]
    pub concurrency: Option<crate::config::Concurrency>,
    /// Also serve the dashboard and the HTTP API on this address (e.g.
    /// `127.0.0.1:7878`; overrides `http.addr`). Any address but loopback
    /// needs a token in the variable `http.token_env` names.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Read templates, eval suites, agent types and pools from this Git repository (a path, relative to config.yaml's directory) at REF (default HEAD), following new commits (overrides `definitions:`).
    #[arg(long, value_name = "REPO[@REF]")]
    pub definitions: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The prompt file.
    pub prompt: PathBuf,
    #[command(flatten)]
    pub prompt_args: PromptArgs,
    /// Print the final task as JSON (with `--dry-run`: the effective task).
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
