//! One task's life, written once for every engine. The serve loop
//! (`reconciler`) claims a task and hands it here; the supervisor asks the
//! [`Engine`](crate::backend::Engine) for facts and decides what they mean
//! for the task. The loop imports this module, never the other way: what
//! the two share (`Ctx`), the control channel and what a lost lease means
//! live here, and admission (`crate::admission`) below both.
//!
//! ```text
//!  reconciler::serve ── claim ──▶ run ─────────────────────────────┐
//!        │                         prepare → Gateway::open → launch │
//!        ├── take over ──▶ adopt (engine.find)                      ▼
//!        │                   Running ───────────────────────▶ watch (one select! loop:
//!        │                   NeverStarted/Gone → clear, requeue     phases, timeout, cancel,
//!        │                                        or record         TERM→KILL escalation,
//!        └── parked to end ──▶ park::end_parked                     usage, lease)
//!                                (engine.collect_kept)                │
//!                                                                     ▼
//!                               collect: Lost → requeue_or_fail; parked exit → record_park;
//!                               else engine.collect → record.rs (changes.patch)
//!                                     → conclude (outcome::classify) → finish (deliver, report.md, retry)
//! ```
//!
//! The invariant: one writer per task at a time, the holder of its lease.
//! Every write is fenced by the lease (`store::lifecycle::move_state`);
//! a supervisor that learns another foreman holds its task (a refused
//! write, or the lease renewer's word) lets go without touching the
//! servo, the results or the gateway's directory.
//!
//! Who writes what:
//! - the supervisor: `starting`→`running` (`started`, after the engine
//!   started the servo or reported it running), the container or service
//!   id, live usage, a park, requeues, the delivery (`deliver`, just
//!   before the ending) and the ending (`finish`);
//! - the serve loop: claims (`queued`→`starting`), take-overs, cancels
//!   passed on, parked tasks held to be ended;
//! - the task's gateway: `waiting` while it waits for a human (the desk,
//!   and its egress proxy's questions under `egress_approval: ask`, issue
//!   50) or for its children; its egress ledger rows; a child's `queued` row (`spawn_task`, issue 30:
//!   a new task, as a submit writes one) and the wait that received a
//!   child's outcome;
//! - `task cancel` (any process): a queued task's `cancelled`, and for
//!   its queued descendants too; running ones are flagged for their
//!   supervisors;
//! - a best-of-N task's supervisor (`samples`, issue 51; it runs no
//!   servo): its own `running` and ending, its samples' `queued` rows
//!   (once, fenced by its lease) and their cancels (`first_complete`, or
//!   the task's own cancel);
//! - engines (`backend`): nothing; they report phases, what was
//!   collected and typed errors.
//!
//! # Layout
//!
//! - `ctx`: what a serve loop shares with its supervisors (`Ctx`: config,
//!   lease, engine, stores, upstream, bus, metrics, admission), what a
//!   supervisor hands back (`Joined`), its reports to admission.
//! - `control`: the per-task channel (`Control` the loop's end, `Inbox`
//!   the supervisor's): stop requests, the waiting flag, a lost lease.
//! - `lease`: letting go of a task another foreman holds now
//!   (`lease_lost`, `still_held`, `abandon`, `let_go`); the renewal is the
//!   loop's (`reconciler::lease`).
//! - `run`: prepare → launch → watch → collect → conclude; launch failures.
//! - `gateway`: the task's gateway put together from `door`, `llm` and
//!   `routes`, opened (or adopted with what it spent) and stopped.
//! - `watch`: the one loop while a servo runs; `freeze`: a waiting
//!   servo frozen after `suspend_after` (a wait of its task's, or model
//!   calls its gateway holds: `llm::held`), thawed when its wait is over
//!   (a held call's answer waits for the thaw).
//! - `samples`, `select`: a task with `samples: K` (best-of-N): its
//!   samples queued and watched, the winner picked (pure), its results
//!   made the task's.
//! - `collect`: after the watch (lost, parked, collected).
//! - `conclude`, `outcome`: what was observed → state and reason (pure).
//! - `adopt`: a stopped foreman's task; `park`: parked tasks recorded and
//!   ended.
//! - `finish`: the terminal write, the next attempt queued, requeues
//!   with backoff; `retry`: the retry policy (whether, from where, how
//!   long it waits, the chain's budget, the model's note; pure);
//!   `record`: `changes.patch` and `report.md`; `deliver`: a task's
//!   branch committed and pushed (issue 52), its `delivered` column.

mod adopt;
mod collect;
mod conclude;
mod control;
mod ctx;
mod deliver;
mod finish;
mod freeze;
mod gateway;
mod lease;
mod outcome;
mod park;
mod record;
mod retry;
mod run;
mod samples;
mod select;
mod synthesis;
mod watch;

pub(crate) use adopt::adopt;
pub(crate) use control::{Command, Control, Inbox, channel};
pub(crate) use ctx::{Ctx, Joined, MAX_REQUEUES};
pub(crate) use lease::{abandon, lease_lost, let_go, still_held};
pub(crate) use park::end_parked;
pub(crate) use run::run;
