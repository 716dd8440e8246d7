//! Where the next assistant turn comes from: the foreman's gateway
//! (OpenAI chat completions) or a replay script.

mod openai;
mod replay;
mod retry;

use saheeli_protocol::Usage;
use saheeli_protocol::chat::{ChatMessage, ToolSpec};

pub(crate) use openai::Gateway;
pub(crate) use replay::Replay;
pub(crate) use retry::Waiting;

/// One assistant turn and what it cost.
pub(crate) struct Turn {
    pub message: ChatMessage,
    pub usage: Usage,
    /// The reply was cut at the output cap (`finish_reason: length`): the
    /// model is told, rather than left with a silent truncation.
    pub cut: bool,
}

/// What the model is told after a reply cut at the output cap.
pub(crate) const CUT_NOTE: &str = "[saheeli] Your last reply was cut off at the output limit \
(finish_reason: length), so it is incomplete and any tool call in it may be missing or truncated. \
Keep replies shorter: write large files in parts, and think in fewer words.";

#[derive(Debug)]
pub(crate) enum LlmError {
    /// Not worth retrying (4xx, or retries exhausted).
    Failed(String),
    /// The replay script has no more turns.
    Exhausted,
    /// The gateway refused the call: the budget is spent.
    Budget(String),
    /// The provider's answer was unusable; worth telling the model and going on.
    Malformed(String),
    /// The request did not fit the model's window: compact and ask again.
    ContextLength(String),
    /// The gateway looked at the inbox with the call and found messages or
    /// a pause: take them, then ask again (nothing was sent to a model).
    Inbox(saheeli_protocol::human::Inbox),
}

/// Providers are an enum until a trait earns its place.
pub(crate) enum Provider {
    Gateway(Gateway),
    Replay(Replay),
}

impl Provider {
    /// A replay started again from a saved session skips the turns it
    /// already played.
    /// Whether the servo's calls reach a gateway (which can look at the
    /// inbox with each, `ServoTask::inbox_on_call`).
    pub fn is_gateway(&self) -> bool {
        matches!(self, Provider::Gateway(_))
    }

    pub fn skip(&mut self, turns: usize) {
        if let Provider::Replay(r) = self {
            r.skip(turns);
        }
    }

    pub async fn next_turn(
        &mut self,
        model: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        inbox_after: Option<i64>,
        notify: impl FnMut(Waiting),
    ) -> Result<Turn, LlmError> {
        match self {
            Provider::Gateway(g) => {
                g.complete(model, messages, tools, inbox_after, notify)
                    .await
            }
            Provider::Replay(r) => r.next_turn(),
        }
    }
}

impl std::fmt::Display for LlmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LlmError::Failed(m) => f.write_str(m),
            LlmError::Exhausted => f.write_str("the replay script has no more turns"),
            LlmError::Budget(m) => write!(f, "budget spent: {m}"),
            LlmError::Malformed(m) => write!(f, "unusable response: {m}"),
            LlmError::ContextLength(m) => write!(f, "context too long: {m}"),
            LlmError::Inbox(_) => f.write_str("the inbox has messages or a pause first"),
        }
    }
}
