//! `saheeli task fork`'s arguments (issue 51).

use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct ForkArgs {
    /// An ended task (id, unique prefix or last digits).
    pub id: String,
    /// The step to go on from (default: the task's last; an earlier one needs snapshots, not built yet).
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
