//! From a prompt file, config.yaml and `--param` overrides to a [`TaskSpec`]:
//! everything needed to run the task, fixed at submit time.

mod checks;
mod params;
mod task;
#[cfg(test)]
mod tests;

use checks::*;
use params::*;

pub(crate) use task::TaskSpec;
