//! What a task needs of the engine that runs it (issue 53): each engine
//! declares the capabilities it has (`backend::capabilities`), each task
//! names the ones its settings ask for ([`TaskSpec::needs`]), and a task
//! needing one its engine lacks is refused at submit and at serve, never
//! launched to fail. Not to be confused with MCP `capabilities:` (tools a
//! task is granted, `crate::capability`): these are the engine's.

use super::TaskSpec;

/// Something an engine can do for a task, or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Capability {
    ThirdPartyAgents,
    TaskImages,
    HiddenTests,
    Verify,
    RootAgent,
    SetUp,
    Egress,
    ChildTasks,
    DiskQuota,
    Parking,
    LiveLogs,
    WarmPool,
    Gpus,
    Snapshots,
    Suspension,
}

impl Capability {
    /// Every capability, in the order the table shows them.
    pub const ALL: [Capability; 15] = [
        Capability::ThirdPartyAgents,
        Capability::TaskImages,
        Capability::HiddenTests,
        Capability::Verify,
        Capability::RootAgent,
        Capability::SetUp,
        Capability::Egress,
        Capability::ChildTasks,
        Capability::DiskQuota,
        Capability::Parking,
        Capability::LiveLogs,
        Capability::WarmPool,
        Capability::Gpus,
        Capability::Snapshots,
        Capability::Suspension,
    ];

    /// The name messages, `saheeli doctor` and the docs use.
    pub fn name(self) -> &'static str {
        match self {
            Capability::ThirdPartyAgents => "third_party_agents",
            Capability::TaskImages => "task_images",
            Capability::HiddenTests => "hidden_tests",
            Capability::Verify => "verify",
            Capability::RootAgent => "root_agent",
            Capability::SetUp => "setup",
            Capability::Egress => "egress",
            Capability::ChildTasks => "child_tasks",
            Capability::DiskQuota => "disk_quota",
            Capability::Parking => "parking",
            Capability::LiveLogs => "live_logs",
            Capability::WarmPool => "warm_pool",
            Capability::Gpus => "gpus",
            Capability::Snapshots => "snapshots",
            Capability::Suspension => "suspension",
        }
    }

    /// What it is, and the setting that asks for it.
    pub fn what(self) -> &'static str {
        match self {
            Capability::ThirdPartyAgents => {
                "a third-party agent CLI runs in the servo (`agent: claude-code`, `codex`, …)"
            }
            Capability::TaskImages => {
                "the task's own image or a Dockerfile directory (`image:`, `environment:`)"
            }
            Capability::HiddenTests => {
                "tests the agent never sees, copied into the verify container (`verify: { files }`)"
            }
            Capability::Verify => {
                "`verify:` commands run in a fresh container on the task's workspace"
            }
            Capability::RootAgent => "the agent's processes run as uid 0 (`agent_user: root`)",
            Capability::SetUp => {
                "commands run before the agent, cached as an image (`setup:`, `maintenance:`, `setup_env:`)"
            }
            Capability::Egress => {
                "named hosts reached through the gateway's proxy (`egress:`, `egress_approval: ask`)"
            }
            Capability::ChildTasks => "the task spawns and waits for child tasks (`delegate:`)",
            Capability::DiskQuota => {
                "/workspace is a size-limited filesystem: writes past it fail with ENOSPC (`resources.disk`)"
            }
            Capability::Parking => {
                "a task waiting on a human gives up its container and resumes in a new one (`park_after`)"
            }
            Capability::LiveLogs => {
                "the servo's audit lines followed live (`task logs -f`, `task attach`)"
            }
            Capability::WarmPool => "idle servos started ahead of tasks (config `pool:`)",
            Capability::Gpus => "GPUs given to a task's container",
            Capability::Snapshots => "a task's state kept at each step, to fork from (issue 51)",
            Capability::Suspension => {
                "a waiting servo frozen (cgroup freezer: no CPU, no slot; its memory kept) after `suspend_after` (issue 51)"
            }
        }
    }
}

/// A capability a task needs, with the setting that asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Need {
    pub capability: Capability,
    /// The key to drop or change, as the prompt writes it.
    pub setting: String,
}

impl TaskSpec {
    /// The engine capabilities this task's settings ask for, each once.
    pub(crate) fn needs(&self) -> Vec<Need> {
        let mut needs = Vec::new();
        let mut need = |capability, setting: String| {
            needs.push(Need {
                capability,
                setting,
            })
        };
        if self.agent.api().is_some() {
            need(
                Capability::ThirdPartyAgents,
                format!("agent: {}", self.agent.label()),
            );
        }
        match &self.image {
            Some(super::TaskImage::Named(_)) => need(Capability::TaskImages, "image".into()),
            Some(super::TaskImage::Dockerfile(_)) => {
                need(Capability::TaskImages, "environment".into())
            }
            None => {}
        }
        if !self.verify_hidden.is_empty() {
            need(Capability::HiddenTests, "verify: { files }".into());
        }
        if !self.verify.is_empty() {
            need(Capability::Verify, "verify".into());
        }
        if self.root_agent() {
            need(Capability::RootAgent, "agent_user: root".into());
        }
        if !self.setup.is_empty() || !self.setup_plan.is_empty() {
            need(Capability::SetUp, "setup".into());
        }
        if self.egress.any() {
            need(Capability::Egress, "egress".into());
        }
        if self.delegate.is_some() {
            need(Capability::ChildTasks, "delegate".into());
        }
        if self.disk_asked {
            need(Capability::DiskQuota, "resources.disk".into());
        }
        if self.snapshots != saheeli_protocol::front_matter::Snapshots::Off {
            need(
                Capability::Snapshots,
                format!("snapshots: {}", self.snapshots.as_str()),
            );
        }
        // The first run of `fork_at: N` keeps its steps for the forks.
        if let Some(s) = self.samples.as_ref().filter(|s| s.fork_at > 0) {
            need(Capability::Snapshots, format!("fork_at: {}", s.fork_at));
        }
        needs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_snake_case() {
        let mut names: Vec<_> = Capability::ALL.iter().map(|c| c.name()).collect();
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        );
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Capability::ALL.len());
    }
}
