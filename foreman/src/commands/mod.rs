//! One function per subcommand. Each returns the process exit code as a
//! value (an incomplete task is `Ok(1)`); `Err` means bad input or a
//! failure of Saheeli itself, which `main` prints and maps to 2.

mod attach;
mod build;
mod build_agent;
mod children;
mod common;
mod copy;
mod doctor;
mod dry_run;
mod error;
mod eval;
mod eval_progress;
mod eval_runs;
mod gc;
mod human;
mod live;
mod metrics;
mod overrides;
mod report;
mod run;
mod serve;
mod steps;
mod task;
mod trajectory;

use common::{
    exit_for, open_existing_store, pack_submitted, require_image, spec_for, submit_prompt,
};
use dry_run::dry_run;
use serve::{context, signals};

pub(crate) use attach::attach;
pub(crate) use build::build_servo;
pub(crate) use children::submit_child;
pub(crate) use common::{open_store, prepare_results_dir, spec_for_text, submit_spec};
pub(crate) use doctor::doctor;
pub(crate) use error::CommandError;
pub(crate) use eval::eval;
pub(crate) use eval_runs::{eval_compare, eval_list};
pub(crate) use gc::gc;
pub(crate) use human::{
    Steer, answer, approve, breakpoint, deny, inject, pause, resume, steer, step, step_override,
    who,
};
pub(crate) use metrics::metrics;
pub(crate) use overrides::override_outcome;
pub(crate) use report::{diff, report};
pub(crate) use run::run;
pub(crate) use serve::serve;
pub(crate) use task::{
    EventPage, cancel, logs, results, retry, retry_task, status, submit, task_view,
};
pub(crate) use trajectory::trajectory;
