//! From a prompt file, config.yaml and `--param` overrides to a [`TaskSpec`]:
//! everything needed to run the task, fixed at submit time.

mod checks;
mod params;
mod sources;
mod task;
#[cfg(test)]
mod tests;
mod tools;
mod verification;

use checks::*;
use params::*;
use verification::*;

pub(crate) use sources::{Effective, Source, effective};
pub(crate) use task::{TaskSpec, front_matter};
pub(crate) use tools::tools_for;
