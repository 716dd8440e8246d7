//! `config.yaml`: every default Saheeli uses, overridable per task by a
//! prompt's front-matter.
//!
//! The file is optional. Relative paths in it are relative to the file's own
//! directory, so `saheeli` behaves the same from any working directory.
//! `providers`: which server a model's calls go to, with which key (built
//! from the config, read by the gateway, specs, metrics and commands).

mod caps;
mod concurrency;
mod defaults;
mod definitions;
mod dotenv;
mod file;
mod limits;
mod load;
mod pool;
pub(crate) mod providers;
mod setup_cache;
mod smtp;
mod suspend;
#[cfg(test)]
mod tests;
pub(crate) mod windows;

pub(crate) use caps::{
    AgentType, PoolCap, Selector, check as check_caps, known as known_agent_types,
};
pub(crate) use concurrency::{AUTO_CEILING, Concurrency};
pub(crate) use defaults::{GateDefault, REQUEUE_BACKOFF, RETRYABLE, TaskDefaults};
pub(crate) use definitions::DefinitionsConfig;
#[cfg(test)]
pub(crate) use file::HttpConfig;
pub(crate) use file::{
    BackendKind, CapabilityConfig, Collection, ConfigFile, FileAccess, LlmConfig, Price,
    ProviderConfig, ProviderKind, SwarmConfig,
};
pub(crate) use limits::{DiskEnforcement, Limits};
pub(crate) use load::{Config, SetKeys};
pub(crate) use pool::{PoolClass, SetupNeeds, WarmClass, WarmNeeds, class_for};
pub(crate) use providers::{Providers, header_vars};
pub(crate) use setup_cache::SetupCacheConfig;
pub(crate) use smtp::{SmtpConfig, SmtpTls};
pub(crate) use suspend::Suspend;
