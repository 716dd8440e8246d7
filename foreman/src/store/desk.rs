//! Humans in the loop, durably: questions and replies (`asks`) here,
//! injected messages in `notes`, pause requests and parked tasks in
//! `pause`. What a human does
//! (the CLI) is written here whether or not a foreman runs; the gateway of
//! the foreman holding the task reads it for the servo (fenced by the lease).
//! Every question, reply, message, pause and resume is an event row too.

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use saheeli_protocol::TaskId;
use saheeli_protocol::human::{Decision, Reply, Waiting};

use crate::state::TaskState;

use super::{
    ExecCached, Lease, Result, Store, StoreError, current_state, enqueue_webhooks, held_state,
    move_state, now_ms,
};
// Its old path, for the store's other parts.
pub(super) use super::pause::requeue_if_parked;

/// A question still open, or answered, as the CLI and status show it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AskRow {
    pub call_id: String,
    pub waiting: Waiting,
    pub asked_at: i64,
    pub reply: Option<Reply>,
}

/// What a human can do to a task from the CLI.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum HumanAct {
    Answer(String),
    Approve(Option<String>),
    Deny(String),
}

impl HumanAct {
    fn decision(&self) -> Decision {
        match self {
            HumanAct::Answer(_) => Decision::Answer,
            HumanAct::Approve(_) => Decision::Approve,
            HumanAct::Deny(_) => Decision::Deny,
        }
    }

    fn text(&self) -> Option<&str> {
        match self {
            HumanAct::Answer(t) | HumanAct::Deny(t) => Some(t),
            HumanAct::Approve(t) => t.as_deref(),
        }
    }

    fn fits(&self, w: &Waiting) -> bool {
        matches!(
            (self, w),
            (HumanAct::Answer(_), Waiting::Answer { .. })
                | (HumanAct::Answer(_), Waiting::Blocked { .. })
                | (
                    HumanAct::Approve(_) | HumanAct::Deny(_),
                    Waiting::Approval { .. } | Waiting::Plan { .. } | Waiting::Egress { .. }
                )
        )
    }
}

/// Why a human's act could not be taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeskError {
    #[error(
        "task `{id}` is {state} and waits for nothing; `saheeli task status {id}` shows what it is doing"
    )]
    NothingToAnswer { id: TaskId, state: TaskState },
    #[error("task `{id}` waits for {waits}, not {given}; use `saheeli task {command} {id} …`")]
    WrongKind {
        id: TaskId,
        waits: &'static str,
        given: &'static str,
        command: &'static str,
    },
    #[error(
        "`{by}` may not decide {what} of task `{id}`: only {from} may approve or deny it; \
         one of them decides (`saheeli task approve {id} --as NAME`)"
    )]
    NotAnApprover {
        id: TaskId,
        what: String,
        by: String,
        from: String,
    },
    #[error("task `{id}` has ended ({state}); there is nobody to tell")]
    Ended { id: TaskId, state: TaskState },
    #[error("task `{id}` is {state}: only a queued, starting or running task can be paused")]
    CannotPause { id: TaskId, state: TaskState },
    #[error(
        "task `{id}` is {state}: it waits for a person's reply first; answer, approve or deny it, then step"
    )]
    NothingToStep { id: TaskId, state: TaskState },
    #[error("task `{id}` is neither paused nor blocked ({state}); nothing to resume")]
    NotPaused { id: TaskId, state: TaskState },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for DeskError {
    fn from(e: rusqlite::Error) -> Self {
        DeskError::Store(e.into())
    }
}

/// An approval naming its approvers (a step's, the tool gates'; issue
/// 52) is decided by one of them only.
fn approver_check(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    waiting: &Waiting,
    by: &str,
) -> std::result::Result<(), DeskError> {
    if !matches!(waiting, Waiting::Approval { .. }) {
        return Ok(());
    }
    let spec: crate::task::TaskSpec = tx.query_row(
        "SELECT spec FROM tasks WHERE id = ?1",
        params![id.to_string()],
        |r| {
            let text: String = r.get(0)?;
            serde_json::from_str(&text).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, e.into())
            })
        },
    )?;
    match crate::task::approval_for(&spec.steps, &spec.gate_approval, waiting) {
        Some((what, a)) if !a.allows(by) => Err(DeskError::NotAnApprover {
            id,
            what,
            by: by.to_string(),
            from: a.from.join(", "),
        }),
        _ => Ok(()),
    }
}

fn kind_words(w: &Waiting) -> (&'static str, &'static str) {
    match w {
        Waiting::Answer { .. } => ("an answer", "answer"),
        Waiting::Approval { .. } => ("an approval", "approve"),
        Waiting::Plan { .. } => ("a plan review", "approve"),
        Waiting::Blocked { .. } => ("an unblock (an answer)", "answer"),
        Waiting::Egress { .. } => ("an egress approval", "approve"),
    }
}

/// Records a non-state event (`kind`: asked, answered, approved, …).
pub(super) fn note_event(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    kind: &str,
    actor: Option<&str>,
    detail: &str,
) -> Result<()> {
    let state = current_state(tx, id)?;
    let at = now_ms();
    tx.exec_cached(
        "INSERT INTO events (task_id, at, from_state, to_state, detail, kind, actor)
         VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6)",
        params![id.to_string(), at, state.as_str(), detail, kind, actor],
    )?;
    // The one kind of event that is a webhook without being a transition.
    if kind == "step_done" {
        enqueue_webhooks(tx, id, tx.last_insert_rowid(), "step.done", at)?;
    }
    Ok(())
}

fn read_ask(r: &rusqlite::Row<'_>) -> rusqlite::Result<AskRow> {
    let waiting: String = r.get(1)?;
    let decision: Option<String> = r.get(3)?;
    let reply = decision.map(|d| Reply {
        decision: match d.as_str() {
            "approve" => Decision::Approve,
            "deny" => Decision::Deny,
            _ => Decision::Answer,
        },
        text: r.get(4).ok().flatten(),
        by: r
            .get::<_, Option<String>>(5)
            .ok()
            .flatten()
            .unwrap_or_default(),
    });
    Ok(AskRow {
        call_id: r.get(0)?,
        waiting: serde_json::from_str(&waiting).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(1, rusqlite::types::Type::Text, Box::new(e))
        })?,
        asked_at: r.get(2)?,
        reply,
    })
}

const ASK_COLUMNS: &str = "call_id, waiting, asked_at, decision, reply, replied_by";

impl Store {
    /// Counts one capability call of a task.
    pub fn count_capability_call(&mut self, id: TaskId) -> Result<()> {
        self.conn.exec_cached(
            "UPDATE tasks SET capability_calls = capability_calls + 1 WHERE id = ?1",
            params![id.to_string()],
        )?;
        Ok(())
    }

    /// The question a task waits on (the newest unanswered one).
    pub fn open_ask(&self, id: TaskId) -> Result<Option<AskRow>> {
        Ok(self
            .conn
            .query_row(
                &format!(
                    "SELECT {ASK_COLUMNS} FROM asks WHERE task_id = ?1 AND decision IS NULL
                     ORDER BY id DESC LIMIT 1"
                ),
                params![id.to_string()],
                read_ask,
            )
            .optional()?)
    }

    /// The servo asks (fenced: only the holder's gateway). Idempotent per
    /// call id. With `auto`, the reply is written at once (no human).
    /// Returns the reply when there is one; else the task now waits.
    pub fn ask(
        &mut self,
        id: TaskId,
        lease: &Lease,
        call_id: &str,
        waiting: &Waiting,
        auto: Option<&Reply>,
        human_timeout_ms: i64,
    ) -> Result<Option<Reply>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = held_state(&tx, id, lease)?;
        let now = now_ms();
        let known: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM asks WHERE task_id = ?1 AND call_id = ?2)",
            params![id.to_string(), call_id],
            |r| r.get(0),
        )?;
        let text = serde_json::to_string(waiting).expect("serializes");
        if !known {
            // One question at a time: the servo asks, then waits for the
            // reply. Another question meanwhile is a flood, not a servo
            // (case 19): refused, counted, and no row.
            let open: Option<String> = tx
                .query_row(
                    "SELECT call_id FROM asks WHERE task_id = ?1 AND decision IS NULL
                     ORDER BY id DESC LIMIT 1",
                    params![id.to_string()],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(open) = open {
                super::guard::count_refusal(&tx, id)?;
                tx.commit()?;
                return Err(StoreError::AskOpen { id, open });
            }
            if !super::guard::charge(&tx, id, text.len())? {
                let e = super::guard::capped(&tx, id)?;
                tx.commit()?;
                return Err(e);
            }
        }
        let inserted = tx.exec_cached(
            "INSERT OR IGNORE INTO asks (task_id, call_id, waiting, asked_at) VALUES (?1, ?2, ?3, ?4)",
            params![id.to_string(), call_id, text, now],
        )?;
        if inserted == 1 {
            note_event(&tx, id, "asked", None, &crate::text::waiting_line(waiting))?;
            if let Some(r) = auto {
                write_reply(&tx, id, call_id, r)?;
            }
        }
        let row = tx.query_row(
            &format!("SELECT {ASK_COLUMNS} FROM asks WHERE task_id = ?1 AND call_id = ?2"),
            params![id.to_string(), call_id],
            read_ask,
        )?;
        // `starting` too: the servo's first call can come before the launch
        // has written `running` (see `Store::started`).
        if row.reply.is_none() && matches!(state, TaskState::Running | TaskState::Starting) {
            let to = match waiting {
                Waiting::Blocked { .. } => TaskState::Blocked,
                _ => TaskState::WaitingHuman,
            };
            move_state(
                &tx,
                id,
                state,
                to,
                Some(&crate::text::waiting_line(waiting)),
            )?;
            tx.exec_cached(
                "UPDATE tasks SET human_deadline = ?2 WHERE id = ?1",
                params![id.to_string(), now + human_timeout_ms],
            )?;
        }
        tx.commit()?;
        Ok(row.reply)
    }

    /// The reply to `call_id` and what was asked (so the servo runs the
    /// call the human saw), for the servo (fenced); marks it delivered and
    /// the task running again.
    pub fn take_reply(
        &mut self,
        id: TaskId,
        lease: &Lease,
        call_id: &str,
    ) -> Result<Option<(Reply, Waiting)>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = held_state(&tx, id, lease)?;
        let row = tx
            .query_row(
                &format!("SELECT {ASK_COLUMNS} FROM asks WHERE task_id = ?1 AND call_id = ?2"),
                params![id.to_string(), call_id],
                read_ask,
            )
            .optional()?;
        let Some((reply, waiting)) = row.and_then(|r| Some((r.reply?, r.waiting))) else {
            return Ok(None);
        };
        tx.exec_cached(
            "UPDATE asks SET delivered_at = COALESCE(delivered_at, ?3) WHERE task_id = ?1 AND call_id = ?2",
            params![id.to_string(), call_id, now_ms()],
        )?;
        if matches!(state, TaskState::WaitingHuman | TaskState::Blocked) {
            let detail = format!("{} by {}", reply.decision.as_str(), reply.by);
            move_state(&tx, id, state, TaskState::Running, Some(&detail))?;
        }
        tx.commit()?;
        Ok(Some((reply, waiting)))
    }

    /// A human answers, approves or denies (not fenced: any process, with
    /// or without a foreman). A parked task is queued to go on.
    pub fn reply(
        &mut self,
        id: TaskId,
        act: &HumanAct,
        by: &str,
    ) -> std::result::Result<Waiting, DeskError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = current_state(&tx, id)?;
        let open = tx
            .query_row(
                &format!(
                    "SELECT {ASK_COLUMNS} FROM asks WHERE task_id = ?1 AND decision IS NULL
                     ORDER BY id DESC LIMIT 1"
                ),
                params![id.to_string()],
                read_ask,
            )
            .optional()?;
        let Some(ask) = open.filter(|_| !state.is_terminal()) else {
            return Err(DeskError::NothingToAnswer { id, state });
        };
        if !act.fits(&ask.waiting) {
            let (waits, command) = kind_words(&ask.waiting);
            let given = match act {
                HumanAct::Answer(_) => "an answer",
                _ => "an approval",
            };
            return Err(DeskError::WrongKind {
                id,
                waits,
                given,
                command,
            });
        }
        approver_check(&tx, id, &ask.waiting, by)?;
        let reply = Reply {
            decision: act.decision(),
            text: act.text().map(str::to_string),
            by: by.to_string(),
        };
        write_reply(&tx, id, &ask.call_id, &reply)?;
        requeue_if_parked(&tx, id, state, "the human replied")?;
        tx.commit()?;
        Ok(ask.waiting)
    }
}

/// Closes a task's open questions as moot: it ended (its servo exited, or
/// it was cancelled) before anyone replied. An ending always wins over a
/// dangling ask (case 22).
pub(super) fn close_moot_asks(tx: &rusqlite::Transaction<'_>, id: TaskId) -> Result<()> {
    let n = tx.exec_cached(
        "UPDATE asks SET decision = 'deny', reply = 'moot: the task ended before a reply',
            replied_by = 'saheeli', replied_at = ?2
         WHERE task_id = ?1 AND decision IS NULL",
        params![id.to_string(), now_ms()],
    )?;
    if n > 0 {
        note_event(
            tx,
            id,
            "ask_moot",
            Some("saheeli"),
            &format!("{n} open question(s) closed unanswered: the task ended"),
        )?;
    }
    Ok(())
}

pub(super) fn write_reply(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    call_id: &str,
    r: &Reply,
) -> Result<()> {
    tx.exec_cached(
        "UPDATE asks SET decision = ?3, reply = ?4, replied_by = ?5, replied_at = ?6
         WHERE task_id = ?1 AND call_id = ?2 AND decision IS NULL",
        params![
            id.to_string(),
            call_id,
            r.decision.as_str(),
            r.text,
            r.by,
            now_ms()
        ],
    )?;
    let kind = match r.decision {
        Decision::Answer => "answered",
        Decision::Approve => "approved",
        Decision::Deny => "denied",
    };
    note_event(tx, id, kind, Some(&r.by), r.text.as_deref().unwrap_or(""))?;
    Ok(())
}
