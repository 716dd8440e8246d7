//! Bringing a finished task's /workspace home: a tar stream from a container
//! we do not trust, extracted into `results/<task_id>/`.
//!
//! The archive is read as it arrives (never held whole in memory) into
//! `results/.<task_id>.<random>.partial/`, which is renamed into place only when
//! complete, so a results directory is never half-written. Entries that
//! would land outside the directory (`..`, absolute paths), device files,
//! FIFOs and hard links are skipped and counted; symlinks are created last,
//! so no entry is ever written through one, and every file and directory
//! is made through directory handles that follow no link (`dir`). Before
//! the rename, every file is scanned for the values of the configured API
//! keys, and any hit is replaced by `[REDACTED:<VARIABLE>]`. Links stay
//! links (they are part of the workspace) and nothing of Saheeli follows
//! them. Holes in sparse files stay holes (`sparse`).
//!
//! `volume` copies a stopped task's volume from its host directory instead
//! (with `*at` calls, links never followed); `read` reads files of a
//! collected workspace (`complete.json`, the audit log) without following
//! links and under a cap; `agent_session` checks the session a
//! third-party agent kept before a retry restores it (issue 51).

mod agent_session;
mod archive;
mod dir;
mod evidence;
mod read;
mod redact;
mod results;
pub(crate) mod snapshot;
pub(crate) mod snapshot_record;
mod sparse;
#[cfg(test)]
mod tests;
mod volume;

use archive::make_links;
use redact::redact_tree;
use results::collect_into;

pub(crate) use agent_session::check_kept;
pub(crate) use archive::{ChannelReader, ChannelWriter, extract};
pub(crate) use dir::{Dir, is_link_or_not_dir};
pub(crate) use read::{
    AuditTotals, CappedLines, Line, MAX_AUDIT_LOG, audit_lines, audit_totals, open_regular,
    read_completion, servo_error,
};
pub(crate) use results::{Collected, TRUNCATED_MARKER, secure_results};
pub(crate) use sparse::{allocated, copy_file};
pub(crate) use volume::copy_volume;
