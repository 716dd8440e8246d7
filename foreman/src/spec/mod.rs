//! From a prompt file, config.yaml and `--param` overrides to a [`TaskSpec`]:
//! everything needed to run the task, fixed at submit time. A prompt that
//! declares `parameters:` is a template (`template`, `placeholders`). The file
//! is read in `prompt`, merged in `task`, and held to its bounds in `bounds`.

mod agent;
mod agent_type;
mod bench;
mod bounds;
mod budget;
mod checks;
mod git;
mod params;
mod placeholders;
mod prompt;
mod samples;
mod setup;
mod sources;
mod task;
mod template;
#[cfg(test)]
mod tests;
mod tools;
mod verification;

use checks::{
    MAX_RETRIES, MAX_STEPS, MAX_TIMEOUT, MAX_TITLE, check_capabilities, check_ceilings,
    check_delegate, check_gates, check_human, check_model, check_notify, check_tools, read_replay,
    secret_forms,
};
use params::{apply_params, default_title};
use template::{check_declarations, check_placeholders, render_all, resolve, split_params};
use verification::Verification;

pub(crate) use crate::task::ParamValue;
pub(crate) use crate::task::{Chain, TaskSpec, Used};
pub(crate) use agent::{default_image, image_for};
pub(crate) use budget::Budget;
pub(crate) use checks::read_replay_here;
pub(crate) use prompt::{SpecError, front_matter};
pub(crate) use samples::share as sample_share;
pub(crate) use sources::{Effective, Source, effective};
pub(crate) use template::{MissingParameters, ask_line, check_value};
pub(crate) use tools::tools_for;
