//! Parking: a servo that waits for a human longer than `park_after`
//! saves its session and exits; started again, it reads that session back
//! and goes on with what it was waiting for.

use std::time::Duration;

use saheeli_protocol::chat::ToolCall;
use saheeli_protocol::human::Parked;
use saheeli_protocol::{AuditEvent, ServoExit, paths};

use super::{Agent, End};
use crate::audit::now;
use crate::tools::Tool;

impl Agent {
    /// Reads the session a parked servo left, if there is one.
    pub(super) fn load_parked_session(&mut self) -> Result<(), String> {
        let path = self.root.join(paths::session(&self.task.task_id));
        // The workspace is the agent's: a link or a FIFO put there is not
        // followed, nor waited on.
        let Some(bytes) = super::resume::read_session_file(&path)? else {
            return Ok(());
        };
        // Only a session that says it parked is gone on from, and only if
        // its seal holds: the file lies in the agent's workspace.
        let claims_parked = serde_json::from_slice::<serde_json::Value>(&bytes)
            .map_err(|e| format!("`{}` is not a session: {e}", path.display()))?
            .get("parked")
            .is_some_and(|p| !p.is_null());
        if !claims_parked {
            return Ok(());
        }
        let (mut session, head) = self
            .seal
            .open_head(&bytes)
            .map_err(|e| format!("the parked session `{}`: {e}", path.display()))?;
        // A start that went on from the park and was killed: its journal
        // says so (`parked` gone), and the servo starts afresh as before.
        let journal = self.root.join(paths::session_journal(&self.task.task_id));
        if let Some(lines) = super::resume::read_session_file(&journal)? {
            super::journal::apply(&mut session, head, &lines, &self.seal);
            if session.parked.is_none() {
                return Ok(());
            }
        }
        if session.parked.is_none() || session.task_id != self.task.task_id {
            return Err(format!(
                "the parked session `{}` is not this task's",
                path.display()
            ));
        }
        self.llm
            .skip(session.messages.iter().filter(|m| m.is_assistant()).count());
        // The shell of the earlier start is gone with its container.
        let used_shell = session
            .messages
            .iter()
            .flat_map(|m| &m.tool_calls)
            .any(|c| Tool::from_call(c).is_some_and(|t| t.is_shell()));
        if used_shell {
            self.tools.note_fresh_shell();
        }
        self.messages = session.messages;
        self.steps = session.steps;
        self.usage = session.usage;
        self.human.notes = session.notes;
        self.human.plan_approved = session.plan_approved;
        *self.tools.steps_started.lock().unwrap() = session.steps_started.into_iter().collect();
        self.context = session.compactions.last().cloned().unwrap_or_default();
        self.compactions = session.compactions;
        self.active_before = Duration::from_millis(session.active_ms);
        self.human.parked = session.parked;
        Ok(())
    }

    /// A parked servo goes on with what it was waiting for.
    pub(super) async fn unpark(&mut self) -> Option<End> {
        let parked = self.human.parked.take()?;
        let step = self.steps;
        match parked {
            Parked::Pause => self.pause(step).await,
            Parked::Reply {
                call_id,
                tool,
                arguments,
                rest,
            } => {
                let call = ToolCall {
                    id: call_id,
                    kind: "function".into(),
                    function: saheeli_protocol::chat::FunctionCall {
                        name: tool,
                        arguments,
                    },
                };
                let mut rest = rest.into_iter();
                let tool = Tool::from_call(&call)?;
                let waiting = self.human.waiting_for(&tool)?;
                let reply = match self.human.await_reply(&call.id).await {
                    Some(r) => r,
                    None => return Some(self.park_on(step, &call, rest.collect())),
                };
                if let Some(end) = self.apply_reply(step, call, tool, waiting, reply).await {
                    return Some(end);
                }
                while let Some(c) = rest.next() {
                    if let Some(end) = self.handle_call(step, c, &mut rest).await {
                        return Some(end);
                    }
                }
                None
            }
        }
    }

    /// Saves the session with what is awaited and ends this start.
    pub(super) fn park_on(&mut self, step: u32, call: &ToolCall, rest: Vec<ToolCall>) -> End {
        self.park(
            step,
            Parked::Reply {
                call_id: call.id.clone(),
                tool: call.function.name.clone(),
                arguments: call.function.arguments.clone(),
                rest,
            },
        )
    }

    pub(super) fn park(&mut self, step: u32, parked: Parked) -> End {
        self.human.parked = Some(parked);
        self.save_whole();
        self.audit.log(&AuditEvent::Parked { ts: now(), step });
        (ServoExit::Parked, None)
    }
}
