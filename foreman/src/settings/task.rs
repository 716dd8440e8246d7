//! The per-task settings: what a prompt's front-matter sets, and the
//! `task:` defaults of config.yaml behind them. In the order `--dry-run`
//! shows them.

use std::time::Duration;

use saheeli_protocol::front_matter::Memory;
use serde_json::{Value, json};

use super::Setting;

fn duration(d: Duration) -> Value {
    json!(humantime::format_duration(d).to_string())
}

/// `{ initial: 10s, multiplier: 2, max: 10m }` as `--dry-run` shows it.
pub(super) fn backoff(b: &saheeli_protocol::attempt::Backoff) -> Value {
    json!({
        "initial": humantime::format_duration(b.initial.0).to_string(),
        "multiplier": b.multiplier,
        "max": humantime::format_duration(b.max.0).to_string(),
    })
}

pub(super) const TASK: &[Setting] = &[
    Setting::new("title", "string")
        .doc("The task's name in tables and reports (default: the body's first heading, else the file's name).")
        .front(|f| f.title.is_some())
        .param()
        .shown(|s, _| json!(s.title)),
    Setting::new("model", "string")
        .default("gpt-4o-mini")
        .doc("An OpenAI-compatible model, an Anthropic model, `PROVIDER/model`, or `replay:FILE`.")
        .config("task.model")
        .front(|f| f.model.is_some())
        .param()
        .shown(|s, _| json!(s.model)),
    Setting::new("max_steps", "integer")
        .default("50")
        .doc("LLM calls the agent may make before it ends `incomplete` (`max_steps`).")
        .config("task.max_steps")
        .front(|f| f.max_steps.is_some())
        .param()
        .shown(|s, _| json!(s.max_steps)),
    Setting::new("max_tokens", "integer")
        .doc("Token budget (input + output), enforced by the gateway; unset: none.")
        .config("task.max_tokens")
        .front(|f| f.max_tokens.is_some())
        .param()
        .shown(|s, _| json!(s.max_tokens)),
    Setting::new("max_cost", "number")
        .doc("Cost budget in USD, enforced by the gateway (needs `prices:` for the model); unset: none.")
        .config("task.max_cost")
        .front(|f| f.max_cost.is_some())
        .param()
        .shown(|s, _| json!(s.max_cost)),
    Setting::new("timeout", "duration")
        .default("30m")
        .doc("Wall-clock limit (`90s`, `30m`, `1h 30m`, or seconds); waits for a human do not count.")
        .config("task.timeout")
        .front(|f| f.timeout.is_some())
        .param()
        .shown(|s, _| duration(Duration::from_secs(s.timeout_s))),
    Setting::new("deadline", "time")
        .doc("An absolute time the task must end by (`2026-12-01T17:00:00Z`), beside `timeout`: it ends `timeout` then, waits for a human included; the model is told it. Unset: none.")
        .front(|f| f.deadline.is_some())
        .param()
        .shown(|s, _| json!(s.deadline_ms.map(crate::text::time))),
    Setting::new("priority", "integer")
        .default("0")
        .doc("Higher runs first; `--priority` (or the API's `priority`) wins over it.")
        .front(|f| f.priority.is_some())
        .shown(|s, _| json!(s.priority.unwrap_or(0))),
    Setting::new("retries", "integer")
        .default("0")
        .doc("Further attempts when the agent ends incomplete; each is a new task linked to the last.")
        .config("task.retries")
        .front(|f| f.retries.is_some())
        .param()
        .shown(|s, _| json!(s.retries)),
    Setting::new("retry_on", "list of reasons")
        .default("[timeout, max_steps, llm_error, oom, exit, terminated, lost, replay_exhausted, no_completion, invalid_completion]")
        .doc("Which incomplete reasons are retried (`budget`, `auth`, `bad_request`, `results_too_large` never are).")
        .config("task.retry_on")
        .front(|f| f.retry_on.is_some())
        .shown(|s, _| json!(s.retry_on)),
    Setting::new("retry_from", "session | workspace | scratch")
        .doc("Where a retry starts: `session` (the collected workspace and the saved conversation, with a note on what ended the attempt), `workspace` (the collected workspace, a fresh conversation), `scratch` (the submitted workspace). Unset: `session` after `oom`, `timeout`, `terminated`, `lost`, `llm_error`, else `scratch`.")
        .config("task.retry_from")
        .front(|f| f.retry_from.is_some())
        .param()
        .shown(|s, _| json!(s.retry_from.map(|r| r.as_str()))),
    Setting::new("retry_backoff", "map")
        .default("{ initial: 10s, multiplier: 2, max: 10m }")
        .doc("How long a retry waits in `queued` first (`not_before`): `initial`, times `multiplier` per retry before it, at most `max`, ±20 % jitter.")
        .config("task.retry_backoff")
        .front(|f| f.retry_backoff.is_some())
        .shown(|s, _| backoff(&s.retry_backoff)),
    Setting::new("budget_per_attempt", "bool")
        .default("false")
        .doc("`max_steps`, `max_tokens` and `max_cost` are each attempt's own; unset, they span the chain of retries.")
        .config("task.budget_per_attempt")
        .front(|f| f.budget_per_attempt.is_some())
        .param()
        .shown(|s, _| json!(s.budget_per_attempt)),
    Setting::new("network", "none | bridge | host")
        .default("none")
        .doc("The container's network; the servo needs none to reach the LLM. Must be in `limits.networks`.")
        .config("task.network")
        .front(|f| f.network.is_some())
        .param()
        .shown(|s, _| json!(s.network.as_str())),
    Setting::new("egress", "map of lists")
        .default("{}")
        .doc("Hosts each phase may reach through the gateway's proxy, the container keeping no network: `{ setup: [pypi.org, \"*.pythonhosted.org\"], agent: [], verify: [] }` (names, `*.` wildcards, addresses, optional `:port`; a name without a port may use 80 and 443). Each within `limits.egress`; see [Egress](../guides/egress.md).")
        .config("task.egress")
        .front(|f| f.egress.is_some())
        .shown(|s, _| s.egress.shown()),
    Setting::new("egress_approval", "deny | ask")
        .default("deny")
        .doc("A host no list names: `deny` answers the client 403 at once; `ask` puts the task in `waiting_human` until `task approve` (that host, for the rest of the task) or `task deny`. The agent phase only: set-up and verify refuse at once.")
        .config("task.egress_approval")
        .front(|f| f.egress_approval.is_some())
        .param()
        .shown(|s, _| json!(s.egress.approval.as_str())),
    Setting::new("resources.memory", "size")
        .default("2g")
        .doc("The container's memory limit (`512m`, `2g`); at most `limits.memory`.")
        .config("task.memory")
        .front(|f| f.resources.as_ref().is_some_and(|r| r.memory.is_some()))
        .shown(|s, _| json!(Memory(s.memory).to_string())),
    Setting::new("resources.cpus", "number")
        .default("1.0")
        .doc("CPUs the container may use; at most `limits.cpus`.")
        .config("task.cpus")
        .front(|f| f.resources.as_ref().is_some_and(|r| r.cpus.is_some()))
        .shown(|s, _| json!(s.cpus)),
    Setting::new("resources.pids", "integer")
        .default("512")
        .doc("Processes the container may run (at least 16); at most `limits.pids`.")
        .config("task.pids")
        .front(|f| f.resources.as_ref().is_some_and(|r| r.pids.is_some()))
        .shown(|s, _| json!(s.pids)),
    Setting::new("resources.disk", "size")
        .default("2g")
        .doc("Size of /workspace: writes past it fail with ENOSPC; at most `limits.disk`.")
        .config("task.disk")
        .front(|f| f.resources.as_ref().is_some_and(|r| r.disk.is_some()))
        .shown(|s, _| json!(s.disk.map(|d| Memory(d).to_string()))),
    Setting::new("env", "map")
        .doc("Environment for the agent's shell commands. Never secrets: keys stay in the foreman.")
        .front(|f| !f.env.is_empty())
        .shown(|s, _| json!(s.env)),
    Setting::new("workspace", "path or map")
        .doc("A host directory (relative to the prompt file) copied into /workspace at submit, or a Git repository at a ref, `{ git: URL_OR_PATH, ref: main, depth: 1 }`, whose commit is checked out (see the Git guide).")
        .front(|f| f.workspace.is_some())
        .param()
        .shown(|s, _| match &s.git {
            Some(g) => json!({ "git": g.url, "ref": g.reference, "depth": g.depth }),
            None => json!(s.workspace),
        }),
    Setting::new("deliver", "map")
        .doc("With a `workspace: { git }`: `{ branch: \"saheeli/{task_id_short}-{slug}\", push: true, on: [complete] }` commits the task's changes on that branch from its start commit and pushes it (`on` may add `incomplete`).")
        .front(|f| f.deliver.is_some())
        .shown(|s, _| json!(s.deliver)),
    Setting::new("workspace_include_ignored", "bool")
        .default("false")
        .doc("Copy what `.gitignore` names too (`.env*` and what `.saheeliignore` names never are).")
        .config("task.workspace_include_ignored")
        .front(|f| f.workspace_include_ignored.is_some())
        .shown(|s, _| json!(s.workspace_include_ignored)),
    Setting::new("max_output_bytes", "integer")
        .default("16384")
        .doc("Largest tool output handed back to the model (head and tail kept).")
        .config("task.max_output_bytes")
        .shown(|s, _| json!(s.max_output_bytes)),
    Setting::new("approve", "list or map")
        .doc("Approval gates: `[execute_shell]`, `{execute_shell: \"regex\"}`, or `[plan]`; `{ tools: [execute_shell], from: [ops], message: \"…\" }`: only those named decide, shown the message.")
        .config("task.approve")
        .front(|f| f.approve.is_some())
        .shown(|s, _| json!(s.gates)),
    Setting::new("pause_on", "list")
        .default("[]")
        .doc("Breakpoints: `[tool_error]` pauses the task when a tool call fails.")
        .config("task.pause_on")
        .front(|f| f.pause_on.is_some())
        .shown(|s, _| {
            if s.pause_on_tool_error {
                json!(["tool_error"])
            } else {
                json!([])
            }
        }),
    Setting::new("breakpoint", "on_subtask")
        .doc("`on_subtask`: the task pauses each time its model spawns a child task (with `delegate:`); `task resume` goes on, `task breakpoint ID --clear` clears it.")
        .front(|f| f.breakpoint.is_some())
        .shown(|s, _| json!(s.break_on_subtask.then_some("on_subtask"))),
    Setting::new("human_timeout", "duration")
        .default("24h")
        .doc("How long a question or pause waits for a human, then the task ends `incomplete` (`no_answer`).")
        .config("task.human_timeout")
        .front(|f| f.human_timeout.is_some())
        .shown(|s, _| duration(Duration::from_secs(s.human_timeout_s))),
    Setting::new("park_after", "duration")
        .default("10s")
        .doc("How long a waiting servo keeps its container before it parks (at most 1h).")
        .config("task.park_after")
        .front(|f| f.park_after.is_some())
        .shown(|s, _| duration(Duration::from_millis(s.park_after_ms))),
    Setting::new("no_human", "bool")
        .default("false")
        .doc("Nobody will answer: `ask_user` is answered at once, gates follow `no_human_gates` (also `--no-human`).")
        .config("task.no_human")
        .shown(|s, _| json!(s.no_human)),
    Setting::new("no_human_gates", "deny | approve")
        .default("deny")
        .doc("What an approval gate does when no human is there.")
        .config("task.no_human_gates")
        .shown(|s, _| json!(if s.no_human_approves { "approve" } else { "deny" })),
    Setting::new("capabilities", "list")
        .doc("MCP capabilities (config.yaml `capabilities:`) this task may use, as `name__tool`.")
        .front(|f| f.capabilities.is_some())
        .shown(|s, _| json!(s.capabilities)),
    Setting::new("tools", "list")
        .doc("The built-in tools offered (all when unset); must include `task_complete`.")
        .front(|f| f.tools.is_some())
        .shown(|s, _| match &s.tools {
            Some(t) => json!(t),
            None => json!("all built-in tools"),
        }),
    Setting::new("delegate", "{ max_children, max_depth }")
        .doc("Parent and child tasks: the model may spawn up to `max_children` child tasks (`spawn_task`, `wait_tasks`), `max_depth` levels deep (default 1); each child's budget is carved out of this task's (docs: fan-out).")
        .front(|f| f.delegate.is_some())
        .shown(|s, _| match &s.delegate {
            Some(d) => json!({"max_children": d.max_children, "max_depth": d.max_depth}),
            None => json!("none"),
        }),
    Setting::new("cache", "5m | 1h | off")
        .default("5m")
        .doc("Provider prompt caching: Anthropic breakpoints with this lifetime, OpenAI `prompt_cache_key`; `1h` pays off for tasks that wait for people (docs: long tasks).")
        .config("task.cache")
        .front(|f| f.cache.is_some())
        .param()
        .shown(|s, _| json!(s.cache.as_str())),
    Setting::new("context", "map")
        .doc("`window`, `strategy` (mask | summarize | mask+summarize), `keep_recent`, `threshold`: how the conversation is compacted before it outgrows the model's window.")
        .config("task.context")
        .front(|f| f.context.is_some())
        .shown(|s, _| {
            json!({
                "window": s.context.window,
                "strategy": s.context.strategy.as_str(),
                "keep_recent": s.context.keep_recent,
                "threshold": s.context.threshold,
            })
        }),
    Setting::new("agent", "name or map")
        .default("saheeli")
        .doc("Who runs the task: `saheeli` (the built-in loop), `claude-code`, `codex`, `mini-swe-agent`, `aider`, `oracle` (runs `solution:` instead of a model), or `{ command, api }` (docs: agents).")
        .config("task.agent")
        .front(|f| f.agent.is_some())
        .param()
        .shown(|s, _| json!(s.agent)),
    Setting::new("agent_type", "name")
        .doc("A kind of worker config.yaml's `agent_types:` defines: its `agent`, `model`, `image`, budgets and tools are this task's defaults, under what the front-matter sets (also `--agent-type`); `pools:` may cap it.")
        .front(|f| f.agent_type.is_some())
        .param()
        .shown(|s, _| json!(s.agent_type)),
    Setting::new("notify", "list of webhooks")
        .default("[]")
        .doc("Webhooks (`url`, `events`, `format`: `json` or `slack`) and email channels (`email`, `events`, through `smtp:`); a prompt's are added to config.yaml's.")
        .config("notify")
        .front(|f| f.notify.is_some())
        .shown(|s, _| json!(s.notify.iter().map(|n| &n.url).collect::<Vec<_>>())),
    Setting::new("verify", "command, list or map")
        .default("[]")
        .doc("Commands run in a fresh container after `task_complete`; all must exit 0, else the model hears why. `{ run, files, reward, timeout, env }`: `files` (the hidden tests) are copied to /tests in that container only, and the reward file graded (docs: evals).")
        .config("task.verify")
        .front(|f| f.verify.is_some())
        .param()
        .shown(|s, _| json!(s.verify)),
    Setting::new("pass_reward", "number")
        .default("1.0")
        .doc("The reward a verify's reward file must reach for `complete`.")
        .front(|f| f.pass_reward.is_some())
        .shown(|s, _| json!(s.pass_reward)),
    Setting::new("image", "string")
        .default("saheeli-servo:latest")
        .doc("config.yaml: the servo image tasks run in (`saheeli build-servo` builds it; on a swarm, a registry reference). A prompt: the task's own image (a local tag), the servo added on top once per image (docker backend).")
        .config("image")
        .front(|f| f.image.is_some())
        .shown(|s, d| match &s.image {
            Some(crate::task::TaskImage::Named(i)) => json!(i),
            Some(crate::task::TaskImage::Dockerfile(dir)) => json!(format!("built from {}", dir.display())),
            None => json!(d.image),
        }),
    Setting::new("environment", "map")
        .doc("`{ dockerfile: DIR }`: the task's image is built from DIR's Dockerfile, cached by content (`images.map` for a `FROM` Docker lacks).")
        .front(|f| f.environment.is_some()),
    Setting::new("workdir", "path")
        .doc("Where the agent works (`/app`): that path is the workspace, what the image holds there copied in first.")
        .front(|f| f.workdir.is_some())
        .shown(|s, _| json!(s.workdir)),
    Setting::new("agent_user", "agent | root")
        .default("agent")
        .doc("Whom the agent's processes run as: `agent` (uid 1000, the default) or `root` (uid 0 with no capability, a writable root file system, the workspace root's; set-up and verify run as root too). `backend: docker` only; see the evals guide for what `root` weakens.")
        .front(|f| f.agent_user.is_some())
        .shown(|s, _| json!(s.agent_user)),
    Setting::new("setup", "command, list or map")
        .doc("Commands run before the agent, in a container of the task's image on its workspace (offline, the agent's user, the workdir; each within `timeout`); one failing ends the task `failed`, reason `setup_failed`, its output in the report. `{ run: [...], key_files: [requirements.txt] }`: what the set-up wrote is cached, keyed by the image, the commands and the key files' content, and reused (`saheeli cache`).")
        .front(|f| f.setup.is_some())
        .shown(|s, _| json!({"run": s.setup, "key_files": s.setup_plan.key_files})),
    Setting::new("maintenance", "command or list")
        .doc("Run instead of `setup` when a cached set-up is reused (e.g. `git fetch`), with the set-up's secrets.")
        .front(|f| f.maintenance.is_some())
        .shown(|s, _| json!(s.setup_plan.maintenance)),
    Setting::new("setup_env", "list of names")
        .doc("Variables of the `.env` beside config.yaml given only to the set-up and maintenance commands (never to the agent, the workspace, the database or the results); a name `.env` lacks is refused at submit.")
        .front(|f| f.setup_env.is_some())
        .shown(|s, _| json!(s.setup_plan.env)),
    Setting::new("solution", "path")
        .doc("A directory with `solve.sh`: `agent: oracle` runs it (read-only at /solution) instead of a model.")
        .front(|f| f.solution.is_some())
        .shown(|s, _| json!(s.solution)),
    Setting::new("verify_files", "list of paths")
        .default("[]")
        .doc("Paths restored from the submitted workspace before verify runs, so the agent cannot edit the checks.")
        .config("task.verify_files")
        .front(|f| f.verify_files.is_some())
        .shown(|s, _| json!(s.verify_files)),
    Setting::new("verify_retries", "integer")
        .default("2")
        .doc("Further attempts after a failed verify or assessment.")
        .config("task.verify_retries")
        .front(|f| f.verify_retries.is_some())
        .param()
        .shown(|s, _| json!(s.verify_retries)),
    Setting::new("verify_timeout", "duration")
        .default("10m")
        .doc("Limit on each verify command.")
        .config("task.verify_timeout")
        .front(|f| f.verify_timeout.is_some())
        .param()
        .shown(|s, _| duration(Duration::from_secs(s.verify_timeout_s))),
    Setting::new("assess", "bool")
        .default("false")
        .doc("After verify passes, an LLM judges whether the objective is met; not met is a failed attempt.")
        .config("task.assess")
        .front(|f| f.assess.is_some())
        .param()
        .shown(|s, _| json!(s.assess)),
    Setting::new("samples", "integer")
        .doc("Best-of-N: run K samples of the task (1 to 16), each an ordinary task under it from step 0, each with `max_tokens` / K and `max_cost` / K; the one `select` picks gives the task its results.")
        .front(|f| f.samples.is_some())
        .param()
        .shown(|s, _| json!(s.samples.map(|x| x.count))),
    Setting::new("select", "verify | assess | first_complete")
        .doc("With `samples:`, the winner: the first sample whose `verify:` passes (the default with `verify:`), the complete sample the assessor scores highest, or the first to complete (the default without `verify:`; the others are cancelled).")
        .front(|f| f.select.is_some())
        .param()
        .shown(|s, _| json!(s.samples.map(|x| x.select.as_str()))),
    Setting::new("fork_at", "integer")
        .default("0")
        .doc("With `samples:`, the step of a first run the samples are forked from (0: each starts at step 0). Above 0 the first run keeps snapshots and the rest are forked from its step N (built-in agent; an engine with snapshots).")
        .front(|f| f.fork_at.is_some())
        .param()
        .shown(|s, _| json!(s.samples.map_or(0, |x| x.fork_at))),
    Setting::new("logprobs", "bool")
        .default("false")
        .doc("Ask the provider for each answer's per-token log probabilities (OpenAI-compatible chat; Anthropic returns none): kept per call by the gateway, and in `eval export`'s trajectories (each agent step's `metrics.logprobs`).")
        .front(|f| f.logprobs.is_some())
        .shown(|s, _| json!(s.logprobs)),
    Setting::new("objective", "string")
        .doc("What the assessor judges against (default: the title and the body).")
        .config("task.objective")
        .front(|f| f.objective.is_some())
        .param()
        .shown(|s, _| json!(s.objective)),
    Setting::new("report", "facts | synthesized")
        .default("facts")
        .doc("What report.md holds: facts only, or also a short Findings / Partial findings / Limitations section written by one more metered call from the audit log and the verification (a replay script answers it with `synthesis:`).")
        .config("task.report")
        .front(|f| f.report.is_some())
        .shown(|s, _| json!(s.report)),
    Setting::new("snapshots", "every | on_request | off")
        .default("off")
        .doc("Keep the workspace and the conversation at a step, so that `task fork ID --at-step N` can go on from it, the task running or ended: `every` (before each call, the workspace as the last step left it; only what a step changed is copied, the rest linked), `on_request` (at the next step after `saheeli task snapshot ID`), `off`. Kept in the foreman's state, never in the container, removed with the task. The built-in agent only; the local engine only.")
        .config("task.snapshots")
        .front(|f| f.snapshots.is_some())
        .shown(|s, _| json!(s.snapshots.as_str())),
    Setting::new("parameters", "list")
        .doc("A template's declared parameters; `{{ name }}` in the prompt is replaced by the value (`--param name=…`).")
        .front(|f| !f.parameters.is_empty()),
    Setting::new("steps", "list")
        .doc("A template's checklist (`name`, `description`, `done_when` as text or `{ verify: COMMAND }`, `approve`: `true` or `{ from: [NAME], message }`, `breakpoint`), ticked off with `step_start` and `step_done`.")
        .front(|f| !f.steps.is_empty()),
];
