//! One function per subcommand. Each returns the process exit code as a
//! value (an incomplete task is `Ok(1)`); `Err` means bad input or a
//! failure of Saheeli itself, which `main` prints and maps to 2.

mod build;
mod common;
mod gc;
mod report;
mod run;
mod serve;
mod task;

use common::*;
use serve::{context, signals};

pub(crate) use build::build_servo;
pub(crate) use gc::gc;
pub(crate) use report::{diff, report};
pub(crate) use run::run;
pub(crate) use serve::serve;
pub(crate) use task::{cancel, logs, results, retry, status, submit};
