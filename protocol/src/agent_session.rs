//! A third-party agent's own session, kept with the task's (issue 51).
//!
//! Claude Code and Codex write their conversation into their home:
//! Claude Code `~/.claude/projects/-workspace/<session id>.jsonl` (the id
//! the servo gives it with `--session-id`), Codex
//! `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<session id>.jsonl`.
//! The servo keeps a copy of that directory in the workspace
//! ([`KEPT`]), refreshed before each of the agent's model calls, so it
//! outlives the container (an OOM kill, a lost node). A retry from the
//! session brings the copy back at [`STAGED`] in its workspace; the servo
//! restores it into the new home and starts the CLI with its own resume
//! option (`claude --resume ID`, `codex exec resume ID`).
//!
//! What is kept was written by the agent: both sides read it as hostile
//! ([`check`], the caps, never through a link). Pure: no I/O here.

use serde::{Deserialize, Serialize};

use crate::agent::{Agent, AgentName};

/// Where the kept session lies, relative to the workspace (in the servo's
/// `.saheeli/`, collected with the results).
pub const KEPT: &str = ".saheeli/agent-session";
/// Where a retry's workspace brings it, relative to the workspace; the
/// servo removes it once restored (or not).
pub const STAGED: &str = ".saheeli-agent-session";
/// The manifest in [`KEPT`]: a [`Manifest`] as JSON.
pub const MANIFEST: &str = "session.json";
/// The home's kept part, below [`KEPT`] (the same paths as in the home).
pub const HOME: &str = "home";
/// The largest session file kept or restored; a bigger one is refused.
pub const MAX_FILE: u64 = 64 << 20;
/// The most bytes kept in all.
pub const MAX_TOTAL: u64 = 128 << 20;
/// The largest manifest read.
pub const MAX_MANIFEST: u64 = 64 << 10;

/// `POST` a [`RestoreIncomplete`] to the task's gateway: the servo could
/// not restore the session a retry brought (after the foreman's check
/// passed); the retry's trail gets a `restore_incomplete` event.
pub const RESTORE_INCOMPLETE: &str = "/saheeli/v1/agent-session/restore-incomplete";
/// The longest reason the foreman keeps, in characters.
pub const MAX_WHY: usize = 400;

/// Why the servo's restore of a retry's kept session came out incomplete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreIncomplete {
    pub why: String,
}

/// An agent whose own session can be kept and resumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    ClaudeCode,
    Codex,
}

impl Kind {
    /// The kind of `agent`, if its session can be resumed.
    pub fn of(agent: &Agent) -> Option<Kind> {
        match agent {
            Agent::Named(AgentName::ClaudeCode) => Some(Kind::ClaudeCode),
            Agent::Named(AgentName::Codex) => Some(Kind::Codex),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ClaudeCode => "claude-code",
            Kind::Codex => "codex",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        [Kind::ClaudeCode, Kind::Codex]
            .into_iter()
            .find(|k| k.as_str() == s)
    }

    /// The directory of the home holding its sessions (what is kept).
    pub fn dir(self) -> &'static str {
        match self {
            Kind::ClaudeCode => ".claude/projects",
            Kind::Codex => ".codex/sessions",
        }
    }

    /// Claude Code's session file for `id` (its project directory is
    /// named after the working directory, `/workspace`).
    pub fn claude_file(id: &str) -> String {
        format!(".claude/projects/-workspace/{id}.jsonl")
    }
}

/// What the kept copy says it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub agent: Kind,
    /// The agent's session id (a UUID).
    pub id: String,
    /// The session file, relative to the home.
    pub file: String,
    /// Files of the home's session directory left out (too big).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
}

impl Manifest {
    /// Whether the manifest is one a restore may act on: a UUID id, a
    /// session file below the agent's directory named by that id, with no
    /// `..`, no absolute path and nothing odd in it.
    pub fn valid(&self) -> Result<(), String> {
        if !is_id(&self.id) {
            return Err(format!("the session id `{}` is not a UUID", clip(&self.id)));
        }
        let file = &self.file;
        let fine = file.starts_with(self.agent.dir())
            && file.len() < 512
            && file
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != "..")
            && file
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:".contains(c));
        if !fine {
            return Err(format!(
                "the session file `{}` is not one of the agent's",
                clip(file)
            ));
        }
        let named = match self.agent {
            Kind::ClaudeCode => *file == Kind::claude_file(&self.id),
            Kind::Codex => {
                file.ends_with(&format!("-{}.jsonl", self.id))
                    && file
                        .rsplit('/')
                        .next()
                        .is_some_and(|n| n.starts_with("rollout-"))
            }
        };
        if !named {
            return Err(format!(
                "the session file `{}` is not session `{}`'s",
                clip(file),
                self.id
            ));
        }
        Ok(())
    }
}

/// Whether `s` is a session id (a UUID, hyphenated).
pub fn is_id(s: &str) -> bool {
    s.len() == 36 && uuid::Uuid::parse_str(s).is_ok()
}

fn clip(s: &str) -> String {
    s.chars().take(120).collect()
}

/// Checks a session file's bytes: JSON lines (a last line cut short by a
/// kill is left out), of session `id`, with a conversation to go on from.
/// Returns how many lines a resume would read.
pub fn check(kind: Kind, id: &str, bytes: &[u8]) -> Result<usize, String> {
    let whole = match bytes.iter().rposition(|b| *b == b'\n') {
        Some(end) => &bytes[..=end],
        None => &[][..],
    };
    let mut lines = 0;
    let mut turns = 0;
    for (n, line) in whole.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(line)
            .map_err(|e| format!("line {} of the session file is not JSON: {e}", n + 1))?;
        lines += 1;
        match kind {
            Kind::ClaudeCode => {
                let ty = v["type"].as_str().unwrap_or_default();
                if matches!(ty, "user" | "assistant") {
                    if v["sessionId"].as_str() != Some(id) {
                        return Err(format!("line {} is another session's", n + 1));
                    }
                    turns += 1;
                }
            }
            Kind::Codex => {
                if lines == 1
                    && (v["type"] != "session_meta" || v["payload"]["id"].as_str() != Some(id))
                {
                    return Err(format!(
                        "the session file does not open with session `{id}`'s `session_meta`"
                    ));
                }
                if v["type"] == "response_item" {
                    turns += 1;
                }
            }
        }
    }
    if turns == 0 {
        return Err("the session file holds no conversation".into());
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0190f3a2-1111-7222-8333-444455556666";

    #[test]
    fn claude_lines_are_checked() {
        let ok = format!(
            "{{\"type\":\"queue-operation\"}}\n{{\"type\":\"user\",\"sessionId\":\"{ID}\"}}\n{{\"type\":\"assis"
        );
        assert_eq!(check(Kind::ClaudeCode, ID, ok.as_bytes()), Ok(2));
        let other = "{\"type\":\"user\",\"sessionId\":\"x\"}\n";
        assert!(check(Kind::ClaudeCode, ID, other.as_bytes()).is_err());
        assert!(check(Kind::ClaudeCode, ID, b"garbage\n").is_err());
        assert!(check(Kind::ClaudeCode, ID, b"").is_err(), "no conversation");
    }

    #[test]
    fn codex_opens_with_its_meta() {
        let ok = format!(
            "{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"{ID}\"}}}}\n{{\"type\":\"response_item\"}}\n"
        );
        assert_eq!(check(Kind::Codex, ID, ok.as_bytes()), Ok(2));
        let bad = "{\"type\":\"response_item\"}\n";
        assert!(check(Kind::Codex, ID, bad.as_bytes()).is_err());
    }

    #[test]
    fn a_manifest_names_only_the_agents_own_file() {
        let m = |agent, id: &str, file: &str| Manifest {
            agent,
            id: id.into(),
            file: file.into(),
            refused: vec![],
        };
        assert!(
            m(Kind::ClaudeCode, ID, &Kind::claude_file(ID))
                .valid()
                .is_ok()
        );
        let rollout = format!(".codex/sessions/2026/12/05/rollout-2026-12-05T21-46-12-{ID}.jsonl");
        assert!(m(Kind::Codex, ID, &rollout).valid().is_ok());
        for (agent, id, file) in [
            (Kind::ClaudeCode, "x", ".claude/projects/-workspace/x.jsonl"),
            (Kind::ClaudeCode, ID, "/etc/passwd"),
            (Kind::ClaudeCode, ID, ".claude/projects/../../etc/passwd"),
            (
                Kind::ClaudeCode,
                ID,
                ".claude/projects/-workspace/other.jsonl",
            ),
            (Kind::Codex, ID, ".codex/sessions/../x-{ID}.jsonl"),
            (Kind::Codex, ID, &Kind::claude_file(ID)),
        ] {
            assert!(m(agent, id, file).valid().is_err(), "{file}");
        }
    }
}
