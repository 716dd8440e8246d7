//! The task's `env:` when it came with a warm servo's launch (`warm`):
//! given to the agent's processes (the tool runner, a third-party agent)
//! and never set in the servo's own environment. A cold servo's task env
//! is its container's environment, and this stays empty.

use std::collections::BTreeMap;
use std::sync::OnceLock;

static TASK_ENV: OnceLock<BTreeMap<String, String>> = OnceLock::new();

/// The egress proxy's variables (issue 50), once its bridge listens.
static PROXY_ENV: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// Gives the agent's processes the egress proxy (`HTTP_PROXY`, …).
pub(crate) fn set_proxy() {
    let env = saheeli_protocol::egress::proxy_env()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let _ = PROXY_ENV.set(env);
}

/// Keeps the claimed task's env (once; the servo serves one task). Keys
/// of the servo's own (`SAHEELI_…`) are never passed on.
pub(crate) fn set(env: BTreeMap<String, String>) {
    let env = env
        .into_iter()
        .filter(|(k, _)| !k.starts_with("SAHEELI_") && !k.is_empty() && !k.contains('='))
        .collect();
    let _ = TASK_ENV.set(env);
}

/// The task's env for the agent's processes (empty for a cold servo),
/// then the egress proxy's when it serves.
pub(crate) fn vars() -> impl Iterator<Item = (&'static String, &'static String)> {
    TASK_ENV
        .get()
        .into_iter()
        .flatten()
        .chain(PROXY_ENV.get().into_iter().flatten().map(|(k, v)| (k, v)))
}
