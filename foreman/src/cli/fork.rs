//! The arguments of the commands that make new tasks from an ended one:
//! `task fork` (issue 51) and `task follow-up` (issue 52).

use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct ForkArgs {
    /// A task (id, unique prefix or last digits): ended, or running with snapshots.
    pub id: String,
    /// The step to go on from (default: the task's last; any other needs a snapshot of it, `snapshots:`).
    #[arg(long, value_name = "N")]
    pub at_step: Option<u64>,
    /// How many forks to make (1 to 16).
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub count: u32,
    /// Another model for the forks (default: the task's).
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// A message each fork's model reads after the task's conversation, before its first call.
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
    /// Print the new tasks as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SnapshotArgs {
    /// A running task with `snapshots: on_request` (id, unique prefix or last digits).
    pub id: String,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct FollowUpArgs {
    /// A task whose `deliver:` pushed its branch.
    pub id: String,
    /// The feedback: a file, or the text itself.
    #[arg(long, value_name = "FILE_OR_TEXT")]
    pub prompt: String,
    #[arg(long)]
    pub json: bool,
}
