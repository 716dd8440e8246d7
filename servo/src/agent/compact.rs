//! Compaction carried out (issue 26): the decision is `context`'s; this
//! makes the summary call, records the new view and audits it.

use saheeli_protocol::AuditEvent;
use saheeli_protocol::chat::ChatMessage;
use tracing::{info, warn};

use super::Agent;
use super::context::{self, Cause, Step};
use crate::audit::now;
use crate::llm::Provider;

/// Consecutive context-length errors after which the task ends.
pub(super) const MAX_CONTEXT_ERRORS: u32 = 4;

impl Agent {
    fn specs_bytes(&self) -> usize {
        serde_json::to_vec(&self.specs).map_or(0, |b| b.len())
    }

    /// What the model is sent now.
    pub(super) fn view(&self) -> Vec<ChatMessage> {
        context::view(&self.messages, &self.context)
    }

    /// Compacts the conversation when `cause` calls for it; false when
    /// nothing was done (or nothing could be).
    pub(super) async fn keep_in_window(&mut self, step: u32, cause: Cause) -> bool {
        let specs = self.specs_bytes();
        let plan = self.task.context;
        let Some(decision) = context::decide(&self.messages, specs, &self.context, &plan, cause)
        else {
            return false;
        };
        let before = context::estimate(&self.view(), specs);
        let (state, strategy) = match decision {
            Step::Mask(state) => (state, "mask"),
            Step::Summarize {
                upto,
                masked_before,
            } => {
                let text = self.summary(step, upto).await;
                (context::summarized(upto, masked_before, text), "summarize")
            }
        };
        self.context = state;
        self.compactions.push(self.context.clone());
        let after = context::estimate(&self.view(), specs);
        info!(
            step,
            strategy,
            cause = cause.as_str(),
            before,
            after,
            "conversation compacted"
        );
        self.audit.log(&AuditEvent::Compacted {
            ts: now(),
            step,
            strategy: strategy.to_string(),
            cause: cause.as_str().to_string(),
            tokens_before: before,
            tokens_after: after,
        });
        self.save_session();
        true
    }

    /// The provider said the request was too long: compact (keeping fewer
    /// turns each time in a row) and ask again; Some when nothing more can
    /// be compacted or it kept happening.
    pub(super) async fn too_long(
        &mut self,
        step: u32,
        latency_ms: u64,
        why: String,
    ) -> Option<super::End> {
        self.audit.log(&AuditEvent::LlmCall {
            ts: now(),
            step,
            model: self.task.model.clone(),
            latency_ms,
            usage: Default::default(),
            error: Some(format!("context too long: {why}")),
            text: None,
            text_cut: None,
        });
        self.context_errors += 1;
        let n = self.context_errors;
        if n <= MAX_CONTEXT_ERRORS && self.keep_in_window(step, Cause::ContextError(n)).await {
            // The call is made again under the same step number.
            self.steps -= 1;
            return None;
        }
        Some((
            saheeli_protocol::ServoExit::LlmError,
            Some(format!(
                "the conversation does not fit the model's window even compacted ({n} tries): {why}"
            )),
        ))
    }

    /// The note for messages `2..upto`: from the replayed run's summaries,
    /// from one metered call through the gateway, or (a replay without
    /// them, a failed call) made here.
    async fn summary(&mut self, step: u32, upto: usize) -> String {
        let view = self.view();
        let max_bytes = self.task.context.window.map_or(24 * 1024, |w| {
            (w as usize * context::BYTES_PER_TOKEN / 2).clamp(2048, 400 * 1024)
        });
        let request = context::summary_request(&view, upto, max_bytes);
        let model = self.task.model.clone();
        let answer = match &mut self.llm {
            Provider::Replay(r) => {
                return r
                    .summary()
                    .unwrap_or_else(|| context::mechanical_note(&self.messages, upto));
            }
            Provider::Gateway(g) => {
                let t0 = std::time::Instant::now();
                let r = g.complete(&model, &request, &[], None, |_| {}).await;
                let latency_ms = t0.elapsed().as_millis() as u64;
                match r {
                    Ok(turn) => {
                        self.usage.add(turn.usage);
                        self.audit.log(&AuditEvent::LlmCall {
                            ts: now(),
                            step,
                            model: model.clone(),
                            latency_ms,
                            usage: turn.usage,
                            error: None,
                            text: None,
                            text_cut: None,
                        });
                        turn.message.content.filter(|t| !t.trim().is_empty())
                    }
                    Err(e) => {
                        warn!(step, error = %e, "the summary call failed; summarising without it");
                        self.audit.log(&AuditEvent::LlmCall {
                            ts: now(),
                            step,
                            model,
                            latency_ms,
                            usage: Default::default(),
                            error: Some(format!("summary: {e}")),
                            text: None,
                            text_cut: None,
                        });
                        None
                    }
                }
            }
        };
        match answer {
            Some(a) => context::note_from(&a, &self.messages, upto),
            None => context::mechanical_note(&self.messages, upto),
        }
    }
}
