//! The agent's side of verified outcomes: with `verify:` or `assess: true`
//! in its task, `task_complete` first asks the foreman to check the work.
//! Passed: complete.json is written, with every check. Failed: the model
//! gets the feedback as the result of its `task_complete` and goes on,
//! until the foreman says no attempt is left. The servo decides nothing
//! itself: the foreman counts the attempts. Before asking, it stops what
//! the agent left running in the background (its tool runner does:
//! the servo cannot signal the agent's processes).

use saheeli_protocol::chat::ChatMessage;
use saheeli_protocol::verify::VerifyRequest;
use saheeli_protocol::{AuditEvent, ServoExit};
use tracing::{info, warn};

use super::{Agent, End};
use crate::audit::now;

impl Agent {
    /// `task_complete` with verification: Some when the task ends here.
    pub(super) async fn verify(
        &mut self,
        step: u32,
        call_id: String,
        message: String,
    ) -> Option<End> {
        info!(step, "task_complete: asking the foreman to verify");
        // The wait may be long: what the model did so far is saved first.
        self.save_session();
        // Every process of the agent goes (one that left its process group
        // survives `execute_shell`), its shell too: the model hears so at
        // its next command. The checks themselves run in a fresh container.
        self.tools.reset_agent(true, false).await;
        let req = VerifyRequest {
            call_id: call_id.clone(),
            message: message.clone(),
        };
        let verdict = match self.desk.verify(&req).await {
            Ok(v) => v,
            Err(e) => {
                warn!(error = %e.0, "the foreman refused to verify");
                let why = format!("verification could not run: {}", e.0);
                self.messages
                    .push(ChatMessage::tool_result(call_id, format!("error: {why}")));
                return Some((ServoExit::VerificationFailed, Some(why)));
            }
        };
        let this_attempt = verdict
            .checks
            .iter()
            .filter(|c| c.attempt == verdict.attempt)
            .cloned()
            .collect();
        self.audit.log(&AuditEvent::Verified {
            ts: now(),
            step,
            attempt: verdict.attempt,
            max_attempts: verdict.max_attempts,
            passed: verdict.passed,
            checks: this_attempt,
        });
        info!(
            step,
            attempt = verdict.attempt,
            passed = verdict.passed,
            "verification"
        );
        if verdict.passed {
            self.messages.push(ChatMessage::tool_result(
                call_id,
                "Verification passed. Task marked complete.",
            ));
            return Some(self.complete(message, verdict.checks));
        }
        self.messages
            .push(ChatMessage::tool_result(call_id, verdict.feedback.clone()));
        self.save_session();
        if verdict.limited {
            let why = format!(
                "the assessor found the objective cannot be met here (attempt {} of {}): \
                 more attempts cannot help",
                verdict.attempt, verdict.max_attempts
            );
            return Some((ServoExit::Limited, Some(why)));
        }
        if verdict.is_final_failure() {
            let why = format!(
                "verification failed on the last allowed attempt ({} of {})",
                verdict.attempt, verdict.max_attempts
            );
            return Some((ServoExit::VerificationFailed, Some(why)));
        }
        None
    }
}
