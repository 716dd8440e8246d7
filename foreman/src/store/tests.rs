//! Unit tests of the store on real SQLite files.

use super::*;
use crate::state::TaskState;
use crate::task::TaskSpec;
use saheeli_protocol::TaskId;
use std::collections::BTreeMap;
use std::time::Duration;

pub(crate) fn spec(title: &str) -> TaskSpec {
    TaskSpec {
        title: title.into(),
        prompt_path: "p.md".into(),
        body: "b".into(),
        model: "gpt".into(),
        max_steps: 5,
        max_tokens: None,
        max_cost: None,
        retries: 0,
        retry_on: vec![],
        timeout_s: 60,
        network: saheeli_protocol::NetworkMode::None,
        egress: Default::default(),
        memory: 1 << 30,
        cpus: 1.0,
        pids: 64,
        disk: None,
        disk_asked: false,
        env: BTreeMap::new(),
        max_output_bytes: 1000,
        replay: None,
        workspace: None,
        workspace_under: None,
        workspace_include_ignored: false,
        git: None,
        deliver: None,
        follow_up_of: None,
        definitions: None,
        gates: vec![],
        pause_on_tool_error: false,
        break_on_subtask: false,
        human_timeout_s: 3600,
        park_after_ms: 1000,
        no_human: false,
        no_human_approves: false,
        plan_only: false,
        notify: vec![],
        capabilities: vec![],
        tools: None,
        delegate: None,
        parameters: vec![],
        steps: vec![],
        verify: vec![],
        verify_files: vec![],
        verify_retries: 2,
        verify_timeout_s: 600,
        assess: false,
        objective: None,
        logprobs: false,
        report: Default::default(),
        snapshots: Default::default(),
        cache: Default::default(),
        context: Default::default(),
        agent: Default::default(),
        deadline_ms: None,
        priority: None,
        retry_from: None,
        retry_backoff: Default::default(),
        budget_per_attempt: false,
        chain: None,
        forked_from: None,
        samples: None,
        sample_of: None,
        image: None,
        workdir: None,
        agent_user: Default::default(),
        verify_hidden: Vec::new(),
        verify_reward: None,
        verify_env: Default::default(),
        pass_reward: 1.0,
        solution: None,
        setup: Vec::new(),
        setup_plan: Default::default(),
        agent_type: None,
        provider_key: None,
        gate_approval: Default::default(),
    }
}

pub(crate) fn lease() -> Lease {
    Lease {
        owner: "test".into(),
        ms: 10_000,
    }
}

pub(crate) fn store() -> (tempfile::TempDir, Store) {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(&d.path().join("q.db")).unwrap();
    (d, s)
}

#[test]
fn claim_follows_priority_then_age() {
    let (_d, mut s) = store();
    let a = TaskId::new();
    let b = TaskId::new();
    let c = TaskId::new();
    s.submit(a, &spec("a"), 0, None, 1).unwrap();
    s.submit(b, &spec("b"), 5, None, 1).unwrap();
    s.submit(c, &spec("c"), 0, None, 1).unwrap();
    let order: Vec<_> =
        std::iter::from_fn(|| s.claim_next(None, &lease()).unwrap().map(|t| t.id)).collect();
    assert_eq!(order, vec![b, a, c]);
    assert!(s.claim_next(None, &lease()).unwrap().is_none());
}

#[test]
fn transitions_are_checked_and_recorded() {
    let (_d, mut s) = store();
    let id = TaskId::new();
    s.submit(id, &spec("t"), 0, None, 1).unwrap();
    let err = s
        .transition(id, &lease(), TaskState::Running, None, None)
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost(_)), "unclaimed: {err}");
    s.claim_next(None, &lease()).unwrap();
    let err = s
        .transition(id, &lease(), TaskState::Complete, None, None)
        .unwrap_err();
    assert!(matches!(err, StoreError::BadTransition { .. }), "{err}");
    s.transition(id, &lease(), TaskState::Running, None, None)
        .unwrap();
    let o = Outcome {
        reason: Some("max_steps".into()),
        steps: 5,
        ..Default::default()
    };
    s.transition(
        id,
        &lease(),
        TaskState::Incomplete,
        Some("exit 3"),
        Some(&o),
    )
    .unwrap();
    let t = s.require(&id.to_string()).unwrap();
    assert_eq!(t.state, TaskState::Incomplete);
    assert_eq!(t.reason.as_deref(), Some("max_steps"));
    assert!(t.finished_at.is_some());
    let ev: Vec<_> = s.events(id).unwrap().into_iter().map(|e| e.to).collect();
    assert_eq!(
        ev,
        vec![
            TaskState::Queued,
            TaskState::Starting,
            TaskState::Running,
            TaskState::Incomplete
        ]
    );
}

#[test]
fn expired_leases_are_taken_over_live_ones_are_not() {
    let (_d, mut s) = store();
    let (a, b) = (TaskId::new(), TaskId::new());
    s.submit(a, &spec("a"), 0, None, 1).unwrap();
    s.submit(b, &spec("b"), 0, None, 1).unwrap();
    let live = lease();
    let dead = Lease {
        owner: "dead".into(),
        ms: -1,
    };
    s.claim_next(Some(a), &live).unwrap();
    s.claim_next(Some(b), &dead).unwrap();
    let me = Lease {
        owner: "me".into(),
        ms: 10_000,
    };
    let taken: Vec<_> = s
        .take_over_expired(&me)
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(taken, vec![b]);
    assert!(s.take_over_expired(&me).unwrap().is_empty());
    assert_eq!(s.renew(&live).unwrap(), vec![a]);
    s.requeue(b, &me, "never started", Duration::ZERO).unwrap();
    let t = s.require(&b.to_string()).unwrap();
    assert_eq!((t.state, t.requeues), (TaskState::Queued, 1));
    assert_eq!(s.claim_next(None, &me).unwrap().unwrap().id, b);
    // Issue 15: the daemon's failures are counted nowhere.
    for _ in 0..10 {
        s.requeue_for_daemon(b, &me, "docker down", Duration::ZERO)
            .unwrap();
        assert_eq!(s.claim_next(None, &me).unwrap().unwrap().id, b);
    }
    let t = s.require(&b.to_string()).unwrap();
    assert_eq!(
        (t.state, t.requeues, t.attempt),
        (TaskState::Starting, 1, 1)
    );
    // ... but the supervisor caps them by their events (a 5xx the daemon
    // gives one task every time must not keep it queued forever).
    assert_eq!(s.requeues_with(b, "docker down").unwrap(), 10);
    assert_eq!(s.requeues_with(b, "never").unwrap(), 1);
    assert_eq!(s.requeues_with(a, "docker down").unwrap(), 0);
}

/// Issue 15: a foreman's admission state, fresh or not.
#[test]
fn admission_rows_are_read_while_fresh() {
    let (_d, mut s) = store();
    let row = crate::store::AdmissionRow {
        owner: "f1".into(),
        concurrency: "auto".into(),
        limit: 12,
        running: 3,
        breaker: "open".into(),
        failures: 5,
        latency_ms: Some(80.0),
        baseline_ms: None,
        open_for_ms: Some(4000),
        updated_at: 1_000,
        pool_idle: Some(2),
    };
    s.put_admission(&row).unwrap();
    assert_eq!(s.admission_since(900).unwrap(), Some(row.clone()));
    assert_eq!(s.admission_since(1_001).unwrap(), None);
    s.drop_admission("f1").unwrap();
    assert_eq!(s.admission_since(0).unwrap(), None);
}

/// Issue 47: a `saheeli run` beside a serving foreman writes a fresher
/// row with no pool; the serving foreman's idle pool still shows, and
/// two pools add up.
#[test]
fn every_fresh_foremans_pool_counts_toward_the_idle_servos() {
    let (_d, mut s) = store();
    let serving = crate::store::AdmissionRow {
        owner: "serve".into(),
        concurrency: "4".into(),
        limit: 4,
        running: 0,
        breaker: "closed".into(),
        failures: 0,
        latency_ms: None,
        baseline_ms: None,
        open_for_ms: None,
        updated_at: 1_000,
        pool_idle: Some(2),
    };
    let run = crate::store::AdmissionRow {
        owner: "run".into(),
        running: 1,
        updated_at: 1_100,
        pool_idle: None,
        ..serving.clone()
    };
    s.put_admission(&serving).unwrap();
    s.put_admission(&run).unwrap();
    let row = s.admission_since(900).unwrap().unwrap();
    assert_eq!((row.owner.as_str(), row.pool_idle), ("run", Some(2)));
    s.put_admission(&crate::store::AdmissionRow {
        owner: "serve2".into(),
        pool_idle: Some(3),
        ..serving.clone()
    })
    .unwrap();
    assert_eq!(s.admission_since(900).unwrap().unwrap().pool_idle, Some(5));
    // A stale foreman's pool is gone with it.
    assert_eq!(s.admission_since(1_050).unwrap().unwrap().pool_idle, None);
}

/// Issue 9 §2: a foreman whose task was taken over writes nothing.
#[test]
fn writes_are_fenced_by_the_lease() {
    let (_d, mut s) = store();
    let id = TaskId::new();
    s.submit(id, &spec("t"), 0, None, 1).unwrap();
    let old = Lease {
        owner: "old".into(),
        ms: -1,
    };
    s.claim_next(None, &old).unwrap();
    s.transition(id, &old, TaskState::Running, None, None)
        .unwrap();
    let new = lease();
    assert_eq!(s.take_over_expired(&new).unwrap().len(), 1);
    let lost = |e: StoreError| matches!(e, StoreError::LeaseLost(t) if t == id);
    assert!(lost(s.hold(id, &old).unwrap_err()));
    assert!(lost(
        s.set_usage(id, &old, 1, 2, 3, 0.0, (0, 0)).unwrap_err()
    ));
    assert!(lost(s.set_container(id, &old, "c").unwrap_err()));
    assert!(lost(s.release(id, &old).unwrap_err()));
    assert!(lost(s.requeue(id, &old, "x", Duration::ZERO).unwrap_err()));
    let retry = Retry {
        id: TaskId::new(),
        spec: spec("t"),
        priority: 0,
        attempt: 2,
        not_before: None,
        said: Some(("restore_incomplete", "gone".into())),
    };
    let err = s
        .finish(id, &old, TaskState::Incomplete, None, None, Some(&retry))
        .unwrap_err();
    assert!(lost(err));
    // Neither the retry nor what its start says.
    assert!(s.get(&retry.id.to_string()).unwrap().is_none());
    assert!(s.events(retry.id).unwrap().is_empty());
    assert!(s.renew(&old).unwrap().is_empty());
    // Nothing the old foreman tried left a trace; the new one goes on.
    assert!(s.get(&retry.id.to_string()).unwrap().is_none());
    s.hold(id, &new).unwrap();
    s.finish(id, &new, TaskState::Incomplete, None, None, Some(&retry))
        .unwrap();
    let next = s.retried_as(id).unwrap().unwrap();
    assert_eq!((next.id, next.attempt), (retry.id, 2));
    assert!(
        lost(s.hold(id, &new).unwrap_err()),
        "ended tasks are held by none"
    );
}

#[test]
fn only_ended_tasks_are_retried() {
    let (_d, mut s) = store();
    let id = TaskId::new();
    s.submit(id, &spec("t"), 0, None, 1).unwrap();
    let err = s.retry(id, TaskId::new()).unwrap_err();
    assert!(matches!(err, StoreError::NotEnded { .. }), "{err}");
    s.request_cancel(id).unwrap();
    let next = TaskId::new();
    s.retry(id, next).unwrap();
    assert_eq!(s.retried_as(id).unwrap().unwrap().id, next);
}

/// Issue 30: a retry queued with its backoff waits in `queued`, its
/// `not_before` in the row, and is not claimed before then; a retry by
/// hand of an attempt in a chain starts a chain of its own.
#[test]
fn a_retry_waits_out_its_backoff() {
    let (_d, mut s) = store();
    let l = lease();
    let id = TaskId::new();
    s.submit(id, &spec("t"), 0, None, 1).unwrap();
    s.claim_next(Some(id), &l).unwrap().unwrap();
    let mut chained = spec("t");
    chained.chain = Some(crate::task::Chain {
        from: id,
        mode: saheeli_protocol::attempt::RetryFrom::Session,
        note: "n".into(),
        used: Default::default(),
    });
    let later = now_ms() + 3_600_000;
    let retry = Retry {
        id: TaskId::new(),
        spec: chained,
        priority: 0,
        attempt: 2,
        not_before: Some(later),
        said: Some(("restore_incomplete", "its session file is gone".into())),
    };
    s.finish(id, &l, TaskState::Incomplete, None, None, Some(&retry))
        .unwrap();
    let row = s.get(&retry.id.to_string()).unwrap().unwrap();
    // What its start says is on its trail, written with it (issue 51).
    let said: Vec<_> = s
        .events(retry.id)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind.as_deref() == Some("restore_incomplete"))
        .map(|e| (e.to, e.actor, e.detail))
        .collect();
    assert_eq!(
        said,
        [(
            TaskState::Queued,
            Some("saheeli".into()),
            Some("its session file is gone".into())
        )]
    );
    assert_eq!(
        (row.state, row.not_before),
        (TaskState::Queued, Some(later))
    );
    assert!(row.spec.chain.is_some());
    assert!(
        s.claim_next(None, &l).unwrap().is_none(),
        "not before its time"
    );
    s.request_cancel(retry.id).unwrap();
    let by_hand = TaskId::new();
    s.retry(retry.id, by_hand).unwrap();
    let row = s.get(&by_hand.to_string()).unwrap().unwrap();
    assert!(row.spec.chain.is_none());
    assert_eq!(row.not_before, None);
    assert_eq!(s.claim_next(None, &l).unwrap().unwrap().id, by_hand);
}

/// Issue 9 §6: processes opening a new database at once all succeed.
#[test]
fn concurrent_opens_of_a_new_database() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("new.db");
    let threads: Vec<_> = (0..10)
        .map(|_| {
            let p = path.clone();
            std::thread::spawn(move || Store::open(&p).map(|_| ()))
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
}

#[test]
fn prefix_lookup_and_cancel() {
    let (_d, mut s) = store();
    let id = TaskId::new();
    s.submit(id, &spec("t"), 0, None, 1).unwrap();
    let full = id.to_string();
    assert_eq!(s.require(&full[..8]).unwrap().id, id);
    assert_eq!(s.require(&id.short()).unwrap().id, id);
    assert!(matches!(
        s.require("ffffffff"),
        Err(StoreError::TaskNotFound(_))
    ));
    assert_eq!(s.request_cancel(id).unwrap(), TaskState::Queued);
    assert_eq!(s.require(&full).unwrap().state, TaskState::Cancelled);
    assert!(s.claim_next(None, &lease()).unwrap().is_none());
}

mod desk {
    use super::*;
    use crate::store::{DeskError, HumanAct};
    use saheeli_protocol::human::{Decision, Waiting};

    fn running(s: &mut Store) -> TaskId {
        let id = TaskId::new();
        s.submit(id, &spec("t"), 0, None, 1).unwrap();
        s.claim_next(None, &lease()).unwrap().unwrap();
        s.transition(id, &lease(), TaskState::Running, None, None)
            .unwrap();
        id
    }

    fn question() -> Waiting {
        Waiting::Answer {
            question: "which?".into(),
        }
    }

    /// A servo's first call can reach the desk before its launch writes
    /// `running`: the question still makes the task wait, and the late
    /// start keeps the wait instead of overwriting it.
    #[test]
    fn a_question_before_the_launch_writes_running_still_waits() {
        let (_d, mut s) = store();
        let id = TaskId::new();
        s.submit(id, &spec("t"), 0, None, 1).unwrap();
        s.claim_next(None, &lease()).unwrap().unwrap();
        assert_eq!(
            s.ask(id, &lease(), "c1", &question(), None, 60_000)
                .unwrap(),
            None
        );
        assert_eq!(
            s.require(&id.to_string()).unwrap().state,
            TaskState::WaitingHuman
        );
        assert_eq!(
            s.started(id, &lease(), "container abc").unwrap(),
            TaskState::WaitingHuman
        );
        assert_eq!(
            s.require(&id.to_string()).unwrap().state,
            TaskState::WaitingHuman
        );
        // Without a question, the start moves `starting` to `running`.
        let other = TaskId::new();
        s.submit(other, &spec("u"), 0, None, 1).unwrap();
        s.claim_next(None, &lease()).unwrap().unwrap();
        assert_eq!(
            s.started(other, &lease(), "container def").unwrap(),
            TaskState::Running
        );
    }

    #[test]
    fn an_answer_is_delivered_once_and_the_task_runs_again() {
        let (_d, mut s) = store();
        let id = running(&mut s);
        assert_eq!(
            s.ask(id, &lease(), "c1", &question(), None, 60_000)
                .unwrap(),
            None
        );
        assert_eq!(
            s.require(&id.to_string()).unwrap().state,
            TaskState::WaitingHuman
        );
        // Asking again (a servo restarted) asks nothing twice.
        assert_eq!(
            s.ask(id, &lease(), "c1", &question(), None, 60_000)
                .unwrap(),
            None
        );
        assert_eq!(s.take_reply(id, &lease(), "c1").unwrap(), None);
        let err = s.reply(id, &HumanAct::Approve(None), "ann").unwrap_err();
        assert!(err.to_string().contains("waits for an answer"), "{err}");
        s.reply(id, &HumanAct::Answer("this".into()), "ann")
            .unwrap();
        let (r, asked) = s.take_reply(id, &lease(), "c1").unwrap().unwrap();
        assert_eq!(asked, question(), "what was asked comes with the reply");
        assert_eq!(
            (r.decision, r.text.as_deref(), r.by.as_str()),
            (Decision::Answer, Some("this"), "ann")
        );
        assert_eq!(
            s.require(&id.to_string()).unwrap().state,
            TaskState::Running
        );
        // The reply is fixed: a second reply finds nothing to answer.
        assert!(
            s.reply(id, &HumanAct::Answer("that".into()), "bob")
                .is_err()
        );
        let kinds: Vec<_> = s
            .events(id)
            .unwrap()
            .into_iter()
            .filter_map(|e| e.kind)
            .collect();
        assert_eq!(kinds, ["asked", "answered"]);
    }

    #[test]
    fn a_reply_to_a_parked_task_queues_it_and_a_reply_while_parking_too() {
        let (_d, mut s) = store();
        let id = running(&mut s);
        s.ask(id, &lease(), "c1", &question(), None, 60_000)
            .unwrap();
        assert!(!s.park(id, &lease(), 500).unwrap());
        let t = s.require(&id.to_string()).unwrap();
        assert!(t.parked && t.state == TaskState::WaitingHuman && t.active_ms == 500);
        // Nobody holds it, and a take-over round leaves it alone.
        assert!(s.take_over_expired(&lease()).unwrap().is_empty());
        s.reply(id, &HumanAct::Answer("x".into()), "ann").unwrap();
        assert_eq!(s.require(&id.to_string()).unwrap().state, TaskState::Queued);
        let t = s.claim_next(None, &lease()).unwrap().unwrap();
        assert!(t.parked);
        s.transition(id, &lease(), TaskState::Running, None, None)
            .unwrap();
        assert!(!s.require(&id.to_string()).unwrap().parked);

        // The reply lands between the servo's last look and the park.
        let id = running(&mut s);
        s.ask(id, &lease(), "c2", &question(), None, 60_000)
            .unwrap();
        s.reply(id, &HumanAct::Answer("y".into()), "ann").unwrap();
        assert_eq!(
            s.require(&id.to_string()).unwrap().state,
            TaskState::WaitingHuman
        );
        assert!(s.park(id, &lease(), 0).unwrap(), "queued at once");
        assert_eq!(s.require(&id.to_string()).unwrap().state, TaskState::Queued);
    }

    #[test]
    fn a_parked_task_past_its_human_timeout_or_cancelled_is_to_be_ended() {
        let (_d, mut s) = store();
        let late = running(&mut s);
        s.ask(late, &lease(), "c", &question(), None, -1).unwrap();
        s.park(late, &lease(), 0).unwrap();
        let fresh = running(&mut s);
        s.ask(fresh, &lease(), "c", &question(), None, 60_000)
            .unwrap();
        s.park(fresh, &lease(), 0).unwrap();
        assert_eq!(s.parked_to_end().unwrap(), vec![(late, false)]);
        s.request_cancel(fresh).unwrap();
        let mut ends = s.parked_to_end().unwrap();
        ends.sort();
        let mut want = vec![(late, false), (fresh, true)];
        want.sort();
        assert_eq!(ends, want);
        assert!(s.hold_parked(late, &lease()).unwrap().is_some());
        assert!(
            s.hold_parked(late, &lease()).unwrap().is_none(),
            "held once"
        );
    }

    #[test]
    fn pause_and_resume_through_the_inbox() {
        let (_d, mut s) = store();
        let id = running(&mut s);
        s.inject(id, "look at b.rs", "ann").unwrap();
        s.request_pause(id, "ann").unwrap();
        let (notes, pause, state) = s.inbox(id, &lease(), 60_000, None).unwrap();
        assert!(pause);
        assert_eq!(notes.len(), 1);
        // The state it says is the state it left (the desk's flag follows it).
        assert_eq!(state, TaskState::Paused);
        assert_eq!(s.require(&id.to_string()).unwrap().state, TaskState::Paused);
        let (_, _, state) = s.inbox(id, &lease(), 60_000, None).unwrap();
        assert_eq!(state, TaskState::Paused, "a look that moves nothing");
        s.delivered(id, &lease(), &[notes[0].id]).unwrap();
        assert!(!s.park(id, &lease(), 0).unwrap());
        s.resume(id, "ann").unwrap();
        let t = s.require(&id.to_string()).unwrap();
        assert_eq!(t.state, TaskState::Queued);
        assert!(!t.pause_requested);
        s.claim_next(None, &lease()).unwrap().unwrap();
        s.transition(id, &lease(), TaskState::Running, None, None)
            .unwrap();
        let (notes, pause, _) = s.inbox(id, &lease(), 60_000, None).unwrap();
        assert!(notes.is_empty() && !pause, "delivered once");
        assert!(s.resume(id, "ann").is_err(), "not paused");
    }

    /// Issue 23, case 23: a note marked delivered by someone else (the
    /// agent's shell) still reaches a servo that says what it has.
    #[test]
    fn a_note_marked_delivered_by_another_still_reaches_the_servo() {
        let (_d, mut s) = store();
        let id = running(&mut s);
        let first = s.inject(id, "one", "ann").unwrap().unwrap();
        let second = s.inject(id, "two", "ann").unwrap().unwrap();
        s.delivered(id, &lease(), &[first, second]).unwrap();
        let (notes, _, _) = s.inbox(id, &lease(), 60_000, Some(0)).unwrap();
        assert_eq!(
            notes.iter().map(|n| n.id).collect::<Vec<_>>(),
            [first, second]
        );
        let (notes, _, _) = s.inbox(id, &lease(), 60_000, Some(first)).unwrap();
        assert_eq!(notes.iter().map(|n| n.id).collect::<Vec<_>>(), [second]);
    }

    fn approval(args: &str) -> Waiting {
        Waiting::Approval {
            tool: "fake__push".into(),
            arguments: args.into(),
        }
    }

    /// Issue 23, case 19: one open question per task; more are refused
    /// (no row, no event) and counted.
    #[test]
    fn a_task_has_one_open_question_at_a_time() {
        let (_d, mut s) = store();
        let id = running(&mut s);
        s.ask(id, &lease(), "c1", &question(), None, 60_000)
            .unwrap();
        for i in 0..20 {
            let err = s
                .ask(
                    id,
                    &lease(),
                    &format!("flood-{i}"),
                    &question(),
                    None,
                    60_000,
                )
                .unwrap_err();
            assert!(matches!(err, StoreError::AskOpen { .. }), "{err}");
        }
        // The same question again is the same question (a servo restarted).
        assert_eq!(
            s.ask(id, &lease(), "c1", &question(), None, 60_000)
                .unwrap(),
            None
        );
        let asked = s
            .events(id)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind.as_deref() == Some("asked"))
            .count();
        assert_eq!(asked, 1);
        assert_eq!(s.require(&id.to_string()).unwrap().gateway_refused, 20);
        // Once answered, the servo may ask the next one.
        s.reply(id, &HumanAct::Answer("x".into()), "ann").unwrap();
        s.take_reply(id, &lease(), "c1").unwrap().unwrap();
        s.ask(id, &lease(), "c2", &question(), None, 60_000)
            .unwrap();
    }

    /// Issue 23, case 19: past the per-task caps the gateway's writes are
    /// refused and counted, and one event says the cap was reached.
    #[test]
    fn gateway_writes_stop_at_the_caps_with_one_event() {
        let (_d, mut s) = store();
        let id = running(&mut s);
        let big = "P".repeat(60 * 1024);
        let mut refused = 0;
        for i in 0..400 {
            let w = Waiting::Plan {
                plan: vec![big.clone()],
            };
            match s.ask(id, &lease(), &format!("c{i}"), &w, None, 60_000) {
                Ok(_) => {
                    s.reply(id, &HumanAct::Approve(None), "ann").unwrap();
                    s.take_reply(id, &lease(), &format!("c{i}")).unwrap();
                }
                Err(StoreError::GatewayCap(_)) => refused += 1,
                Err(e) => panic!("{e}"),
            }
        }
        let events = s.events(id).unwrap();
        let asked = events
            .iter()
            .filter(|e| e.kind.as_deref() == Some("asked"))
            .count();
        let cap = crate::store::MAX_GATEWAY_BYTES as usize / (big.len() + 40);
        assert!(
            asked <= cap + 1 && refused > 0,
            "asked {asked}, refused {refused}"
        );
        let said = events
            .iter()
            .filter(|e| e.kind.as_deref() == Some("gateway_cap"))
            .count();
        assert_eq!(said, 1, "the cap is said once");
        assert_eq!(s.require(&id.to_string()).unwrap().gateway_refused, refused);
    }

    /// Issue 23, case 21: refused capability calls are counted; only the
    /// first few are event rows.
    #[test]
    fn refused_capability_calls_are_counted_past_the_first_few() {
        let (_d, mut s) = store();
        let id = running(&mut s);
        let recorded = (0..100)
            .filter(|_| {
                s.refuse_capability(id, "capability_refused", "x: not granted")
                    .unwrap()
            })
            .count();
        assert_eq!(recorded as i64, crate::store::LOGGED_REFUSALS);
        assert_eq!(s.require(&id.to_string()).unwrap().gateway_refused, 100);
    }

    /// Issue 23, case 36: a gated call runs on a human's approval of that
    /// exact call, once.
    #[test]
    fn an_approval_is_for_that_call_and_used_once() {
        let (_d, mut s) = store();
        let id = running(&mut s);
        assert!(!s.use_approval(id, &lease(), "fake__push", "{}").unwrap());
        s.ask(id, &lease(), "c1", &approval("{}"), None, 60_000)
            .unwrap();
        assert!(
            !s.use_approval(id, &lease(), "fake__push", "{}").unwrap(),
            "not yet approved"
        );
        s.reply(id, &HumanAct::Approve(None), "ann").unwrap();
        assert!(
            !s.use_approval(id, &lease(), "fake__push", "{\"x\":1}")
                .unwrap(),
            "other arguments"
        );
        assert!(s.use_approval(id, &lease(), "fake__push", "{}").unwrap());
        assert!(
            !s.use_approval(id, &lease(), "fake__push", "{}").unwrap(),
            "used once"
        );
        // A denied call never runs.
        s.take_reply(id, &lease(), "c1").unwrap();
        s.ask(id, &lease(), "c2", &approval("{}"), None, 60_000)
            .unwrap();
        s.reply(id, &HumanAct::Deny("no".into()), "ann").unwrap();
        assert!(!s.use_approval(id, &lease(), "fake__push", "{}").unwrap());
    }

    /// Issue 23, case 22: a servo that ends with a question open (its
    /// shell asked just before `task_complete`) is recorded as it ended,
    /// and the question is closed as moot.
    #[test]
    fn an_ending_wins_over_an_open_question() {
        let (_d, mut s) = store();
        let id = running(&mut s);
        s.ask(id, &lease(), "shell-1", &question(), None, 60_000)
            .unwrap();
        assert_eq!(
            s.require(&id.to_string()).unwrap().state,
            TaskState::WaitingHuman
        );
        s.finish(id, &lease(), TaskState::Complete, Some("done"), None, None)
            .unwrap();
        assert_eq!(
            s.require(&id.to_string()).unwrap().state,
            TaskState::Complete
        );
        assert!(s.open_ask(id).unwrap().is_none(), "the question is moot");
        let err = s
            .reply(id, &HumanAct::Answer("late".into()), "ann")
            .unwrap_err();
        assert!(matches!(err, DeskError::NothingToAnswer { .. }), "{err}");
    }
}

/// A task run to `incomplete` (reason `max_steps`).
fn ended_incomplete(s: &mut Store) -> TaskId {
    let id = TaskId::new();
    s.submit(id, &spec("t"), 0, None, 1).unwrap();
    s.claim_next(Some(id), &lease()).unwrap();
    s.transition(id, &lease(), TaskState::Running, None, None)
        .unwrap();
    let o = Outcome {
        reason: Some("max_steps".into()),
        ..Default::default()
    };
    s.transition(id, &lease(), TaskState::Incomplete, None, Some(&o))
        .unwrap();
    id
}

/// Issue 12: an override sets the state, keeps the first outcome, and is
/// an event; overriding again is allowed and the latest wins.
#[test]
fn override_keeps_the_first_outcome_and_records_each() {
    let (_d, mut s) = store();
    let id = ended_incomplete(&mut s);
    let finished = s.require(&id.to_string()).unwrap().finished_at;
    s.override_outcome(id, TaskState::Complete, "tests pass by hand", "alice")
        .unwrap();
    let t = s.require(&id.to_string()).unwrap();
    assert_eq!(t.state, TaskState::Complete);
    assert_eq!(
        t.reason.as_deref(),
        Some("max_steps"),
        "the run's reason stays"
    );
    assert_eq!(t.finished_at, finished);
    let o = t.overridden.unwrap();
    assert_eq!(
        (o.from, o.reason.as_str(), o.by.as_str()),
        (TaskState::Incomplete, "tests pass by hand", "alice")
    );

    s.override_outcome(id, TaskState::Incomplete, "no: flaky", "bob")
        .unwrap();
    let t = s.require(&id.to_string()).unwrap();
    assert_eq!(t.state, TaskState::Incomplete);
    let o = t.overridden.unwrap();
    assert_eq!(
        (o.from, o.reason.as_str(), o.by.as_str()),
        (TaskState::Incomplete, "no: flaky", "bob")
    );

    let last: Vec<_> = s.events(id).unwrap().into_iter().rev().take(2).collect();
    assert_eq!(
        (last[1].from, last[1].to, last[1].detail.as_deref()),
        (
            Some(TaskState::Incomplete),
            TaskState::Complete,
            Some("overridden by alice: tests pass by hand")
        )
    );
    assert_eq!(
        (last[0].from, last[0].to, last[0].detail.as_deref()),
        (
            Some(TaskState::Complete),
            TaskState::Incomplete,
            Some("overridden by bob: no: flaky")
        )
    );
    // Retrying an overridden task still works.
    let next = TaskId::new();
    s.retry(id, next).unwrap();
    assert_eq!(
        s.require(&next.to_string()).unwrap().state,
        TaskState::Queued
    );
}

#[test]
fn override_refuses_unended_cancelled_and_bad_targets() {
    let (_d, mut s) = store();
    let queued = TaskId::new();
    s.submit(queued, &spec("q"), 0, None, 1).unwrap();
    let err = s
        .override_outcome(queued, TaskState::Complete, "r", "me")
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotOverridable {
                state: TaskState::Queued,
                ..
            }
        ),
        "{err}"
    );
    s.claim_next(Some(queued), &lease()).unwrap();
    let err = s
        .override_outcome(queued, TaskState::Complete, "r", "me")
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotOverridable {
                state: TaskState::Starting,
                ..
            }
        ),
        "{err}"
    );

    let cancelled = TaskId::new();
    s.submit(cancelled, &spec("c"), 0, None, 1).unwrap();
    s.request_cancel(cancelled).unwrap();
    let err = s
        .override_outcome(cancelled, TaskState::Complete, "r", "me")
        .unwrap_err();
    assert!(matches!(err, StoreError::NotOverridable { .. }), "{err}");

    let ended = ended_incomplete(&mut s);
    for to in [TaskState::Failed, TaskState::Cancelled, TaskState::Running] {
        let err = s.override_outcome(ended, to, "r", "me").unwrap_err();
        assert!(matches!(err, StoreError::BadOverride { .. }), "{to}: {err}");
    }
    let err = s
        .override_outcome(ended, TaskState::Incomplete, "r", "me")
        .unwrap_err();
    assert!(matches!(err, StoreError::SameOutcome { .. }), "{err}");
    // Nothing refused was written.
    assert!(s.require(&ended.to_string()).unwrap().overridden.is_none());
    assert_eq!(s.events(ended).unwrap().len(), 4);
}

mod outbox {
    use super::*;
    use saheeli_protocol::front_matter::{Notify, NotifyFormat};

    #[test]
    fn a_tasks_events_are_claimed_one_at_a_time_in_order() {
        let (_d, mut s) = store();
        let mut sp = spec("hooked");
        sp.notify = vec![
            Notify {
                url: "http://a/".into(),
                email: None,
                events: vec!["all".into()],
                format: NotifyFormat::Json,
            },
            Notify {
                url: "http://b/".into(),
                email: None,
                events: vec!["task.completed".into()],
                format: NotifyFormat::Slack,
            },
        ];
        let id = TaskId::new();
        s.submit(id, &sp, 0, None, 1).unwrap();
        s.claim_next(None, &lease()).unwrap().unwrap();
        s.transition(id, &lease(), TaskState::Running, None, None)
            .unwrap();
        s.transition(id, &lease(), TaskState::Complete, None, None)
            .unwrap();
        // A task without webhooks adds nothing.
        let plain = TaskId::new();
        s.submit(plain, &spec("plain"), 0, None, 1).unwrap();

        let first = s.claim_deliveries("me", 10_000, 10).unwrap();
        let kinds: Vec<_> = first
            .iter()
            .map(|d| (d.url.as_str(), d.kind.as_str()))
            .collect();
        // Only the head of each (task, URL) line: a's queued and b's completed.
        assert_eq!(
            kinds,
            [
                ("http://a/", "task.queued"),
                ("http://b/", "task.completed")
            ]
        );
        assert!(
            s.claim_deliveries("other", 10_000, 10).unwrap().is_empty(),
            "claimed"
        );
        s.delivery_failed(first[0].id, "HTTP 503", 0, false)
            .unwrap();
        s.delivery_done(first[1].id).unwrap();
        let again = s.claim_deliveries("me", 10_000, 10).unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(
            (again[0].kind.as_str(), again[0].attempts),
            ("task.queued", 1)
        );
        s.delivery_done(again[0].id).unwrap();
        let next = s.claim_deliveries("me", 10_000, 10).unwrap();
        assert_eq!(next[0].kind, "task.started");
        s.delivery_failed(next[0].id, "gone", 0, true).unwrap();
        let c = s.webhook_counts(id).unwrap();
        assert_eq!((c.delivered, c.pending, c.dead), (2, 1, 1));
        assert_eq!(s.webhook_counts(plain).unwrap(), Default::default());
    }
}

#[test]
fn a_step_done_again_updates_its_evidence_and_is_fenced() {
    // Issue 23, case 20: marking a step again writes no second event (so
    // no second `step.done` webhook).
    let (_d, mut s) = store();
    let id = TaskId::new();
    s.submit(id, &spec("t"), 0, None, 1).unwrap();
    s.claim_next(None, &lease()).unwrap().unwrap();
    s.transition(id, &lease(), TaskState::Running, None, None)
        .unwrap();
    let done = s.step_done(id, &lease(), "fix", "first").unwrap();
    assert_eq!(done, StepMarked::Done(vec!["fix".into()]));
    let StepMarked::Done(done) = s.step_done(id, &lease(), "check", "ran it").unwrap() else {
        panic!("not done")
    };
    assert_eq!(done.len(), 2);
    s.step_done(id, &lease(), "fix", "second").unwrap();
    let rows = s.steps_done(id).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let fix = rows.iter().find(|r| r.name == "fix").unwrap();
    assert_eq!(fix.evidence, "second");
    let other = Lease {
        owner: "other".into(),
        ms: 10_000,
    };
    let err = s.step_done(id, &other, "fix", "forged").unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost(_)), "{err}");
    let rows = s.steps_done(id).unwrap();
    assert!(rows.iter().all(|r| r.evidence != "forged"));
    let events = s.events(id).unwrap();
    let kinds = events
        .iter()
        .filter(|e| e.kind.as_deref() == Some("step_done"))
        .count();
    assert_eq!(kinds, 2, "one event per step, however often it is marked");
}

#[test]
fn a_step_done_reaching_a_step_first_meets_its_gate_and_its_breakpoint() {
    // Case N15: `step_done` of a step never started is its start.
    use saheeli_protocol::human::Waiting;
    use saheeli_protocol::template::{Position, Step, StepHeld};
    let (_d, mut s) = store();
    let id = TaskId::new();
    let mut sp = spec("t");
    sp.steps = vec![
        Step {
            name: "a".into(),
            approve: saheeli_protocol::template::StepApproval {
                required: true,
                ..Default::default()
            },
            ..Step::default()
        },
        Step {
            name: "b".into(),
            breakpoint: Some(Position::Before),
            ..Step::default()
        },
    ];
    s.submit(id, &sp, 0, None, 1).unwrap();
    s.claim_next(None, &lease()).unwrap().unwrap();
    s.transition(id, &lease(), TaskState::Running, None, None)
        .unwrap();
    let held = s.step_done(id, &lease(), "a", "shipped").unwrap();
    assert_eq!(held, StepMarked::Held(StepHeld::NeedsApproval));
    assert!(s.steps_done(id).unwrap().is_empty());
    assert!(s.step_starts(id).unwrap().is_empty());
    // The step's approval, given to the `step_done` that reached it.
    let waiting = Waiting::Approval {
        tool: "step_done".into(),
        arguments: r#"{"name":"a","evidence":"shipped"}"#.into(),
    };
    s.ask(id, &lease(), "c1", &waiting, None, 60_000).unwrap();
    s.reply(id, &HumanAct::Approve(None), "pat").unwrap();
    let done = s.step_done(id, &lease(), "a", "shipped").unwrap();
    assert_eq!(done, StepMarked::Done(vec!["a".into()]));
    // Used once: `a` has started, so marking it again needs nothing.
    assert!(matches!(
        s.step_done(id, &lease(), "a", "again").unwrap(),
        StepMarked::Done(_)
    ));
    // `b`: started by the call, paused before its work, not done.
    let held = s.step_done(id, &lease(), "b", "did b").unwrap();
    assert_eq!(held, StepMarked::Held(StepHeld::BreakpointBefore));
    assert_eq!(s.steps_done(id).unwrap().len(), 1);
    let starts: Vec<String> = s
        .step_starts(id)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(starts, ["a", "b"]);
    assert!(s.get(&id.to_string()).unwrap().unwrap().pause_requested);
    assert!(matches!(
        s.step_done(id, &lease(), "b", "did b").unwrap(),
        StepMarked::Done(_)
    ));
}

mod verify {
    use super::*;
    use saheeli_protocol::verify::{Check, CheckKind};

    fn check(attempt: u32, passed: bool) -> Check {
        Check {
            attempt,
            kind: CheckKind::Verify,
            command: "sh t.sh".into(),
            exit_code: Some(if passed { 0 } else { 1 }),
            duration_ms: 7,
            passed,
            output: "out".into(),
            limited: false,
            findings: Vec::new(),
            graded: None,
        }
    }

    #[test]
    fn attempts_are_counted_kept_by_call_and_fenced() {
        let (_d, mut s) = store();
        let id = TaskId::new();
        s.submit(id, &spec("t"), 0, None, 1).unwrap();
        s.claim_next(None, &lease()).unwrap().unwrap();
        assert_eq!(s.verify_attempts(id).unwrap(), 0);
        assert!(!s.verify_passed(id).unwrap());
        s.record_verify(id, &lease(), "call_1", 1, &[check(1, false)])
            .unwrap();
        let assess = Check {
            kind: CheckKind::Assess,
            command: "assess".into(),
            exit_code: None,
            ..check(2, true)
        };
        s.record_verify(id, &lease(), "call_2", 2, &[check(2, true), assess])
            .unwrap();
        assert_eq!(s.verify_attempts(id).unwrap(), 2);
        assert!(s.verify_passed(id).unwrap());
        let (n, checks) = s.verify_attempt_of(id, "call_1").unwrap().unwrap();
        assert_eq!((n, checks), (1, vec![check(1, false)]));
        assert!(s.verify_attempt_of(id, "call_9").unwrap().is_none());
        let all = s.verify_checks(id).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[2].kind, CheckKind::Assess);
        // Only the lease holder records.
        let other = Lease {
            owner: "other".into(),
            ms: 10_000,
        };
        let err = s
            .record_verify(id, &other, "call_3", 3, &[check(3, true)])
            .unwrap_err();
        assert!(matches!(err, StoreError::LeaseLost(_)), "{err}");
        assert_eq!(s.verify_attempts(id).unwrap(), 2);
        let kinds: Vec<_> = s
            .events(id)
            .unwrap()
            .into_iter()
            .filter_map(|e| e.kind)
            .collect();
        assert_eq!(
            kinds.iter().filter(|k| *k == "verified").count(),
            2,
            "{kinds:?}"
        );
    }
}
