//! A realistic task history written straight into a project's SQLite file:
//! thousands of `task submit` processes would take minutes.
//!
//! The schema is the foreman's own: the database was created by the real
//! `saheeli` binary (its migrations) before any row is written here, and
//! every row copies the spec of a task it submitted. Ids are UUIDv7 spread
//! over the last 30 days, in order; 94% of tasks ended complete, 3%
//! incomplete, 2% failed, 1% cancelled, the newest 20 are queued. Every
//! ended task has its four events (queued, starting, running, terminal)
//! with details like the foreman writes.

use rusqlite::params;
use uuid::{NoContext, Timestamp, Uuid};

use crate::project::Project;

/// Adds `n` tasks like `template`; returns the number of events written and
/// the id of a task in the middle of the history.
pub fn fill(p: &Project, template: &str, n: usize) -> anyhow::Result<(usize, String)> {
    let mut db = p.db()?;
    let (title, spec): (String, String) = db.query_row(
        "SELECT title, spec FROM tasks WHERE id = ?1",
        [template],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let results = p.path().join("results");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    let span_ms: u64 = 30 * 24 * 3600 * 1000;
    let step = (span_ms / n.max(1) as u64).max(1);
    let tx = db.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut events = 0;
    let mut middle = String::new();
    {
        let mut task = tx.prepare(
            "INSERT INTO tasks (id, title, state, reason, priority, spec, container_id, created_at,
                started_at, finished_at, steps, input_tokens, output_tokens, results_path)
             VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )?;
        let mut event = tx.prepare(
            "INSERT INTO events (task_id, at, from_state, to_state, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for i in 0..n {
            let created = now_ms - span_ms + i as u64 * step;
            let id = Uuid::new_v7(Timestamp::from_unix(
                NoContext,
                created / 1000,
                (created % 1000) as u32 * 1_000_000,
            ))
            .to_string();
            if i == n / 2 {
                middle = id.clone();
            }
            let created = created as i64;
            if i + 20 >= n {
                task.execute(params![
                    id,
                    title,
                    "queued",
                    None::<String>,
                    spec,
                    None::<String>,
                    created,
                    None::<i64>,
                    None::<i64>,
                    0,
                    0,
                    0,
                    None::<String>
                ])?;
                event.execute(params![
                    id,
                    created,
                    None::<String>,
                    "queued",
                    "submitted from one.md"
                ])?;
                events += 1;
                continue;
            }
            let (state, reason) = match i % 100 {
                0..94 => ("complete", "complete"),
                94..97 => ("incomplete", "max_steps"),
                97..99 => ("failed", "launch: image missing"),
                _ => ("cancelled", "cancelled"),
            };
            let container = format!("{:064x}", i as u128 * 0x9e37_79b9_7f4a_7c15);
            let (started, finished) =
                (created + 40, created + 40 + 20_000 + (i % 7) as i64 * 3_000);
            let dest = results.join(&id).display().to_string();
            task.execute(params![
                id,
                title,
                state,
                reason,
                spec,
                container,
                created,
                started,
                finished,
                12 + (i % 30) as i64,
                20_000 + (i % 1000) as i64,
                1_500 + (i % 300) as i64,
                dest
            ])?;
            let collected = format!("exit 0; collected 14 files, 48213 bytes in 21 ms into {dest}");
            for (at, from, to, detail) in [
                (
                    created,
                    None,
                    "queued",
                    Some("submitted from one.md".to_string()),
                ),
                (started, Some("queued"), "starting", None),
                (
                    started + 150,
                    Some("starting"),
                    "running",
                    Some(format!("container {}", &container[..12])),
                ),
                (finished, Some("running"), state, Some(collected)),
            ] {
                event.execute(params![id, at, from, to, detail])?;
                events += 1;
            }
        }
    }
    tx.commit()?;
    Ok((events, middle))
}
