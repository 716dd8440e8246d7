//! `TaskSpec`: a prompt file, its front-matter, config.yaml and `--param`
//! merged and checked into what is queued.

use std::path::Path;

use anyhow::{Context, bail};
use saheeli_protocol::front_matter::{
    Deadline, FrontMatter, Memory, NetworkMode, PauseOn, Resources,
};
use saheeli_protocol::{ServoTask, TaskId};

use crate::config::Config;

use super::bounds::{check_max_cost, check_run, context_plan};
use super::prompt::{SpecError, read_text, template};
use super::{
    Budget, MAX_TITLE, ParamValue, TaskSpec, Verification, agent, check_capabilities,
    check_ceilings, check_delegate, check_gates, check_human, check_model, check_notify,
    check_tools, default_title, secret_forms,
};

impl TaskSpec {
    /// Reads and validates a prompt file. Nothing is written.
    #[cfg(test)]
    pub fn from_prompt(cfg: &Config, path: &Path, params: &[String]) -> anyhow::Result<TaskSpec> {
        Self::from_prompt_asked(cfg, path, params, &[]).map_err(SpecError::into_anyhow)
    }

    /// Like [`TaskSpec::from_prompt`], with values of a template's
    /// parameters typed in on a terminal (`asked`, NAME and VALUE). A
    /// required parameter without a value is a [`MissingParameters`] error.
    pub fn from_prompt_asked(
        cfg: &Config,
        path: &Path,
        params: &[String],
        asked: &[(String, String)],
    ) -> Result<TaskSpec, SpecError> {
        let text = read_text(path)?;
        Self::from_text_asked(cfg, path, &text, params, asked)
    }

    /// Validates a prompt's text as if it were the file `path` (whose
    /// directory relative `workspace:` and replay scripts resolve against,
    /// and which messages name). Nothing is read but what it names.
    pub fn from_text(
        cfg: &Config,
        path: &Path,
        text: &str,
        params: &[String],
    ) -> anyhow::Result<TaskSpec> {
        Self::from_text_asked(cfg, path, text, params, &[]).map_err(SpecError::into_anyhow)
    }

    /// Whether a template's text makes a task, as if it were the file
    /// `path`, given no `--param`: required parameters without a value
    /// are fine (a submit gives them); any other problem is the error.
    pub fn check_template(cfg: &Config, path: &Path, text: &str) -> anyhow::Result<()> {
        match Self::from_text_asked(cfg, path, text, &[], &[]) {
            Ok(_) | Err(SpecError::Missing(_)) => Ok(()),
            Err(SpecError::Invalid(e)) => Err(e),
        }
    }

    fn from_text_asked(
        cfg: &Config,
        path: &Path,
        text: &str,
        params: &[String],
        asked: &[(String, String)],
    ) -> Result<TaskSpec, SpecError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let (fm, body, parameters) = template(path, dir, text, params, asked)?;
        let fm = super::agent_type::apply(cfg, path, fm)?;
        let samples = (fm.samples, fm.select, fm.fork_at);
        let mut spec = Self::merged(cfg, path, dir, fm, body, parameters)?;
        spec.samples = super::samples::checked(path, samples, &spec)?;
        Ok(spec)
    }

    /// A resolved prompt merged with config.yaml's defaults and checked.
    fn merged(
        cfg: &Config,
        path: &Path,
        dir: &Path,
        fm: FrontMatter,
        body: String,
        parameters: Vec<ParamValue>,
    ) -> anyhow::Result<TaskSpec> {
        let d = &cfg.file.task;
        let egress = egress_plan(cfg, path, &fm)?;
        let timeout = fm.timeout.map(|t| t.0).unwrap_or(d.timeout);
        let (bench, model, replay) = super::bench::resolve(cfg, path, dir, &fm, timeout)?;
        let verify_timeout = fm.verify.as_ref().and_then(|v| v.timeout).map(|t| t.0);
        let (workspace, git, deliver) =
            super::git::sources(path, dir, fm.workspace.clone(), fm.deliver.clone(), &egress)?;
        let setup = super::setup::checked(cfg, path, &fm, workspace.as_deref())?;
        let sandbox = Sandbox::of(cfg, path, fm.resources.unwrap_or_default(), fm.network)?;
        let max_steps = fm.max_steps.unwrap_or(d.max_steps);
        let retries = fm.retries.unwrap_or(d.retries);
        let retry_on = fm.retry_on.unwrap_or_else(|| d.retry_on.clone());
        let retry_backoff = fm.retry_backoff.unwrap_or(d.retry_backoff);
        if let Some(why) = retry_backoff.problem() {
            bail!("{}: `retry_backoff`: {why}", path.display());
        }
        check_run(path, max_steps, timeout, retries, &retry_on, &fm.env)?;
        let deadline_ms = deadline_ms(path, fm.deadline)?;
        let max_tokens = fm.max_tokens.or(d.max_tokens);
        let max_cost = fm.max_cost.or(d.max_cost);
        if let Some(c) = max_cost {
            check_max_cost(cfg, path, &model, replay.is_some(), c)?;
        }
        if replay.is_none() {
            check_model(cfg, path, &model)?;
        }
        let context = context_plan(cfg, path, &model, fm.context)?;
        let capabilities = fm.capabilities.clone().unwrap_or_default();
        check_capabilities(cfg, path, &capabilities)?;
        let tools = fm.tools.clone();
        check_tools(path, tools.as_deref())?;
        let delegate = fm.delegate;
        check_delegate(path, delegate.as_ref())?;
        let (gates, gate_approval) = gates_of(fm.approve.as_ref().or(d.approve.as_ref()));
        check_gates(path, &gates, &capabilities)?;
        let pause_on = fm.pause_on.unwrap_or_else(|| d.pause_on.clone());
        let on_subtask = on_subtask(path, fm.breakpoint, delegate.as_ref())?;
        let human_timeout = fm.human_timeout.map(|t| t.0).unwrap_or(d.human_timeout);
        let park_after = fm.park_after.map(|t| t.0).unwrap_or(d.park_after);
        check_human(path, human_timeout, park_after)?;
        let mut notify = cfg.file.notify.clone();
        notify.extend(fm.notify.clone().unwrap_or_default());
        check_notify(path, &mut notify, cfg.file.smtp.is_some())?;
        let title = title_of(path, fm.title, &body)?;
        let checks = Verification {
            verify: fm.verify.map_or_else(|| d.verify.clone(), |v| v.run).0,
            files: fm.verify_files.unwrap_or_else(|| d.verify_files.clone()),
            retries: fm.verify_retries.unwrap_or(d.verify_retries),
            timeout: verify_timeout
                .or(fm.verify_timeout.map(|t| t.0))
                .unwrap_or(d.verify_timeout),
            assess: fm.assess.unwrap_or(d.assess),
            objective: fm.objective.or_else(|| d.objective.clone()),
        }
        .checked(path, workspace.as_deref(), replay.is_some())?;
        let agent = agent::resolve(cfg, path, fm.agent, &model, replay.is_some())?;
        let mut spec = TaskSpec {
            title,
            prompt_path: path.display().to_string(),
            body,
            provider_key: provider_key(cfg, &model, replay.is_some()), // before they move
            model,
            max_steps,
            max_tokens,
            max_cost,
            retries,
            retry_on,
            timeout_s: timeout.as_secs().max(1),
            network: sandbox.network,
            egress,
            memory: sandbox.memory.0,
            cpus: sandbox.cpus,
            pids: sandbox.pids,
            disk: Some(sandbox.disk.0),
            disk_asked: sandbox.disk_asked,
            env: fm.env,
            max_output_bytes: d.max_output_bytes,
            replay,
            workspace,
            workspace_under: None,
            git,
            deliver,
            follow_up_of: None,
            definitions: None,
            workspace_include_ignored: fm
                .workspace_include_ignored
                .unwrap_or(d.workspace_include_ignored),
            gates,
            pause_on_tool_error: pause_on.contains(&PauseOn::ToolError),
            break_on_subtask: on_subtask,
            human_timeout_s: human_timeout.as_secs().max(1),
            park_after_ms: park_after.as_millis() as u64,
            no_human: d.no_human,
            no_human_approves: d.no_human_gates == crate::config::GateDefault::Approve,
            plan_only: false,
            notify,
            capabilities,
            tools,
            delegate,
            parameters,
            steps: fm.steps,
            verify: checks.verify,
            verify_files: checks.files,
            verify_retries: checks.retries,
            verify_timeout_s: checks.timeout.as_secs().max(1),
            assess: checks.assess,
            objective: checks.objective,
            logprobs: fm.logprobs.unwrap_or(false),
            report: fm.report.unwrap_or(d.report),
            snapshots: fm.snapshots.unwrap_or(d.snapshots),
            cache: fm.cache.unwrap_or(d.cache),
            context,
            agent,
            agent_type: fm.agent_type,
            gate_approval,
            deadline_ms,
            priority: fm.priority,
            retry_from: fm.retry_from.or(d.retry_from),
            retry_backoff,
            budget_per_attempt: fm.budget_per_attempt.unwrap_or(d.budget_per_attempt),
            chain: None,
            forked_from: None,
            samples: None,
            sample_of: None,
            image: bench.image,
            workdir: bench.workdir,
            agent_user: bench.agent_user,
            verify_hidden: bench.hidden,
            verify_reward: bench.reward,
            verify_env: bench.env,
            pass_reward: bench.pass_reward,
            solution: bench.solution,
            setup: setup.run,
            setup_plan: setup.plan,
        };
        // Keys pasted into a prompt or a replay script must not reach the
        // database (nor, through it, `task status --json` or a container).
        spec.redact(&crate::config::Providers::from_config(cfg).secrets())?;
        Ok(spec)
    }

    /// Replaces every known key value, and its base64 forms, in every text
    /// of the spec with `[REDACTED:<VARIABLE>]`.
    fn redact(&mut self, secrets: &[(String, String)]) -> anyhow::Result<()> {
        if secrets.is_empty() {
            return Ok(());
        }
        let mut json = serde_json::to_string(self)?;
        let before = json.len();
        for (var, value) in secrets {
            for form in secret_forms(value) {
                // Keys are plain ASCII tokens: JSON escaping leaves them as they are.
                json = json.replace(&form, &format!("[REDACTED:{var}]"));
            }
        }
        if json.len() != before {
            *self = serde_json::from_str(&json).context("re-reading the redacted task")?;
        }
        Ok(())
    }

    /// What the servo is told (no secrets, no host paths).
    pub fn servo_task(&self, id: TaskId) -> ServoTask {
        ServoTask {
            task_id: id,
            title: self.title.clone(),
            model: self.model.clone(),
            // What the chain of attempts has left (issue 30).
            max_steps: u32::try_from(self.left().steps).unwrap_or(u32::MAX),
            max_tokens: self.left().tokens,
            timeout_s: self.timeout_s,
            deadline_ms: self.deadline_ms,
            max_output_bytes: self.max_output_bytes,
            // Set at launch from the gateway's policy (config, not the spec).
            request_timeout_s: None,
            egress: self.egress.serves(saheeli_protocol::egress::Phase::Agent),
            gates: self.gates.clone(),
            pause_on_tool_error: self.pause_on_tool_error,
            // The built-in loop's calls to a model (not a script's turns)
            // reach `llm::chat`, which looks at the inbox with each.
            inbox_on_call: self.agent.is_builtin() && !self.model.starts_with("replay:"),
            snapshots: self.agent.is_builtin()
                && self.snapshots != saheeli_protocol::front_matter::Snapshots::Off,
            plan_only: self.plan_only,
            park_after_ms: Some(self.park_after_ms),
            tools: self.tools.clone(),
            capabilities: self.capabilities.clone(),
            delegate: self.delegate,
            // Who may approve a step is the foreman's to check.
            steps: self
                .steps
                .iter()
                .map(|s| saheeli_protocol::template::Step {
                    approve: s.approve.for_servo(),
                    ..s.clone()
                })
                .collect(),
            verify: self.verifies(),
            replay: self.replay.clone(),
            context: self.context,
            agent: (!self.agent.is_builtin()).then(|| self.agent.clone()),
            stop_grace_ms: None,
            resume: self.resume(),
        }
    }

    /// Whether `task_complete` is checked (`verify:` or `assess: true`).
    pub fn verifies(&self) -> bool {
        !self.verify.is_empty() || self.assess
    }

    /// How many verification attempts the task may make in all.
    pub fn max_verify_attempts(&self) -> u32 {
        self.verify_retries.saturating_add(1)
    }

    /// The gateway's budget: what the chain of attempts has left.
    pub fn budget(&self) -> Budget {
        let left = self.left();
        Budget {
            max_tokens: left.tokens,
            max_cost: left.cost,
            // The built-in loop counts its own steps; a third-party
            // agent's gateway counts its LLM calls instead (issue 25).
            max_calls: (!self.agent.is_builtin()).then_some(left.steps),
            cache: self.cache,
        }
    }
}

/// `breakpoint: on_subtask`, which needs `delegate:`.
fn on_subtask(
    path: &Path,
    breakpoint: Option<saheeli_protocol::front_matter::TaskBreakpoint>,
    delegate: Option<&saheeli_protocol::delegate::Delegate>,
) -> anyhow::Result<bool> {
    let on_subtask = breakpoint == Some(saheeli_protocol::front_matter::TaskBreakpoint::OnSubtask);
    if on_subtask && delegate.is_none() {
        bail!(
            "{}: `breakpoint: on_subtask` pauses the task when its model spawns a child; \
             add `delegate: {{ max_children: N }}` or remove it",
            path.display()
        );
    }
    Ok(on_subtask)
}

/// `approve:`'s gates, and who may decide them with what message (issue 52).
fn gates_of(
    approve: Option<&saheeli_protocol::front_matter::Approve>,
) -> (
    Vec<saheeli_protocol::human::Gate>,
    saheeli_protocol::template::StepApproval,
) {
    let Some(a) = approve else {
        return Default::default();
    };
    let named = a.named().map(|g| saheeli_protocol::template::StepApproval {
        required: true,
        from: g.from.clone(),
        message: g.message.clone(),
    });
    (a.gates(), named.unwrap_or_default())
}

/// The variable the key of `model`'s provider is read from (none for a
/// replay: no provider is called).
fn provider_key(cfg: &Config, model: &str, replay: bool) -> Option<String> {
    if replay {
        return None;
    }
    crate::config::Providers::from_config(cfg)
        .route(model)
        .provider
        .key_env
}

/// A task's container: `resources:` and `network:` over config.yaml's
/// `task:` defaults, held to `limits:`.
struct Sandbox {
    memory: Memory,
    cpus: f64,
    pids: i64,
    disk: Memory,
    /// `resources.disk` was set (front-matter, config.yaml or the
    /// environment), not left to the built-in default.
    disk_asked: bool,
    network: NetworkMode,
}

impl Sandbox {
    fn of(
        cfg: &Config,
        path: &Path,
        resources: Resources,
        network: Option<NetworkMode>,
    ) -> anyhow::Result<Sandbox> {
        let d = &cfg.file.task;
        let cpus = resources.cpus.unwrap_or(d.cpus);
        if !(cpus > 0.0 && cpus.is_finite()) {
            bail!(
                "{}: `resources.cpus` must be greater than 0",
                path.display()
            );
        }
        let pids = resources.pids.unwrap_or(d.pids);
        if pids < 16 {
            bail!("{}: `resources.pids` must be at least 16", path.display());
        }
        let memory = resources.memory.unwrap_or(d.memory);
        let disk_asked = resources.disk.is_some()
            || cfg.set_keys.file.contains("task.disk")
            || cfg.set_keys.env.contains_key("task.disk");
        let disk = resources.disk.unwrap_or(d.disk);
        let network = network.unwrap_or(d.network);
        check_ceilings(cfg, path, memory, cpus, pids, disk, network)?;
        Ok(Sandbox {
            memory,
            cpus,
            pids,
            disk,
            disk_asked,
            network,
        })
    }
}

/// `deadline:` as Unix milliseconds; one that has passed is refused.
fn deadline_ms(path: &Path, deadline: Option<Deadline>) -> anyhow::Result<Option<i64>> {
    if let Some(at) = deadline
        && std::time::SystemTime::now() >= at.0
    {
        bail!(
            "{}: `deadline` {} has passed already; give a time to come",
            path.display(),
            String::from(at)
        );
    }
    Ok(deadline.map(|d| d.unix_ms()))
}

/// Child tasks run only on one host for now.
/// `egress:` and `egress_approval:` over config.yaml's, within its limits.
fn egress_plan(
    cfg: &Config,
    path: &Path,
    fm: &FrontMatter,
) -> anyhow::Result<crate::task::EgressPlan> {
    let d = &cfg.file.task;
    let egress = crate::task::egress::plan(
        path,
        fm.egress.as_ref().unwrap_or(&d.egress),
        fm.egress_approval.unwrap_or(d.egress_approval),
        &cfg.file.limits.egress,
    )?;
    Ok(egress)
}

/// `title:`, else the body's first heading or the file's name; 1 to
/// `MAX_TITLE` characters.
fn title_of(path: &Path, title: Option<String>, body: &str) -> anyhow::Result<String> {
    let title = title.unwrap_or_else(|| default_title(path, body));
    if title.trim().is_empty() || title.chars().count() > MAX_TITLE {
        bail!(
            "{}: `title` must be 1 to {MAX_TITLE} characters",
            path.display()
        );
    }
    Ok(title)
}
