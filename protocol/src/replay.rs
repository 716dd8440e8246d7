//! Scripts for the offline `replay:` model.
//!
//! A script is a YAML or JSON file with a list of assistant turns:
//!
//! ```yaml
//! turns:
//!   - content: Let me look around.
//!     tool_calls:
//!       - name: execute_shell
//!         arguments: { command: ls -la }
//!   - tool_calls:
//!       - name: task_complete
//!         arguments: { message: Done. }
//! ```
//!
//! A recorded `servo-<id>-session.json` is also accepted: its assistant
//! turns are played back in order, which reproduces a run exactly.

use serde::{Deserialize, Serialize};

use crate::audit::{Session, Usage};
use crate::chat::{ChatMessage, Role};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayScript {
    pub turns: Vec<ReplayTurn>,
    /// Summaries the recorded run's compactions made, in order: a replay
    /// answers its own summary calls with them, so it compacts exactly as
    /// the run did (issue 26).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub summaries: Vec<String>,
    /// The answer to the report's synthesis call (`report: synthesized`,
    /// issue 29): its text and usage, metered as the call would be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesis: Option<ReplayTurn>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayTurn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ReplayCall>,
    /// Usage to report for this turn; defaults to zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayCall {
    pub name: String,
    /// An object, or a string sent verbatim (to replay malformed arguments).
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

impl ReplayCall {
    /// The arguments as the JSON string a provider would send.
    pub fn arguments_json(&self) -> String {
        match &self.arguments {
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{0}")]
    Parse(String),
    #[error("the replay script has no turns; add at least one under `turns:`")]
    Empty,
}

impl ReplayScript {
    /// Parses a script (YAML or JSON) or a recorded session.json.
    pub fn parse(text: &str) -> Result<ReplayScript, ReplayError> {
        let script = if let Ok(session) = serde_json::from_str::<Session>(text) {
            ReplayScript::from_session(&session)
        } else {
            serde_yaml::from_str::<ReplayScript>(text)
                .map_err(|e| ReplayError::Parse(e.to_string()))?
        };
        if script.turns.is_empty() {
            return Err(ReplayError::Empty);
        }
        Ok(script)
    }

    /// The assistant turns of a recorded session, in order.
    pub fn from_session(session: &Session) -> ReplayScript {
        let turns = session
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .map(|m: &ChatMessage| ReplayTurn {
                content: m.content.clone(),
                tool_calls: m
                    .tool_calls
                    .iter()
                    .map(|c| ReplayCall {
                        name: c.function.name.clone(),
                        arguments: serde_json::Value::String(c.function.arguments.clone()),
                    })
                    .collect(),
                usage: None,
            })
            .collect();
        // A summary is new where its `upto` moved (a mask-only
        // compaction keeps the summary before it).
        let mut summaries: Vec<String> = Vec::new();
        let mut upto = 0;
        for c in &session.compactions {
            if let Some(s) = &c.summary
                && s.upto != upto
            {
                upto = s.upto;
                summaries.push(s.text.clone());
            }
        }
        ReplayScript {
            turns,
            summaries,
            synthesis: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{FunctionCall, ToolCall};

    #[test]
    fn yaml_script_parses() {
        let s = ReplayScript::parse(
            "turns:\n  - content: hi\n    tool_calls:\n      - name: execute_shell\n        arguments: { command: ls }\n",
        )
        .unwrap();
        assert_eq!(s.turns.len(), 1);
        assert_eq!(
            s.turns[0].tool_calls[0].arguments_json(),
            r#"{"command":"ls"}"#
        );
    }

    #[test]
    fn unknown_key_is_rejected() {
        let e = ReplayScript::parse("turns:\n  - contnet: hi\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `contnet`"), "{e}");
    }

    #[test]
    fn empty_script_is_rejected() {
        assert!(matches!(
            ReplayScript::parse("turns: []\n"),
            Err(ReplayError::Empty)
        ));
    }

    #[test]
    fn session_round_trips_to_script() {
        let session = Session {
            task_id: crate::TaskId::new(),
            model: "gpt".into(),
            steps: 1,
            usage: Usage::default(),
            messages: vec![
                ChatMessage::system("s"),
                ChatMessage::user("u"),
                ChatMessage {
                    role: Role::Assistant,
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        kind: "function".into(),
                        function: FunctionCall {
                            name: "task_complete".into(),
                            arguments: r#"{"message":"ok"}"#.into(),
                        },
                    }],
                    tool_call_id: None,
                },
            ],
            parked: None,
            active_ms: 0,
            notes: vec![],
            plan_approved: false,
            steps_started: vec![],
            compactions: vec![],
        };
        let text = serde_json::to_string(&session).unwrap();
        let s = ReplayScript::parse(&text).unwrap();
        assert_eq!(s.turns.len(), 1);
        assert_eq!(
            s.turns[0].tool_calls[0].arguments_json(),
            r#"{"message":"ok"}"#
        );
    }
}
