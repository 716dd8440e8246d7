//! The schema, its migrations, and opening a database (safe when several
//! processes open a new one at once).

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite_migration::{M, Migrations};

use super::*;

pub(super) const MIGRATIONS: &[M<'static>] = &[
    M::up(
        "CREATE TABLE tasks (
        id            TEXT PRIMARY KEY,
        title         TEXT NOT NULL,
        state         TEXT NOT NULL,
        reason        TEXT,
        priority      INTEGER NOT NULL DEFAULT 0,
        spec          TEXT NOT NULL,
        retry_of      TEXT REFERENCES tasks(id),
        container_id  TEXT,
        created_at    INTEGER NOT NULL,
        started_at    INTEGER,
        finished_at   INTEGER,
        steps         INTEGER NOT NULL DEFAULT 0,
        input_tokens  INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        results_path  TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX tasks_by_state ON tasks(state, priority DESC, id);
    CREATE TABLE events (
        id         INTEGER PRIMARY KEY,
        task_id    TEXT NOT NULL REFERENCES tasks(id),
        at         INTEGER NOT NULL,
        from_state TEXT,
        to_state   TEXT NOT NULL,
        detail     TEXT
    );
    CREATE INDEX events_by_task ON events(task_id, id);",
    ),
    M::up("ALTER TABLE tasks ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0;"),
    // Leases: the foreman running a task renews `lease_until`; another
    // foreman takes the task over only once the lease has expired.
    M::up(
        "ALTER TABLE tasks ADD COLUMN owner TEXT;
         ALTER TABLE tasks ADD COLUMN lease_until INTEGER;
         ALTER TABLE tasks ADD COLUMN requeues INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE tasks ADD COLUMN not_before INTEGER;",
    ),
    M::up("ALTER TABLE tasks ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;"),
    // `reason` holds a code from a fixed set (protocol::Reason); the human
    // detail of an ending goes beside it. `task status ID` follows retries.
    M::up(
        "ALTER TABLE tasks ADD COLUMN detail TEXT;
         CREATE INDEX tasks_by_retry_of ON tasks(retry_of);",
    ),
];

pub(crate) struct Store {
    pub(super) conn: Connection,
}

impl Store {
    /// Opens (creating when absent) and migrates the database.
    pub fn open(path: &Path) -> Result<Store> {
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        migrate(&mut conn)?;
        Ok(Store { conn })
    }
}

/// Brings the schema up to date. Several processes may open a new
/// database at the same moment: each migration runs under SQLite's write
/// lock, and one that finds the work done by another (or loses the race for
/// it) reads the version again and goes on from there.
pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
    let migrations = Migrations::from_slice(MIGRATIONS);
    let mut tries = 0;
    loop {
        match migrations.to_latest(conn) {
            Ok(()) => return Ok(()),
            Err(e) if tries < 50 => {
                tries += 1;
                tracing::debug!(error = %e, "migration raced another process; trying again");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
}
