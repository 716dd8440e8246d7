//! Where an attempt's time went (issue 49): set-up (claimed → its servo
//! running: the image, the container, the inputs), the agent (running →
//! the end, less the verify) and verify (its checks' durations added up),
//! from the task's state events: a pure function, tested by a table.

use serde::{Deserialize, Serialize};

use crate::state::TaskState;

/// An attempt's (or a result's, added up) time by phase, in ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Phases {
    pub setup_ms: i64,
    pub agent_ms: i64,
    pub verify_ms: i64,
}

impl std::ops::AddAssign for Phases {
    fn add_assign(&mut self, o: Phases) {
        self.setup_ms += o.setup_ms;
        self.agent_ms += o.agent_ms;
        self.verify_ms += o.verify_ms;
    }
}

/// The phases of one attempt from its state changes `(at, to)` in order,
/// its end (`finished_at`) and its verify checks' summed durations. Each
/// launch counts from its claim (`starting`) to `running` (a requeued or
/// parked task launches again); the agent's time is what the servo ran,
/// less the verify (which ran while it waited). None until it has ended.
pub(crate) fn phases(
    changes: &[(i64, TaskState)],
    finished_at: Option<i64>,
    verify_ms: i64,
) -> Option<Phases> {
    let end = finished_at?;
    let mut p = Phases {
        verify_ms,
        ..Phases::default()
    };
    let mut claimed: Option<i64> = None;
    let mut running: Option<i64> = None;
    for &(at, to) in changes {
        if let Some(since) = running.take() {
            p.agent_ms += (at - since).max(0);
        }
        if let Some(since) = claimed.take() {
            p.setup_ms += (at - since).max(0);
        }
        match to {
            TaskState::Starting => claimed = Some(at),
            TaskState::Running => running = Some(at),
            _ => {}
        }
    }
    if let Some(since) = running {
        p.agent_ms += (end - since).max(0);
    }
    if let Some(since) = claimed {
        p.setup_ms += (end - since).max(0);
    }
    p.agent_ms = (p.agent_ms - verify_ms).max(0);
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskState::*;

    fn p(setup_ms: i64, agent_ms: i64, verify_ms: i64) -> Option<Phases> {
        Some(Phases {
            setup_ms,
            agent_ms,
            verify_ms,
        })
    }

    #[test]
    fn time_is_split_by_phase() {
        #[allow(clippy::type_complexity)]
        let table: &[(&[(i64, TaskState)], Option<i64>, i64, Option<Phases>)] = &[
            // queued at 0, claimed at 10, running at 110, ended at 1110
            // with 300 ms of verify.
            (
                &[
                    (0, Queued),
                    (10, Starting),
                    (110, Running),
                    (1110, Complete),
                ],
                Some(1110),
                300,
                p(100, 700, 300),
            ),
            // A launch that failed: all set-up.
            (
                &[(0, Queued), (10, Starting), (60, Failed)],
                Some(60),
                0,
                p(50, 0, 0),
            ),
            // Requeued after a failed launch (its wait in the queue is no
            // phase), then run.
            (
                &[
                    (0, Queued),
                    (10, Starting),
                    (30, Queued),
                    (1030, Starting),
                    (1050, Running),
                    (1150, Incomplete),
                ],
                Some(1150),
                0,
                p(40, 100, 0),
            ),
            // A wait for a human is no agent time.
            (
                &[
                    (0, Queued),
                    (10, Starting),
                    (20, Running),
                    (120, WaitingHuman),
                    (5120, Running),
                    (5220, Complete),
                ],
                Some(5220),
                0,
                p(10, 200, 0),
            ),
            // Not ended.
            (&[(0, Queued), (10, Starting)], None, 0, None),
            // Verify longer than what was seen (clock skew): never negative.
            (
                &[(0, Starting), (10, Running), (20, Complete)],
                Some(20),
                50,
                p(10, 0, 50),
            ),
        ];
        for (changes, end, verify, want) in table {
            assert_eq!(phases(changes, *end, *verify), *want, "{changes:?}");
        }
    }
}
