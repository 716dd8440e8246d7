//! The serve loop's doorbell: it wakes when any process commits to the
//! database (`task submit`, a cancel, an answer), so a submit is claimed at
//! once instead of at the next poll.
//!
//! SQLite in WAL mode appends every commit to `<db>-wal` (and checkpoints
//! into `<db>`), so an inotify watch on the database's directory, filtered
//! to those two names, hears every writer, whatever process it is, with no
//! protocol between them. What woke the loop is still read from the
//! database (`PRAGMA data_version`): the bell only says "look now". The
//! foreman's own writes ring it too; `rung` gathers a burst of events into
//! one wake. Where inotify is unavailable, the bell never rings and the
//! loop's timer alone looks for work.

use std::ffi::OsString;
use std::path::Path;

use futures_util::{FutureExt, StreamExt};
use inotify::{EventStream, Inotify, WatchMask};
use tracing::warn;

pub(super) struct Bell {
    stream: Option<EventStream<Vec<u8>>>,
    names: [OsString; 2],
}

impl Bell {
    /// Watches the directory of `db`; without inotify the bell is mute.
    pub(super) fn watch(db: &Path) -> Bell {
        let file = db.file_name().map(OsString::from).unwrap_or_default();
        let mut wal = file.clone();
        wal.push("-wal");
        let dir = match db.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        let stream = Inotify::init().and_then(|i| {
            i.watches()
                .add(&dir, WatchMask::MODIFY | WatchMask::CREATE)?;
            i.into_event_stream(vec![0u8; 4096])
        });
        let stream = match stream {
            Ok(s) => Some(s),
            Err(e) => {
                warn!(dir = %dir.display(), error = %e, "no inotify on the database directory: looking for work on a timer only");
                None
            }
        };
        Bell {
            stream,
            names: [file, wal],
        }
    }

    /// Whether the bell can ring at all.
    pub(super) fn works(&self) -> bool {
        self.stream.is_some()
    }

    /// Waits until the database was written, then takes every event that
    /// is already queued (one wake for a burst). Never returns when mute.
    pub(super) async fn rung(&mut self) {
        let Some(stream) = self.stream.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            match stream.next().await {
                Some(Ok(e)) if e.name.as_ref().is_some_and(|n| self.names.contains(n)) => break,
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    warn!(error = %e, "inotify failed: looking for work on a timer only");
                    self.stream = None;
                    return std::future::pending().await;
                }
                None => {
                    self.stream = None;
                    return std::future::pending().await;
                }
            }
        }
        while let Some(Some(Ok(_))) = stream.next().now_or_never() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_commit_by_another_connection_rings_and_other_files_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("saheeli.db");
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.pragma_update(None, "journal_mode", "wal").unwrap();
        conn.execute("CREATE TABLE t (x)", []).unwrap();
        let mut bell = Bell::watch(&db);
        assert!(bell.works());
        // A file beside the database is not the database.
        std::fs::write(dir.path().join("other.txt"), "x").unwrap();
        let quiet = tokio::time::timeout(Duration::from_millis(200), bell.rung()).await;
        assert!(quiet.is_err(), "a write to another file rang the bell");
        let writer = rusqlite::Connection::open(&db).unwrap();
        writer.execute("INSERT INTO t VALUES (1)", []).unwrap();
        tokio::time::timeout(Duration::from_secs(5), bell.rung())
            .await
            .expect("a commit did not ring the bell");
    }
}
