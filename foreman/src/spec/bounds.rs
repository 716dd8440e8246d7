//! A task's run within its bounds: steps, time, retries, environment,
//! the context window and `max_cost`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::bail;

use crate::config::Config;

use super::{MAX_RETRIES, MAX_STEPS, MAX_TIMEOUT};

/// Steps, time, retries and environment within their bounds.
pub(super) fn check_run(
    path: &Path,
    max_steps: u32,
    timeout: std::time::Duration,
    retries: u32,
    retry_on: &[String],
    env: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    if !(1..=MAX_STEPS).contains(&max_steps) {
        bail!(
            "{}: `max_steps` {max_steps} is out of range; use 1 to {MAX_STEPS}",
            path.display()
        );
    }
    if timeout > MAX_TIMEOUT {
        bail!(
            "{}: `timeout` {} is longer than the most allowed, {}",
            path.display(),
            humantime::format_duration(timeout),
            humantime::format_duration(MAX_TIMEOUT)
        );
    }
    for key in env.keys() {
        if key.is_empty() || key.contains('=') || key.starts_with("SAHEELI_") {
            bail!(
                "{}: `env` key `{key}` is not allowed (empty, contains `=`, or reserved SAHEELI_ prefix)",
                path.display()
            );
        }
    }
    if retries > MAX_RETRIES {
        bail!(
            "{}: `retries` {retries} is out of range; use 0 to {MAX_RETRIES}",
            path.display()
        );
    }
    if let Some(bad) = retry_on
        .iter()
        .find(|r| !crate::config::RETRYABLE.contains(&r.as_str()))
    {
        bail!(
            "{}: `retry_on` reason `{bad}` is not retryable; use any of {}",
            path.display(),
            crate::config::RETRYABLE.join(", ")
        );
    }
    Ok(())
}

/// `context:` resolved: the front-matter's keys over config.yaml's, the
/// window from `windows:`, the provider or the known-model table, checked.
pub(super) fn context_plan(
    cfg: &Config,
    path: &Path,
    model: &str,
    fm: Option<saheeli_protocol::context::ContextSettings>,
) -> anyhow::Result<saheeli_protocol::context::ContextPlan> {
    let mut s = fm.unwrap_or_default().or(cfg.file.task.context);
    if s.window.is_none() {
        let route = crate::config::Providers::from_config(cfg).route(model);
        s.window = crate::config::windows::window(
            &cfg.file.windows,
            route.provider.context_window,
            None,
            model,
            &route.model,
        );
    }
    let plan = saheeli_protocol::context::ContextPlan::from_settings(s);
    if !(plan.threshold > 0.0 && plan.threshold <= 1.0) {
        bail!(
            "{}: `context.threshold` must be a fraction of the window above 0 and at most 1 (e.g. 0.85)",
            path.display()
        );
    }
    if plan.window.is_some_and(|w| w < 1024) {
        bail!(
            "{}: `context.window` must be at least 1024 tokens",
            path.display()
        );
    }
    Ok(plan)
}

/// `max_cost` is a positive amount, and the model has a price to count it.
pub(super) fn check_max_cost(
    cfg: &Config,
    path: &Path,
    model: &str,
    replay: bool,
    max_cost: f64,
) -> anyhow::Result<()> {
    if !(max_cost > 0.0 && max_cost.is_finite()) {
        bail!(
            "{}: `max_cost` must be a positive number of USD",
            path.display()
        );
    }
    if !replay
        && crate::config::Providers::from_config(cfg)
            .route(model)
            .price
            .is_none()
    {
        bail!(
            "{}: `max_cost` needs a price for model `{model}`: add it under `prices:` in config.yaml",
            path.display()
        );
    }
    Ok(())
}
