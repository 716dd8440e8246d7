//! The agent's side of humans in the loop: `ask_user`, `task_blocked`,
//! approval gates and the plan gate (compiled in `gates`), the reply
//! awaited and applied. Injected messages, pauses and `pause_on:
//! [tool_error]` are in `pause`; parking (saving the session and exiting
//! while a human takes their time) in `park`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use saheeli_protocol::AuditEvent;
use saheeli_protocol::chat::{ChatMessage, ToolCall};
use saheeli_protocol::human::{Ask, Decision, Replied, Reply, Waiting};
use serde::Deserialize;
use tracing::{info, warn};

use super::{Agent, End};
use crate::audit::now;
use crate::tools::{Builtin, Human, Tool};

/// What stands in front of a tool call.
pub(super) enum Flow {
    /// Nothing: it runs.
    Go,
    /// It is not run; the model is told why.
    Refuse(&'static str),
    /// It waits for a human: an answer, a plan's approval, the call's
    /// approval, or an unblocking.
    Ask(Waiting),
    /// A plan-only run's plan: the task ends with it.
    PlanOnly(Vec<String>),
}

/// A gated call, as the human sees it.
fn approval(tool: &Tool) -> Waiting {
    Waiting::Approval {
        tool: tool.name().to_string(),
        arguments: tool.arguments().to_string(),
    }
}

/// Waits until the (movable) deadline has passed.
pub(crate) async fn deadline_passed(deadline: Arc<Mutex<tokio::time::Instant>>) {
    loop {
        let at = *deadline.lock().unwrap();
        tokio::time::sleep_until(at).await;
        if tokio::time::Instant::now() >= *deadline.lock().unwrap() {
            return;
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Question {
    question: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Plan {
    steps: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Blocked {
    reason: String,
    needed: String,
}

/// What the model hears of the calls of its turn after `task_blocked`.
pub(super) const NOT_RUN_BLOCKED: &str =
    "not run: task_blocked ended the turn; call it again once you are unblocked, if still needed";

impl Agent {
    /// A wait for a human is not working time: the deadline moves back.
    pub(super) fn waited_for(&mut self, d: Duration) {
        self.waited += d;
        *self.deadline.lock().unwrap() += d;
    }

    /// What a pending call waits for, rebuilt from its tool (None: the
    /// call cannot be parsed any more; then nothing waits).
    pub(super) fn waiting_for(&self, tool: &Tool) -> Option<Waiting> {
        let args = tool.arguments();
        Some(match tool {
            Tool::Human {
                tool: Human::Ask, ..
            } => Waiting::Answer {
                question: serde_json::from_str::<Question>(args).ok()?.question,
            },
            Tool::Human {
                tool: Human::Plan, ..
            } => Waiting::Plan {
                plan: serde_json::from_str::<Plan>(args).ok()?.steps,
            },
            Tool::Human {
                tool: Human::Blocked,
                ..
            } => {
                let b = serde_json::from_str::<Blocked>(args).ok()?;
                Waiting::Blocked {
                    reason: b.reason,
                    needed: b.needed,
                }
            }
            _ => approval(tool),
        })
    }

    /// What stands in front of a call: a question, a plan, a gate, or
    /// nothing (it runs).
    pub(super) fn gate(&self, tool: &Tool) -> Flow {
        let plan_gate = (self.gates.plan || self.task.plan_only) && !self.plan_approved;
        match tool {
            Tool::Human {
                tool: Human::Ask,
                arguments,
            } => match serde_json::from_str::<Question>(arguments) {
                Ok(q) if !q.question.trim().is_empty() => Flow::Ask(Waiting::Answer {
                    question: q.question,
                }),
                _ => {
                    Flow::Refuse("ask_user needs {\"question\": \"...\"} with a non-empty question")
                }
            },
            Tool::Human {
                tool: Human::Blocked,
                arguments,
            } => match serde_json::from_str::<Blocked>(arguments) {
                Ok(b) if !b.reason.trim().is_empty() && !b.needed.trim().is_empty() => {
                    Flow::Ask(Waiting::Blocked {
                        reason: b.reason,
                        needed: b.needed,
                    })
                }
                _ => Flow::Refuse(
                    "task_blocked needs {\"reason\": \"...\", \"needed\": \"...\"}, both non-empty",
                ),
            },
            Tool::Human {
                tool: Human::Plan,
                arguments,
            } => match serde_json::from_str::<Plan>(arguments) {
                Ok(p) if !p.steps.is_empty() && self.task.plan_only => Flow::PlanOnly(p.steps),
                Ok(p) if !p.steps.is_empty() => Flow::Ask(Waiting::Plan { plan: p.steps }),
                _ => Flow::Refuse(
                    "propose_plan needs {\"steps\": [\"...\", ...]} with at least one step",
                ),
            },
            _ if plan_gate && tool.acts() => Flow::Refuse(
                "not run: a plan must be approved first. Propose one with propose_plan {\"steps\": [...]} and wait for the answer.",
            ),
            // A step with `approve: true` starts on a person's approval.
            Tool::Builtin {
                tool: Builtin::StepStart,
                arguments,
            } if crate::tools::step_named(&self.task.steps, arguments)
                .is_some_and(|s| s.approve) =>
            {
                Flow::Ask(approval(tool))
            }
            // So does one whose `step_done` reaches it first (case N15).
            Tool::Builtin {
                tool: Builtin::StepDone,
                arguments,
            } if crate::tools::step_done_needs_approval(&self.tools, arguments) => {
                Flow::Ask(approval(tool))
            }
            _ if self.gates.holds(tool) => Flow::Ask(approval(tool)),
            _ => Flow::Go,
        }
    }

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
        let reply = match self.desk.ask(&ask).await {
            // Answered at once: the reply to what was just asked.
            Ok(Some(r)) => (r, None),
            Ok(None) => match self.await_reply(&call.id).await {
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

    /// The reply, waited for up to `park_after` (None: park now), with
    /// what the foreman recorded as asked.
    pub(super) async fn await_reply(&mut self, call_id: &str) -> Option<(Reply, Option<Waiting>)> {
        let t0 = Instant::now();
        let park_at = t0 + self.park_after();
        loop {
            let left = park_at.saturating_duration_since(Instant::now());
            let r = self.desk.reply(call_id, left).await;
            let done = match r {
                Ok(Replied {
                    reply: Some(reply),
                    waiting,
                }) => Some(Some((reply, waiting))),
                Ok(_) if Instant::now() >= park_at => Some(None),
                Ok(_) => None,
                Err(e) => {
                    warn!(error = %e.0, "the desk refused the wait; parking");
                    Some(None)
                }
            };
            if let Some(result) = done {
                self.waited_for(t0.elapsed());
                return result;
            }
        }
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
                self.plan_approved = true;
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
        };
        self.messages
            .push(ChatMessage::tool_result(call.id, result));
        self.save_session();
        None
    }
}

/// Whether the foreman's record of a question is this one. The desk
/// keeps at most 64 KiB of each text, the cut stated as
/// `…[N more bytes not shown]`: a cut text matches the one it was cut from.
fn same_ask(asked: &Waiting, waiting: &Waiting) -> bool {
    match (asked, waiting) {
        (
            Waiting::Approval { tool, arguments },
            Waiting::Approval {
                tool: t,
                arguments: a,
            },
        ) => same_text(tool, t) && same_text(arguments, a),
        (Waiting::Answer { question }, Waiting::Answer { question: q }) => same_text(question, q),
        (
            Waiting::Blocked { reason, needed },
            Waiting::Blocked {
                reason: r,
                needed: n,
            },
        ) => same_text(reason, r) && same_text(needed, n),
        // The desk keeps the first 100 steps.
        (Waiting::Plan { plan }, Waiting::Plan { plan: p }) => {
            plan.len() == p.len().min(100) && plan.iter().zip(p).all(|(a, b)| same_text(a, b))
        }
        _ => false,
    }
}

fn same_text(kept: &str, full: &str) -> bool {
    if kept == full {
        return true;
    }
    let Some(cut) = kept.rfind("…[") else {
        return false;
    };
    let (head, tail) = (&kept[..cut], &kept[cut..]);
    full.starts_with(head) && tail == format!("…[{} more bytes not shown]", full.len() - head.len())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(arguments: &str) -> Waiting {
        Waiting::Approval {
            tool: "execute_shell".into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn only_the_call_the_human_saw_matches() {
        let seen = approval(r#"{"command":"echo benign"}"#);
        assert!(same_ask(&seen, &seen.clone()));
        assert!(!same_ask(&seen, &approval(r#"{"command":"echo EVIL"}"#)));
        // The desk keeps 64 KiB of a text, the cut stated.
        let long = format!(r#"{{"command":"{}"}}"#, "a".repeat(70_000));
        let kept = format!(
            "{}…[{} more bytes not shown]",
            &long[..65536],
            long.len() - 65536
        );
        assert!(same_ask(&approval(&kept), &approval(&long)));
        let other = format!("{}b", &long[..long.len() - 1]);
        assert!(
            same_ask(&approval(&kept), &approval(&other)),
            "same head, same length"
        );
        assert!(!same_ask(&approval(&kept), &approval(&long[..60_000])));
        let question = Waiting::Answer {
            question: "which?".into(),
        };
        assert!(!same_ask(&question, &seen));
    }
}
