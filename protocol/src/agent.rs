//! Which agent runs a task: Saheeli's own loop (`saheeli`, the default) or
//! a third-party CLI that the servo supervises (issue 25).
//!
//! `agent:` in front-matter, config.yaml or an eval suite is a name
//! (`claude-code`, `codex`, `mini-swe-agent`, `aider`) or a mapping for any
//! other CLI: `{ command: ["my-agent", "--task", "{prompt_file}"], api:
//! openai-chat }`. The servo knows how to start each named agent; a
//! mapping's command is run as given, `{prompt_file}` replaced by the path
//! of the prompt.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The agents Saheeli knows by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AgentName {
    /// The servo's own tool loop.
    Saheeli,
    /// Claude Code (`claude -p`), from the `claude-agent-sdk` wheel.
    ClaudeCode,
    /// OpenAI's Codex CLI (`codex exec`), from `openai-codex-cli-bin`.
    Codex,
    /// mini-swe-agent (`mini`), batch mode.
    MiniSweAgent,
    /// aider (`aider --message … --yes`).
    Aider,
    /// No model: the task's `solution:` (`solve.sh`) runs instead, to
    /// check a suite is solvable before spending on it (issue 49).
    Oracle,
}

impl AgentName {
    pub const ALL: [AgentName; 6] = [
        AgentName::Saheeli,
        AgentName::ClaudeCode,
        AgentName::Codex,
        AgentName::MiniSweAgent,
        AgentName::Aider,
        AgentName::Oracle,
    ];

    /// The name as written in `agent:`.
    pub const fn as_str(self) -> &'static str {
        match self {
            AgentName::Saheeli => "saheeli",
            AgentName::ClaudeCode => "claude-code",
            AgentName::Codex => "codex",
            AgentName::MiniSweAgent => "mini-swe-agent",
            AgentName::Aider => "aider",
            AgentName::Oracle => "oracle",
        }
    }

    pub fn parse(s: &str) -> Option<AgentName> {
        Self::ALL.into_iter().find(|a| a.as_str() == s)
    }

    /// The wire format the agent speaks to its LLM (None: the built-in
    /// loop, which talks to the gateway itself).
    pub const fn api(self) -> Option<AgentApi> {
        match self {
            AgentName::Saheeli | AgentName::Oracle => None,
            AgentName::ClaudeCode => Some(AgentApi::Anthropic),
            AgentName::Codex => Some(AgentApi::OpenaiResponses),
            AgentName::MiniSweAgent | AgentName::Aider => Some(AgentApi::OpenaiChat),
        }
    }
}

impl fmt::Display for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for AgentName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for AgentName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        AgentName::parse(&s).ok_or_else(|| serde::de::Error::custom(unknown(&s)))
    }
}

fn unknown(name: &str) -> String {
    format!(
        "unknown agent `{name}`, expected one of {}, or a mapping `{{ command: [...], api: ... }}`",
        AgentName::ALL.map(AgentName::as_str).join(", ")
    )
}

/// The LLM API an agent speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentApi {
    /// Anthropic Messages (`/v1/messages`): needs an Anthropic provider.
    Anthropic,
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    OpenaiChat,
    /// OpenAI Responses (`/v1/responses`).
    OpenaiResponses,
}

impl AgentApi {
    pub const fn as_str(self) -> &'static str {
        match self {
            AgentApi::Anthropic => "anthropic",
            AgentApi::OpenaiChat => "openai-chat",
            AgentApi::OpenaiResponses => "openai-responses",
        }
    }

    /// Whether a provider of the Anthropic kind serves it (else an
    /// OpenAI-compatible one does).
    pub const fn needs_anthropic(self) -> bool {
        matches!(self, AgentApi::Anthropic)
    }
}

/// Any other CLI: its command line and the API it speaks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomAgent {
    /// The command and its arguments; `{prompt_file}` in an argument is
    /// replaced by the prompt's path inside the container.
    pub command: Vec<String>,
    pub api: AgentApi,
    /// The image it runs in (default: the servo image, `image:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// `agent:`: a known name or a custom command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Agent {
    Named(AgentName),
    Custom(CustomAgent),
}

impl Default for Agent {
    fn default() -> Self {
        Agent::Named(AgentName::Saheeli)
    }
}

impl Agent {
    /// Whether this is the servo's own loop (the oracle runs in it, its
    /// turns scripted).
    pub fn is_builtin(&self) -> bool {
        matches!(self, Agent::Named(AgentName::Saheeli | AgentName::Oracle))
    }

    /// What status and reports show: the name, or `custom` with its program.
    pub fn label(&self) -> String {
        match self {
            Agent::Named(n) => n.as_str().to_string(),
            Agent::Custom(c) => format!(
                "custom ({})",
                c.command.first().map(String::as_str).unwrap_or("?")
            ),
        }
    }

    pub fn api(&self) -> Option<AgentApi> {
        match self {
            Agent::Named(n) => n.api(),
            Agent::Custom(c) => Some(c.api),
        }
    }

    /// Checks a custom command; the message names what is wrong.
    pub fn check(&self) -> Result<(), String> {
        let Agent::Custom(c) = self else {
            return Ok(());
        };
        match c.command.first() {
            None => Err("`agent.command` is empty; give the program and its arguments".into()),
            Some(p) if p.trim().is_empty() => {
                Err("`agent.command` starts with an empty program".into())
            }
            Some(_) if c.command.iter().any(|a| a.contains('\0')) => {
                Err("`agent.command` holds a NUL byte".into())
            }
            Some(_) => Ok(()),
        }
    }
}

impl Serialize for Agent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Agent::Named(n) => s.serialize_str(n.as_str()),
            Agent::Custom(c) => c.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Agent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Agent;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "an agent name (saheeli, claude-code, codex, mini-swe-agent, aider) or a \
                     mapping `{ command: [...], api: anthropic | openai-chat | openai-responses }`",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Agent, E> {
                AgentName::parse(v)
                    .map(Agent::Named)
                    .ok_or_else(|| E::custom(unknown(v)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Agent, A::Error> {
                CustomAgent::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(Agent::Custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for n in AgentName::ALL {
            let a: Agent = serde_json::from_str(&format!("\"{n}\"")).unwrap();
            assert_eq!(a, Agent::Named(n));
            assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{n}\""));
        }
        let e = serde_json::from_str::<Agent>("\"claude\"").unwrap_err();
        assert!(e.to_string().contains("unknown agent `claude`"), "{e}");
        assert!(e.to_string().contains("claude-code"), "{e}");
    }

    #[test]
    fn a_mapping_is_a_custom_agent() {
        let a: Agent = serde_json::from_str(
            r#"{"command": ["my-agent", "{prompt_file}"], "api": "openai-chat"}"#,
        )
        .unwrap();
        let Agent::Custom(c) = &a else {
            panic!("{a:?}")
        };
        assert_eq!(c.api, AgentApi::OpenaiChat);
        assert_eq!(a.label(), "custom (my-agent)");
        let back: Agent = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
        let e =
            serde_json::from_str::<Agent>(r#"{"command": ["x"], "api": "gemini"}"#).unwrap_err();
        assert!(e.to_string().contains("gemini"), "{e}");
        let e =
            serde_json::from_str::<Agent>(r#"{"command": ["x"], "api": "anthropic", "key": 1}"#)
                .unwrap_err();
        assert!(e.to_string().contains("unknown field `key`"), "{e}");
        let empty: Agent = serde_json::from_str(r#"{"command": [], "api": "anthropic"}"#).unwrap();
        assert!(empty.check().unwrap_err().contains("empty"));
    }

    #[test]
    fn each_name_speaks_its_api() {
        let cases = [
            (AgentName::Saheeli, None),
            (AgentName::ClaudeCode, Some(AgentApi::Anthropic)),
            (AgentName::Codex, Some(AgentApi::OpenaiResponses)),
            (AgentName::MiniSweAgent, Some(AgentApi::OpenaiChat)),
            (AgentName::Aider, Some(AgentApi::OpenaiChat)),
        ];
        for (n, api) in cases {
            assert_eq!(n.api(), api, "{n}");
        }
        assert!(Agent::default().is_builtin());
    }
}
