//! Where servos run: the [`Engine`] the supervisor asks to launch, watch,
//! stop and collect a servo, find one a stopped foreman left, and list
//! what carries Saheeli's labels. Engines report facts and never write a
//! task's state.
//!
//! # Layout
//!
//! - `seam`: [`Engine`] (`Local`, `Swarm`, and in tests `Fake`) and its
//!   methods, one `match` each; `facts`: what they report ([`Phase`],
//!   [`Collected`], [`Found`], [`EngineError`]).
//! - `local`: this host's Docker engine, a container per task (`disk` for
//!   size-limited workspaces); `docker`: bollard helpers both engines use.
//! - `swarm`: Docker Swarm, a job service per task on any node.
//! - `engine`: [`TaskEngine`], where one launch runs, for what acts on its
//!   running container (verify, the assessor, live logs).
//! - `warm_pool`: an engine's warm pool as the serve loop and the
//!   sweeper reach it.
//! - `fake`: a scripted engine for the supervisor's unit tests.
//! - `conformance`: the suite every engine must pass (issue 53), written
//!   once over a `Bench`; run on the Fake (`reconciler/conformance_tests.rs`)
//!   and, from `tests/it`, on this host's Docker and a real swarm.

pub(crate) mod capabilities;
#[cfg(test)]
pub(crate) mod conformance;
pub(crate) mod disk;
pub(crate) mod docker;
mod engine;
mod facts;
#[cfg(test)]
mod fake;
pub(crate) mod local;
mod seam;
pub(crate) mod swarm;
mod warm_pool;

pub(crate) use engine::TaskEngine;
pub(crate) use facts::{EngineError, Found, Phase, Prepared, Reach, Servo, Stop, Workspace};
#[cfg(test)]
pub(crate) use fake::Fake;
pub(crate) use local::{ORPHAN_SLOT_AGE, POOL_PREFIX, Pace, remove_warm, slot_of};
pub(crate) use seam::{Engine, Removal, ServoLog};
