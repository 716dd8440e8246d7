//! Parent and child tasks (issue 30): the `children` table links a child
//! to its parent and the root of its tree. A spawn is one transaction:
//! the parent's `delegate:` limits (fan-out, depth along every ancestor,
//! the tree's size) and its budget are checked, the child's budget is
//! carved out of what the parent has left, and the child is queued as an
//! ordinary task. A refusal is recorded on the parent as a
//! `spawn_refused` event. A wait hands each child's outcome to one wait
//! (the tool call that received it is recorded with the time), so a
//! servo asking again after a foreman restart gets the same answer and no
//! other wait gets it again.

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use saheeli_protocol::TaskId;
use saheeli_protocol::delegate::{Delegate, MAX_TREE};

use crate::task::TaskSpec;

use super::carve::{Carved, ParentBudget, carve};
use super::carved::carved;
use super::{ExecCached, Result, Store, TaskRow, current_state, insert_task, now_ms};

/// What a spawn asks of the tree.
#[derive(Clone, Debug, Default)]
pub(crate) struct SpawnAsk {
    pub parent: TaskId,
    /// The spawning tool call: asked again, it spawns no second child.
    pub call_id: Option<String>,
    /// A servo's spawn: the parent's `delegate:` limits apply (a person's
    /// `--parent` is not limited).
    pub enforce: bool,
    /// The parent's budget and what it spent so far (its gateway's meter).
    pub budget: ParentBudget,
    /// What the child asked for (`max_tokens`, `max_cost`).
    pub want_tokens: Option<u64>,
    pub want_cost: Option<f64>,
}

/// How a spawn went.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Spawned {
    /// Queued, with the budget carved for it.
    New {
        id: TaskId,
        max_tokens: Option<u64>,
        max_cost: Option<f64>,
    },
    /// This call spawned it before.
    Again(TaskId),
    /// Refused, and why (recorded on the parent).
    Refused(String),
}

/// One child as its parent's wait sees it.
#[derive(Clone, Debug)]
pub(crate) struct ChildRow {
    /// The child as spawned.
    pub id: TaskId,
    /// Its last attempt (retries followed): the outcome that counts.
    pub last: TaskRow,
    /// What every attempt of it spent (tokens, cost): the chain the
    /// parent's carve covers.
    pub tokens: i64,
    pub cost: f64,
    pub delivered_call: Option<String>,
    /// When its parent received its outcome (ms since the epoch).
    pub delivered_at: Option<i64>,
}

impl ChildRow {
    /// Ended: its last attempt is terminal (a retry still to come is not).
    pub fn ended(&self) -> bool {
        self.last.state.is_terminal()
    }
}

/// What a wait found.
#[derive(Clone, Debug)]
pub(crate) enum WaitState {
    /// Every child waited for has ended; each marked received by this call
    /// unless an earlier one received it (`delivered_call`).
    Done(Vec<ChildRow>),
    /// Not yet: these are still to end.
    Running(Vec<TaskId>),
    /// Ids that are not this task's children.
    NotChildren(Vec<TaskId>),
}

impl Store {
    /// Queues `spec` as a child of `ask.parent` (see [`SpawnAsk`]).
    pub fn spawn_child(
        &mut self,
        id: TaskId,
        mut spec: TaskSpec,
        priority: i64,
        ask: &SpawnAsk,
    ) -> Result<Spawned> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let parent = ask.parent.to_string();
        if let Some(call) = &ask.call_id {
            let before: Option<String> = tx
                .query_row(
                    "SELECT child_id FROM children WHERE parent_id = ?1 AND call_id = ?2",
                    params![parent, call],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(child) = before {
                return Ok(Spawned::Again(child.parse().expect("stored ids are UUIDs")));
            }
        }
        let state = current_state(&tx, ask.parent)?;
        let (root, depth) = link_of(&tx, ask.parent)?;
        let carved = carved(&tx, ask.parent)?;
        let mut share = 1;
        if ask.enforce {
            if state.is_terminal() {
                return refuse(tx, ask.parent, format!("task {parent} has ended ({state})"));
            }
            match limits(&tx, ask.parent, &root, carved.children)? {
                Ok(left) => share = left,
                Err(why) => return refuse(tx, ask.parent, why),
            }
        }
        let want_tokens = ask.want_tokens.or(spec.max_tokens);
        let want_cost = ask.want_cost.or(spec.max_cost);
        let (max_tokens, max_cost) =
            match carve(&ask.budget, &carved, want_tokens, want_cost, share) {
                Ok(b) => b,
                Err(why) => return refuse(tx, ask.parent, why),
            };
        spec.max_tokens = max_tokens;
        spec.max_cost = max_cost;
        // The carve covers the child's whole chain of attempts: a retry
        // gets what the chain has left, never a budget of its own (N18).
        spec.budget_per_attempt = false;
        insert_task(&tx, id, &spec, priority, None, 1)?;
        tx.exec_cached(
            "INSERT INTO children (child_id, parent_id, root_id, depth, call_id)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id.to_string(), parent, root, depth + 1, ask.call_id],
        )?;
        super::desk::note_event(
            &tx,
            ask.parent,
            "spawned",
            None,
            &format!("spawned child {id}"),
        )?;
        tx.commit()?;
        Ok(Spawned::New {
            id,
            max_tokens,
            max_cost,
        })
    }

    /// Records a spawn refused before the store was asked (no
    /// `delegate:`, a template that does not parse) on the parent.
    pub fn spawn_refused(&mut self, parent: TaskId, why: &str) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        tracing::warn!(task_id = %parent, refused = %why, "spawn refused");
        super::desk::note_event(&tx, parent, "spawn_refused", None, why)?;
        tx.commit()?;
        Ok(())
    }

    /// What `parent`'s children hold of its budget now.
    pub fn carved(&mut self, parent: TaskId) -> Result<Carved> {
        let tx = self.conn.transaction()?;
        let c = carved(&tx, parent)?;
        tx.commit()?;
        Ok(c)
    }

    /// `parent`'s children, oldest first, each with its last attempt.
    pub fn children(&self, parent: TaskId) -> Result<Vec<ChildRow>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT child_id, delivered_call, delivered_at FROM children
             WHERE parent_id = ?1 ORDER BY child_id",
        )?;
        type Link = (String, Option<String>, Option<i64>);
        let links: Vec<Link> = stmt
            .query_map(params![parent.to_string()], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut out = Vec::with_capacity(links.len());
        for (child, delivered_call, delivered_at) in links {
            let id: TaskId = child.parse().expect("stored ids are UUIDs");
            let chain = self.attempts(id)?;
            let tokens = chain.iter().map(|a| a.input_tokens + a.output_tokens).sum();
            let cost = chain.iter().map(|a| a.cost_usd).sum();
            let last = chain
                .into_iter()
                .next_back()
                .expect("a task is its own first attempt");
            out.push(ChildRow {
                id,
                last,
                tokens,
                cost,
                delivered_call,
                delivered_at,
            });
        }
        Ok(out)
    }

    /// The parent of `id`, when it is a child.
    pub fn parent_of(&self, id: TaskId) -> Result<Option<TaskId>> {
        Ok(self
            .conn
            .query_row(
                "SELECT parent_id FROM children WHERE child_id = ?1",
                params![id.to_string()],
                |r| r.get::<_, String>(0),
            )
            .optional()?
            .and_then(|s| s.parse().ok()))
    }

    /// Every descendant of `id` with its depth below it, parents before
    /// their children.
    pub fn descendants(&self, id: TaskId) -> Result<Vec<(TaskId, u32)>> {
        below(&self.conn, id)
    }

    /// A wait of `parent`'s call `call_id` for `ids` (None: every child).
    pub fn wait_children(
        &mut self,
        parent: TaskId,
        call_id: &str,
        ids: Option<&[TaskId]>,
    ) -> Result<WaitState> {
        let all = self.children(parent)?;
        let chosen: Vec<ChildRow> = match ids {
            None => all,
            Some(ids) => {
                let strangers: Vec<TaskId> = ids
                    .iter()
                    .filter(|i| !all.iter().any(|c| c.id == **i))
                    .copied()
                    .collect();
                if !strangers.is_empty() {
                    return Ok(WaitState::NotChildren(strangers));
                }
                all.into_iter().filter(|c| ids.contains(&c.id)).collect()
            }
        };
        let running: Vec<TaskId> = chosen.iter().filter(|c| !c.ended()).map(|c| c.id).collect();
        if !running.is_empty() {
            return Ok(WaitState::Running(running));
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let mut out = Vec::with_capacity(chosen.len());
        for mut c in chosen {
            if c.delivered_call.is_none() {
                c.delivered_at = Some(now);
                tx.exec_cached(
                    "UPDATE children SET delivered_call = ?2, delivered_at = ?3
                     WHERE child_id = ?1 AND delivered_call IS NULL",
                    params![c.id.to_string(), call_id, now],
                )?;
                c.delivered_call = tx.query_row(
                    "SELECT delivered_call FROM children WHERE child_id = ?1",
                    params![c.id.to_string()],
                    |r| r.get(0),
                )?;
            }
            out.push(c);
        }
        tx.commit()?;
        Ok(WaitState::Done(out))
    }
}

/// Every descendant of `id`, parents first (a cancel's cascade).
pub(super) fn descendants_in(tx: &rusqlite::Transaction<'_>, id: TaskId) -> Result<Vec<TaskId>> {
    Ok(below(tx, id)?.into_iter().map(|(id, _)| id).collect())
}

fn below(conn: &rusqlite::Connection, id: TaskId) -> Result<Vec<(TaskId, u32)>> {
    let mut stmt = conn.prepare_cached(
        "WITH RECURSIVE below(id, depth) AS (
            SELECT child_id, 1 FROM children WHERE parent_id = ?1
            UNION ALL
            SELECT c.child_id, b.depth + 1 FROM children c JOIN below b ON c.parent_id = b.id
         )
         SELECT id, depth FROM below ORDER BY depth, id",
    )?;
    let rows = stmt
        .query_map(params![id.to_string()], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, u32>(1)?))
        })?
        .filter_map(|r| r.ok())
        .filter_map(|(s, d)| s.parse().ok().map(|id| (id, d)))
        .collect();
    Ok(rows)
}

/// The root of `id`'s tree and its depth in it (0: a root).
pub(super) fn link_of(tx: &rusqlite::Transaction<'_>, id: TaskId) -> Result<(String, i64)> {
    Ok(tx
        .query_row(
            "SELECT root_id, depth FROM children WHERE child_id = ?1",
            params![id.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .unwrap_or((id.to_string(), 0)))
}

fn delegate_of(tx: &rusqlite::Transaction<'_>, id: &str) -> Result<Option<Delegate>> {
    let spec: String = tx.query_row("SELECT spec FROM tasks WHERE id = ?1", params![id], |r| {
        r.get(0)
    })?;
    Ok(serde_json::from_str::<TaskSpec>(&spec)
        .ok()
        .and_then(|s| s.delegate))
}

/// The parent's `delegate:` limits for one more child: Ok(how many share
/// what is left: the parent and the children it may still spawn, this
/// one included) or why not.
fn limits(
    tx: &rusqlite::Transaction<'_>,
    parent: TaskId,
    root: &str,
    spawned: u32,
) -> Result<std::result::Result<u32, String>> {
    let Some(d) = delegate_of(tx, &parent.to_string())? else {
        return Ok(Err(format!(
            "task {parent} was not granted `delegate:`; it cannot spawn tasks"
        )));
    };
    if spawned >= d.max_children {
        return Ok(Err(format!(
            "task {parent} has spawned {spawned} children, its `delegate.max_children`"
        )));
    }
    // The new child is `k` levels below each ancestor: each must allow it.
    let mut at = parent.to_string();
    let mut k = 1u32;
    loop {
        let allowed = match delegate_of(tx, &at)? {
            Some(d) => d.max_depth,
            None => 0,
        };
        if k > allowed {
            return Ok(Err(format!(
                "a child here would be {k} levels below task {at}, whose `delegate.max_depth` is {allowed}"
            )));
        }
        let up: Option<String> = tx
            .query_row(
                "SELECT parent_id FROM children WHERE child_id = ?1",
                params![at],
                |r| r.get(0),
            )
            .optional()?;
        match up {
            Some(p) => {
                at = p;
                k += 1;
            }
            None => break,
        }
    }
    let tree: u32 = tx.query_row(
        "SELECT COUNT(*) FROM children WHERE root_id = ?1",
        params![root],
        |r| r.get(0),
    )?;
    if tree + 1 >= MAX_TREE {
        return Ok(Err(format!(
            "the tree of task {root} has {} tasks, the most one tree may have ({MAX_TREE})",
            tree + 1
        )));
    }
    // The parent keeps a share too: it goes on after spawning.
    Ok(Ok(d.max_children - spawned + 1))
}

/// Records a refusal on the parent (`spawn_refused`) and returns it.
fn refuse(tx: rusqlite::Transaction<'_>, parent: TaskId, why: String) -> Result<Spawned> {
    tracing::warn!(task_id = %parent, refused = %why, "spawn refused");
    super::desk::note_event(&tx, parent, "spawn_refused", None, &why)?;
    tx.commit()?;
    Ok(Spawned::Refused(why))
}
