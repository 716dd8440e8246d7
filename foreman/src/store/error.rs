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

/// A store operation run off the async threads (`Ctx::db`): the store's
/// own error, or the thread that ran it died.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DbError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("database thread panicked: {0}")]
    Panicked(#[from] tokio::task::JoinError),
}

impl DbError {
    /// Whether another foreman took the task over (`StoreError::LeaseLost`).
    pub fn lease_lost(&self) -> bool {
        matches!(self, DbError::Store(StoreError::LeaseLost(_)))
    }
}

/// Whether a chain of causes says another foreman took the task over:
/// for callers that joined a store error into an `anyhow` chain. The
/// store reads its own error back; everyone else matches [`DbError`].
pub(crate) fn lease_lost_in(e: &anyhow::Error) -> bool {
    e.chain().any(|c| match c.downcast_ref::<DbError>() {
        Some(d) => d.lease_lost(),
        None => matches!(
            c.downcast_ref::<StoreError>(),
            Some(StoreError::LeaseLost(_))
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_lease_is_told_typed_or_in_a_chain() {
        let id = TaskId::new();
        assert!(DbError::from(StoreError::LeaseLost(id)).lease_lost());
        assert!(!DbError::from(StoreError::TaskNotFound("x".into())).lease_lost());
        let chained = anyhow::Error::from(DbError::from(StoreError::LeaseLost(id)))
            .context("writing the usage");
        assert!(lease_lost_in(&chained));
        let plain = anyhow::Error::from(StoreError::LeaseLost(id)).context("finishing");
        assert!(lease_lost_in(&plain));
        assert!(!lease_lost_in(&anyhow::anyhow!("task `{id}` lease lost")));
    }
}
