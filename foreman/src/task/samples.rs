//! Best-of-N (issue 51): what a task with `samples: K` was queued with,
//! and what each of its samples knows of the task it samples. Plain data.

use saheeli_protocol::TaskId;
use saheeli_protocol::front_matter::Select;
use serde::{Deserialize, Serialize};

/// A task that runs K samples and keeps the one `select` picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Samples {
    /// K, 1 to `MAX_SAMPLES`.
    pub count: u32,
    pub select: Select,
    /// The step of a first run the samples start from (0: step 0).
    #[serde(default)]
    pub fork_at: u64,
}

/// Set on a sample: the task it samples, which one of how many it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SampleOf {
    pub task: TaskId,
    /// 1-based.
    pub index: u32,
    pub count: u32,
}

/// The environment variables a sample's commands see: which sample it is
/// and of how many (a script or a verify can tell the samples apart).
/// Not `SAHEELI_` names: the servo keeps those from the agent's commands.
/// They replace the same keys of the task's own `env:`.
pub(crate) const SAMPLE_ENV: &str = "SAMPLE_INDEX";
pub(crate) const SAMPLES_ENV: &str = "SAMPLE_COUNT";

impl super::TaskSpec {
    /// Makes this spec sample `index` (1-based) of `count` of the task
    /// titled `title`: the title says which, and so do its commands'
    /// `SAMPLE_INDEX` and `SAMPLE_COUNT`. A fork of the first run
    /// (`fork_at`) is renumbered so, or it would say it is sample 1.
    pub(crate) fn number_sample(&mut self, title: &str, index: u32, count: u32) {
        self.title = format!("{title} [sample {index}/{count}]");
        if let Some(of) = self.sample_of.as_mut() {
            of.index = index;
            of.count = count;
        }
        self.env.insert(SAMPLE_ENV.into(), index.to_string());
        self.env.insert(SAMPLES_ENV.into(), count.to_string());
    }

    /// Which sample of task `task` this is (1-based), when it is one: its
    /// `sample_of`, or for a fork of the task's first run (`fork_at`),
    /// one more than its fork number (the first run is sample 1).
    pub(crate) fn sample_index(&self, task: TaskId) -> Option<u32> {
        let of = self.sample_of.filter(|o| o.task == task)?;
        Some(match &self.forked_from {
            Some(f) => f.index + 1,
            None => of.index,
        })
    }
}
