//! `saheeli eval export RUN`: an ended run in other tools' formats.
//!
//! - `sample`: each case × repeat with what the store and its results
//!   directory hold (the graded reward, the phases' times, the trajectory);
//! - `atif`: a task's session and audit log as ATIF v1.8;
//! - `harbor`: a Harbor job directory, one trial per sample;
//! - `rl`: one JSON line per sample, infrastructure failures left out.

mod atif;
mod harbor;
mod rl;
mod sample;
#[cfg(test)]
mod tests;

pub(crate) use harbor::write as write_harbor;
pub(crate) use rl::lines as rl_lines;
pub(crate) use sample::{gather, read_report};

/// What `saheeli eval export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// A Harbor job directory: config.json, result.json, one trial directory per case and repeat.
    Harbor,
    /// JSON lines: per case and repeat its reward, outcome, tokens, cost and ATIF trajectory.
    Rl,
}
