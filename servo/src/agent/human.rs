//! The human in the loop: `Human` holds what the agent knows of them
//! (the desk, the approval and plan gates compiled in `gates`, the plan's
//! approval, what a parked servo waits for, injected messages, the wait
//! clock) and decides what stands in front of a tool call (`gate`). The
//! agent's side (asking, applying the reply) is in `ask`; injected
//! messages, pauses and `pause_on: [tool_error]` in `pause`; parking
//! (saving the session and exiting while a human takes their time) in `park`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use saheeli_protocol::ServoTask;
use saheeli_protocol::human::{Note, Parked, Replied, Reply, Waiting};
use serde::Deserialize;
use tracing::warn;

use super::gates::Gates;
use crate::desk::Desk;
use crate::tools::{self, Builtin, Tool, Toolbox};

/// The default of `park_after`.
const PARK_AFTER: Duration = Duration::from_secs(10);

/// The human in the loop, as the agent sees them: their desk (asked,
/// answered, messages and pauses), the task's gates, the plan's approval,
/// what a parked servo waits for, and the wait clock (waits for humans,
/// and for children, are not working time).
pub(crate) struct Human {
    /// The foreman's desk (the agent holds the same handle, for the
    /// gateway's other routes).
    pub desk: Arc<Desk>,
    gates: Gates,
    /// A plan-only run: the plan is the result.
    plan_only: bool,
    pub plan_approved: bool,
    /// What a parked servo was waiting for when it stopped.
    pub parked: Option<Parked>,
    /// Injected messages already in the conversation.
    pub notes: Vec<i64>,
    /// When the time budget runs out; pushed back by waits for humans.
    pub deadline: Arc<Mutex<tokio::time::Instant>>,
    /// Waits of this start.
    pub waited: Duration,
    /// During a wait: the working time it had left when the wait began
    /// (the deadline stands still meanwhile, however long the wait, a
    /// frozen servo's included: issue 51).
    held: Option<Duration>,
    /// How long a wait lasts before the servo parks.
    pub park_after: Duration,
    /// Calls answered in a row with the inbox instead of a turn.
    pub inbox_rounds: u32,
}

/// What stands in front of a tool call.
#[derive(Debug, PartialEq)]
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

/// A look this much later than asked for means the servo did not run
/// meanwhile (its container was frozen, issue 51).
const STOOD_STILL: Duration = Duration::from_secs(1);

/// Waits until the (movable) deadline has passed. It is read again at
/// least every second: a wait that ends moves it nearer again. A look
/// that comes late by more than [`STOOD_STILL`] moves it back by the
/// delay: the servo was frozen (a model call the gateway held, issue 51)
/// and that time was not its own; the foreman does not count it either.
pub(crate) async fn deadline_passed(deadline: Arc<Mutex<tokio::time::Instant>>) {
    loop {
        let at = *deadline.lock().unwrap();
        let look = (tokio::time::Instant::now() + Duration::from_secs(1)).min(at);
        tokio::time::sleep_until(look).await;
        let late = tokio::time::Instant::now().saturating_duration_since(look);
        let mut at = deadline.lock().unwrap();
        if late > STOOD_STILL {
            *at += late;
        }
        if tokio::time::Instant::now() >= *at {
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

impl Human {
    pub fn new(desk: Arc<Desk>, gates: Gates, task: &ServoTask) -> Human {
        Human {
            desk,
            gates,
            plan_only: task.plan_only,
            plan_approved: false,
            parked: None,
            notes: Vec::new(),
            deadline: Arc::new(Mutex::new(tokio::time::Instant::now())),
            waited: Duration::ZERO,
            held: None,
            park_after: task
                .park_after_ms
                .map(Duration::from_millis)
                .unwrap_or(PARK_AFTER),
            inbox_rounds: 0,
        }
    }

    /// Whether the model is offered `propose_plan`.
    pub fn plans(&self) -> bool {
        self.gates.plan || self.plan_only
    }

    /// A wait begins: the deadline stands still until [`Human::waited_for`]
    /// (a servo frozen meanwhile must not wake up past its deadline).
    pub fn wait_begins(&mut self) {
        let mut at = self.deadline.lock().unwrap();
        let now = tokio::time::Instant::now();
        if self.held.is_none() {
            self.held = Some(at.saturating_duration_since(now));
            *at = now + Duration::from_secs(365 * 86_400);
        }
    }

    /// A wait for a human is not working time: the deadline moves back
    /// (by `d`, or to what was left when [`Human::wait_begins`] held it).
    pub fn waited_for(&mut self, d: Duration) {
        self.waited += d;
        let mut at = self.deadline.lock().unwrap();
        match self.held.take() {
            Some(left) => *at = tokio::time::Instant::now() + left,
            None => *at += d,
        }
    }

    /// What a pending call waits for, rebuilt from its tool (None: the
    /// call cannot be parsed any more; then nothing waits).
    pub fn waiting_for(&self, tool: &Tool) -> Option<Waiting> {
        let args = tool.arguments();
        Some(match tool {
            Tool::Human {
                tool: tools::Human::Ask,
                ..
            } => Waiting::Answer {
                question: serde_json::from_str::<Question>(args).ok()?.question,
            },
            Tool::Human {
                tool: tools::Human::Plan,
                ..
            } => Waiting::Plan {
                plan: serde_json::from_str::<Plan>(args).ok()?.steps,
            },
            Tool::Human {
                tool: tools::Human::Blocked,
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
    /// `tools` answers whether a step waits for an approval.
    pub fn gate(&self, tool: &Tool, tools: &Toolbox) -> Flow {
        let plan_gate = (self.gates.plan || self.plan_only) && !self.plan_approved;
        match tool {
            Tool::Human {
                tool: tools::Human::Ask,
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
                tool: tools::Human::Blocked,
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
                tool: tools::Human::Plan,
                arguments,
            } => match serde_json::from_str::<Plan>(arguments) {
                Ok(p) if !p.steps.is_empty() && self.plan_only => Flow::PlanOnly(p.steps),
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
            } if crate::tools::step_named(&tools.steps, arguments)
                .is_some_and(|s| s.approve.required) =>
            {
                Flow::Ask(approval(tool))
            }
            // So does one whose `step_done` reaches it first (case N15).
            Tool::Builtin {
                tool: Builtin::StepDone,
                arguments,
            } if crate::tools::step_done_needs_approval(tools, arguments) => {
                Flow::Ask(approval(tool))
            }
            _ if self.gates.holds(tool) => Flow::Ask(approval(tool)),
            _ => Flow::Go,
        }
    }

    /// The reply, waited for up to `park_after` (None: park now), with
    /// what the foreman recorded as asked.
    pub async fn await_reply(&mut self, call_id: &str) -> Option<(Reply, Option<Waiting>)> {
        let t0 = Instant::now();
        self.wait_begins();
        let park_at = t0 + self.park_after;
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

    /// The newest injected message in the conversation (0: none).
    pub fn newest_note(&self) -> i64 {
        self.notes.iter().copied().max().unwrap_or(0)
    }

    /// The injected messages not yet in the conversation.
    pub fn unseen(&self, notes: Vec<Note>) -> Vec<Note> {
        notes
            .into_iter()
            .filter(|n| !self.notes.contains(&n.id))
            .collect()
    }
}

/// Whether the foreman's record of a question is this one. The desk
/// keeps at most 64 KiB of each text, the cut stated as
/// `…[N more bytes not shown]`: a cut text matches the one it was cut from.
pub(super) fn same_ask(asked: &Waiting, waiting: &Waiting) -> bool {
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

#[cfg(test)]
#[path = "human_tests.rs"]
mod tests;
