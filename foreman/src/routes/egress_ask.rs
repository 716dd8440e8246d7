//! `egress_approval: ask` (issue 50): a host no list names, asked for by a
//! process of the agent phase, becomes the task's question through the
//! same desk as `ask_user` — the task `waiting_human` ("the agent phase
//! wants files.pythonhosted.org:443") until `saheeli task approve` or
//! `deny` (or the human timeout) — while the client's connection waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use saheeli_protocol::egress::Phase;
use saheeli_protocol::human::{Decision, Waiting};

use super::Ctx;
use super::desk::DeskPolicy;
use crate::egress::{Answer, Approver};

/// Asks the task's person through its desk.
pub(crate) struct DeskApprover {
    pub ctx: Arc<Ctx>,
    pub policy: DeskPolicy,
}

impl Approver for DeskApprover {
    fn ask(
        &self,
        phase: Phase,
        host: &str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
        let waiting = Waiting::Egress {
            host: host.to_string(),
            port,
            phase: phase.as_str().to_string(),
        };
        Box::pin(async move { self.decide(waiting).await })
    }
}

impl DeskApprover {
    async fn decide(&self, waiting: Waiting) -> Answer {
        if self.policy.no_human {
            return Answer {
                approved: false,
                by: "saheeli (the task runs without a human)".into(),
                lasting: true,
            };
        }
        let Waiting::Egress { host, port, .. } = &waiting else {
            unreachable!("built as an egress question")
        };
        // One question per host and port: asked again after a restart, it
        // is the same question.
        let call = format!("egress:{host}:{port}");
        let id = self.ctx.task_id;
        let timeout = self.policy.human_timeout_ms;
        let (c, w) = (call.clone(), waiting.clone());
        if let Err(e) = self
            .ctx
            .moved(move |s, l| s.ask(id, l, &c, &w, None, timeout))
            .await
        {
            tracing::warn!(task_id = %id, status = %e.status(), "egress: the question could not be asked");
            return Answer {
                approved: false,
                by: "saheeli (the question could not be asked: another is open)".into(),
                lasting: false,
            };
        }
        tracing::info!(task_id = %id, call = %call, "egress: waiting for a human");
        let mut rx = self.ctx.bus.subscribe();
        loop {
            let c = call.clone();
            match self.ctx.moved(move |s, l| s.take_reply(id, l, &c)).await {
                Ok(Some((reply, _))) => {
                    return Answer {
                        approved: reply.decision == Decision::Approve,
                        by: reply.by,
                        lasting: true,
                    };
                }
                Ok(None) => {}
                Err(_) => {
                    return Answer {
                        approved: false,
                        by: "saheeli (the desk could not be read)".into(),
                        lasting: false,
                    };
                }
            }
            let until = tokio::time::Instant::now() + Duration::from_secs(30);
            self.ctx.trail_moves(&mut rx, until).await;
        }
    }
}
