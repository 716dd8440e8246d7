//! `report:`: what a task's report.md holds.

use serde::{Deserialize, Serialize};

/// What a task's report.md holds (`report:`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportMode {
    /// Facts only: what ran, what changed, what was checked.
    #[default]
    Facts,
    /// The facts, and a short "Findings / Partial findings / Limitations"
    /// section written by one metered LLM call from the audit log and the
    /// verification.
    Synthesized,
}
