//! `pools:`: which pools are full, and the claim that skips them, on a
//! real SQLite queue.

use std::time::Duration;

use saheeli_protocol::TaskId;

use super::*;
use crate::store::{Lease, Store};

fn caps(yaml: &str) -> Vec<PoolCap> {
    serde_yaml::from_str(yaml).unwrap()
}

fn group(state: TaskState, t: Option<&str>, m: &str, k: Option<&str>, n: usize) -> PoolGroup {
    PoolGroup {
        state: Some(state),
        agent_type: t.map(Into::into),
        model: Some(m.into()),
        key: k.map(Into::into),
        tasks: n,
    }
}

#[test]
fn a_pool_is_closed_once_its_running_tasks_reach_max() {
    let caps = caps(
        "[{ agent_type: a, max: 1 }, { model: m, max: 2 }, { key: K, max: 3 }, { model: x, max: 5 }]",
    );
    use TaskState::{Queued, Running, Starting};
    for (groups, want) in [
        (vec![], Closed::default()),
        // Queued tasks hold no slot.
        (
            vec![group(Queued, Some("a"), "m", Some("K"), 9)],
            Closed::default(),
        ),
        (
            vec![group(Starting, Some("a"), "o", None, 1)],
            Closed {
                agent_types: vec!["a".into()],
                ..Closed::default()
            },
        ),
        // Starting and running both count, summed over groups.
        (
            vec![
                group(Starting, None, "m", Some("K"), 1),
                group(Running, Some("b"), "m", Some("K"), 1),
            ],
            Closed {
                models: vec!["m".into()],
                ..Closed::default()
            },
        ),
        (
            vec![
                group(Running, None, "m", Some("K"), 1),
                group(Running, None, "o", Some("K"), 2),
            ],
            Closed {
                keys: vec!["K".into()],
                ..Closed::default()
            },
        ),
        (vec![group(Running, None, "x", None, 4)], Closed::default()),
    ] {
        assert_eq!(closed(&caps, &groups), want, "{groups:?}");
    }
}

#[test]
fn usage_counts_each_pool_and_the_footer_names_them() {
    let caps = caps("[{ agent_type: a, max: 1 }, { model: m, max: 2 }]");
    let groups = [
        group(TaskState::Running, Some("a"), "m", None, 1),
        group(TaskState::Queued, Some("a"), "m", None, 2),
        group(TaskState::Queued, None, "m", None, 1),
    ];
    let u = usage(&caps, &groups);
    assert_eq!(
        u,
        [
            PoolUsage {
                pool: "agent_type=a".into(),
                max: 1,
                running: 1,
                queued: 2
            },
            PoolUsage {
                pool: "model=m".into(),
                max: 2,
                running: 1,
                queued: 3
            },
        ]
    );
    assert_eq!(
        line(&u).unwrap(),
        "pools: agent_type=a 1/1 (2 queued), model=m 1/2 (3 queued)"
    );
    assert_eq!(line(&[]), None);
}

fn spec(agent_type: Option<&str>, model: &str) -> crate::task::TaskSpec {
    let mut s = crate::store::tests::spec(model);
    s.model = model.into();
    s.agent_type = agent_type.map(Into::into);
    s.provider_key = (!model.starts_with("replay:")).then(|| "K".to_string());
    s
}

/// The claim takes the best queued task no full pool holds back:
/// priority, then age; a full pool's head never blocks the tasks behind
/// it, and gets its pool's next slot before later tasks of that pool.
#[test]
fn a_full_pool_holds_back_only_its_own_tasks_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&dir.path().join("t.db")).unwrap();
    let lease = Lease::new(Duration::from_secs(60));
    let caps = caps("[{ agent_type: a, max: 1 }, { model: m, max: 2 }]");
    let submit = |s: &mut Store, t: Option<&str>, m: &str, priority: i64| {
        let id = TaskId::new();
        s.submit(id, &spec(t, m), priority, None, 1).unwrap();
        id
    };
    let a1 = submit(&mut s, Some("a"), "o", 5);
    let a2 = submit(&mut s, Some("a"), "o", 5);
    let m1 = submit(&mut s, None, "m", 1);
    let m2 = submit(&mut s, Some("b"), "m", 1);
    let m3 = submit(&mut s, None, "m", 1);
    let f1 = submit(&mut s, None, "replay:x", 0);
    let a3 = submit(&mut s, Some("a"), "o", 0);
    let end = |s: &mut Store, id: TaskId| {
        s.started(id, &lease, "started").unwrap();
        s.transition(id, &lease, TaskState::Complete, None, None)
            .unwrap();
    };
    let pick = |s: &mut Store| {
        let f = |g: &[PoolGroup]| closed(&caps, g);
        s.claim_within(None, false, &lease, Some(&f))
            .unwrap()
            .map(|t| t.id)
    };
    // a1 (priority 5); a2 waits for `a`; m1 and m2 fill `m`; m3 waits;
    // f1 is in no pool.
    assert_eq!(pick(&mut s), Some(a1));
    assert_eq!(pick(&mut s), Some(m1));
    assert_eq!(pick(&mut s), Some(m2));
    assert_eq!(pick(&mut s), Some(f1));
    assert_eq!(pick(&mut s), None, "every queued task is in a full pool");
    // `a` frees a slot: its oldest waiting task of the highest priority.
    end(&mut s, a1);
    assert_eq!(pick(&mut s), Some(a2));
    end(&mut s, m1);
    assert_eq!(pick(&mut s), Some(m3));
    end(&mut s, a2);
    assert_eq!(pick(&mut s), Some(a3));
    // Without pools the same queue is claimed in order.
    let next = submit(&mut s, Some("a"), "m", 0);
    assert_eq!(
        s.claim_next(None, &lease).unwrap().map(|t| t.id),
        Some(next)
    );
}
