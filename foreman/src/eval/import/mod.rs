//! `saheeli import`: the benchmark suites users already have as a Saheeli
//! suite. Harbor task directories and datasets, Terminal-Bench 1 tasks and
//! SWE-bench instances become cases with the keys of issue 49 (the task's
//! own image, tests hidden until verify, a reward, the oracle's solution).
//! What a task asks for that cannot be honoured is named per task here, at
//! import, never found at run time.
//!
//! - `source`: which importer reads a source (given or sniffed), datasets.
//! - `harbor`, `tb1`, `swebench`: one format each, into `ImportedTask`s;
//!   `dockerfile` and `git` what they read with; `grade.py` SWE-bench's grader.
//! - `write`: the suite directory (`suite.yaml` and generated files) and
//!   [`import_to`], both steps at once.
//! - `model`: the types between them.

mod dockerfile;
#[cfg(test)]
mod fixtures;
mod git;
mod harbor;
mod model;
mod source;
mod swebench;
mod tb1;
mod write;

pub(crate) use model::{Format, Options};
pub(crate) use source::problem_lines;
pub(crate) use write::import_to;
