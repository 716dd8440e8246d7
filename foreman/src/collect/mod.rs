//! Bringing a finished task's /workspace home: a tar stream from a container
//! we do not trust, extracted into `results/<task_id>/`.
//!
//! The archive is read as it arrives (never held whole in memory) into
//! `results/.<task_id>.<random>.partial/`, which is renamed into place only when
//! complete, so a results directory is never half-written. Entries that
//! would land outside the directory (`..`, absolute paths), device files,
//! FIFOs and hard links are skipped and counted; symlinks are created last,
//! so no entry is ever written through one. Before the rename, every file is
//! scanned for the values of the configured API keys, and any hit is
//! replaced by `[REDACTED:<VARIABLE>]`.
//!
//! `volume` copies a stopped task's volume from its host directory instead
//! (with `*at` calls, links never followed); `read` reads files of a
//! collected workspace (`complete.json`, the audit log) without following
//! links and under a cap.

mod archive;
mod read;
mod redact;
mod results;
#[cfg(test)]
mod tests;
mod volume;

use archive::make_links;
use redact::redact_tree;
use results::collect_into;

pub(crate) use archive::{ChannelReader, ChannelWriter, extract};
pub(crate) use read::{
    AuditTotals, CappedLines, Line, MAX_AUDIT_LOG, audit_lines, audit_totals, open_regular,
    read_completion,
};
pub(crate) use results::{Collected, TRUNCATED_MARKER};
pub(crate) use volume::copy_volume;
