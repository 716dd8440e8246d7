//! A task as it is queued (issue 48, layer 0): [`TaskSpec`]'s fields, a
//! chain of attempts and what its budgets have left, a template's
//! parameter values. Plain data and arithmetic over it, below the store
//! (which keeps it as JSON) and `spec/` (which builds it from a prompt,
//! config.yaml and `--param`, and re-exports it).

mod approvers;
mod capability;
mod chain;
pub(crate) mod egress;
mod git;
mod params;
mod samples;
mod setup_plan;
mod task_spec;

pub(crate) use approvers::{approval_for, asked_line};
pub(crate) use capability::{Capability, Need};
pub(crate) use chain::{Chain, Used};
pub(crate) use egress::EgressPlan;
pub(crate) use git::{DeliverPlan, Delivered, GitStart, GitWorkspace, branch_name};
pub(crate) use params::{ParamSource, ParamValue};
pub(crate) use samples::{SampleOf, Samples};
pub(crate) use setup_plan::{SetupPlan, SetupRan};
pub(crate) use task_spec::{ForkOf, FromDefinitions, TaskImage, TaskSpec};
