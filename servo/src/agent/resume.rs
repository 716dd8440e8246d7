//! A retry that goes on from the attempt before it (issue 30). The
//! foreman started this servo on that attempt's collected workspace; its
//! session file `servo-<from>-session.json` lies there, sealed with that
//! attempt's key (the gateway gives it as `resume_key`). With `session`
//! the conversation goes on from it; with `workspace` only its last tool
//! call is told. Either way the model gets the foreman's note on what
//! ended the attempt. Budgets start from nothing here: the foreman gave
//! this attempt what the chain has left.
//!
//! The session the attempt saved may end inside a step (the servo saves
//! it when the model's turn arrives and again after its tool calls):
//! calls without a result are answered as not finished, so the
//! conversation stays one a provider accepts.

use std::path::Path;

use saheeli_protocol::attempt::RetryFrom;
use saheeli_protocol::chat::{ChatMessage, Role, ToolCall};
use saheeli_protocol::{Session, paths};
use tracing::{info, warn};

use super::Agent;
use crate::tools::Tool;

/// The largest session file read.
pub(super) const MAX_SESSION: u64 = 256 << 20;

/// Longest tool arguments quoted in the note.
const MAX_ARGS: usize = 300;

/// What an unanswered call of the ended attempt is answered with.
const NOT_FINISHED: &str =
    "[saheeli] This call did not finish: the previous attempt ended while it ran.";

/// The session file at `path`, if there is one: never through a link, nor
/// waited on (a FIFO), and at most [`MAX_SESSION`] bytes. The workspace
/// is the agent's.
pub(super) fn read_session_file(path: &Path) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("opening `{}`: {e}", path.display())),
        Ok(f) => f,
    };
    let is_file = file.metadata().map(|m| m.is_file()).unwrap_or(false);
    if !is_file {
        return Err(format!("`{}` is not a regular file", path.display()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_SESSION)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading `{}`: {e}", path.display()))?;
    Ok(Some(bytes))
}

impl Agent {
    /// Goes on from the attempt before this one, when the task says so and
    /// this servo is not itself going on from a park.
    pub(super) fn load_resumed_session(&mut self) {
        let Some(resume) = self.task.resume.clone() else {
            return;
        };
        if self.human.parked.is_some() {
            return;
        }
        let path = self.root.join(paths::session(&resume.from));
        let journal = self.root.join(paths::session_journal(&resume.from));
        let opened = read_session_file(&path).and_then(|bytes| {
            let bytes = bytes.ok_or_else(|| format!("`{}` is not there", path.display()))?;
            let seal = self
                .seal
                .for_resume()
                .ok_or("the gateway gave no key to check its seal")?;
            let (mut session, head) = seal
                .open_head(&bytes)
                .map_err(|e| format!("`{}`: {e}", path.display()))?;
            // What the attempt saved after its file was last written whole.
            if let Some(lines) = read_session_file(&journal)? {
                super::journal::apply(&mut session, head, &lines, &seal);
            }
            if session.task_id != resume.from {
                return Err(format!("`{}` is not the attempt's", path.display()));
            }
            Ok(session)
        });
        let mut note = resume.note.clone();
        match opened {
            Ok(session) => {
                if let Some(line) = last_call(&session.messages) {
                    note.push(' ');
                    note.push_str(&line);
                }
                if resume.mode == RetryFrom::Session {
                    self.go_on_from(session);
                }
            }
            Err(why) => {
                warn!(task_id = %self.task.task_id, from = %resume.from, %why, "the previous attempt's session cannot be used");
                if resume.mode == RetryFrom::Session {
                    note.push_str(
                        " (Its conversation could not be restored: this one starts afresh.)",
                    );
                }
            }
        }
        info!(task_id = %self.task.task_id, from = %resume.from, mode = %resume.mode, steps = self.messages.len(), "going on from the previous attempt");
        self.messages.push(ChatMessage::user(note));
    }

    /// Takes over the conversation of `session`.
    fn go_on_from(&mut self, session: Session) {
        let Session {
            mut messages,
            plan_approved,
            compactions,
            ..
        } = session;
        answer_unfinished(&mut messages);
        self.llm
            .skip(messages.iter().filter(|m| m.is_assistant()).count());
        // The shell of the attempt before is gone with its container.
        let used_shell = messages
            .iter()
            .flat_map(|m| &m.tool_calls)
            .any(|c| Tool::from_call(c).is_some_and(|t| t.is_shell()));
        if used_shell {
            self.tools.note_fresh_shell();
        }
        self.messages = messages;
        self.human.plan_approved = plan_approved;
        self.context = compactions.last().cloned().unwrap_or_default();
        self.compactions = compactions;
    }
}

/// Answers the calls of the conversation's last assistant turn that have
/// no result (the attempt ended while they ran).
fn answer_unfinished(messages: &mut Vec<ChatMessage>) {
    for call in unfinished(messages) {
        messages.push(ChatMessage::tool_result(call.id, NOT_FINISHED));
    }
}

/// The calls of the last assistant turn without a result after it.
fn unfinished(messages: &[ChatMessage]) -> Vec<ToolCall> {
    let Some(at) = messages.iter().rposition(|m| m.is_assistant()) else {
        return Vec::new();
    };
    let answered: Vec<&str> = messages[at + 1..]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    messages[at]
        .tool_calls
        .iter()
        .filter(|c| !answered.contains(&c.id.as_str()))
        .cloned()
        .collect()
}

/// The note's line on the attempt's last tool call: the one it was
/// running when it ended, else the last one it made.
fn last_call(messages: &[ChatMessage]) -> Option<String> {
    let quote = |c: &ToolCall| {
        let args: String = c.function.arguments.chars().take(MAX_ARGS).collect();
        let cut = if args.len() < c.function.arguments.len() {
            "…"
        } else {
            ""
        };
        format!("`{}` with {args}{cut}", c.function.name)
    };
    if let Some(c) = unfinished(messages).first() {
        return Some(format!(
            "It ended while running its last tool call, {}.",
            quote(c)
        ));
    }
    let c = messages
        .iter()
        .rev()
        .flat_map(|m| m.tool_calls.iter().rev())
        .next()?;
    Some(format!("Its last tool call was {}.", quote(c)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use saheeli_protocol::chat::FunctionCall;

    fn call(id: &str, name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            kind: "function".into(),
            function: FunctionCall {
                name: name.into(),
                arguments: args.into(),
            },
        }
    }

    fn turn(calls: Vec<ToolCall>) -> ChatMessage {
        ChatMessage {
            role: Role::Assistant,
            content: None,
            tool_calls: calls,
            tool_call_id: None,
        }
    }

    #[test]
    fn a_call_cut_off_is_named_and_answered() {
        let mut m = vec![
            ChatMessage::system("s"),
            ChatMessage::user("u"),
            turn(vec![call("a", "create_file", r#"{"path":"x"}"#)]),
            ChatMessage::tool_result("a", "ok"),
            turn(vec![
                call("b", "execute_shell", r#"{"command":"big"}"#),
                call("c", "read_file", "{}"),
            ]),
            ChatMessage::tool_result("b", "ran"),
        ];
        let line = last_call(&m).unwrap();
        assert!(
            line.contains("while running") && line.contains("read_file"),
            "{line}"
        );
        answer_unfinished(&mut m);
        assert_eq!(m.len(), 7);
        assert_eq!(m[6].tool_call_id.as_deref(), Some("c"));
        assert!(unfinished(&m).is_empty());
        let line = last_call(&m).unwrap();
        assert!(
            line.starts_with("Its last tool call was `read_file`"),
            "{line}"
        );
    }

    #[test]
    fn long_arguments_are_cut_and_no_call_says_nothing() {
        let long = format!(r#"{{"command":"{}"}}"#, "x".repeat(1000));
        let m = vec![
            turn(vec![call("a", "execute_shell", &long)]),
            ChatMessage::tool_result("a", ""),
        ];
        let line = last_call(&m).unwrap();
        assert!(line.len() < MAX_ARGS + 100 && line.contains('…'), "{line}");
        assert_eq!(last_call(&[ChatMessage::user("u")]), None);
    }
}
