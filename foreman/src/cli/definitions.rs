//! `saheeli definitions …` (issue 52): the definitions read from Git.

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub(crate) enum DefinitionsCommand {
    /// The commit in use, what it changed (added, removed, changed), its templates, suites, agent types and pools, and the last commit rejected with why.
    Status {
        #[arg(long)]
        json: bool,
    },
}
