//! Everything Saheeli asks of Docker, through bollard: build the servo
//! image, create a hardened and labelled container per task, copy files in
//! and out, wait, stop, and clean up.
//!
//! Containers and volumes are found by their `saheeli.task` label, never by
//! name; a task's verify container also carries `saheeli.role=verify`.

mod container;
mod daemon;
mod exec;
mod image;
mod labels;
mod timed;
mod verify;
mod volume;

pub(crate) use bollard::Docker;
pub(crate) use container::*;
pub(crate) use daemon::*;
pub(crate) use exec::*;
pub(crate) use image::*;
pub(crate) use labels::*;
use timed::{DockerOp, timed};
pub(crate) use verify::*;
pub(crate) use volume::*;
