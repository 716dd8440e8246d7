//! The command line, as clap derives it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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

    #[command(subcommand)]
    pub command: Command,
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
}

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Only list what would be removed.
    #[arg(long)]
    pub dry_run: bool,
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
    /// Cancel a queued or running task.
    Cancel(IdArgs),
    /// Queue the same prompt again as a new task.
    Retry(RetryArgs),
}

#[derive(Debug, Args)]
pub(crate) struct PromptArgs {
    /// Override a front-matter key for this task (repeatable), e.g. `--param max_steps=10`.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    /// Accept a `workspace:` outside the prompt file's directory tree.
    #[arg(long)]
    pub allow_workspace_outside: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// The prompt file (Markdown with optional YAML front-matter).
    #[arg(long, short, value_name = "FILE")]
    pub prompt: PathBuf,
    #[command(flatten)]
    pub prompt_args: PromptArgs,
    /// Print `{"id": …}` instead of the bare id.
    #[arg(long)]
    pub json: bool,
    /// Wait until the task ends (someone must be running `saheeli serve`).
    #[arg(long)]
    pub wait: bool,
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
    /// How many tasks the table shows, newest first.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
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
    /// Copy the results directory here.
    #[arg(long, value_name = "DIR")]
    pub dest: Option<PathBuf>,
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
pub(crate) struct ServeArgs {
    /// Exit when nothing is queued or running (for CI). Exit code 1 when any task did not complete.
    #[arg(long)]
    pub drain: bool,
    /// Override `concurrency` from config.yaml.
    #[arg(long, short = 'j')]
    pub concurrency: Option<usize>,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The prompt file.
    pub prompt: PathBuf,
    #[command(flatten)]
    pub prompt_args: PromptArgs,
    /// Print the final task as JSON.
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
