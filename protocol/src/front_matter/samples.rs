//! Best-of-N (issue 51): `samples: K` runs K independent attempts of the
//! task (each an ordinary task linked under it), `select:` picks the one
//! whose results become the task's, and `fork_at: N` starts them from
//! step N of a first run instead of step 0.

use serde::{Deserialize, Serialize};

/// The most samples one task may run.
pub const MAX_SAMPLES: u32 = 16;

/// How the winner among a task's samples is picked (`select:`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Select {
    /// The first sample to end `complete` with its `verify:` passed; the
    /// others run to their end.
    #[default]
    Verify,
    /// The `complete` sample the assessor scored highest (`assess: true`);
    /// the others run to their end.
    Assess,
    /// The first sample to end `complete`; the others are cancelled then.
    FirstComplete,
}

impl Select {
    pub fn as_str(self) -> &'static str {
        match self {
            Select::Verify => "verify",
            Select::Assess => "assess",
            Select::FirstComplete => "first_complete",
        }
    }
}

impl std::fmt::Display for Select {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_names_round_trip() {
        for s in [Select::Verify, Select::Assess, Select::FirstComplete] {
            let yaml = serde_yaml::to_string(&s).unwrap();
            assert_eq!(yaml.trim(), s.as_str());
            assert_eq!(serde_yaml::from_str::<Select>(s.as_str()).unwrap(), s);
        }
        assert!(serde_yaml::from_str::<Select>("best").is_err());
    }
}
