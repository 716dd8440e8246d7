use super::*;
use std::sync::Arc;

/// A pool config of one class of `size`, and what a task of exactly
/// that class needs.
fn one_class(size: usize) -> (Vec<WarmClass>, WarmNeeds) {
    let file: crate::config::ConfigFile =
        serde_yaml::from_str(&format!("pool:\n  - {{ size: {size} }}\n")).unwrap();
    let classes = file.warm_classes();
    let c = &classes[0];
    let needs = WarmNeeds {
        image: c.image.clone(),
        network: c.network,
        memory: c.memory,
        cpus: c.cpus,
        pids: c.pids,
        disk: c.disk,
        setup: None,
    };
    (classes, needs)
}

#[test]
fn a_warm_claim_holds_refills_for_a_lull_and_a_cold_one_does_not() {
    let (classes, needs) = one_class(1);
    let pool = Pool::new(classes, "me".into(), std::env::temp_dir());
    assert_eq!(pool.lull_ends(), None, "nothing claimed yet");
    // The pool is empty: the claim goes cold, and refills may start.
    assert!(pool.claim(TaskId::new(), &needs).is_none());
    assert_eq!(pool.lull_ends(), None, "a cold claim holds nothing up");
    pool.lock().last_claim = Some(Instant::now());
    let end = pool.lull_ends().expect("a warm claim just now");
    assert!(end <= Instant::now() + CLAIM_LULL);
    pool.lock().last_claim = Some(Instant::now() - CLAIM_LULL);
    assert_eq!(pool.lull_ends(), None, "the lull is over");
}

/// A burst is over for the refills only once its servos got going: a
/// claimed servo that has not made its first model call holds them
/// (past the claims' lull), its call lets them go, and one that never
/// calls holds them for [`START_HOLD`] at most.
#[tokio::test]
async fn refills_wait_for_claimed_servos_to_call_the_model() {
    let (classes, needs) = one_class(2);
    let run = tempfile::tempdir().unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(run.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let pool = Pool::new(classes, "me".into(), run.path().to_path_buf());
    let mut sockets = vec![];
    for _ in 0..2 {
        let name = slot_name(TaskId::new());
        let dir = socket_name(&name).unwrap();
        let socket = WarmSocket::bind(run.path(), &dir, false).unwrap();
        sockets.push(socket.clone());
        pool.lock().idle[0].push_back(Idle {
            name,
            socket,
            born: Instant::now(),
        });
    }
    assert!(pool.claim(TaskId::new(), &needs).is_some());
    pool.lock().last_claim = Some(Instant::now() - CLAIM_LULL);
    let held = pool.lull_ends().expect("its servo has not called yet");
    assert!(held <= Instant::now() + START_LOOK, "looked at again soon");
    sockets[0].went();
    assert_eq!(pool.lull_ends(), None, "its servo called the model");
    // A servo that never calls: held while it is new, not after.
    assert!(pool.claim(TaskId::new(), &needs).is_some());
    pool.lock().last_claim = Some(Instant::now() - CLAIM_LULL);
    assert!(pool.lull_ends().is_some());
    pool.lock().starting[0].1 = Instant::now() - START_HOLD;
    assert_eq!(pool.lull_ends(), None, "held {START_HOLD:?} at most");
    for s in sockets {
        s.discard().await;
    }
}

/// `GET end` on a claimed socket, over its unix socket: the status line.
async fn ask_end(socket: &WarmSocket) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::UnixStream::connect(socket.dir().join("gateway.sock"))
        .await
        .unwrap();
    let ask = format!(
        "GET {} HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n",
        saheeli_protocol::remote::warm::END
    );
    // A connection over the socket's cap is closed at once: no answer.
    let _ = s.write_all(ask.as_bytes()).await;
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer).await;
    answer.lines().next().unwrap_or_default().to_string()
}

/// A claimed servo's end (`GET end`) waits while a servo claimed beside
/// it has not made its first model call, and is answered once it has;
/// an end with nobody starting, or on a socket the pool does not hold
/// (adopted after a restart), is answered at once.
#[tokio::test]
async fn a_claimed_servos_end_waits_for_the_servos_claimed_beside_it() {
    let (classes, needs) = one_class(3);
    let run = tempfile::tempdir().unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(run.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let pool = Arc::new(Pool::new(classes, "me".into(), run.path().to_path_buf()));
    let mut sockets = vec![];
    for _ in 0..2 {
        let name = slot_name(TaskId::new());
        let socket = WarmSocket::bind(run.path(), &socket_name(&name).unwrap(), false).unwrap();
        let weak = Arc::downgrade(&pool);
        socket.hold_ends_for(Arc::new(move || {
            weak.upgrade().is_some_and(|p| p.starts_pending())
        }));
        sockets.push(socket.clone());
        pool.lock().idle[0].push_back(Idle {
            name,
            socket,
            born: Instant::now(),
        });
    }
    for s in &sockets {
        assert!(pool.claim(TaskId::new(), &needs).is_some());
        s.claim_for_test();
    }
    // The first ends while the second has not called the model yet.
    let first = sockets[0].clone();
    let mut end = tokio::spawn(async move { ask_end(&first).await });
    let early = tokio::time::timeout(Duration::from_millis(300), &mut end).await;
    assert!(
        early.is_err(),
        "answered while a servo beside it was starting"
    );
    sockets[1].went();
    let answered = tokio::time::timeout(Duration::from_secs(5), end).await;
    let status = answered
        .expect("answered once the other got going")
        .unwrap();
    assert!(status.contains("204"), "{status}");
    // Nobody starting now: the second's own end is answered at once.
    let status = tokio::time::timeout(Duration::from_secs(5), ask_end(&sockets[1]))
        .await
        .expect("nobody to wait for");
    assert!(status.contains("204"), "{status}");
    // A socket with no pool behind it never holds an end.
    let lone = WarmSocket::bind(
        run.path(),
        &socket_name(&slot_name(TaskId::new())).unwrap(),
        false,
    )
    .unwrap();
    lone.claim_for_test();
    let status = tokio::time::timeout(Duration::from_secs(5), ask_end(&lone))
        .await
        .expect("no hold");
    assert!(status.contains("204"), "{status}");
    // A flood of ends while a servo beside them never gets going: the
    // connections over the socket's cap are closed at once, the others
    // held no longer than the longest hold, and the socket still
    // answers afterwards.
    assert!(
        pool.claim(TaskId::new(), &needs).is_none(),
        "the pool is empty"
    );
    let name = slot_name(TaskId::new());
    let stuck = WarmSocket::bind(run.path(), &socket_name(&name).unwrap(), false).unwrap();
    pool.lock().idle[0].push_back(Idle {
        name,
        socket: stuck.clone(),
        born: Instant::now(),
    });
    assert!(pool.claim(TaskId::new(), &needs).is_some());
    let flood: Vec<_> = (0..64)
        .map(|_| {
            let s = sockets[0].clone();
            tokio::spawn(async move { ask_end(&s).await })
        })
        .collect();
    let all = tokio::time::timeout(
        Duration::from_millis(saheeli_protocol::remote::warm::END_HOLD_MS + 4000),
        futures_util::future::join_all(flood),
    )
    .await
    .expect("every end answered or closed within the longest hold");
    let answered = all
        .into_iter()
        .filter(|r| r.as_ref().unwrap().contains("204"))
        .count();
    assert!(
        (1..=crate::listen::GATEWAY_CONNECTIONS).contains(&answered),
        "{answered} held ends answered"
    );
    stuck.went();
    let status = tokio::time::timeout(Duration::from_secs(5), ask_end(&sockets[0]))
        .await
        .expect("the socket answers after the flood");
    assert!(status.contains("204"), "{status}");
    for s in sockets.into_iter().chain([lone, stuck]) {
        s.discard().await;
    }
}

#[test]
fn a_slot_names_its_container_volume_and_socket_and_nothing_else_does() {
    let slot = TaskId::new();
    let name = slot_name(slot);
    assert!(name.starts_with(POOL_PREFIX) && name.len() == POOL_PREFIX.len() + 32);
    let sock = socket_name(&name).unwrap();
    assert_eq!(sock.len(), 34, "shorter than a task's directory (36)");
    for bad in [
        "saheeli-0191d3e2-aaaa-7bbb-8ccc-0123456789ab",
        "saheeli-pool-../../etc",
        "saheeli-pool-",
        "saheeli-pool-0123456789abcdef0123456789abcdeg",
    ] {
        assert_eq!(socket_name(bad), None, "{bad}");
    }
}
