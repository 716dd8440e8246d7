//! Evaluation suites (`saheeli eval`): a suite file's cases run as
//! ordinary tasks tagged with the run's id, scored, and reported.
//!
//! - `suite`: reading a suite file strictly (errors name the line);
//!   `checked`: its deserialization helpers; `expect`: a case's `expect:`.
//! - `prepare`: a case into a `TaskSpec` through `spec/`.
//! - `score`: a case's verdict from its task and collected workspace.
//! - `report`: `report.json` per case and repeat; `totals` over them;
//!   `pass_at_k` the unbiased estimator over samples and repeats;
//!   `outcome` whose failure a result is (`agent`, `infra`, `verifier`);
//!   `phases` its time by set-up, agent and verify.
//! - `html`, `charts`: `report.html`, one self-contained page.
//! - `compare`: two runs side by side.
//! - `export`: a run as a Harbor job directory or RL JSON lines.
//! - `import`: Harbor, Terminal-Bench 1 and SWE-bench tasks as a suite.

mod charts;
mod checked;
mod compare;
mod expect;
pub(crate) mod export;
mod html;
pub(crate) mod import;
mod outcome;
mod pass_at_k;
mod phases;
mod prepare;
mod report;
mod score;
mod suite;
mod totals;

pub(crate) use compare::{compare, html as compare_html, table as compare_table};
pub(crate) use html::render;
pub(crate) use outcome::FailureClass;
pub(crate) use prepare::{Overrides, case_spec};
pub(crate) use report::{EvalReport, case_result, gather, last_attempt, rfc3339};
pub(crate) use suite::{Suite, case_line, parse};
