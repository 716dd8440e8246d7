//! Best-of-N's decision (issue 51): from what the samples of a task did,
//! whether to wait, which sample won (and which to cancel), or that none
//! qualified. Pure, beside its table test; `samples.rs` carries it out.
//!
//! The rules (docs/guides/fork.md, "Best-of-N"):
//! - a sample *qualifies* when its last attempt ended `complete` (with
//!   `verify:`, that means its verify passed; with `assess: true`, that
//!   the assessor said met);
//! - `verify`: once every sample has ended, the qualifying one that ended
//!   first wins (ties: the lower sample number);
//! - `assess`: once every sample has ended, the qualifying one with the
//!   highest assessor score wins (no score counts as 0; ties as above);
//! - `first_complete`: the first qualifying sample wins as soon as it
//!   ends, and the samples still running or queued are cancelled;
//! - none qualifies once all have ended: the task ends `incomplete`,
//!   `no_sample_qualified`.

use saheeli_protocol::TaskId;
use saheeli_protocol::front_matter::Select;

use crate::state::TaskState;

/// One sample as the decision sees it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sampled {
    pub id: TaskId,
    /// 1-based.
    pub index: u32,
    /// Its last attempt's state.
    pub state: TaskState,
    /// When its last attempt ended (ms since the epoch).
    pub finished_at: Option<i64>,
    /// The assessor's score of its last passing assessment.
    pub score: Option<f64>,
}

impl Sampled {
    fn qualifies(&self) -> bool {
        self.state == TaskState::Complete
    }

    fn ended(&self) -> bool {
        self.state.is_terminal()
    }

    /// Earlier first: the end's time, then the sample's number.
    fn order(&self) -> (i64, u32) {
        (self.finished_at.unwrap_or(i64::MAX), self.index)
    }
}

/// What to do now.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Decision {
    /// Not decided yet.
    Wait,
    /// `winner` won; `cancel` are the samples still to end (first_complete).
    Won { winner: TaskId, cancel: Vec<TaskId> },
    /// Every sample ended and none qualified: why, for the task's detail.
    NoneQualified(String),
}

/// The decision over `samples` (all `count` of them spawned, or fewer: wait).
pub(crate) fn decide(select: Select, count: u32, samples: &[Sampled]) -> Decision {
    if samples.len() < count as usize {
        return Decision::Wait;
    }
    let first = samples
        .iter()
        .filter(|s| s.qualifies())
        .min_by_key(|s| s.order());
    let all_ended = samples.iter().all(Sampled::ended);
    if select == Select::FirstComplete
        && let Some(w) = first
    {
        let cancel = samples
            .iter()
            .filter(|s| !s.ended())
            .map(|s| s.id)
            .collect();
        return Decision::Won {
            winner: w.id,
            cancel,
        };
    }
    if !all_ended {
        return Decision::Wait;
    }
    let winner = match select {
        Select::Assess => samples.iter().filter(|s| s.qualifies()).min_by(|a, b| {
            let (sa, sb) = (a.score.unwrap_or(0.0), b.score.unwrap_or(0.0));
            sb.total_cmp(&sa).then(a.order().cmp(&b.order()))
        }),
        Select::Verify | Select::FirstComplete => first,
    };
    match winner {
        Some(w) => Decision::Won {
            winner: w.id,
            cancel: Vec::new(),
        },
        None => Decision::NoneQualified(none_qualified(select, samples)),
    }
}

/// Why no sample won: each sample's state.
fn none_qualified(select: Select, samples: &[Sampled]) -> String {
    let each: Vec<String> = samples
        .iter()
        .map(|s| format!("sample {} {}", s.index, s.state))
        .collect();
    let check = match select {
        Select::Verify => "passed its verify",
        Select::Assess => "was assessed as met",
        Select::FirstComplete => "completed",
    };
    format!(
        "no sample of {} {check} (select: {select}): {}",
        samples.len(),
        each.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskState::*;

    fn ids() -> Vec<TaskId> {
        let mut v: Vec<TaskId> = (0..4).map(|_| TaskId::new()).collect();
        v.sort();
        v
    }

    fn s(id: TaskId, index: u32, state: TaskState, at: Option<i64>, score: Option<f64>) -> Sampled {
        Sampled {
            id,
            index,
            state,
            finished_at: at,
            score,
        }
    }

    #[test]
    fn every_rule_of_the_selection() {
        let i = ids();
        let won = |w: usize, cancel: &[usize]| Decision::Won {
            winner: i[w],
            cancel: cancel.iter().map(|c| i[*c]).collect(),
        };
        use Select::*;
        let cases: Vec<(Select, Vec<Sampled>, Decision)> = vec![
            // Fewer samples than asked: they are still being spawned.
            (
                Verify,
                vec![s(i[0], 1, Complete, Some(1), None)],
                Decision::Wait,
            ),
            // verify waits for every sample, then the first to pass wins.
            (
                Verify,
                vec![
                    s(i[0], 1, Incomplete, Some(1), None),
                    s(i[1], 2, Complete, Some(5), None),
                    s(i[2], 3, Running, None, None),
                ],
                Decision::Wait,
            ),
            (
                Verify,
                vec![
                    s(i[0], 1, Incomplete, Some(1), None),
                    s(i[1], 2, Complete, Some(5), None),
                    s(i[2], 3, Complete, Some(3), None),
                ],
                won(2, &[]),
            ),
            // The same end time: the lower sample number.
            (
                Verify,
                vec![
                    s(i[0], 1, Complete, Some(3), None),
                    s(i[1], 2, Complete, Some(3), None),
                    s(i[2], 3, Failed, Some(1), None),
                ],
                won(0, &[]),
            ),
            // assess: the highest score among the complete ones.
            (
                Assess,
                vec![
                    s(i[0], 1, Complete, Some(1), Some(0.4)),
                    s(i[1], 2, Incomplete, Some(2), Some(0.99)),
                    s(i[2], 3, Complete, Some(3), Some(0.9)),
                ],
                won(2, &[]),
            ),
            (
                Assess,
                vec![
                    s(i[0], 1, Complete, Some(4), None),
                    s(i[1], 2, Complete, Some(2), None),
                    s(i[2], 3, Cancelled, Some(1), None),
                ],
                won(1, &[]),
            ),
            // first_complete: at once, the rest cancelled.
            (
                FirstComplete,
                vec![
                    s(i[0], 1, Running, None, None),
                    s(i[1], 2, Complete, Some(2), None),
                    s(i[2], 3, Queued, None, None),
                ],
                won(1, &[0, 2]),
            ),
            (
                FirstComplete,
                vec![
                    s(i[0], 1, Incomplete, Some(1), None),
                    s(i[1], 2, Running, None, None),
                    s(i[2], 3, WaitingHuman, None, None),
                ],
                Decision::Wait,
            ),
        ];
        for (n, (select, samples, want)) in cases.into_iter().enumerate() {
            assert_eq!(decide(select, 3, &samples), want, "case {n}");
        }
    }

    #[test]
    fn none_qualifies_once_all_ended_and_says_each_state() {
        let i = ids();
        let samples = vec![
            s(i[0], 1, Incomplete, Some(1), None),
            s(i[1], 2, Failed, Some(2), None),
            s(i[2], 3, Cancelled, Some(3), None),
        ];
        for select in [Select::Verify, Select::Assess, Select::FirstComplete] {
            let Decision::NoneQualified(why) = decide(select, 3, &samples) else {
                panic!("{select}");
            };
            assert!(
                why.contains("sample 1 incomplete, sample 2 failed, sample 3 cancelled"),
                "{why}"
            );
        }
    }
}
