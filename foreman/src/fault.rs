//! Why a Docker call failed for the daemon's sake (layer 0): the backend
//! sorts its errors into it, admission counts it against the daemon, and
//! metrics label launch failures by it.

/// Why a Docker call failed for the daemon's sake, not the task's: the
/// launch is worth another try once the daemon is well, and says nothing
/// against the task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum DaemonFault {
    /// No answer: the socket is gone, the connection was refused or cut.
    Unreachable,
    /// The daemon answered with a 5xx (its own failure).
    ServerError,
    /// The call timed out.
    Timeout,
}
