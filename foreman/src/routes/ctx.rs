//! What a task's routes are served with: its LLM side and its desk link.

use std::ops::Deref;
use std::sync::Arc;

use super::desk::DeskLink;
use crate::llm::GatewayState;

/// What a task's routes are served with.
pub(crate) struct Ctx {
    /// The task's LLM side: its budget and meter, and the redactor every
    /// answer goes through.
    pub(crate) llm: Arc<GatewayState>,
    pub(crate) desk: DeskLink,
}

/// The routes read the task's id, budget and meter as the LLM side's.
impl Deref for Ctx {
    type Target = GatewayState;

    fn deref(&self) -> &GatewayState {
        &self.llm
    }
}
