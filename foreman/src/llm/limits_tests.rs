//! The shared budgets, on tokio's paused clock (no real time passes).

use std::time::Duration;

use super::*;

fn key() -> Key {
    ("fake".into(), "gpt-4o-mini".into())
}

fn per_minute(limit: u64, remaining: u64) -> Observed {
    Observed {
        requests: Some(Allowance {
            limit: Some(limit),
            remaining,
            resets_in: None,
        }),
        tokens: None,
        retry_after: None,
    }
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 100.0).round() / 100.0
}

#[tokio::test(start_paused = true)]
async fn calls_wait_in_order_at_the_providers_rate() {
    let limits = Limits::default();
    let mut probe = limits.turn(key(), 100, |_| {}).await;
    assert_eq!(probe.waited, Duration::ZERO);
    // 60 a minute, 2 left: two go now, the next ones one second apart.
    limits.answered(&mut probe, &per_minute(60, 2));
    drop(probe);
    let mut waits = vec![];
    for _ in 0..5 {
        let t0 = Instant::now();
        let turn = limits.turn(key(), 100, |_| {}).await;
        waits.push(secs(t0.elapsed()));
        drop(turn);
    }
    assert_eq!(waits, [0.0, 0.0, 1.0, 1.0, 1.0]);
}

#[tokio::test(start_paused = true)]
async fn parallel_calls_queue_and_the_wait_is_visible() {
    let limits = Arc::new(Limits::default());
    let mut probe = limits.turn(key(), 10, |_| {}).await;
    limits.answered(&mut probe, &per_minute(60, 0));
    drop(probe);
    let t0 = Instant::now();
    let mut tasks = vec![];
    for _ in 0..4 {
        let l = limits.clone();
        tasks.push(tokio::spawn(async move {
            let told = std::sync::Mutex::new(vec![]);
            let turn = l.turn(key(), 10, |w| told.lock().unwrap().push(w)).await;
            let waited = turn.waited;
            drop(turn);
            (waited, told.into_inner().unwrap())
        }));
    }
    tokio::task::yield_now().await;
    // Four queued: a fifth would wait about five seconds.
    assert_eq!(secs(limits.wait_now()), 5.0);
    let mut waited = vec![];
    for t in tasks {
        let (w, told) = t.await.unwrap();
        assert_eq!(
            told.len(),
            2,
            "told when the wait starts and ends: {told:?}"
        );
        assert!(told[0].is_some() && told[1].is_none());
        waited.push(secs(w));
    }
    waited.sort_by(f64::total_cmp);
    assert_eq!(waited, [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(secs(t0.elapsed()), 4.0);
}

#[tokio::test(start_paused = true)]
async fn the_first_call_probes_alone() {
    let limits = Arc::new(Limits::default());
    let mut probe = limits.turn(key(), 1, |_| {}).await;
    let l = limits.clone();
    let other = tokio::spawn(async move {
        let t = l.turn(key(), 1, |_| {}).await;
        t.waited
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!other.is_finished(), "waits for the probe's answer");
    limits.answered(&mut probe, &Observed::default());
    // No rate headers: unlimited from now on.
    assert_eq!(secs(other.await.unwrap()), 0.7);
    for _ in 0..100 {
        assert_eq!(limits.turn(key(), 1, |_| {}).await.waited, Duration::ZERO);
    }
    assert_eq!(limits.wait_now(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_probe_dropped_unanswered_hands_over_and_a_silent_one_times_out() {
    let limits = Arc::new(Limits::default());
    let probe = limits.turn(key(), 1, |_| {}).await;
    let l = limits.clone();
    let other = tokio::spawn(async move { l.turn(key(), 1, |_| {}).await.probe });
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(probe);
    assert!(other.await.unwrap(), "the next call probes");
    // A probe that never answers: the others go after PROBE_WAIT.
    let silent = limits.turn(key(), 1, |_| {}).await;
    assert!(silent.probe);
    let t0 = Instant::now();
    let t = limits.turn(key(), 1, |_| {}).await;
    assert_eq!(t0.elapsed(), PROBE_WAIT);
    assert!(!t.probe);
    drop(silent);
}

#[tokio::test(start_paused = true)]
async fn a_429_pauses_the_budget_for_its_retry_after() {
    let limits = Limits::default();
    let mut t = limits.turn(key(), 1, |_| {}).await;
    let o = Observed {
        retry_after: Some(Duration::from_secs(3)),
        ..per_minute(600, 0)
    };
    assert_eq!(limits.refused(&mut t, &o), Duration::from_secs(3));
    drop(t);
    let t0 = Instant::now();
    drop(limits.turn(key(), 1, |_| {}).await);
    // Paused 3 s (the bucket refills meanwhile, at 10 a second).
    assert_eq!(secs(t0.elapsed()), 3.0);
    // Without retry-after, until the exhausted dimension resets.
    let mut t = limits.turn(key(), 1, |_| {}).await;
    let o = Observed {
        requests: Some(Allowance {
            limit: Some(600),
            remaining: 0,
            resets_in: Some(Duration::from_secs(2)),
        }),
        ..Default::default()
    };
    assert_eq!(limits.refused(&mut t, &o), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn tokens_bind_when_they_run_out_first() {
    let limits = Limits::default();
    let mut t = limits.turn(key(), 1000, |_| {}).await;
    // Plenty of requests; 1,000 tokens left of 60,000 a minute (1,000 a second).
    let o = Observed {
        requests: Some(Allowance {
            limit: Some(10_000),
            remaining: 9_999,
            resets_in: None,
        }),
        tokens: Some(Allowance {
            limit: Some(60_000),
            remaining: 1_000,
            resets_in: Some(Duration::from_secs(59)),
        }),
        retry_after: None,
    };
    limits.answered(&mut t, &o);
    drop(t);
    let t0 = Instant::now();
    drop(limits.turn(key(), 1000, |_| {}).await);
    drop(limits.turn(key(), 3000, |_| {}).await);
    assert_eq!(secs(t0.elapsed()), 3.0);
}

#[tokio::test(start_paused = true)]
async fn budgets_are_per_provider_and_model() {
    let limits = Limits::default();
    let mut t = limits.turn(key(), 1, |_| {}).await;
    limits.answered(&mut t, &per_minute(60, 0));
    drop(t);
    let other = ("fake".to_string(), "another-model".to_string());
    let t0 = Instant::now();
    let t = limits.turn(other, 1, |_| {}).await;
    assert!(t.probe, "another model has its own budget");
    assert_eq!(t0.elapsed(), Duration::ZERO);
}
