//! `saheeli eval`'s subcommands and their arguments.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub(crate) enum EvalCommand {
    /// Cases that went from pass to fail and back between two runs; pass-rate and cost deltas.
    Compare(EvalCompareArgs),
    /// Past runs: id, suite, started, state (an interrupted run can be resumed), pass rate.
    List(EvalListArgs),
    /// Write an ended run as a Harbor job directory (Harbor's viewer reads it) or as JSON lines for RL.
    Export(EvalExportArgs),
    /// Verify each result's collected workspace again, without the agent; show old against new.
    Regrade(EvalRegradeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct EvalExportArgs {
    /// The run (an id or a unique prefix).
    pub run: String,
    /// `harbor`: a job directory `OUT/<run id>/`; `rl`: one JSON line per sample in the file OUT.
    #[arg(long, value_enum)]
    pub format: crate::eval::export::Format,
    /// The directory (`harbor`) or the file (`rl`; `-` for stdout).
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct EvalRegradeArgs {
    /// The run (an id or a unique prefix).
    pub run: String,
    /// Hidden tests to use instead of each task's own (a directory, a file or a .tar/.tar.gz; copied to /tests).
    #[arg(long, value_name = "DIR")]
    pub tests: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EvalCompareArgs {
    /// The earlier run (an id or a unique prefix).
    pub run_a: String,
    /// The later run.
    pub run_b: String,
    #[arg(long)]
    pub json: bool,
    /// Also write the comparison as a self-contained HTML page.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct EvalListArgs {
    #[arg(long)]
    pub json: bool,
}
