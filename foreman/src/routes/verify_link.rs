//! What the verify route (`verify`) and the assessor (`assess`) take
//! from a task's spec: its container, its commands and files, its limits.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use saheeli_protocol::TaskId;

use crate::backend::TaskEngine;
use crate::backend::docker;
use crate::inputs;

/// What the verify route needs to check a task's work.
pub(crate) struct VerifyLink {
    /// Where the task's container is found at verify time.
    pub engine: TaskEngine,
    /// The submitted workspace (`verify_files` come from it).
    pub submitted: PathBuf,
    /// Where the assessor's copy of the workspace is made.
    pub scratch: PathBuf,
    pub commands: Vec<String>,
    pub files: Vec<PathBuf>,
    /// The most the workspace's files may hold when it is read to be
    /// compared with the submitted one (its size).
    pub max_workspace: u64,
    pub timeout: Duration,
    pub max_attempts: u32,
    pub assess: bool,
    /// What the assessor judges against.
    pub objective: String,
    /// One attempt at a time (the servo and the agent's shell may both ask).
    pub one_at_a_time: tokio::sync::Mutex<()>,
    /// What the verify container takes from the task.
    pub sandbox: docker::Sandbox,
    /// The hidden tests (issue 49), staged for each attempt under
    /// `state_dir`, and the reward the commands leave.
    pub hidden: Vec<PathBuf>,
    pub reward: Option<String>,
    pub pass_reward: f64,
    pub state_dir: PathBuf,
    /// The task has an egress proxy (issue 50): each attempt's verify
    /// container is given its ledger at `/logs/verifier/egress.json`.
    pub egress: bool,
    /// The verify container made ahead of the next attempt.
    pub spares: super::verify_spare::Spares,
}

impl VerifyLink {
    /// Whether a reward grades the attempt (hidden tests or a reward
    /// file named), not the exit codes alone.
    pub fn grades(&self) -> bool {
        !self.hidden.is_empty() || self.reward.is_some()
    }

    /// Where check `attempt` sees the workspace through a throwaway
    /// copy-on-write view (`docker::OnCopy`), None for the workspace itself:
    /// a copy when the task has hidden tests and the agent gets its
    /// workspace back after the check (a verify attempt with another left;
    /// a checked step, numbered past the verify attempts), so that nothing
    /// the check's code writes, the tests copied into /workspace say, ever
    /// reaches it. The last attempt checks the workspace itself.
    pub fn on_copy(&self, attempt: u32) -> Option<docker::OnCopy<'_>> {
        (!self.hidden.is_empty() && attempt != self.max_attempts).then_some(docker::OnCopy {
            state_dir: &self.state_dir,
            bytes: self.max_workspace,
        })
    }
}

impl VerifyLink {
    /// The link of a task whose spec verifies or has checked steps (None
    /// otherwise).
    pub fn of(
        spec: &crate::spec::TaskSpec,
        id: TaskId,
        engine: TaskEngine,
        state_dir: &std::path::Path,
    ) -> Option<Arc<VerifyLink>> {
        let checked = spec
            .steps
            .iter()
            .any(|s| s.done_when.as_ref().is_some_and(|w| w.command().is_some()));
        if !spec.verifies() && !checked {
            return None;
        }
        let objective = spec
            .objective
            .clone()
            .unwrap_or_else(|| format!("{}\n\n{}", spec.title, spec.body.trim_end()));
        let network = match &engine {
            TaskEngine::Local(_) | TaskEngine::Container(..) => {
                docker::VerifyNetwork::Declared(spec.network)
            }
            TaskEngine::Swarm { .. } => docker::VerifyNetwork::OfTask,
        };
        let sandbox = docker::Sandbox::of(spec, network);
        Some(Arc::new(VerifyLink {
            engine,
            sandbox,
            submitted: inputs::workspace_tar(state_dir, id),
            scratch: state_dir.join("assess"),
            commands: spec.verify.clone(),
            files: spec.verify_files.clone(),
            max_workspace: spec.disk.unwrap_or(64 << 30),
            timeout: Duration::from_secs(spec.verify_timeout_s.max(1)),
            max_attempts: spec.max_verify_attempts(),
            assess: spec.assess,
            objective,
            one_at_a_time: tokio::sync::Mutex::new(()),
            hidden: spec.verify_hidden.clone(),
            reward: spec.verify_reward.clone(),
            pass_reward: spec.pass_reward,
            state_dir: state_dir.to_path_buf(),
            egress: spec.egress.any(),
            spares: Default::default(),
        }))
    }
}
