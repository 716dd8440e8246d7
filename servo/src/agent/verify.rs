//! The agent's side of verified outcomes: with `verify:` or `assess: true`
//! in its task, `task_complete` first asks the foreman to check the work.
//! Passed: complete.json is written, with every check. Failed: the model
//! gets the feedback as the result of its `task_complete` and goes on,
//! until the foreman says no attempt is left. The servo decides nothing
//! itself: the foreman counts the attempts. Before asking, it stops what
//! the agent left running in the background.

use saheeli_protocol::chat::ChatMessage;
use saheeli_protocol::verify::VerifyRequest;
use saheeli_protocol::{AuditEvent, ServoExit};
use tracing::{info, warn};

use super::{Agent, End};
use crate::audit::now;

/// Stops every process the agent left running (one that left its process
/// group survives `execute_shell`), so that nothing rewrites the workspace
/// while the checks run, restored `verify_files` included. Only inside a
/// servo container (PID 1 is the container's init and our parent): on any
/// other machine `kill(-1)` would reach the user's own processes.
fn stop_leftovers() {
    let in_container = std::path::Path::new("/.dockerenv").exists()
        // SAFETY: getppid and getpid cannot fail.
        && unsafe { libc::getppid() } == 1
        && std::process::id() != 1;
    if in_container {
        // SAFETY: kill only sends a signal; Linux spares the caller and PID 1.
        unsafe {
            libc::kill(-1, libc::SIGKILL);
        }
    }
}

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
        // The shell goes too; the model hears so at its next command.
        if self.tools.shell.lock().await.take().is_some() {
            self.tools
                .shell_reset
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        stop_leftovers();
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
