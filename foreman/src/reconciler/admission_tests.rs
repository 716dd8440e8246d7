//! The admission controller, driven by made-up reports at made-up times
//! (it takes the time as an argument: no clock runs here).

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::backend::docker::DaemonFault;
use crate::config::Concurrency;

const FAST: Report = Report::Launched(Duration::from_millis(100));
const SLOW: Report = Report::Launched(Duration::from_millis(400));
const DOWN: Report = Report::DaemonFailed(DaemonFault::Unreachable);

fn auto() -> Admission {
    Admission::new(Concurrency::Auto, Tuning::default())
}

#[test]
fn auto_ramps_up_while_latency_stays_at_its_baseline() {
    let mut a = auto();
    let now = Instant::now();
    assert_eq!(a.limit(), 4);
    for _ in 0..4 {
        assert_eq!(a.report(now, FAST), None);
    }
    // Slow start: one more per good launch, so a round of launches doubles it.
    assert_eq!(a.limit(), 8);
    for _ in 0..8 {
        a.report(now, FAST);
    }
    assert_eq!(a.limit(), 16);
    for _ in 0..10_000 {
        a.report(now, FAST);
    }
    assert_eq!(a.limit(), 512, "capped at Tuning::max");
}

#[test]
fn auto_backs_off_when_latency_climbs_then_grows_slowly() {
    let mut a = auto();
    let now = Instant::now();
    for _ in 0..28 {
        a.report(now, FAST);
    }
    assert_eq!(a.limit(), 32);
    // Latency climbs past twice the baseline: the smoothed value gets there
    // after a few samples, and the limit loses a quarter once.
    let mut shrunk = Vec::new();
    for _ in 0..6 {
        if let Some(Change::Shrunk { limit }) = a.report(now, SLOW) {
            shrunk.push(limit);
        }
    }
    assert_eq!(shrunk.len(), 1, "{shrunk:?}");
    let after = a.limit();
    assert!((23..=24).contains(&after), "{after}");
    // Still slow a round later: another quarter.
    for _ in 0..after {
        a.report(now, SLOW);
    }
    assert!(a.limit() < after, "{} !< {after}", a.limit());
    // Back to normal: additive growth, about one per round.
    let low = a.limit();
    for _ in 0..20 {
        a.report(now, FAST);
    }
    let grown = a.limit();
    assert!(grown > low && grown <= low + 2, "{low} -> {grown}");
    let snap = a.snapshot(now);
    assert_eq!(snap.breaker, Breaker::Closed);
    assert!(snap.baseline_ms.unwrap() >= 100.0 && snap.baseline_ms.unwrap() < 120.0);
}

#[test]
fn latency_between_the_thresholds_holds_the_limit() {
    let mut a = auto();
    let now = Instant::now();
    for _ in 0..4 {
        a.report(now, FAST);
    }
    // 1.8× the baseline, once the smoothed value has caught up.
    let between = Report::Launched(Duration::from_millis(180));
    for _ in 0..8 {
        a.report(now, between);
    }
    let held = a.limit();
    for _ in 0..15 {
        a.report(now, between);
    }
    assert_eq!(a.limit(), held);
}

#[test]
fn daemon_errors_halve_the_limit_and_trip_the_breaker() {
    let mut a = auto();
    let now = Instant::now();
    for _ in 0..12 {
        a.report(now, FAST);
    }
    assert_eq!(a.limit(), 16);
    for _ in 0..4 {
        assert_eq!(a.report(now, DOWN), None);
    }
    assert_eq!(a.limit(), 1);
    assert_eq!(a.may_launch(now, 0), (true, None));
    match a.report(now, DOWN) {
        Some(Change::Opened { for_, failures: 5 }) => assert_eq!(for_, Duration::from_secs(5)),
        other => panic!("{other:?}"),
    }
    assert_eq!(a.may_launch(now, 0), (false, None));
    assert_eq!(a.snapshot(now).open_for_ms, Some(5000));
}

#[test]
fn an_open_breaker_half_opens_after_its_pause_and_one_good_launch_closes_it() {
    let mut now = Instant::now();
    let mut a = Admission::new(Concurrency::Fixed(8), Tuning::default());
    for _ in 0..5 {
        a.report(now, DOWN);
    }
    assert_eq!(a.limit(), 8, "a fixed limit stays fixed");
    assert!(!a.may_launch(now, 0).0);
    now += Duration::from_millis(4999);
    assert!(!a.may_launch(now, 0).0);
    now += Duration::from_millis(1);
    assert_eq!(a.may_launch(now, 0), (true, Some(Change::HalfOpened)));
    // One trial at a time.
    a.admitted();
    assert_eq!(a.may_launch(now, 1), (false, None));
    assert_eq!(a.report(now, FAST), Some(Change::Closed));
    assert_eq!(a.may_launch(now, 7), (true, None));
    assert_eq!(a.may_launch(now, 8), (false, None));
}

#[test]
fn a_failed_trial_opens_the_breaker_for_twice_as_long_up_to_the_cap() {
    let mut now = Instant::now();
    let mut a = Admission::new(Concurrency::Fixed(4), Tuning::default());
    for _ in 0..5 {
        a.report(now, DOWN);
    }
    let mut pauses = Vec::new();
    for _ in 0..6 {
        now += Duration::from_secs(60);
        assert!(a.may_launch(now, 0).0);
        a.admitted();
        match a.report(now, DOWN) {
            Some(Change::Opened { for_, .. }) => pauses.push(for_.as_secs()),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(pauses, [10, 20, 40, 60, 60, 60]);
    // A neutral end of the trial lets another one through.
    now += Duration::from_secs(60);
    assert!(a.may_launch(now, 0).0);
    a.admitted();
    assert!(!a.may_launch(now, 1).0);
    a.report(now, Report::Neutral);
    assert!(a.may_launch(now, 1).0);
    // Success resets the pause to its first length.
    a.admitted();
    a.report(now, FAST);
    for _ in 0..5 {
        a.report(now, DOWN);
    }
    assert_eq!(a.snapshot(now).open_for_ms, Some(5000));
}

#[test]
fn errors_between_successes_do_not_trip_the_breaker() {
    let now = Instant::now();
    let mut a = Admission::new(Concurrency::Fixed(4), Tuning::default());
    for _ in 0..20 {
        for _ in 0..4 {
            a.report(now, DOWN);
        }
        a.report(now, FAST);
    }
    assert_eq!(a.snapshot(now).breaker, Breaker::Closed);
}

#[test]
fn a_slower_daemon_becomes_the_new_baseline_in_time() {
    let mut a = auto();
    let now = Instant::now();
    for _ in 0..4 {
        a.report(now, FAST);
    }
    for _ in 0..400 {
        a.report(now, SLOW);
    }
    let before = a.limit();
    for _ in 0..40 {
        a.report(now, SLOW);
    }
    assert!(a.limit() > before, "grows again at the new normal");
}
