//! A turn's tool calls: each parsed once into a [`Tool`], through its
//! gate (`Human::gate`), run by the one dispatch here, and answered: audited,
//! its result added to the conversation.

use std::time::Instant;

use saheeli_protocol::AuditEvent;
use saheeli_protocol::chat::{ChatMessage, ToolCall};
use saheeli_protocol::human::Waiting;
use saheeli_protocol::tools::allowed_by;
use tracing::debug;

use super::ask::NOT_RUN_BLOCKED;
use super::human::Flow;
use super::{Agent, End};
use crate::audit::now;
use crate::tools::{Tool, ToolOutput, unknown_tool};

impl Agent {
    /// Runs a turn's tool calls in order, auditing each; Some when one of
    /// them ended the task (`task_complete`) or the servo parked.
    pub(super) async fn run_tools(&mut self, step: u32, calls: Vec<ToolCall>) -> Option<End> {
        let mut calls = calls.into_iter();
        while let Some(call) = calls.next() {
            if let Some(end) = self.handle_call(step, call, &mut calls).await {
                return Some(end);
            }
        }
        None
    }

    /// One tool call with whatever stands in front of it (a question, a
    /// plan, a gate); `rest` are the turn's later calls, saved on a park.
    pub(super) async fn handle_call(
        &mut self,
        step: u32,
        call: ToolCall,
        rest: &mut std::vec::IntoIter<ToolCall>,
    ) -> Option<End> {
        let t0 = Instant::now();
        let tool = match Tool::parse(&call, &self.specs) {
            Ok(tool) => tool,
            Err(out) => return self.answer(step, call, out, t0).await,
        };
        match self.human.gate(&tool, &self.tools) {
            Flow::Go => self.run_call(step, call, &tool).await,
            Flow::Refuse(why) => self.refuse(step, call, why),
            Flow::PlanOnly(plan) => Some(self.plan_only(step, call, plan)),
            Flow::Ask(waiting) => {
                if let Waiting::Blocked { .. } = waiting {
                    // It ends the turn: the turn's later calls are not run
                    // (and are not saved to run after a park).
                    for c in rest.by_ref() {
                        self.refuse(step, c, NOT_RUN_BLOCKED);
                    }
                }
                self.ask_human(step, call, tool, waiting, rest).await
            }
        }
    }

    /// Runs one tool call (no gate in front of it any more) and answers
    /// it; Some when it ended the task.
    pub(super) async fn run_call(&mut self, step: u32, call: ToolCall, tool: &Tool) -> Option<End> {
        let t0 = Instant::now();
        let out = self.run_tool(&call.id, tool).await;
        self.answer(step, call, out, t0).await
    }

    /// The one dispatch: a delegate tool and a granted capability's go
    /// to the foreman, a built-in one to the toolbox (unless the task was
    /// not offered it).
    async fn run_tool(&mut self, call_id: &str, tool: &Tool) -> ToolOutput {
        match tool {
            // Only a task granted `delegate:` has these tools.
            Tool::Delegate { tool, arguments } if self.task.delegate.is_some() => {
                let out = self.delegate(call_id, *tool, arguments).await;
                return self.tools.capped(out);
            }
            Tool::Capability { name, arguments } if self.granted(name) => {
                return self.capability(name, arguments).await;
            }
            _ => {}
        }
        let name = tool.name();
        if !self.specs.iter().any(|t| t.function.name == name) {
            return unknown_tool(name, &self.specs);
        }
        let narrowed = !allowed_by(self.task.tools.as_deref(), name);
        if narrowed || matches!(tool, Tool::Capability { .. }) {
            return ToolOutput::error(format!("`{name}` is not one of this task's tools"));
        }
        match tool {
            Tool::Builtin { tool, arguments } => self.tools.run(*tool, arguments).await,
            // The human layer answers its own tools before this.
            other => self.tools.dispatch(other.name(), other.arguments()).await,
        }
    }

    /// A call's answer: audited, its result for the model; `task_complete`
    /// ends the task (after verification, when the task asks for it).
    async fn answer(
        &mut self,
        step: u32,
        call: ToolCall,
        out: ToolOutput,
        t0: Instant,
    ) -> Option<End> {
        let took = t0.elapsed();
        self.clock.tools += took;
        let duration_ms = took.as_millis() as u64;
        debug!(step, tool = %call.function.name, ok = out.ok, duration_ms, "tool call");
        self.audit.log(&AuditEvent::ToolCall {
            ts: now(),
            step,
            tool: call.function.name.clone(),
            arguments: call.function.arguments.clone(),
            ok: out.ok,
            exit_code: out.exit_code,
            result_bytes: out.text.len(),
            truncated: out.truncated,
            duration_ms,
        });
        if let Some(message) = out.complete {
            if self.task.verify {
                return self.verify(step, call.id, message).await;
            }
            self.messages
                .push(ChatMessage::tool_result(call.id, out.text));
            return Some(self.complete(message, Vec::new()));
        }
        self.messages
            .push(ChatMessage::tool_result(call.id, out.text.clone()));
        if !out.ok && self.task.pause_on_tool_error {
            self.breakpoint(&call.function.name, &out.text).await;
        }
        None
    }
}
