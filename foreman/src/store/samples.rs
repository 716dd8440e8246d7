//! Best-of-N's samples (issue 51): a task with `samples: K` queues its K
//! samples once, as its children (the `children` table: they show under
//! it in `--tree`, the report and the dashboard, and a cancel of the task
//! cascades to them). A spawn is one transaction fenced by the task's
//! lease that queues only the samples not queued yet: a foreman that took
//! the task over after a crash never queues a second set. With `fork_at`,
//! the forks of the first run are filed under the task the same way.

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use saheeli_protocol::TaskId;

use crate::task::TaskSpec;

use super::{ExecCached, Lease, Result, Store, held_state, insert_task};

impl Store {
    /// Queues those of `samples` whose sample number `task` has no child
    /// for yet, as its children; the ids of all its children, oldest
    /// first. Nothing is queued twice, whoever asks again.
    pub fn spawn_samples(
        &mut self,
        task: TaskId,
        lease: &Lease,
        samples: &[(TaskId, TaskSpec)],
        priority: i64,
    ) -> Result<Vec<TaskId>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        held_state(&tx, task, lease)?;
        let parent = task.to_string();
        let have: Vec<u32> = {
            let mut stmt = tx.prepare_cached(
                "SELECT json_extract(t.spec, '$.sample_of.index') FROM children c
                 JOIN tasks t ON t.id = c.child_id WHERE c.parent_id = ?1",
            )?;
            let rows = stmt.query_map(params![parent], |r| r.get::<_, Option<u32>>(0))?;
            rows.filter_map(|r| r.ok().flatten()).collect()
        };
        let (root, depth) = super::children::link_of(&tx, task)?;
        let mut queued = 0;
        for (id, spec) in samples {
            if spec.sample_of.is_some_and(|o| have.contains(&o.index)) {
                continue;
            }
            insert_task(&tx, *id, spec, priority, None, 1)?;
            link(&tx, *id, &parent, &root, depth)?;
            queued += 1;
        }
        if queued > 0 {
            let detail = format!("queued {queued} samples");
            super::desk::note_event(&tx, task, "samples_spawned", None, &detail)?;
        }
        let ids = ids_under(&tx, &parent)?;
        tx.commit()?;
        Ok(ids)
    }

    /// Files the tasks `ids` (forks of the task's first run, `fork_at`)
    /// under `task` as its samples; those filed already are left.
    pub fn link_samples(&mut self, task: TaskId, lease: &Lease, ids: &[TaskId]) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        held_state(&tx, task, lease)?;
        let parent = task.to_string();
        let have = ids_under(&tx, &parent)?;
        let (root, depth) = super::children::link_of(&tx, task)?;
        let new: Vec<TaskId> = ids.iter().filter(|i| !have.contains(i)).copied().collect();
        for id in &new {
            link(&tx, *id, &parent, &root, depth)?;
        }
        if !new.is_empty() {
            let detail = format!("filed {} forks of the first run as samples", new.len());
            super::desk::note_event(&tx, task, "samples_spawned", None, &detail)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Records on `task` which sample won (an event row, `sample_won`),
    /// once: a foreman that takes the task over and decides the same does
    /// not record it again.
    pub fn note_sample_won(&mut self, task: TaskId, lease: &Lease, detail: &str) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        held_state(&tx, task, lease)?;
        let noted: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM events
                WHERE task_id = ?1 AND kind = 'sample_won' AND detail = ?2)",
            params![task.to_string(), detail],
            |r| r.get(0),
        )?;
        if !noted {
            super::desk::note_event(&tx, task, "sample_won", None, detail)?;
        }
        tx.commit()?;
        Ok(())
    }
}

fn link(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    parent: &str,
    root: &str,
    depth: i64,
) -> Result<()> {
    tx.exec_cached(
        "INSERT INTO children (child_id, parent_id, root_id, depth, call_id)
         VALUES (?1, ?2, ?3, ?4, NULL)",
        params![id.to_string(), parent, root, depth + 1],
    )?;
    Ok(())
}

fn ids_under(tx: &rusqlite::Transaction<'_>, parent: &str) -> Result<Vec<TaskId>> {
    let mut stmt =
        tx.prepare_cached("SELECT child_id FROM children WHERE parent_id = ?1 ORDER BY child_id")?;
    let ids = stmt
        .query_map(params![parent], |r| r.get::<_, String>(0))?
        .filter_map(|r| r.ok().and_then(|s| s.parse().ok()))
        .collect();
    Ok(ids)
}

impl Store {
    /// The sample that won `task` (its `sample_won` event), once one did.
    pub fn sample_winner(&self, task: TaskId) -> Result<Option<TaskId>> {
        let detail: Option<String> = self
            .conn
            .query_row(
                "SELECT detail FROM events WHERE task_id = ?1 AND kind = 'sample_won'
                 ORDER BY id DESC LIMIT 1",
                params![task.to_string()],
                |r| r.get(0),
            )
            .optional()?;
        // "sample I of K: ID"
        Ok(detail.and_then(|d| d.rsplit(": ").next().and_then(|id| id.parse().ok())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{lease, spec, store};
    use crate::task::SampleOf;

    fn sample(task: TaskId, index: u32) -> (TaskId, TaskSpec) {
        let mut s = spec(&format!("sample {index}"));
        s.sample_of = Some(SampleOf {
            task,
            index,
            count: 3,
        });
        (TaskId::new(), s)
    }

    /// A draining foreman (`under_held`) claims the queued samples of a
    /// task it holds, and their retries, nothing else; another foreman's
    /// drain claims none of them.
    #[test]
    fn a_drain_claims_only_what_the_held_tasks_wait_on() {
        let (_d, mut s) = store();
        let task = TaskId::new();
        s.submit(task, &spec("t"), 0, None, 1).unwrap();
        assert_eq!(s.claim_next(None, &lease()).unwrap().unwrap().id, task);
        let other_work = TaskId::new();
        s.submit(other_work, &spec("other"), 9, None, 1).unwrap();
        let ids = s
            .spawn_samples(task, &lease(), &[sample(task, 1)], 0)
            .unwrap();
        let someone = Lease {
            owner: "someone".into(),
            ms: 10_000,
        };
        assert!(
            s.claim_within(None, true, &someone, None)
                .unwrap()
                .is_none()
        );
        let first = s.claim_within(None, true, &lease(), None).unwrap().unwrap();
        assert_eq!(first.id, ids[0], "the sample, not the other work");
        assert!(
            s.claim_within(None, true, &lease(), None)
                .unwrap()
                .is_none()
        );
        // The sample's retry is part of the same work.
        s.started(first.id, &lease(), "c").unwrap();
        let retry = crate::store::Retry {
            id: TaskId::new(),
            spec: first.spec.clone(),
            priority: 0,
            attempt: 2,
            not_before: None,
            said: None,
        };
        let to = crate::state::TaskState::Incomplete;
        s.finish(first.id, &lease(), to, None, None, Some(&retry))
            .unwrap();
        let next = s.claim_within(None, true, &lease(), None).unwrap().unwrap();
        assert_eq!(next.id, retry.id);
        assert!(
            s.claim_within(None, true, &lease(), None)
                .unwrap()
                .is_none()
        );
        // Not draining: anything.
        assert_eq!(
            s.claim_next(None, &lease()).unwrap().unwrap().id,
            other_work
        );
    }

    #[test]
    fn samples_are_queued_once_fenced_and_the_win_noted_once() {
        let (_d, mut s) = store();
        let task = TaskId::new();
        s.submit(task, &spec("t"), 0, None, 1).unwrap();
        let held = s.claim_next(None, &lease()).unwrap().unwrap();
        assert_eq!(held.id, task);
        let first: Vec<_> = (1..=3).map(|i| sample(task, i)).collect();
        let ids = s.spawn_samples(task, &lease(), &first, 0).unwrap();
        assert_eq!(ids.len(), 3);
        // Asked again (a foreman that took the task over): nothing new.
        let again: Vec<_> = (1..=3).map(|i| sample(task, i)).collect();
        assert_eq!(s.spawn_samples(task, &lease(), &again, 0).unwrap(), ids);
        assert_eq!(s.children(task).unwrap().len(), 3);
        // Another foreman's lease writes nothing.
        let other = Lease {
            owner: "other".into(),
            ms: 10_000,
        };
        let more = vec![sample(task, 4)];
        assert!(s.spawn_samples(task, &other, &more, 0).is_err());
        assert!(s.link_samples(task, &other, &[more[0].0]).is_err());
        // Filing the same ids twice links them once.
        let fork = TaskId::new();
        s.submit(fork, &spec("fork"), 0, None, 1).unwrap();
        s.link_samples(task, &lease(), &[fork]).unwrap();
        s.link_samples(task, &lease(), &[fork]).unwrap();
        assert_eq!(s.children(task).unwrap().len(), 4);
        let detail = format!("sample 2 of 3: {}", ids[1]);
        s.note_sample_won(task, &lease(), &detail).unwrap();
        s.note_sample_won(task, &lease(), &detail).unwrap();
        assert_eq!(s.sample_winner(task).unwrap(), Some(ids[1]));
        let won = s
            .events(task)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind.as_deref() == Some("sample_won"))
            .count();
        assert_eq!(won, 1);
    }
}
