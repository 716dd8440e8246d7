//! Parent and child tasks (issue 30): a task whose front-matter grants
//! `delegate:` spawns child tasks (`spawn_task`) and waits for them
//! (`wait_tasks`) through its gateway socket. The foreman decides
//! everything (depth, fan-out, the budget carved out of the parent's); the
//! servo only carries the model's request and the answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::TaskId;

/// `delegate: { max_children: N, max_depth: D }` in a prompt's front-matter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Delegate {
    /// Children this task may spawn in all.
    pub max_children: u32,
    /// Levels below this task: 1 allows children, 2 grandchildren, …
    #[serde(default = "one")]
    pub max_depth: u32,
}

fn one() -> u32 {
    1
}

/// The most a front-matter may grant (a prompt asking for more is refused
/// at submit): no tree grows past `MAX_CHILDREN^MAX_DEPTH` tasks, and
/// [`MAX_TREE`] caps it sooner.
pub const MAX_CHILDREN: u32 = 32;
pub const MAX_DEPTH: u32 = 4;
/// Tasks in one tree (its root and every descendant), whatever each
/// level grants.
pub const MAX_TREE: u32 = 128;

/// Caps on the files a spawn copies from the parent's workspace.
pub const MAX_FILES: usize = 64;
pub const MAX_FILE_BYTES: usize = 256 * 1024;
pub const MAX_FILES_BYTES: usize = 1024 * 1024;

/// Caps on what a wait hands back to the model per child.
pub const MAX_MESSAGE: usize = 4 * 1024;
pub const MAX_PATCH: usize = 16 * 1024;

/// The servo's routes on the gateway socket for children.
pub mod routes {
    /// `POST` a [`Spawn`](super::Spawn); answered with a [`Spawned`](super::Spawned).
    pub const SPAWN: &str = "/saheeli/v1/children/spawn";
    /// `POST` a [`Wait`](super::Wait); answered with a [`Waited`](super::Waited).
    pub const WAIT: &str = "/saheeli/v1/children/wait";
}

/// One file copied from the parent's workspace into the child's.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// Relative to /workspace.
    pub path: String,
    /// UTF-8 text (binary files are refused by the servo).
    pub content: String,
}

/// `POST /saheeli/v1/children/spawn`: a child from `prompt` text, or from
/// the template `template` (relative to the parent's prompt file) with
/// `params`. Idempotent per `call_id` (the tool call's id): a servo asking
/// again after a foreman restart gets the same child.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Spawn {
    pub call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspace: Vec<File>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
}

/// Answer to a [`Spawn`].
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Spawned {
    pub id: TaskId,
    /// The budget carved out of the parent's for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
}

/// `POST /saheeli/v1/children/wait`: block until the children `ids` (all
/// of this task's children when None) have ended, up to `wait_ms`.
/// Idempotent per `call_id`: asked again (a foreman restarted meanwhile),
/// the same outcomes come back, and no other wait gets them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Wait {
    pub call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<Vec<TaskId>>,
    pub wait_ms: u64,
}

/// Answer to a [`Wait`]: `done` once every child waited for has ended
/// (then `children` holds their outcomes), else the ones still running.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Waited {
    pub done: bool,
    #[serde(default)]
    pub children: Vec<ChildOutcome>,
    /// Children not ended yet (when not `done`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<TaskId>,
}

/// How one child ended, as its parent's model reads it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ChildOutcome {
    pub id: TaskId,
    pub title: String,
    /// `complete`, `incomplete`, `failed`, `cancelled`.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `task_complete`'s message (capped at [`MAX_MESSAGE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Its changes as a patch (capped at [`MAX_PATCH`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// Handed to an earlier `wait_tasks` already: only its state is repeated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub already_received: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delegate_defaults_depth_and_refuses_unknown_keys() {
        let d: Delegate = serde_yaml::from_str("max_children: 3").unwrap();
        assert_eq!(
            d,
            Delegate {
                max_children: 3,
                max_depth: 1
            }
        );
        let e = serde_yaml::from_str::<Delegate>("max_children: 3\nmax_kids: 2").unwrap_err();
        assert!(e.to_string().contains("unknown field `max_kids`"), "{e}");
    }
}
