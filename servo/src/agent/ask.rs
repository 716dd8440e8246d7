//! The agent's side of a human's answer: a call refused or asked, the
//! reply awaited (parking when it is long) and applied, and a plan-only
//! run's plan as its result.

use saheeli_protocol::AuditEvent;
use saheeli_protocol::chat::{ChatMessage, ToolCall};
use saheeli_protocol::human::{Ask, Decision, Reply, Waiting};
use tracing::{info, warn};

use super::human::same_ask;
use super::{Agent, End};
use crate::audit::now;
use crate::tools::Tool;

/// What the model hears of the calls of its turn after `task_blocked`.
pub(super) const NOT_RUN_BLOCKED: &str =
    "not run: task_blocked ended the turn; call it again once you are unblocked, if still needed";

impl Agent {
    /// A call that is not run: the model is told why.
    pub(super) fn refuse(&mut self, step: u32, call: ToolCall, why: &str) -> Option<End> {
        self.audit.log(&AuditEvent::ToolCall {
            ts: now(),
            step,
            tool: call.function.name.clone(),
            arguments: call.function.arguments.clone(),
            ok: false,
            exit_code: None,
            result_bytes: why.len(),
            truncated: false,
            duration_ms: 0,
        });
        self.messages
            .push(ChatMessage::tool_result(call.id, format!("error: {why}")));
        None
    }

    /// `--plan-only`: the plan is the result.
    pub(super) fn plan_only(&mut self, step: u32, call: ToolCall, plan: Vec<String>) -> End {
        let text: String = plan
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{}. {s}\n", i + 1))
            .collect();
        self.audit.log(&AuditEvent::ToolCall {
            ts: now(),
            step,
            tool: call.function.name.clone(),
            arguments: call.function.arguments.clone(),
            ok: true,
            exit_code: None,
            result_bytes: 0,
            truncated: false,
            duration_ms: 0,
        });
        self.messages.push(ChatMessage::tool_result(
            call.id,
            "Plan recorded (plan-only run: nothing is carried out).",
        ));
        self.complete(
            format!("Plan (plan-only run, nothing was carried out):\n{text}"),
            Vec::new(),
        )
    }

    /// Asks the desk and waits for the reply (parking when it is long).
    pub(super) async fn ask_human(
        &mut self,
        step: u32,
        call: ToolCall,
        tool: Tool,
        waiting: Waiting,
        rest: &mut std::vec::IntoIter<ToolCall>,
    ) -> Option<End> {
        self.audit.log(&AuditEvent::Asked {
            ts: now(),
            step,
            call_id: call.id.clone(),
            waiting: waiting.clone(),
        });
        info!(step, call = %call.id, "waiting for a human");
        let ask = Ask {
            call_id: call.id.clone(),
            waiting: waiting.clone(),
        };
        let reply = match self.human.desk.ask(&ask).await {
            // Answered at once: the reply to what was just asked.
            Ok(Some(r)) => (r, None),
            Ok(None) => match self.human.await_reply(&call.id).await {
                Some(r) => r,
                None => return Some(self.park_on(step, &call, rest.collect())),
            },
            Err(e) => {
                let why = format!("nobody could be asked: {}", e.0);
                return self.refuse(step, call, &why);
            }
        };
        self.apply_reply(step, call, tool, waiting, reply).await
    }

    /// What the model hears of a reply; an approved call runs now, if it
    /// is the call the human saw: `asked` (the foreman's record) must match
    /// what this servo's session says it waits for, which the workspace's
    /// owner could have rewritten while it was parked (case 39).
    pub(super) async fn apply_reply(
        &mut self,
        step: u32,
        call: ToolCall,
        tool: Tool,
        waiting: Waiting,
        (reply, asked): (Reply, Option<Waiting>),
    ) -> Option<End> {
        if let Some(asked) = asked
            && !same_ask(&asked, &waiting)
        {
            warn!(call = %call.id, "the reply is for another call than the session's; not run");
            let why = "not run: the call the human replied to differs from this one (the \
                       saved session was changed); ask again if it is still needed";
            return self.refuse(step, call, why);
        }
        self.audit.log(&AuditEvent::Replied {
            ts: now(),
            step,
            call_id: call.id.clone(),
            reply: reply.clone(),
            waited_ms: 0,
        });
        let text = reply.text.clone().unwrap_or_default();
        let result = match (waiting, reply.decision) {
            (Waiting::Approval { .. }, Decision::Approve) => {
                return self.run_call(step, call, &tool).await;
            }
            (Waiting::Approval { .. }, _) => format!(
                "[saheeli] {} denied this call, so it was not run.{} Do something else, or ask with ask_user.",
                reply.by,
                reason_sentence(&text)
            ),
            (Waiting::Plan { .. }, Decision::Approve) => {
                self.human.plan_approved = true;
                format!(
                    "[saheeli] {} approved the plan. Carry it out.{}",
                    reply.by,
                    reason_sentence(&text)
                )
            }
            (Waiting::Plan { .. }, _) => format!(
                "[saheeli] {} rejected the plan.{} Revise the plan and propose it again with propose_plan.",
                reply.by,
                feedback_sentence(&text)
            ),
            (Waiting::Answer { .. }, _) => format!("{} answered: {text}", reply.by),
            (Waiting::Blocked { .. }, _) => {
                format!("[saheeli] {} unblocked the task: {text}", reply.by)
            }
            // The foreman's egress proxy asks those, never the servo.
            (Waiting::Egress { .. }, _) => format!("{} replied: {text}", reply.by),
        };
        self.messages
            .push(ChatMessage::tool_result(call.id, result));
        self.save_session();
        None
    }
}

fn reason_sentence(text: &str) -> String {
    if text.trim().is_empty() {
        String::new()
    } else {
        format!(" Their note: {text}")
    }
}

fn feedback_sentence(text: &str) -> String {
    if text.trim().is_empty() {
        String::new()
    } else {
        format!(" Their feedback: {text}")
    }
}
