//! config.yaml's shape: every key, its default, and its checks
//! (`task_defaults:` has its own module, `defaults`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use saheeli_protocol::front_matter::{Memory, parse_duration_value};
use serde::Deserialize;

use super::{Concurrency, Limits, PoolClass, REQUEUE_BACKOFF, SmtpConfig, TaskDefaults};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ConfigFile {
    /// The servo image tasks run in.
    pub image: String,
    /// The base image the Dockerfile starts from (passed as build arg `BASE`).
    pub base_image: String,
    /// How many tasks run at once: a number, or `auto`.
    pub concurrency: Concurrency,
    /// The SQLite queue.
    pub database: PathBuf,
    /// Where `results/<task_id>/` directories are collected.
    pub results_dir: PathBuf,
    /// Who else on this host may read the database and the results, as
    /// they are created (existing ones are left as they are).
    pub file_access: FileAccess,
    /// Saheeli's own state: submitted workspaces.
    pub state_dir: PathBuf,
    /// Gateway sockets, one directory per task. Kept short: a unix socket
    /// path may not exceed 107 bytes. Unset: a per-user runtime directory
    /// (`Config::run_dir`).
    pub run_dir: Option<PathBuf>,
    /// How long a stopped servo gets to flush before it is killed.
    #[serde(deserialize_with = "parse_duration_value")]
    pub stop_grace: Duration,
    /// Freeze a servo that waited this long (issue 51); unset: never.
    pub suspend_after: Option<saheeli_protocol::front_matter::Timeout>,
    /// What `suspend_after` does: `freeze` (`checkpoint` is refused at load).
    pub suspend: super::Suspend,
    /// A foreman renews its hold on running tasks every fifth of this; when
    /// it dies, another foreman takes them over once this has passed.
    #[serde(deserialize_with = "parse_duration_value")]
    pub lease: Duration,
    /// How a finished workspace is brought home: `auto` copies the task's
    /// volume straight from its directory when the daemon is on this host
    /// and the directory is readable (fast: no mount), else through the
    /// Docker archive API; `archive` always uses the API.
    pub collection: Collection,
    /// Collection stops at this many bytes of files (the task then ends
    /// `incomplete` with reason `results_too_large`, partial results kept).
    pub max_results_size: Memory,
    /// A submitted `workspace:` larger than this (in files) is refused.
    pub max_workspace_size: Memory,
    /// Author and committer of a delivered branch's commit (issue 52),
    /// `Name <email>`.
    pub deliver_author: String,
    /// How long a task waits in the queue after an infrastructure
    /// failure (its launch failed, its servo was lost before it ran):
    /// the same backoff as `task.retry_backoff`, with its own numbers.
    pub requeue_backoff: saheeli_protocol::attempt::Backoff,
    /// Per-task defaults; a prompt's front-matter overrides each.
    pub task: TaskDefaults,
    /// Ceilings a prompt cannot lift: it may only ask for less.
    pub limits: Limits,
    pub llm: LlmConfig,
    /// LLM servers by name, added to (or replacing) the built-in `openai`
    /// and `anthropic`. A model `NAME/model` goes to provider NAME.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// USD per million tokens, by model name (as sent upstream).
    pub prices: BTreeMap<String, Price>,
    /// Context windows in tokens by model (as written or as sent upstream;
    /// `prefix*` matches the start), over the built-in `config::windows`.
    pub windows: BTreeMap<String, u64>,
    /// Webhooks for every task's events (a prompt's `notify` adds more).
    pub notify: Vec<saheeli_protocol::front_matter::Notify>,
    /// The relay `email:` channels are sent through.
    pub smtp: Option<SmtpConfig>,
    /// A delivery still failing after this long is given up (marked dead).
    #[serde(deserialize_with = "parse_duration_value")]
    pub notify_max_age: Duration,
    /// MCP servers run on the foreman's side, by name; a task asks for
    /// them with `capabilities: [name]` and sees their tools as `name__tool`.
    pub capabilities: BTreeMap<String, CapabilityConfig>,
    /// The capabilities tasks may ask for (unset: every one configured).
    pub allow: Option<Vec<String>>,
    /// The dashboard and HTTP API of `saheeli serve` (off by default).
    pub http: HttpConfig,
    /// Where tasks run: `docker` (this host's engine) or `swarm`.
    pub backend: BackendKind,
    /// The Docker Swarm to run tasks on (`backend: swarm`).
    pub swarm: Option<SwarmConfig>,
    // --- issue 25: third-party agents -------------------------------------
    /// The image each named agent runs in (`saheeli build-servo --agent
    /// NAME` builds it); unset: `saheeli-servo-NAME:<version>`.
    pub agents: BTreeMap<saheeli_protocol::AgentName, String>,
    /// Classes of warm servos (issue 28; `config::pool`): none, no pool.
    pub pool: Vec<PoolClass>,
    /// Tasks' own images (issue 49).
    pub images: ImagesConfig,
    /// The cache of set-ups' results (issue 50).
    pub setup_cache: super::SetupCacheConfig,
    /// Named kinds of worker (issue 52; `config::caps`): a task's
    /// `agent_type:` takes their values as its defaults.
    pub agent_types: BTreeMap<String, super::AgentType>,
    /// Caps per agent type, model or provider key, beside `concurrency`.
    pub pools: Vec<super::PoolCap>,
    /// Definitions read from a Git repository (issue 52; `config::definitions`).
    pub definitions: Option<super::DefinitionsConfig>,
}

/// `images:`: what a task's `environment:` Dockerfile may start from.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ImagesConfig {
    /// A `FROM` image Docker does not have here, mapped to one it has
    /// (`python:3.13-slim: my-python:3.13`): there is no registry.
    pub map: BTreeMap<String, String>,
}

/// `file_access:`: the modes the database (`saheeli.db`, and SQLite's
/// `-wal` and `-shm` beside it) and the results directories are created
/// with. They hold prompts, questions, answers and the agent's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FileAccess {
    /// This user only: 0600 files, 0700 directories.
    #[default]
    Owner,
    /// This user's group may read: 0640, 0750.
    Group,
    /// Every local user may read: 0644, 0755.
    All,
}

impl FileAccess {
    pub fn file_mode(self) -> u32 {
        match self {
            FileAccess::Owner => 0o600,
            FileAccess::Group => 0o640,
            FileAccess::All => 0o644,
        }
    }

    pub fn dir_mode(self) -> u32 {
        match self {
            FileAccess::Owner => 0o700,
            FileAccess::Group => 0o750,
            FileAccess::All => 0o755,
        }
    }
}

/// `backend:`: which engine runs the servos.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BackendKind {
    /// The local Docker engine (`DOCKER_HOST`), a container per task.
    #[default]
    Docker,
    /// A Docker Swarm, a `replicated-job` service per task.
    Swarm,
}

/// `swarm:`: the swarm's manager, registry, overlay and the address the
/// servos reach their gateway on.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SwarmConfig {
    /// The manager's API, DOCKER_HOST-style (`tcp://10.0.0.11:2375`,
    /// `unix:///var/run/docker.sock`).
    pub manager: String,
    /// `host:port` of the registry the nodes pull the servo image from.
    pub registry: String,
    /// The attachable overlay network the servos join, or `none`: no
    /// network at all, the gateway reached through a relay on each node
    /// (`backend::swarm::relay`; the nodes' engines must have no default
    /// bridge).
    pub network: String,
    /// `addr:port` the gateway listens on, reachable from every node.
    pub gateway_listen: String,
    /// TLS for the manager's and every node's engine API (`tcp://` with
    /// `--tlsverify`): the CA that signed the engines' certificates, and
    /// the foreman's client certificate and key (PEM files, relative to
    /// the config file).
    #[serde(default)]
    pub tls: Option<SwarmTls>,
}

/// `swarm.tls`: the PEM files the foreman reaches the engines with.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SwarmTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// One MCP server: a local command over stdio, or a streamable-HTTP URL.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CapabilityConfig {
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Names of host environment variables passed to the server (values
    /// never written in a file).
    #[serde(default)]
    pub env: Vec<String>,
    pub url: Option<String>,
    /// Request headers for `url`; `${VAR}` is replaced from the environment.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// `http:`: where `saheeli serve` serves the dashboard and the API.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct HttpConfig {
    /// `IP:PORT` to listen on (`serve --http` overrides); none: no server.
    pub addr: Option<String>,
    /// The environment variable (or `.env` entry) holding the access
    /// token. Required for any address but loopback; when set, every
    /// request needs it. Never put the token itself in config.yaml.
    pub token_env: String,
    /// A request's head must arrive within this, and an idle keep-alive
    /// connection is closed after it (slow clients cannot hold sockets).
    #[serde(deserialize_with = "parse_duration_value")]
    pub header_timeout: Duration,
    /// Connections open at once (live event streams included); one more
    /// is closed at once.
    pub max_connections: usize,
    /// Connections one client address may hold open at once (an IPv6
    /// address's /64 counts as one); one more is closed at once, before
    /// the global cap is touched.
    pub max_connections_per_client: usize,
    /// Named tokens (issue 52): a name to the variable holding its token.
    pub api_tokens: BTreeMap<String, String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            addr: None,
            token_env: "SAHEELI_HTTP_TOKEN".into(),
            header_timeout: Duration::from_secs(10),
            max_connections: 256,
            max_connections_per_client: 64,
            api_tokens: BTreeMap::new(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Collection {
    Auto,
    Archive,
}

/// Which wire format a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ProviderKind {
    /// OpenAI chat completions (OpenAI, vLLM, Ollama, LiteLLM, OpenRouter, …).
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderConfig {
    pub kind: ProviderKind,
    /// OpenAI-style URLs end in `/v1`; Anthropic's do not.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The environment variable (or `.env` entry) holding the key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Output cap per call for this provider's models, instead of
    /// `llm.max_output_tokens`.
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    // --- long tasks (issue 26) ---
    /// The window of this provider's models in tokens, unless `windows:`
    /// names the model (a local server's own, e.g. llama-server `-c`).
    #[serde(default)]
    pub context_window: Option<u64>,
    // --- end long tasks ---
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    // --- long tasks (issue 26) ---
    /// Input read from the provider's prompt cache; unset: the provider's
    /// published ratio (`llm::pricing`).
    #[serde(default)]
    pub cache_read_per_mtok: Option<f64>,
    /// Input written to the prompt cache; unset: the provider's ratio.
    #[serde(default)]
    pub cache_write_per_mtok: Option<f64>,
    // --- end long tasks ---
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct LlmConfig {
    /// Limit on one upstream request.
    #[serde(deserialize_with = "parse_duration_value")]
    pub request_timeout: Duration,
    /// Attempts per call for 429, 5xx, resets and timeouts (the first included).
    pub max_attempts: u32,
    /// Give up retrying a call after this long.
    #[serde(deserialize_with = "parse_duration_value")]
    pub max_retry_time: Duration,
    /// `max_tokens` sent to Anthropic, which requires one.
    pub anthropic_max_tokens: u64,
    /// Output cap sent with every call (a provider's `max_output_tokens`
    /// overrides it), lowered to what the budget leaves.
    pub max_output_tokens: u64,
    /// Ask providers to stream the built-in loop's answers, so the model's
    /// text is shown as it comes (issue 29; the default); false: whole
    /// answers, for a server that cannot stream.
    pub stream: bool,
}

impl Default for ConfigFile {
    fn default() -> Self {
        ConfigFile {
            image: "saheeli-servo:latest".into(),
            base_image: "saheeli-base:bookworm".into(),
            concurrency: Concurrency::default(),
            database: "saheeli.db".into(),
            results_dir: "results".into(),
            file_access: FileAccess::Owner,
            state_dir: ".saheeli".into(),
            run_dir: None,
            stop_grace: Duration::from_secs(10),
            suspend_after: None,
            suspend: super::Suspend::Freeze,
            lease: Duration::from_secs(10),
            max_results_size: Memory(10 << 30),
            max_workspace_size: Memory(1 << 30),
            deliver_author: "Saheeli <saheeli@localhost>".into(),
            requeue_backoff: REQUEUE_BACKOFF,
            collection: Collection::Auto,
            task: TaskDefaults::default(),
            limits: Limits::default(),
            llm: LlmConfig::default(),
            providers: BTreeMap::new(),
            prices: BTreeMap::new(),
            windows: BTreeMap::new(),
            notify: Vec::new(),
            smtp: None,
            notify_max_age: Duration::from_secs(24 * 3600),
            capabilities: BTreeMap::new(),
            allow: None,
            http: HttpConfig::default(),
            backend: BackendKind::Docker,
            swarm: None,
            agents: BTreeMap::new(),
            pool: Vec::new(),
            images: ImagesConfig::default(),
            setup_cache: super::SetupCacheConfig::default(),
            agent_types: BTreeMap::new(),
            pools: Vec::new(),
            definitions: None,
        }
    }
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            request_timeout: Duration::from_secs(300),
            max_attempts: 6,
            max_retry_time: Duration::from_secs(300),
            anthropic_max_tokens: 8192,
            max_output_tokens: 4096,
            stream: true,
        }
    }
}

impl ConfigFile {
    /// With `backend: swarm`, why the nodes could not pull `image`: it must
    /// name an image in `swarm.registry` (the reference `build-servo
    /// --push` prints). None when it does, or on the local engine.
    pub fn swarm_image_problem(&self) -> Option<String> {
        let registry = self.outside_swarm_registry(&self.image)?;
        Some(format!(
            "`image: {}` is not in the swarm's registry `{registry}`, so the nodes cannot \
             pull it; run `saheeli build-servo --push` and set `image:` in config.yaml to \
             the reference it prints",
            self.image
        ))
    }

    /// With `backend: swarm`, the registry `image` is not in (so the
    /// nodes could not pull it); None when it is, or on the local engine.
    pub fn outside_swarm_registry(&self, image: &str) -> Option<&str> {
        let swarm = self
            .swarm
            .as_ref()
            .filter(|_| self.backend == BackendKind::Swarm)?;
        let registry = swarm.registry.trim_end_matches('/');
        let in_registry = image
            .strip_prefix(registry)
            .is_some_and(|rest| rest.starts_with('/') && rest.len() > 1);
        (!in_registry).then_some(registry)
    }

    /// The `task:` defaults must lie within `limits:`, and `suspend:`
    /// must be a mode this build can do.
    pub(super) fn check_limits(&self) -> Result<(), String> {
        if let Some(why) = self.suspend.problem() {
            return Err(why.into());
        }
        let (t, l) = (&self.task, &self.limits);
        let over = |key: &str, v: String, max: String| {
            Err(format!(
                "`task.{key}` {v} is above `limits.{key}` {max}; lower the default or raise the ceiling"
            ))
        };
        if t.memory.0 > l.memory.0 {
            return over("memory", t.memory.to_string(), l.memory.to_string());
        }
        if t.cpus > l.cpus {
            return over("cpus", t.cpus.to_string(), l.cpus.to_string());
        }
        if t.pids > l.pids {
            return over("pids", t.pids.to_string(), l.pids.to_string());
        }
        if t.disk.0 > l.disk.0 {
            return over("disk", t.disk.to_string(), l.disk.to_string());
        }
        if !(l.cpus > 0.0 && l.cpus.is_finite()) || l.pids < 16 {
            return Err("`limits.cpus` must be above 0 and `limits.pids` at least 16".into());
        }
        if !l.networks.contains(&t.network) {
            return Err(format!(
                "`task.network` {} is not in `limits.networks`; add it there or change the default",
                t.network.as_str()
            ));
        }
        // The defaults' egress must be what a task could list itself.
        crate::task::egress::plan(
            std::path::Path::new("config.yaml `task`"),
            &t.egress,
            t.egress_approval,
            &l.egress,
        )
        .map_err(|e| format!("{e:#}"))?;
        Ok(())
    }
}
