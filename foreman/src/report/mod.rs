//! What a user takes away from an ended task, beside its workspace:
//! `.saheeli/changes.patch` (the collected workspace against the submitted
//! one, in git's format) and `report.md` (what happened, from facts: the
//! task row, the audit log, `complete.json` and the patch; no LLM).
//!
//! - `patch`: one path's change rendered as git does (pure); `binary`:
//!   git binary patches (zlib stored blocks, git's base85).
//! - `diffstat`: files changed, read back from a patch (pure).
//! - `tree`: the two workspaces as trees of files and links, read without
//!   following links and under a size cap.
//! - `changes`: writing `changes.patch` into a results directory.
//! - `markdown`: the `Report` and its Markdown; `steps`: its section on a
//!   template's steps.
//! - `facts`: gathering a report's facts and writing `report.md`;
//!   `children`: a parent's section linking its children's reports.
//! - `verification`: the report's section on verify and assess, and
//!   `.saheeli/verify-N.log`, one per attempt.
//! - `submitted`: the submitted workspace's paths and ignore rules, for
//!   the tree a verify attempt checks (`routes::verify_tree`).
//! - `evidence`: changed files and a capped patch for the assessor.
//! - `sanitize`: the synthesized section's Markdown made inert (no HTML,
//!   images, links but web ones as text, or headings above `###`).
//! - `write`: writing files into a results directory the agent filled
//!   (nothing is written through its links).

mod binary;
mod changes;
mod children;
mod diffstat;
mod egress;
mod evidence;
mod facts;
mod ignored;
mod markdown;
mod patch;
mod sanitize;
mod steps;
mod submitted;
mod tree;
mod verification;
mod write;

pub(crate) use changes::write_changes;
pub(crate) use children::append_children;
pub(crate) use egress::append_egress;
pub(crate) use evidence::evidence;
pub(crate) use facts::{tool_counts, write_report};
pub(crate) use submitted::{MAX_COMPARED, Submitted, is_saheelis};
pub(crate) use verification::{log_name as verify_log, write_verify_logs};
pub(crate) use write::{PATCH, REPORT, remove};
