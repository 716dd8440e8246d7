//! `saheeli serve`: the foreman's loop. SQLite holds the desired state,
//! Docker the actual one; this loop moves tasks from one to the other:
//! queue → launch → monitor → collect.
//!
//! One owner of task state: only this loop and the per-task supervisors it
//! spawns write transitions. Other `saheeli` processes talk to it through
//! the database (`task cancel` sets a flag it reads when the database's
//! doorbell rings: see `bell`).

mod admission;
mod adopt;
mod bell;
mod context;
mod control;
mod finish;
mod gate;
mod gather;
mod launch;
mod lease;
mod monitor;
mod outcome;
mod park;
mod record;
mod serve;
mod swarm;
mod swarm_adopt;
mod swarm_park;
mod sweep;

use adopt::*;
use context::*;
use control::*;
use finish::*;
use gate::*;
use gather::*;
use launch::*;
use lease::*;
use monitor::*;
use outcome::*;
use park::*;
use record::*;
use serve::*;
use swarm::*;
use swarm_adopt::*;
use swarm_park::*;
use sweep::*;

pub(crate) use admission::{Admission, Breaker, Tuning};
pub(crate) use context::{Ctx, ServeOptions};
pub(crate) use gather::collect_workspace;
pub(crate) use serve::run;
