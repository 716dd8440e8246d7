//! The one timing helper every Docker call goes through: its latency and
//! whether it failed, by operation, into the process's metrics.

use std::future::Future;
use std::time::Instant;

pub(crate) use crate::metrics::DockerOp;

/// Runs one Docker operation, recording how long it took and whether it
/// failed (an outcome the caller treats as fine, such as removing what is
/// already gone, is not a failure).
pub(super) async fn timed<T>(
    op: DockerOp,
    call: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let started = Instant::now();
    let r = call.await;
    crate::metrics::live().docker(op, started.elapsed(), r.is_ok());
    r
}
