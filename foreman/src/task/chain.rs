//! A chain of attempts (issue 30): a retry by policy carries what it goes
//! on from and what the attempts before it used, and its budgets are what
//! the chain has left (unless `budget_per_attempt`).

use saheeli_protocol::TaskId;
use saheeli_protocol::attempt::{Resume, RetryFrom};
use serde::{Deserialize, Serialize};

use super::TaskSpec;

/// What a retry by policy goes on from (in its spec: fixed when it is
/// queued, in the same transaction as the attempt that ended).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Chain {
    /// The attempt before this one.
    pub from: TaskId,
    /// Where this attempt starts.
    pub mode: RetryFrom,
    /// What the model is told (empty for `scratch`).
    #[serde(default)]
    pub note: String,
    /// What every attempt before this one used.
    pub used: Used,
}

/// Steps, tokens and cost used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Used {
    pub steps: u64,
    pub tokens: u64,
    pub cost: f64,
}

impl Used {
    pub fn plus(self, other: Used) -> Used {
        Used {
            steps: self.steps + other.steps,
            tokens: self.tokens + other.tokens,
            cost: self.cost + other.cost,
        }
    }
}

/// The budgets one attempt may spend.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Left {
    pub steps: u64,
    pub tokens: Option<u64>,
    pub cost: Option<f64>,
}

impl Left {
    /// Which budget nothing is left of, as a phrase; None: every one has some.
    pub fn spent(&self) -> Option<&'static str> {
        if self.steps == 0 {
            Some("max_steps")
        } else if self.tokens == Some(0) {
            Some("max_tokens")
        } else if self.cost.is_some_and(|c| c <= 0.0) {
            Some("max_cost")
        } else {
            None
        }
    }

    /// `12 of 20 steps, 3000 tokens, $0.0400` for the model and people.
    pub fn describe(&self, max_steps: u32) -> String {
        let mut s = format!("{} of {max_steps} steps", self.steps);
        if let Some(t) = self.tokens {
            s.push_str(&format!(", {t} tokens"));
        }
        if let Some(c) = self.cost {
            s.push_str(&format!(", ${c:.4}"));
        }
        s
    }
}

impl TaskSpec {
    /// What the chain's earlier attempts used, as this attempt's budgets
    /// count it: nothing with `budget_per_attempt`.
    pub fn used_before(&self) -> Used {
        match &self.chain {
            Some(c) if !self.budget_per_attempt => c.used,
            _ => Used::default(),
        }
    }

    /// The budgets left for an attempt after `used`.
    pub fn left_after(&self, used: Used) -> Left {
        Left {
            steps: u64::from(self.max_steps).saturating_sub(used.steps),
            tokens: self.max_tokens.map(|m| m.saturating_sub(used.tokens)),
            cost: self.max_cost.map(|m| (m - used.cost).max(0.0)),
        }
    }

    /// This attempt's budgets.
    pub fn left(&self) -> Left {
        self.left_after(self.used_before())
    }

    /// What the servo of this attempt is told about the one before it.
    pub fn resume(&self) -> Option<Resume> {
        let c = self.chain.as_ref()?;
        (c.mode != RetryFrom::Scratch).then(|| Resume {
            from: c.from,
            mode: c.mode,
            note: c.note.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(per_attempt: bool) -> TaskSpec {
        let mut s = crate::store::tests::spec("t");
        s.max_steps = 10;
        s.max_tokens = Some(1000);
        s.budget_per_attempt = per_attempt;
        s.chain = Some(Chain {
            from: TaskId::new(),
            mode: RetryFrom::Session,
            note: "n".into(),
            used: Used {
                steps: 4,
                tokens: 1200,
                cost: 0.0,
            },
        });
        s
    }

    #[test]
    fn budgets_span_the_chain_unless_per_attempt() {
        let s = spec(false);
        let left = s.left();
        assert_eq!(left.steps, 6);
        assert_eq!(left.tokens, Some(0), "never below zero");
        assert_eq!(left.cost, None);
        assert_eq!(left.spent(), Some("max_tokens"));
        assert_eq!(s.budget().max_tokens, Some(0));
        let s = spec(true);
        assert_eq!(s.left().steps, 10);
        assert_eq!(s.left().tokens, Some(1000));
        assert_eq!(s.left().spent(), None);
    }

    #[test]
    fn only_session_and_workspace_resume() {
        let mut s = spec(false);
        assert_eq!(s.resume().unwrap().mode, RetryFrom::Session);
        s.chain.as_mut().unwrap().mode = RetryFrom::Scratch;
        assert!(s.resume().is_none());
        s.chain = None;
        assert!(s.resume().is_none());
    }
}
