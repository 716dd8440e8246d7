//! Saheeli's own tools for a third-party agent, answered by the servo:
//! `ask_user`, `task_complete` and (in a template with steps) `step_done`,
//! reached by `servo mcp` (the agent's MCP server) on the loopback
//! listener at `/saheeli/mcp/tools` and `/saheeli/mcp/call`. Each goes
//! to the foreman through the servo's desk, as the built-in loop's do:
//! `ask_user` makes the task `waiting_human` until someone answers;
//! `task_complete` records the final message and, with `verify:` or
//! `assess:`, asks the foreman to check the work, its feedback coming
//! back as the tool's result (a final failure ends the task).
//!
//! The agent's own shell can call these routes too: it gains nothing it
//! was not given through MCP. A `step_done` is the foreman's to decide: a
//! gated step waits for a person's approval, a breakpoint before a step
//! stops there, and a failed check leaves the step open.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use saheeli_protocol::human::{Ask, Decision, Replied, Reply, Waiting};
use saheeli_protocol::template::{Step, StepDone, StepHeld, StepsDone};
use saheeli_protocol::verify::{Check, VerifyRequest};
use saheeli_protocol::{ServoExit, ServoTask};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::desk::Desk;

/// The longest question or message taken (the rest is cut).
const MAX_TEXT: usize = 64 * 1024;
/// One wait for a reply; the servo asks again until one comes.
const REPLY_WAIT: Duration = Duration::from_secs(60);

/// What the agent said through these tools, read when it exits.
#[derive(Default)]
pub(crate) struct Said {
    /// `task_complete`'s message, the last one.
    pub message: Option<String>,
    /// The checks of a passed verification.
    pub checks: Option<Vec<Check>>,
    /// Set when a call ended the task (verification failed for the last
    /// time): the agent is stopped.
    pub end: Option<(ServoExit, String)>,
}

pub(crate) struct Own {
    desk: Option<Desk>,
    steps: Vec<Step>,
    verify: bool,
    seq: AtomicU64,
    pub said: Mutex<Said>,
    /// Set when `said.end` is.
    pub ended: tokio::sync::Notify,
    /// How long the agent waited for people: its time budget moves back
    /// by as much.
    pub waited: Mutex<Duration>,
}

fn text(t: impl Into<String>, is_error: bool) -> Value {
    json!({"content": [{"type": "text", "text": t.into()}], "isError": is_error})
}

fn cut(s: &str) -> String {
    if s.len() <= MAX_TEXT {
        return s.to_string();
    }
    let mut end = MAX_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// What the agent is told of a `step_done`'s answer: done only when the
/// foreman recorded it (case N15: a failed check was told "marked done").
fn told(name: &str, answer: Result<StepsDone, crate::desk::Refused>) -> Value {
    match answer {
        Ok(StepsDone {
            held: Some(held), ..
        }) => text(held.told(name), true),
        Ok(StepsDone {
            check_failed: Some(why),
            ..
        }) => text(why, true),
        Ok(d) => text(
            format!(
                "Step `{name}` marked done. Steps done so far: {}.",
                d.done.join(", ")
            ),
            false,
        ),
        Err(e) => text(format!("error: the step was not recorded: {}", e.0), true),
    }
}

/// `arguments[key]` as a non-empty string.
fn arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
}

impl Own {
    pub fn new(task: &ServoTask, gateway: &str) -> Own {
        let desk = match Desk::new(gateway) {
            Ok(d) => Some(d),
            Err(e) => {
                warn!(error = %e, "no desk: ask_user, step_done and verification will fail");
                None
            }
        };
        Own {
            desk,
            steps: task.steps.clone(),
            verify: task.verify,
            seq: AtomicU64::new(0),
            said: Mutex::new(Said::default()),
            ended: tokio::sync::Notify::new(),
            waited: Mutex::new(Duration::ZERO),
        }
    }

    /// Tells the foreman the agent's own session could not be restored
    /// (issue 51): the retry's trail says `restore_incomplete`.
    pub async fn restore_incomplete(&self, why: &str) {
        let Some(desk) = &self.desk else { return };
        if let Err(e) = desk.restore_incomplete(why).await {
            warn!(error = %e.0, "restore_incomplete not reported to the foreman");
        }
    }

    /// The tools, as MCP's `tools/list` result.
    pub fn list(&self) -> Value {
        let mut names = vec!["ask_user", "task_complete"];
        if !self.steps.is_empty() {
            names.push("step_done");
        }
        let tools: Vec<Value> = names
            .into_iter()
            .filter_map(|n| {
                let row = saheeli_protocol::tools::built_in(n)?;
                let schema = match row.parameters {
                    Some(p) => p(),
                    None => crate::tools::step_spec(&self.steps)?.function.parameters,
                };
                let description = if n == "task_complete" {
                    format!(
                        "{} Call it once, when done, then finish your turn.",
                        row.description
                    )
                } else {
                    row.description.to_string()
                };
                Some(json!({"name": n, "description": description, "inputSchema": schema}))
            })
            .collect();
        json!({ "tools": tools })
    }

    /// One `tools/call` (`{name, arguments}`), as MCP's result.
    pub async fn call(&self, params: &Value) -> Value {
        let name = params["name"].as_str().unwrap_or("");
        let args = &params["arguments"];
        let desk = match (&self.desk, name) {
            (Some(d), _) => d,
            (None, _) => return text("error: the servo has no desk to the foreman", true),
        };
        let id = format!(
            "mcp_{}_{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0),
            self.seq.fetch_add(1, Ordering::Relaxed)
        );
        match name {
            "ask_user" => match arg(args, "question") {
                Some(q) => self.ask_user(desk, id, cut(q)).await,
                None => text(
                    "error: ask_user needs {\"question\": \"...\"} with a non-empty question",
                    true,
                ),
            },
            "task_complete" => match arg(args, "message") {
                Some(m) => self.task_complete(desk, id, cut(m)).await,
                None => text(
                    "error: task_complete needs {\"message\": \"...\"}, a summary of what was done",
                    true,
                ),
            },
            "step_done" if !self.steps.is_empty() => {
                let (Some(step), Some(evidence)) = (arg(args, "name"), arg(args, "evidence"))
                else {
                    return text(
                        "error: step_done needs {\"name\": \"...\", \"evidence\": \"...\"}, both non-empty",
                        true,
                    );
                };
                if !self.steps.iter().any(|s| s.name == step.trim()) {
                    let names: Vec<&str> = self.steps.iter().map(|s| s.name.as_str()).collect();
                    return text(
                        format!(
                            "error: unknown step `{step}`; the steps are: {}",
                            names.join(", ")
                        ),
                        true,
                    );
                }
                let done = StepDone {
                    name: step.trim().to_string(),
                    evidence: cut(evidence),
                };
                self.step_done(desk, id, done).await
            }
            other => text(
                format!(
                    "error: unknown tool `{other}`; this server has ask_user, task_complete and step_done (with steps)"
                ),
                true,
            ),
        }
    }

    async fn ask_user(&self, desk: &Desk, call_id: String, question: String) -> Value {
        info!(call = %call_id, "ask_user: waiting for a human");
        match self
            .wait_for_human(desk, call_id, Waiting::Answer { question })
            .await
        {
            Ok(Some(r)) => text(
                format!("{} answered: {}", r.by, r.text.unwrap_or_default()),
                false,
            ),
            Ok(None) => text("error: the question got no answer", true),
            Err(why) => text(format!("error: nobody could be asked: {why}"), true),
        }
    }

    /// Asks the desk and waits for the reply (None: the wait was refused);
    /// Err: nobody could be asked.
    async fn wait_for_human(
        &self,
        desk: &Desk,
        call_id: String,
        waiting: Waiting,
    ) -> Result<Option<Reply>, String> {
        let t0 = Instant::now();
        let ask = Ask {
            call_id: call_id.clone(),
            waiting,
        };
        let reply = match desk.ask(&ask).await {
            Ok(Some(r)) => Some(r),
            Ok(None) => loop {
                match desk.reply(&call_id, REPLY_WAIT).await {
                    Ok(Replied { reply: Some(r), .. }) => break Some(r),
                    Ok(_) => continue,
                    Err(e) => {
                        warn!(error = %e.0, "the desk refused the wait");
                        break None;
                    }
                }
            },
            Err(e) => return Err(e.0),
        };
        *self.waited.lock().unwrap() += t0.elapsed();
        Ok(reply)
    }

    /// `step_done`: the step is marked only as the foreman says. A gated
    /// step not started waits for a person's approval of this call first
    /// (the call that reaches a step first is its start); a failed check,
    /// or a breakpoint before the step, leaves it open, and the agent is
    /// told so, never that it is done.
    async fn step_done(&self, desk: &Desk, call_id: String, done: StepDone) -> Value {
        let mut answer = desk.step_done(&done).await;
        if let Ok(StepsDone {
            held: Some(StepHeld::NeedsApproval),
            ..
        }) = &answer
        {
            info!(call = %call_id, step = %done.name, "step_done: waiting for an approval");
            let arguments = json!({"name": done.name, "evidence": done.evidence}).to_string();
            let waiting = Waiting::Approval {
                tool: "step_done".into(),
                arguments,
            };
            match self.wait_for_human(desk, call_id, waiting).await {
                Ok(Some(r)) if r.decision == Decision::Approve => {
                    answer = desk.step_done(&done).await;
                }
                Ok(Some(r)) => {
                    let note = r
                        .text
                        .map(|t| format!(" Their note: {t}"))
                        .unwrap_or_default();
                    return text(
                        format!(
                            "error: {} denied step `{}`, so it was not done.{note}",
                            r.by, done.name
                        ),
                        true,
                    );
                }
                Ok(None) => return text("error: the approval got no answer", true),
                Err(why) => return text(format!("error: nobody could be asked: {why}"), true),
            }
        }
        told(&done.name, answer)
    }

    async fn task_complete(&self, desk: &Desk, call_id: String, message: String) -> Value {
        if !self.verify {
            self.said.lock().unwrap().message = Some(message);
            return text(
                "Recorded. The task completes when you finish: end your turn now.",
                false,
            );
        }
        info!(call = %call_id, "task_complete: asking the foreman to verify");
        let req = VerifyRequest {
            call_id,
            message: message.clone(),
        };
        let verdict = match desk.verify(&req).await {
            Ok(v) => v,
            Err(e) => {
                let why = format!("verification could not run: {}", e.0);
                self.end(ServoExit::VerificationFailed, why.clone());
                return text(format!("error: {why}"), true);
            }
        };
        info!(
            attempt = verdict.attempt,
            passed = verdict.passed,
            "verification"
        );
        if verdict.passed {
            let mut said = self.said.lock().unwrap();
            said.message = Some(message);
            said.checks = Some(verdict.checks);
            return text(
                "Verification passed. Task marked complete: end your turn now.",
                false,
            );
        }
        if verdict.is_final_failure() {
            self.end(
                ServoExit::VerificationFailed,
                format!(
                    "verification failed on the last allowed attempt ({} of {})",
                    verdict.attempt, verdict.max_attempts
                ),
            );
        }
        text(verdict.feedback, true)
    }

    /// Verifies the final answer of an agent that exited without a passed
    /// `task_complete` (one attempt: the agent is gone). The checks, or
    /// why the task did not pass.
    pub async fn verify_at_exit(&self, message: &str) -> Result<Vec<Check>, String> {
        let Some(desk) = &self.desk else {
            return Err("verification could not run: the servo has no desk".into());
        };
        let req = VerifyRequest {
            call_id: "agent-exit".into(),
            message: message.to_string(),
        };
        let v = desk
            .verify(&req)
            .await
            .map_err(|e| format!("verification could not run: {}", e.0))?;
        if v.passed {
            Ok(v.checks)
        } else {
            Err(format!(
                "verification failed (attempt {} of {}) after the agent exited",
                v.attempt, v.max_attempts
            ))
        }
    }

    fn end(&self, exit: ServoExit, why: String) {
        self.said.lock().unwrap().end = Some((exit, why));
        self.ended.notify_one();
    }

    /// Whether the task was verified (or asked for no verification).
    pub fn verify(&self) -> bool {
        self.verify
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_told_done_only_when_the_foreman_recorded_it() {
        let answer = |check_failed: Option<&str>, held| {
            Ok(StepsDone {
                done: vec!["a".into()],
                check_failed: check_failed.map(str::to_string),
                held,
            })
        };
        let failed = told(
            "b",
            answer(Some("[saheeli] Step `b` is not done: exit 1"), None),
        );
        assert_eq!(failed["isError"], true);
        let said = failed["content"][0]["text"].as_str().unwrap();
        assert!(!said.contains("marked done"), "{said}");
        assert!(said.contains("is not done"), "{said}");
        let held = told("b", answer(None, Some(StepHeld::BreakpointBefore)));
        assert_eq!(held["isError"], true);
        assert!(
            held["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("not done yet")
        );
        let gated = told("b", answer(None, Some(StepHeld::NeedsApproval)));
        assert!(
            gated["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("approval")
        );
        let done = told("a", answer(None, None));
        assert_eq!(done["isError"], false);
        assert_eq!(
            done["content"][0]["text"],
            "Step `a` marked done. Steps done so far: a."
        );
    }
}
