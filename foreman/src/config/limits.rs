//! `limits:`: the ceilings a prompt may not lift.

use saheeli_protocol::front_matter::{Memory, NetworkMode};
use serde::Deserialize;

/// The most any task may ask for. The defaults in `task:` must lie within.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Limits {
    pub memory: Memory,
    pub cpus: f64,
    pub pids: i64,
    /// Largest /workspace.
    pub disk: Memory,
    /// The network modes a task may ask for.
    pub networks: Vec<NetworkMode>,
    /// The hosts a task's `egress:` may name (`*`: any; private and
    /// loopback addresses only when a task names the address itself).
    pub egress: Vec<String>,
    /// How `resources.disk` is enforced: `loop` (an ext4 image per task,
    /// loop-mounted by the foreman: needs root and a local daemon) or `off`
    /// (no size limit: an agent can fill the host's disk).
    pub disk_enforcement: DiskEnforcement,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DiskEnforcement {
    Loop,
    Off,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: Memory(8 << 30),
            cpus: 4.0,
            pids: 4096,
            disk: Memory(20 << 30),
            networks: vec![NetworkMode::None],
            egress: vec!["*".into()],
            disk_enforcement: DiskEnforcement::Loop,
        }
    }
}
