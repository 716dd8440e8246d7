//! What can go wrong in the store; callers branch on the cause.

use saheeli_protocol::TaskId;

use crate::state::TaskState;

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("no task with id `{0}`; `saheeli task status` lists them")]
    TaskNotFound(String),
    #[error("id `{query}` matches more than one task ({}); give more digits", .matches.join(", "))]
    Ambiguous { query: String, matches: Vec<String> },
    #[error("task `{id}` is {from}; it cannot become {to}")]
    BadTransition {
        id: TaskId,
        from: TaskState,
        to: TaskState,
    },
    /// Another foreman took the task over (this one's lease expired while
    /// it was paused, hung or cut off): every write about it is refused.
    #[error("task `{0}` is no longer held by this foreman; another one took it over")]
    LeaseLost(TaskId),
    #[error("task `{id}` has not ended ({state}); only an ended task can be retried")]
    NotEnded { id: TaskId, state: TaskState },
    #[error(
        "task `{id}` is {state}: only a task that ended complete, incomplete or failed can \
         have its outcome overridden"
    )]
    NotOverridable { id: TaskId, state: TaskState },
    #[error(
        "task `{id}` cannot be overridden to {to}: give `--state complete` or `--state incomplete`"
    )]
    BadOverride { id: TaskId, to: TaskState },
    #[error("task `{id}` is already {state}; nothing to override")]
    SameOutcome { id: TaskId, state: TaskState },
    /// The task's gateway reached its caps (store/guard.rs): the request
    /// of its container is refused, and counted.
    #[error(
        "task `{0}`'s gateway has stored all it may for its container (events or bytes); \
         the request is refused and counted"
    )]
    GatewayCap(TaskId),
    /// A task has one open question at a time (store/desk.rs).
    #[error("task `{id}` already waits for the reply to `{open}`; ask again once it is answered")]
    AskOpen { id: TaskId, open: String },
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database migration: {0}")]
    Migration(#[from] rusqlite_migration::Error),
}

pub(super) type Result<T> = std::result::Result<T, StoreError>;
