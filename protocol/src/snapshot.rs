//! A snapshot point (issue 51): before each call, a servo whose task keeps
//! snapshots tells its gateway the step it is at; the foreman keeps the
//! workspace (its session file included) as that step left it, when the
//! task's `snapshots:` says so.

use serde::{Deserialize, Serialize};

pub mod routes {
    /// `POST` a [`SnapshotPoint`](super::SnapshotPoint); answered with a
    /// [`SnapshotTaken`](super::SnapshotTaken).
    pub const SNAPSHOT: &str = "/saheeli/v1/snapshot";
}

/// The servo is between steps: `step` steps are done, their tool calls
/// have run and the session is saved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotPoint {
    pub step: u32,
}

/// What the foreman did at a snapshot point.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotTaken {
    /// A snapshot of this step is kept now.
    pub taken: bool,
    /// Why not, when one was due and none was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}
