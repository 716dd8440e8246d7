//! The `replay:` model: scripted assistant turns, played in order.

use std::collections::VecDeque;

use saheeli_protocol::chat::{ChatMessage, FunctionCall, Role, ToolCall};
use saheeli_protocol::{ReplayScript, ReplayTurn};

use super::{LlmError, Turn};

pub(crate) struct Replay {
    turns: VecDeque<ReplayTurn>,
    played: usize,
    /// The recorded run's compaction summaries, answered in order.
    summaries: VecDeque<String>,
}

impl Replay {
    pub fn new(script: ReplayScript) -> Replay {
        Replay {
            turns: script.turns.into(),
            played: 0,
            summaries: script.summaries.into(),
        }
    }

    /// The next summary the recorded run made (issue 26); None: make one.
    pub fn summary(&mut self) -> Option<String> {
        self.summaries.pop_front()
    }

    pub fn skip(&mut self, turns: usize) {
        for _ in 0..turns.min(self.turns.len()) {
            self.turns.pop_front();
        }
        self.played += turns;
    }

    pub fn next_turn(&mut self) -> Result<Turn, LlmError> {
        let turn = self.turns.pop_front().ok_or(LlmError::Exhausted)?;
        self.played += 1;
        let step = self.played;
        let tool_calls = turn
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: format!("replay-{step}-{i}"),
                kind: "function".into(),
                function: FunctionCall {
                    name: c.name.clone(),
                    arguments: c.arguments_json(),
                },
            })
            .collect();
        Ok(Turn {
            message: ChatMessage {
                role: Role::Assistant,
                content: turn.content,
                tool_calls,
                tool_call_id: None,
            },
            usage: turn.usage.unwrap_or_default(),
            cut: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plays_turns_in_order_then_runs_out() {
        let script = ReplayScript::parse(
            "turns:\n  - content: a\n  - tool_calls:\n      - name: task_complete\n        arguments: { message: m }\n",
        )
        .unwrap();
        let mut r = Replay::new(script);
        assert_eq!(r.next_turn().unwrap().message.content.as_deref(), Some("a"));
        let t = r.next_turn().unwrap();
        assert_eq!(t.message.tool_calls[0].id, "replay-2-0");
        assert_eq!(
            t.message.tool_calls[0].function.arguments,
            r#"{"message":"m"}"#
        );
        assert!(matches!(r.next_turn(), Err(LlmError::Exhausted)));
    }
}
