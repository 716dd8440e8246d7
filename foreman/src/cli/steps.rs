//! The arguments of a template's step controls (issue 29; issue 52's
//! `--dry-run` and `on_subtask`): `task breakpoint`, `task step`, `task
//! step-override`.

use clap::Args;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("position").args(["before", "after"])))]
pub(crate) struct BreakpointArgs {
    /// A task that has not ended.
    pub id: String,
    /// The template step's name (as `task status ID` lists them); without it, `--clear` clears every breakpoint.
    #[arg(long)]
    pub step: Option<String>,
    /// Pause once the step has started, before its work.
    #[arg(long)]
    pub before: bool,
    /// Pause once the step is done.
    #[arg(long)]
    pub after: bool,
    /// Clear the breakpoint (the template's too) instead of setting it.
    #[arg(long)]
    pub clear: bool,
    /// Pause the task each time its model spawns a child (`breakpoint: on_subtask`); with `--clear`, stop.
    #[arg(long, conflicts_with_all = ["step", "before", "after"])]
    pub on_subtask: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StepArgs {
    /// A task with template steps that has not ended.
    pub id: String,
    /// Print the next step (what it is, what makes it done, what holds it) and a token estimate; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StepOverrideArgs {
    /// A task that has not ended.
    pub id: String,
    /// The template step's name.
    #[arg(long)]
    pub step: String,
    /// What the step becomes.
    #[arg(long, value_enum)]
    pub state: crate::ops::StepOverrideState,
    /// Why; recorded with your user name and the time, and told to the model.
    #[arg(long)]
    pub reason: String,
}
