//! Egress through the gateway (issue 50): the container keeps no network;
//! a task may name, per phase, the hosts its processes may reach through an
//! HTTP(S) proxy the servo serves on the container's own loopback. Each
//! connection travels over a unix socket to the foreman, which decides,
//! resolves, connects and counts; the TLS stays end to end.

use serde::{Deserialize, Serialize};

/// The proxy's port on the container's `127.0.0.1` (`HTTP_PROXY`).
pub const PROXY_PORT: u16 = 3128;

/// The agent phase's egress socket, beside the gateway's in
/// [`crate::paths::GATEWAY_DIR`].
pub const AGENT_SOCKET: &str = "egress.sock";

/// The set-up phase's egress socket: served only while set-up runs.
pub const SETUP_SOCKET: &str = "setup-egress.sock";

/// The verify phase's egress socket: served only while verify runs.
pub const VERIFY_SOCKET: &str = "verify-egress.sock";

/// What the servo (or the set-up container's bridge) sets for the
/// processes it starts, so common clients (pip, npm, cargo, curl, git)
/// use the proxy. The container's own loopback is not proxied.
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let no = "localhost,127.0.0.1,::1".to_string();
    vec![
        ("HTTP_PROXY", url.clone()),
        ("HTTPS_PROXY", url.clone()),
        ("http_proxy", url.clone()),
        ("https_proxy", url),
        ("NO_PROXY", no.clone()),
        ("no_proxy", no),
    ]
}

/// `egress:` in front-matter and `task.egress` in config.yaml: the hosts
/// each phase may reach (`pypi.org`, `*.pythonhosted.org`, `host:8443`,
/// an address `10.0.0.5:3128`). A name without a port may use 80 and 443.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Egress {
    /// While `setup:` runs.
    pub setup: Vec<String>,
    /// While the agent works.
    pub agent: Vec<String>,
    /// While `verify:` runs.
    pub verify: Vec<String>,
}

impl Egress {
    /// Whether any phase may reach anything.
    pub fn is_empty(&self) -> bool {
        self.setup.is_empty() && self.agent.is_empty() && self.verify.is_empty()
    }
}

/// What a host no list names meets (`egress_approval:`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    /// Refused at once: the client reads a 403 saying which setting allows it.
    #[default]
    Deny,
    /// The task waits (`waiting_human`) until a person approves or denies
    /// that host for the rest of the task.
    Ask,
}

impl Approval {
    pub const fn as_str(self) -> &'static str {
        match self {
            Approval::Deny => "deny",
            Approval::Ask => "ask",
        }
    }
}

/// The phases egress is ruled by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Setup,
    Agent,
    Verify,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Setup, Phase::Agent, Phase::Verify];

    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Setup => "setup",
            Phase::Agent => "agent",
            Phase::Verify => "verify",
        }
    }

    /// Its socket's file name in the gateway directory.
    pub const fn socket(self) -> &'static str {
        match self {
            Phase::Setup => SETUP_SOCKET,
            Phase::Agent => AGENT_SOCKET,
            Phase::Verify => VERIFY_SOCKET,
        }
    }
}
