//! The schema, its migrations, and opening a database (safe when several
//! processes open a new one at once).

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite_migration::{M, Migrations};

use super::{Result, StoreError};

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
    // The gateway's per-call ledger (llm/ledger.rs): each call's
    // reservation, then its real usage; `lost` when a foreman died with
    // the call in flight.
    M::up(
        "CREATE TABLE llm_calls (
            call_id         TEXT PRIMARY KEY,
            task_id         TEXT NOT NULL,
            state           TEXT NOT NULL,
            reserved_tokens INTEGER NOT NULL,
            reserved_cost   REAL NOT NULL,
            input_tokens    INTEGER NOT NULL DEFAULT 0,
            output_tokens   INTEGER NOT NULL DEFAULT 0,
            cost_usd        REAL NOT NULL DEFAULT 0,
            started_at      INTEGER NOT NULL,
            settled_at      INTEGER
        );
        CREATE INDEX llm_calls_by_task ON llm_calls(task_id, state);",
    ),
    // Humans in the loop: questions and their replies, injected messages,
    // pauses, parked tasks; events that are not state changes (`kind`).
    M::up(
        "CREATE TABLE asks (
            id           INTEGER PRIMARY KEY,
            task_id      TEXT NOT NULL REFERENCES tasks(id),
            call_id      TEXT NOT NULL,
            waiting      TEXT NOT NULL,
            asked_at     INTEGER NOT NULL,
            decision     TEXT,
            reply        TEXT,
            replied_by   TEXT,
            replied_at   INTEGER,
            delivered_at INTEGER,
            UNIQUE (task_id, call_id)
        );
        CREATE TABLE notes (
            id           INTEGER PRIMARY KEY,
            task_id      TEXT NOT NULL REFERENCES tasks(id),
            text         TEXT NOT NULL,
            author       TEXT NOT NULL,
            at           INTEGER NOT NULL,
            delivered_at INTEGER
        );
        CREATE INDEX notes_by_task ON notes(task_id, delivered_at);
        ALTER TABLE tasks ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE tasks ADD COLUMN active_ms INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE tasks ADD COLUMN pause_requested INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE tasks ADD COLUMN waiting_since INTEGER;
        ALTER TABLE tasks ADD COLUMN human_deadline INTEGER;
        ALTER TABLE events ADD COLUMN kind TEXT;
        ALTER TABLE events ADD COLUMN actor TEXT;",
    ),
    // `saheeli task override`: the outcome the task first ended with (kept
    // through later overrides) and the latest override's reason, who and when.
    M::up(
        "ALTER TABLE tasks ADD COLUMN override_from TEXT;
         ALTER TABLE tasks ADD COLUMN override_reason TEXT;
         ALTER TABLE tasks ADD COLUMN override_by TEXT;
         ALTER TABLE tasks ADD COLUMN override_at INTEGER;",
    ),
    // Webhooks: the task's targets, and the outbox written in the same
    // transaction as each event (one row per event and URL).
    M::up(
        "ALTER TABLE tasks ADD COLUMN notify TEXT;
         CREATE TABLE outbox (
            id            INTEGER PRIMARY KEY,
            event_id      INTEGER NOT NULL REFERENCES events(id),
            task_id       TEXT NOT NULL REFERENCES tasks(id),
            url           TEXT NOT NULL,
            format        TEXT NOT NULL,
            kind          TEXT NOT NULL,
            created_at    INTEGER NOT NULL,
            state         TEXT NOT NULL DEFAULT 'pending',
            attempts      INTEGER NOT NULL DEFAULT 0,
            next_at       INTEGER NOT NULL,
            last_error    TEXT,
            delivered_at  INTEGER,
            claimed_by    TEXT,
            claimed_until INTEGER,
            UNIQUE (event_id, url)
         );
         CREATE INDEX outbox_due ON outbox(state, next_at);
         CREATE INDEX outbox_by_task ON outbox(task_id, url, state, id);",
    ),
    // A template's steps the model marked done (`step_done`), one row per
    // step: marking it again replaces the evidence.
    M::up(
        "CREATE TABLE steps (
            task_id  TEXT NOT NULL REFERENCES tasks(id),
            name     TEXT NOT NULL,
            evidence TEXT NOT NULL,
            at       INTEGER NOT NULL,
            PRIMARY KEY (task_id, name)
        );",
    ),
    // Verified outcomes: every verify command and assessment the foreman
    // ran after a `task_complete`, by attempt (`call_id`: the model's call
    // that asked, so asking again gets the same verdict).
    M::up(
        "CREATE TABLE verify_checks (
            id          INTEGER PRIMARY KEY,
            task_id     TEXT NOT NULL REFERENCES tasks(id),
            attempt     INTEGER NOT NULL,
            call_id     TEXT NOT NULL,
            kind        TEXT NOT NULL,
            command     TEXT NOT NULL,
            exit_code   INTEGER,
            duration_ms INTEGER NOT NULL,
            passed      INTEGER NOT NULL,
            output      TEXT NOT NULL,
            at          INTEGER NOT NULL
        );
        CREATE INDEX verify_checks_by_task ON verify_checks(task_id, attempt, id);",
    ),
    // Capability calls a task made (issue 17), for status.
    M::up("ALTER TABLE tasks ADD COLUMN capability_calls INTEGER NOT NULL DEFAULT 0;"),
    // Each serving foreman's admission state (store/admission.rs), for
    // `task status` and `saheeli metrics` in other processes.
    M::up(
        "CREATE TABLE admission (
            owner        TEXT PRIMARY KEY,
            concurrency  TEXT NOT NULL,
            lim          INTEGER NOT NULL,
            running      INTEGER NOT NULL,
            breaker      TEXT NOT NULL,
            failures     INTEGER NOT NULL,
            latency_ms   REAL,
            baseline_ms  REAL,
            open_for_ms  INTEGER,
            updated_at   INTEGER NOT NULL
        );",
    ),
    // Evaluation suites (issue 16): a run of a suite, and which task is
    // which case and repeat of it (written with the task, in one
    // transaction, so a resumed run never submits a case twice).
    // `alive_until`: the heartbeat of the `saheeli eval` process.
    M::up(
        "CREATE TABLE eval_runs (
            id           TEXT PRIMARY KEY,
            suite_name   TEXT NOT NULL,
            suite_path   TEXT NOT NULL,
            suite_digest TEXT NOT NULL,
            options      TEXT NOT NULL,
            report_dir   TEXT NOT NULL,
            started_at   INTEGER NOT NULL,
            ended_at     INTEGER,
            state        TEXT NOT NULL,
            alive_until  INTEGER,
            pass_rate    REAL
        );
        CREATE TABLE eval_tasks (
            run_id   TEXT NOT NULL REFERENCES eval_runs(id),
            case_id  TEXT NOT NULL,
            repeat   INTEGER NOT NULL,
            task_id  TEXT NOT NULL UNIQUE REFERENCES tasks(id),
            PRIMARY KEY (run_id, case_id, repeat)
        );",
    ),
    // What a task's gateway wrote on requests from its container (issue
    // 23), so that per-task caps hold across foremen (store/guard.rs);
    // `used_at`: an approved capability call ran on this approval (once).
    M::up(
        "ALTER TABLE tasks ADD COLUMN gateway_events INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE tasks ADD COLUMN gateway_bytes INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE tasks ADD COLUMN gateway_refused INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE asks ADD COLUMN used_at INTEGER;",
    ),
    // Long tasks (issue 26): input read from and written to the provider's
    // prompt cache, per call and per task, and the servo's compactions.
    M::up(
        "ALTER TABLE llm_calls ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE llm_calls ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE tasks ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE tasks ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE tasks ADD COLUMN compactions INTEGER NOT NULL DEFAULT 0;",
    ),
    // Issue 29, step controls (store/step_control.rs): when each step
    // started; breakpoints set or cleared by a person (over the
    // template's); steps a person marked done or skipped
    // (store/step_override.rs); `task step` (pause once the next step ends).
    M::up(
        "CREATE TABLE step_starts (
            task_id TEXT NOT NULL REFERENCES tasks(id),
            name    TEXT NOT NULL,
            at      INTEGER NOT NULL,
            PRIMARY KEY (task_id, name)
         );
         CREATE TABLE step_breakpoints (
            task_id  TEXT NOT NULL REFERENCES tasks(id),
            name     TEXT NOT NULL,
            position TEXT NOT NULL,
            active   INTEGER NOT NULL,
            author   TEXT NOT NULL,
            at       INTEGER NOT NULL,
            PRIMARY KEY (task_id, name, position)
         );
         CREATE TABLE step_overrides (
            task_id TEXT NOT NULL REFERENCES tasks(id),
            name    TEXT NOT NULL,
            state   TEXT NOT NULL,
            reason  TEXT NOT NULL,
            author  TEXT NOT NULL,
            at      INTEGER NOT NULL,
            PRIMARY KEY (task_id, name)
         );
         ALTER TABLE tasks ADD COLUMN step_through INTEGER NOT NULL DEFAULT 0;",
    ),
    // Issue 29, an assessor that can say "limited": the verdict of an
    // assessment (1: more attempts cannot help) and its findings (JSON).
    M::up(
        "ALTER TABLE verify_checks ADD COLUMN limited INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE verify_checks ADD COLUMN findings TEXT NOT NULL DEFAULT '[]';",
    ),
    // Warm servos idle in a serving foreman's pool (issue 28), for `task
    // status` and `saheeli metrics` in other processes; NULL: no pool.
    M::up("ALTER TABLE admission ADD COLUMN pool_idle INTEGER;"),
    // Issue 30, parent and child tasks (store/children.rs): a child's
    // parent, the root of its tree and its depth below it; the spawning
    // tool call (a spawn asked again spawns no second child); the wait
    // that received its outcome, and when (each outcome is handed over
    // once).
    M::up(
        "CREATE TABLE children (
            child_id       TEXT PRIMARY KEY REFERENCES tasks(id),
            parent_id      TEXT NOT NULL REFERENCES tasks(id),
            root_id        TEXT NOT NULL REFERENCES tasks(id),
            depth          INTEGER NOT NULL,
            call_id        TEXT,
            delivered_call TEXT,
            delivered_at   INTEGER
         );
         CREATE INDEX children_by_parent ON children(parent_id, child_id);
         CREATE INDEX children_by_root ON children(root_id);
         CREATE UNIQUE INDEX children_by_call ON children(parent_id, call_id)
            WHERE call_id IS NOT NULL;",
    ),
    // Issue 26, rate limits: until when a call of the task waits for its
    // turn in the provider's shared budget (llm/limits.rs); NULL or
    // past: not waiting.
    M::up("ALTER TABLE tasks ADD COLUMN rate_wait_until INTEGER;"),
    // Issue 49, rewards: what a verifier graded (its reward file's keys
    // and the test counts of its output, JSON); NULL: not graded.
    M::up("ALTER TABLE verify_checks ADD COLUMN graded TEXT;"),
    // Issue 50, egress: one row per connection a task's proxy was asked
    // for (store/egress.rs).
    M::up(
        "CREATE TABLE egress (
            id         INTEGER PRIMARY KEY,
            task_id    TEXT NOT NULL REFERENCES tasks(id),
            phase      TEXT NOT NULL,
            host       TEXT NOT NULL,
            port       INTEGER NOT NULL,
            verdict    TEXT NOT NULL,
            reason     TEXT,
            address    TEXT,
            bytes_up   INTEGER NOT NULL,
            bytes_down INTEGER NOT NULL,
            started_at INTEGER NOT NULL,
            ms         INTEGER NOT NULL
         );
         CREATE INDEX egress_by_task ON egress(task_id, id);",
    ),
    // Issue 50: how a task's set-up went (store/setup.rs), JSON.
    M::up("ALTER TABLE tasks ADD COLUMN setup TEXT;"),
    // Issue 52: the commit a task started from (JSON), how its branch was
    // delivered (JSON, store/git.rs), the task whose review it follows up.
    M::up(
        "ALTER TABLE tasks ADD COLUMN git TEXT;
         ALTER TABLE tasks ADD COLUMN delivered TEXT;
         ALTER TABLE tasks ADD COLUMN follow_up_of TEXT REFERENCES tasks(id);",
    ),
    // Issue 52, pools (store/caps.rs): what `pools:` select a task by,
    // beside the queue's order in one index, so a claim that skips the
    // tasks of full pools reads the index alone (never the specs).
    M::up(
        "ALTER TABLE tasks ADD COLUMN agent_type TEXT;
         ALTER TABLE tasks ADD COLUMN model TEXT;
         ALTER TABLE tasks ADD COLUMN provider_key TEXT;
         UPDATE tasks SET agent_type = json_extract(spec, '$.agent_type'),
                          model = json_extract(spec, '$.model'),
                          provider_key = json_extract(spec, '$.provider_key');
         CREATE INDEX tasks_by_pool
            ON tasks(state, priority DESC, id, not_before, agent_type, model, provider_key);",
    ),
    // Definitions from Git (issue 52): each commit of the definitions
    // repository the foreman judged, applied (with its files and what it
    // changed) or rejected (with why); the newest applied one is the set
    // in use. `notices`: the webhooks of foreman events that belong to no
    // task (`definitions.rejected`), an outbox of their own.
    M::up(
        "CREATE TABLE definitions (
            id        INTEGER PRIMARY KEY,
            repo      TEXT NOT NULL,
            commit_id TEXT NOT NULL,
            applied   INTEGER NOT NULL,
            reason    TEXT,
            changes   TEXT,
            files     TEXT,
            at        INTEGER NOT NULL
         );
         CREATE INDEX definitions_by_kind ON definitions(applied, id);
         CREATE TABLE notices (
            id            INTEGER PRIMARY KEY,
            kind          TEXT NOT NULL,
            url           TEXT NOT NULL,
            format        TEXT NOT NULL,
            facts         TEXT NOT NULL,
            created_at    INTEGER NOT NULL,
            state         TEXT NOT NULL DEFAULT 'pending',
            attempts      INTEGER NOT NULL DEFAULT 0,
            next_at       INTEGER NOT NULL,
            last_error    TEXT,
            delivered_at  INTEGER,
            claimed_by    TEXT,
            claimed_until INTEGER
         );
         CREATE INDEX notices_due ON notices(state, next_at);",
    ),
    // A servo frozen while its task waits (issue 51; store/freeze.rs).
    M::up("ALTER TABLE tasks ADD COLUMN frozen_at INTEGER;"),
];

pub(crate) struct Store {
    pub(super) conn: Connection,
}

impl Store {
    /// Opens (creating when absent) and migrates the database.
    pub fn open(path: &Path) -> Result<Store> {
        // Several processes may open a new database at the same moment:
        // switching it to WAL and migrating it take the write lock, and
        // one that loses a race (to SQLITE_BUSY, or to another process
        // that migrated first) tries again, for as long as the busy
        // timeout would have waited.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        let mut pause = Duration::from_millis(5);
        loop {
            match open_once(path) {
                Ok(conn) => return Ok(Store { conn }),
                Err(e) if std::time::Instant::now() < deadline && retryable(&e) => {
                    tracing::debug!(error = %e, "opening the database raced another process; trying again");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// How long a writer waits for the lock before SQLITE_BUSY.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes a writer that finds the database locked try again every
/// millisecond (a quarter of one at first), for [`BUSY_TIMEOUT`] in all.
/// SQLite's own `busy_timeout` sleeps 1, 2, 5, 10, … up to 100 ms between
/// tries, far longer than the commit it waits for: a burst of submits and
/// the foreman's claims and launch writes queued behind each other for
/// tens of milliseconds each (issue 28's burst and first request).
pub(crate) fn wait_when_busy(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_handler(Some(try_again))
}

fn try_again(tries: i32) -> bool {
    const STEP: Duration = Duration::from_millis(1);
    if STEP * tries.max(0) as u32 >= BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(if tries < 8 { STEP / 4 } else { STEP });
    true
}

/// `execute` through the connection's statement cache: rusqlite's own
/// `execute` compiles its SQL every time, and a task's life runs some
/// dozens of writes (a `perf` of the thousand found 4.5% of the foreman's
/// CPU in SQLite's parser). Only for SQL that is the same text each call.
pub(crate) trait ExecCached {
    fn exec_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;
}

impl ExecCached for Connection {
    fn exec_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }
}

/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 256;

fn open_once(path: &Path) -> Result<Connection> {
    let mut conn = Connection::open(path)?;
    wait_when_busy(&conn)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Migrations::from_slice(MIGRATIONS).to_latest(&mut conn)?;
    // A task's life goes through some dozens of distinct statements; with
    // rusqlite's default cache of 16 they pushed each other out, and each
    // was compiled again per task.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// Errors that another process opening or migrating at the same moment
/// can cause; a missing directory or a file that is not a database cannot
/// be helped by waiting.
fn retryable(e: &StoreError) -> bool {
    use rusqlite::ErrorCode::{CannotOpen, NotADatabase, PermissionDenied, ReadOnly};
    let sqlite = match e {
        StoreError::Sqlite(e) => Some(e),
        StoreError::Migration(rusqlite_migration::Error::RusqliteError { err, .. }) => Some(err),
        StoreError::Migration(_) => None,
        _ => return false,
    };
    !matches!(
        sqlite.and_then(|e| e.sqlite_error_code()),
        Some(CannotOpen | NotADatabase | PermissionDenied | ReadOnly)
    )
}
