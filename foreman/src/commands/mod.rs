//! One function per subcommand. Each returns the process exit code as a
//! value (an incomplete task is `Ok(1)`); `Err` means bad input or a
//! failure of Saheeli itself, which `main` prints and maps to 2.

mod attach;
mod build;
mod build_agent;
mod cache;
mod common;
mod copy;
mod definitions;
mod doctor;
mod dry_run;
mod eval;
mod eval_export;
mod eval_progress;
mod eval_regrade;
mod eval_runs;
mod gc;
mod human;
mod import;
mod live;
mod metrics;
mod overrides;
mod report;
mod run;
mod serve;
mod task;
mod trajectory;

use crate::ops::open_existing_store;
use common::{exit_for, spec_for, submit_prompt};
use dry_run::dry_run;
use serve::{context, signals};

pub(crate) use crate::ops::open_store;
pub(crate) use attach::attach;
pub(crate) use build::build_servo;
pub(crate) use cache::cache;
pub(crate) use common::prepare_results_dir;
pub(crate) use definitions::definitions;
pub(crate) use doctor::doctor;
pub(crate) use eval::eval;
pub(crate) use eval_export::eval_export;
pub(crate) use eval_regrade::eval_regrade;
pub(crate) use eval_runs::{eval_compare, eval_list};
pub(crate) use gc::gc;
pub(crate) use human::{
    answer, approve, breakpoint, deny, inject, pause, resume, step, step_override,
};
pub(crate) use import::import;
pub(crate) use metrics::metrics;
pub(crate) use overrides::override_outcome;
pub(crate) use report::{diff, report};
pub(crate) use run::run;
pub(crate) use serve::serve;
pub(crate) use task::{cancel, follow_up, fork, logs, results, retry, snapshot, status, submit};
pub(crate) use trajectory::trajectory;
