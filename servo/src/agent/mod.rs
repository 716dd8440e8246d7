//! The agent loop: prompt → LLM → tools → … → `task_complete`.
//!
//! Each step is one LLM call followed by the tool calls it asked for. The
//! loop ends on `task_complete` (complete.json is written), at `max_steps`,
//! when the time budget runs out, when the LLM keeps failing, or on SIGTERM.
//! Whatever ends it, the audit log and session file are flushed first
//! (`record`); the time left is counted in `budget`.
//! A servo waiting for a human parks instead (`human`, `park`): it saves its
//! session and exits, and a new servo on the same workspace goes on.

mod ask;
mod budget;
mod calls;
mod capability;
mod compact;
mod context;
mod delegate;
mod delegate_files;
mod gates;
mod human;
mod journal;
mod park;
mod pause;
mod prompt;
mod record;
mod resume;
mod verify;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use saheeli_protocol::chat::{ChatMessage, ToolSpec};
use saheeli_protocol::{AuditEvent, ServoExit, ServoTask, Usage, paths};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{debug, info, warn};

use crate::audit::{Audit, now};
use crate::desk::Desk;
use crate::llm::{Gateway, LlmError, Provider, Replay, Waiting};
use crate::tools::{self, Toolbox};
use crate::workspace::Workspace;
use human::Human;

pub(crate) use record::write_atomic;

/// Default limit on one `execute_shell` command without `timeout_s`.
const SHELL_TIMEOUT: Duration = Duration::from_secs(120);

const NUDGE: &str =
    "Continue with the tools. When the task is done, call task_complete with a summary.";

pub(crate) struct Agent {
    task: ServoTask,
    /// Heard once the gateway's live lines are followed (`live`).
    live_ready: Option<tokio::sync::oneshot::Receiver<()>>,
    root: PathBuf,
    tools: Toolbox,
    specs: Vec<ToolSpec>,
    /// The granted capabilities' tools (`name__tool`), from the gateway.
    capability_tools: Vec<String>,
    llm: Provider,
    audit: Audit,
    messages: Vec<ChatMessage>,
    usage: Usage,
    steps: u32,
    /// The gateway's routes: capabilities, children, verification (the
    /// human's desk is the same handle).
    desk: Arc<Desk>,
    /// The human in the loop, and the time budget's movable deadline.
    human: Human,
    /// Working time of earlier starts (a parked servo's).
    active_before: Duration,
    started: Instant,
    clock: Clock,
    /// Seals the session file (a key only the servo and foreman hold).
    seal: crate::seal::Seal,
    /// The session's journal between whole saves (saved through `&self`).
    journal: std::cell::RefCell<journal::Journal>,
    /// What the model is sent of `messages` (issue 26), every compaction
    /// so far, and context-length errors in a row.
    context: saheeli_protocol::context::ContextState,
    compactions: Vec<saheeli_protocol::context::ContextState>,
    context_errors: u32,
}

/// Where this start's time went (the audit log keeps its own share).
#[derive(Default)]
struct Clock {
    llm: Duration,
    inbox: Duration,
    tools: Duration,
    /// Session file writes (a `Cell`: the session is saved through `&self`).
    session: std::cell::Cell<Duration>,
}

/// How a step or a wait ended the loop.
pub(crate) type End = (ServoExit, Option<String>);

impl Agent {
    pub fn new(
        task: ServoTask,
        root: &Path,
        gateway: &str,
        prompt: String,
        mode: crate::privsep::Mode,
        seal: crate::seal::Seal,
    ) -> Result<Agent, String> {
        let ws =
            Workspace::new(root).map_err(|e| format!("workspace `{}`: {e}", root.display()))?;
        let llm = match &task.replay {
            Some(script) => Provider::Replay(Replay::new(script.clone())),
            None if task.model.starts_with("replay:") => {
                return Err(format!(
                    "model `{}` is a replay, but task.json has no `replay` script",
                    task.model
                ));
            }
            None => Provider::Gateway(Gateway::new(
                gateway,
                task.request_timeout_s.map(Duration::from_secs),
            )?),
        };
        // The model's text as it streams in, on stdout (issue 29).
        let live_ready = matches!(llm, Provider::Gateway(_)).then(|| crate::live::follow(gateway));
        let audit_path = ws.root().join(paths::audit_log(&task.task_id));
        let audit = Audit::open(&audit_path, true)
            .map_err(|e| format!("opening `{}`: {e}", audit_path.display()))?;
        let root = ws.root().to_path_buf();
        let gates = gates::Gates::new(&task.gates)?;
        let desk = Arc::new(Desk::new(gateway)?);
        let human = Human::new(desk.clone(), gates, &task);
        let mut specs = tools::specs();
        specs.extend(tools::human_specs(human.plans()));
        specs.extend(tools::step_start_spec(&task.steps));
        specs.extend(tools::step_spec(&task.steps));
        if task.delegate.is_some() {
            specs.extend(tools::delegate_specs());
        }
        let max_output = task.max_output_bytes.max(1024);
        let runner = Arc::new(crate::runner::Link::new(
            mode,
            root.clone(),
            max_output,
            SHELL_TIMEOUT,
        ));
        let mut agent = Agent {
            tools: Toolbox {
                ws,
                max_output,
                shell_timeout: SHELL_TIMEOUT,
                steps: task.steps.clone(),
                desk: Some(desk.clone()),
                shell: Arc::default(),
                shell_reset: Arc::default(),
                steps_started: Arc::default(),
                runner: Some(runner),
            },
            specs,
            capability_tools: Vec::new(),
            llm,
            audit,
            messages: vec![
                ChatMessage::system(prompt::system_prompt(&task)),
                ChatMessage::user(prompt),
            ],
            usage: Usage::default(),
            steps: 0,
            desk,
            human,
            active_before: Duration::ZERO,
            started: Instant::now(),
            clock: Clock::default(),
            seal,
            journal: Default::default(),
            context: Default::default(),
            compactions: Vec::new(),
            context_errors: 0,
            root,
            task,
            live_ready,
        };
        agent.narrow_tools();
        agent.load_parked_session()?;
        agent.load_resumed_session();
        Ok(agent)
    }

    pub async fn run(mut self) -> ServoExit {
        self.started = Instant::now();
        let left = self.budget().saturating_sub(self.active_before);
        *self.human.deadline.lock().unwrap() = tokio::time::Instant::from_std(self.started + left);
        let deadline = self.human.deadline.clone();
        let by_deadline = self.until_deadline();
        let mut term = signal(SignalKind::terminate()).ok();
        let terminated = async move {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::pin!(terminated);
        if self.human.parked.is_some() {
            self.audit.log(&AuditEvent::Unparked {
                ts: now(),
                step: self.steps,
            });
            info!(task_id = %self.task.task_id, "servo started again on its parked session");
        } else {
            self.audit.log(&AuditEvent::Start {
                ts: now(),
                task_id: self.task.task_id,
                model: self.task.model.clone(),
                max_steps: self.task.max_steps,
                timeout_s: self.task.timeout_s,
                agent: None,
            });
            info!(task_id = %self.task.task_id, model = %self.task.model, "servo started");
            // The session file is the servo's from the start: made before
            // the agent runs anything, so no name of it can be planted.
            self.save_session();
        }

        let outcome = tokio::select! {
            r = self.steps_loop() => r,
            _ = human::deadline_passed(deadline) => (ServoExit::TimeLimit, Some("time budget used up".to_string())),
            _ = tokio::time::sleep(by_deadline.unwrap_or_default()), if by_deadline.is_some() => (ServoExit::TimeLimit, Some("the task's deadline passed".to_string())),
            _ = &mut terminated => (ServoExit::Terminated, Some("stopped by SIGTERM".to_string())),
        };
        // The agent's processes end before anything else happens: a swarm
        // servo's upload is packed by a process of the agent's uid, which
        // the runner's last act (killing every such process) must not hit.
        if let Some(runner) = &self.tools.runner {
            runner.shutdown().await;
        }
        self.finish(outcome.0, outcome.1)
    }

    /// Steps until something ends the task; returns why.
    async fn steps_loop(&mut self) -> End {
        self.load_capabilities().await;
        if let Some(end) = self.unpark().await {
            return end;
        }
        loop {
            if self.task.snapshots {
                // The last step's tools have run and its session is saved.
                self.human.desk.snapshot(self.steps).await;
            }
            let t0 = Instant::now();
            let before = self.before_turn().await;
            self.clock.inbox += t0.elapsed();
            if let Some(end) = before {
                return end;
            }
            if self.steps >= self.task.max_steps {
                return (
                    ServoExit::MaxSteps,
                    Some(format!("reached max_steps ({})", self.task.max_steps)),
                );
            }
            self.keep_in_window(self.steps + 1, context::Cause::Threshold)
                .await;
            self.steps += 1;
            let step = self.steps;
            if let Some(ready) = self.live_ready.take() {
                // The first call's text is followed from its start (the
                // follow was opened at the servo's start).
                live_followed(ready).await;
            }
            let t0 = Instant::now();
            let turn = self.ask(step).await;
            let latency = t0.elapsed();
            self.clock.llm += latency;
            let latency_ms = latency.as_millis() as u64;
            let turn = match turn {
                Ok(t) => {
                    self.human.inbox_rounds = 0;
                    t
                }
                // The gateway looked at the inbox with the call: nothing
                // was asked of the model, and this step is not taken yet.
                Err(LlmError::Inbox(inbox)) => {
                    self.steps -= 1;
                    self.human.inbox_rounds += 1;
                    match self.take_inbox(inbox).await {
                        Some(end) => return end,
                        None => continue,
                    }
                }
                Err(LlmError::ContextLength(why)) => {
                    match self.too_long(step, latency_ms, why).await {
                        Some(end) => return end,
                        None => continue,
                    }
                }
                Err(e) => match self.llm_failed(step, latency_ms, e) {
                    Some(end) => return end,
                    None => continue,
                },
            };
            self.heard(step, latency_ms, &turn);
            let calls = turn.message.tool_calls.clone();
            let had_calls = !calls.is_empty();
            self.messages.push(turn.message);
            if !had_calls {
                let note = if turn.cut {
                    crate::llm::CUT_NOTE
                } else {
                    NUDGE
                };
                self.messages.push(ChatMessage::user(note));
            } else {
                // The turn is kept before its calls run: a servo killed
                // while they run (OOM, kill -9) loses only their results,
                // and a retry knows which call it died in (issue 30).
                self.save_session();
            }
            if let Some(end) = self.run_tools(step, calls).await {
                return end;
            }
            if turn.cut && had_calls {
                // After the tool results: they must follow their calls.
                self.messages.push(ChatMessage::user(crate::llm::CUT_NOTE));
            }
            self.note_budget();
            self.save_session();
        }
    }

    /// A turn arrived: its usage counted, the call audited.
    fn heard(&mut self, step: u32, latency_ms: u64, turn: &crate::llm::Turn) {
        self.context_errors = 0;
        self.usage.add(turn.usage);
        // The turn's text, once, capped (issue 29): what streamed live.
        let said = turn
            .message
            .content
            .as_deref()
            .filter(|t| !t.trim().is_empty())
            .map(saheeli_protocol::live::capped);
        self.audit.log(&AuditEvent::LlmCall {
            ts: now(),
            step,
            model: self.task.model.clone(),
            latency_ms,
            usage: turn.usage,
            error: None,
            text_cut: said.as_ref().map(|s| s.1 as u64).filter(|n| *n > 0),
            text: said.map(|s| s.0),
        });
        debug!(
            step,
            latency_ms,
            input_tokens = turn.usage.input_tokens,
            output_tokens = turn.usage.output_tokens,
            tool_calls = turn.message.tool_calls.len(),
            "LLM call"
        );
    }

    /// One LLM call; waits for an unreachable gateway are audited.
    async fn ask(&mut self, step: u32) -> Result<crate::llm::Turn, LlmError> {
        let view = self.view();
        let inbox_after = self.inbox_on_call().then(|| self.human.newest_note());
        let audit = &mut self.audit;
        self.llm
            .next_turn(&self.task.model, &view, &self.specs, inbox_after, |w| {
                audit.log(&match w {
                    Waiting::Started { error } => AuditEvent::GatewayWait {
                        ts: now(),
                        step,
                        error,
                    },
                    Waiting::Back { waited } => AuditEvent::GatewayBack {
                        ts: now(),
                        step,
                        waited_ms: waited.as_millis() as u64,
                    },
                })
            })
            .await
    }

    /// A failed LLM call: audited; ends the task, except an unusable answer,
    /// which the model hears about (None: go on).
    fn llm_failed(
        &mut self,
        step: u32,
        latency_ms: u64,
        e: LlmError,
    ) -> Option<(ServoExit, Option<String>)> {
        warn!(step, latency_ms, error = %e, "LLM call failed");
        self.audit.log(&AuditEvent::LlmCall {
            ts: now(),
            step,
            model: self.task.model.clone(),
            latency_ms,
            usage: Usage::default(),
            error: Some(e.to_string()),
            text: None,
            text_cut: None,
        });
        let exit = match e {
            LlmError::Exhausted => ServoExit::ReplayExhausted,
            // (An inbox is taken in the loop and never reaches here.)
            LlmError::Failed(_) | LlmError::ContextLength(_) | LlmError::Inbox(_) => {
                ServoExit::LlmError
            }
            LlmError::Budget(_) => ServoExit::Budget,
            // An error turn: the model hears about it and answers again.
            LlmError::Malformed(why) => {
                self.messages.push(ChatMessage::user(format!(
                    "[saheeli] Your last response could not be used ({why}). Please answer again."
                )));
                self.save_session();
                return None;
            }
        };
        Some((exit, Some(e.to_string())))
    }
}

/// Waits (a little) until the gateway's live lines are followed: a
/// gateway that does not serve them delays nothing for long.
async fn live_followed(ready: tokio::sync::oneshot::Receiver<()>) {
    let _ = tokio::time::timeout(Duration::from_secs(5), ready).await;
}
