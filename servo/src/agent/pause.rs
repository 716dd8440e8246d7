//! Before each LLM call: messages a human injected reach the model, a
//! pause asked for is honoured (parking after `park_after`), and a
//! `pause_on: [tool_error]` breakpoint is reported.

use std::time::Instant;

use saheeli_protocol::AuditEvent;
use saheeli_protocol::chat::ChatMessage;
use saheeli_protocol::human::{Breakpoint, Note, Parked};
use tracing::{info, warn};

use super::{Agent, End};
use crate::audit::now;

impl Agent {
    /// Before an LLM call: injected messages reach the model, and a pause
    /// asked for is honoured.
    pub(super) async fn before_turn(&mut self) -> Option<End> {
        // The gateway looks with the call itself (`inbox_on_call`).
        if self.inbox_on_call() {
            return None;
        }
        let inbox = self.human.desk.inbox_now(self.human.newest_note()).await?;
        self.take_inbox(inbox).await
    }

    /// Whether the next call carries the inbox look (`INBOX_AFTER`): when
    /// the task's gateway looks, and unless three calls in a row were
    /// answered with an inbox that brought nothing new (then this call
    /// goes without, and the servo's own look before the next one).
    pub(super) fn inbox_on_call(&self) -> bool {
        self.task.inbox_on_call && self.llm.is_gateway() && self.human.inbox_rounds < 3
    }

    /// What the inbox holds, taken before the next call: the messages into
    /// the conversation, then a pause when one was asked for.
    pub(super) async fn take_inbox(
        &mut self,
        inbox: saheeli_protocol::human::Inbox,
    ) -> Option<End> {
        self.take_notes(inbox.notes).await;
        if inbox.pause {
            return self.pause(self.steps).await;
        }
        None
    }

    /// Paused: waits for a resume (taking messages meanwhile), parking
    /// after `park_after`.
    pub(super) async fn pause(&mut self, step: u32) -> Option<End> {
        self.audit.log(&AuditEvent::Paused { ts: now(), step });
        info!(step, "paused");
        let t0 = Instant::now();
        self.human.wait_begins();
        let park_at = t0 + self.human.park_after;
        loop {
            let left = park_at.saturating_duration_since(Instant::now());
            let inbox = match self
                .human
                .desk
                .inbox_wait(left, self.human.newest_note())
                .await
            {
                Ok(i) => i,
                Err(e) => {
                    warn!(error = %e.0, "the desk refused the pause; going on");
                    self.human.waited_for(t0.elapsed());
                    return None;
                }
            };
            self.take_notes(inbox.notes).await;
            if !inbox.pause {
                let waited = t0.elapsed();
                self.human.waited_for(waited);
                self.audit.log(&AuditEvent::Resumed {
                    ts: now(),
                    step,
                    waited_ms: waited.as_millis() as u64,
                });
                return None;
            }
            if Instant::now() >= park_at {
                self.human.waited_for(t0.elapsed());
                return Some(self.park(step, Parked::Pause));
            }
        }
    }

    /// Adds new injected messages to the conversation, saves the session,
    /// then tells the desk they are delivered (a crash in between delivers
    /// nothing twice: the session knows their ids).
    pub(super) async fn take_notes(&mut self, notes: Vec<Note>) {
        let new = self.human.unseen(notes);
        if new.is_empty() {
            return;
        }
        let ids: Vec<i64> = new.iter().map(|n| n.id).collect();
        for n in new {
            self.audit.log(&AuditEvent::Noted {
                ts: now(),
                step: self.steps,
                id: n.id,
                by: n.by.clone(),
                text: n.text.clone(),
            });
            self.messages.push(ChatMessage::user(format!(
                "[saheeli] A message from {} (a human watching this task): {}",
                n.by, n.text
            )));
            self.human.notes.push(n.id);
        }
        self.save_session();
        if let Err(e) = self.human.desk.delivered(ids).await {
            warn!(error = %e.0, "could not mark messages delivered");
        }
    }

    /// `pause_on: [tool_error]`: the failed call pauses the task before
    /// the next LLM call.
    pub(super) async fn breakpoint(&mut self, tool: &str, error: &str) {
        let bp = Breakpoint {
            tool: tool.to_string(),
            error: error.chars().take(2000).collect(),
        };
        if let Err(e) = self.human.desk.breakpoint(&bp).await {
            warn!(error = %e.0, "the breakpoint was refused");
        }
    }
}
