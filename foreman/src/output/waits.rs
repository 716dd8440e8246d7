//! A queued task that may not be claimed yet (issue 30): a retry waiting
//! out its backoff (`retry 2 of 3 in 40 s`), or a task requeued after an
//! infrastructure failure (`queued again in 4 s`).

use crate::state::TaskState;
use crate::store::TaskRow;

/// How long `t` still waits before it may be claimed, as people read it;
/// None when it does not wait (not queued, or its time has come).
pub(crate) fn waits_line(t: &TaskRow, now_ms: i64) -> Option<String> {
    if t.state != TaskState::Queued {
        return None;
    }
    let left_ms = t.not_before? - now_ms;
    if left_ms <= 0 {
        return None;
    }
    // Whole seconds, rounded up: "in 0 s" would read as now.
    let secs = (left_ms + 999) / 1000;
    let when = if secs < 120 {
        format!("{secs} s")
    } else {
        super::short_duration(left_ms)
    };
    Some(if t.retry_of.is_some() && t.requeues == 0 {
        format!("retry {} of {} in {when}", t.attempt - 1, t.spec.retries)
    } else {
        format!("queued again in {when}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(attempt: i64, retries: u32, not_before: Option<i64>) -> TaskRow {
        let d = tempfile::tempdir().unwrap();
        let mut store = crate::store::Store::open(&d.path().join("db")).unwrap();
        let mut spec = crate::store::tests::spec("t");
        spec.retries = retries;
        let id = saheeli_protocol::TaskId::new();
        store.submit(id, &spec, 0, None, attempt).unwrap();
        let mut t = store.get(&id.to_string()).unwrap().unwrap();
        if attempt > 1 {
            t.retry_of = Some(saheeli_protocol::TaskId::new());
        }
        t.not_before = not_before;
        t
    }

    #[test]
    fn retries_and_requeues_say_how_long_they_wait() {
        let now = 1_000_000;
        let t = row(3, 3, Some(now + 39_200));
        assert_eq!(waits_line(&t, now).as_deref(), Some("retry 2 of 3 in 40 s"));
        let t = row(2, 2, Some(now + 600_000));
        assert_eq!(
            waits_line(&t, now).as_deref(),
            Some("retry 1 of 2 in 10m00s")
        );
        let mut t = row(1, 0, Some(now + 4_000));
        assert_eq!(waits_line(&t, now).as_deref(), Some("queued again in 4 s"));
        t.requeues = 1;
        assert_eq!(waits_line(&t, now).as_deref(), Some("queued again in 4 s"));
        assert_eq!(
            waits_line(&row(2, 2, Some(now)), now),
            None,
            "its time has come"
        );
        assert_eq!(waits_line(&row(2, 2, None), now), None);
        let mut t = row(2, 2, Some(now + 5_000));
        t.state = TaskState::Running;
        assert_eq!(waits_line(&t, now), None);
    }
}
