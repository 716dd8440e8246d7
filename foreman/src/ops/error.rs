//! Why a command the CLI and the HTTP API share (submit, retry, steer)
//! failed, sorted where it failed: the API answers by the variant (the
//! store's own status, 409, 400 or 500), the CLI prints it through `?` as
//! it printed the `anyhow` chain before.

use crate::backend::EngineError;
use crate::inputs::PackError;
use crate::store::{DeskError, StoreError};

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The store refused or failed; its variant says which.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A person's act the task cannot take now (or the store's failure).
    #[error(transparent)]
    Desk(#[from] DeskError),
    /// A request the task's state does not allow.
    #[error("{0}")]
    WrongState(String),
    /// The request's fault: a prompt that does not validate, a workspace
    /// too big or holding a key, an unknown step, an empty text.
    #[error(transparent)]
    Refused(anyhow::Error),
    /// Saheeli's or its host's failure: the disk, a thread, Docker.
    #[error(transparent)]
    Internal(anyhow::Error),
}

impl Error {
    /// A thread that ran part of the command died.
    pub fn panicked(what: &str, e: tokio::task::JoinError) -> Error {
        Error::Internal(anyhow::Error::from(e).context(format!("{what} thread panicked")))
    }
}

/// A missing image an `agent:` names is the prompt's; the daemon's faults
/// are ours.
impl From<EngineError> for Error {
    fn from(e: EngineError) -> Error {
        match e {
            EngineError::ImageMissing(e) | EngineError::Setup(e) => Error::Refused(e),
            EngineError::SetupFailed(why) => Error::Refused(anyhow::anyhow!(why)),
            EngineError::Unreachable { error, .. } => Error::Internal(error),
            EngineError::Gone(what) => Error::Internal(anyhow::anyhow!(what)),
            EngineError::Other(e) => Error::Internal(e),
        }
    }
}

/// A workspace too large, holding a key or outside its bounds, or a file
/// in it that is not there or cannot be read as named, is the request's;
/// any other failure to read or write (the inputs directory too) is the
/// host's.
impl From<PackError> for Error {
    fn from(e: PackError) -> Error {
        let io = match e {
            PackError::Outside(e) => return Error::Refused(e),
            PackError::Inputs(e) => return Error::Internal(e),
            PackError::TooLarge { .. } | PackError::Secret { .. } => None,
            PackError::Io { ref source, .. } => Some(source.kind()),
            PackError::Walk { ref source, .. } => source.io_error().map(std::io::Error::kind),
        };
        if io.is_some_and(|k| !the_callers(k)) {
            Error::Internal(e.into())
        } else {
            Error::Refused(e.into())
        }
    }
}

/// An I/O failure about a path the request named, rather than the host's.
fn the_callers(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind::*;
    matches!(kind, NotFound | InvalidInput | InvalidData)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::PackError;
    #[test]
    fn a_packing_failure_is_sorted_by_its_cause() {
        let refused = |e: PackError| matches!(Error::from(e), Error::Refused(_));
        let dir = std::path::PathBuf::from("ws");
        assert!(refused(PackError::TooLarge {
            dir: dir.clone(),
            limit: 1
        }));
        let io = |kind| PackError::Io {
            dir: dir.clone(),
            source: std::io::Error::new(kind, "x"),
        };
        assert!(refused(io(std::io::ErrorKind::NotFound)));
        assert!(!refused(io(std::io::ErrorKind::StorageFull)));
    }

    #[test]
    fn the_cli_reads_the_same_message() {
        let e = Error::Refused(anyhow::anyhow!("too big").context("p.md"));
        assert_eq!(format!("{:#}", anyhow::Error::from(e)), "p.md: too big");
        let e = Error::Store(StoreError::TaskNotFound("x".into()));
        assert!(
            format!("{:#}", anyhow::Error::from(e)).starts_with("no task with id `x`"),
            "as before"
        );
    }
}
