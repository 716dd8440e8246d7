//! `spawn_task` and `wait_tasks` (issue 30), offered when the task's
//! front-matter grants `delegate:`. Both go to the foreman through the
//! gateway socket, keyed by the tool call's id, so a call asked again
//! after a foreman restart spawns no second child and hands no outcome
//! over twice. Time spent waiting for children is not working time (as a
//! wait for a human is not): the deadline moves back.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use saheeli_protocol::TaskId;
use saheeli_protocol::delegate::{ChildOutcome, Spawn, Wait};
use serde::Deserialize;

use super::{Agent, delegate_files};
use crate::tools::{Delegate, ToolOutput};

/// One long poll of the wait route; the servo asks again until done.
const WAIT_POLL: Duration = Duration::from_secs(30);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpawnArgs {
    prompt: Option<String>,
    template: Option<String>,
    #[serde(default)]
    params: BTreeMap<String, String>,
    model: Option<String>,
    #[serde(default)]
    workspace: Vec<String>,
    max_tokens: Option<u64>,
    max_cost: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitArgs {
    ids: Option<Vec<String>>,
}

impl Agent {
    /// Runs `spawn_task` or `wait_tasks` (the task may delegate).
    pub(super) async fn delegate(
        &mut self,
        call_id: &str,
        tool: Delegate,
        arguments: &str,
    ) -> ToolOutput {
        let args = match arguments.trim() {
            "" => "{}",
            a => a,
        };
        match tool {
            Delegate::Spawn => match serde_json::from_str::<SpawnArgs>(args) {
                Ok(a) => self.spawn(call_id, a).await,
                Err(e) => bad_args(tool.name(), e),
            },
            Delegate::Wait => match serde_json::from_str::<WaitArgs>(args) {
                Ok(a) => self.wait_children(call_id, a).await,
                Err(e) => bad_args(tool.name(), e),
            },
        }
    }

    async fn spawn(&mut self, call_id: &str, a: SpawnArgs) -> ToolOutput {
        if a.prompt.is_some() == a.template.is_some() {
            return ToolOutput::error(
                "give either `prompt` (text) or `template` (a prompt file), not both or neither",
            );
        }
        let root = self.root.clone();
        let paths = a.workspace.clone();
        let files = tokio::task::spawn_blocking(move || delegate_files::collect(&root, &paths))
            .await
            .unwrap_or_else(|e| Err(format!("reading the workspace failed: {e}")));
        let workspace = match files {
            Ok(f) => f,
            Err(e) => return ToolOutput::error(e),
        };
        let req = Spawn {
            call_id: call_id.to_string(),
            prompt: a.prompt,
            template: a.template,
            params: a.params,
            model: a.model,
            workspace,
            max_tokens: a.max_tokens,
            max_cost: a.max_cost,
        };
        match self.desk.spawn(&req).await {
            Ok(s) => {
                let mut text = format!("Spawned child task {}", s.id);
                if let Some(t) = s.max_tokens {
                    let _ = write!(text, " with {t} tokens");
                }
                if let Some(c) = s.max_cost {
                    let _ = write!(text, " and ${c:.4}");
                }
                text.push_str(". Collect its outcome with wait_tasks.");
                ToolOutput::ok(text)
            }
            Err(e) => ToolOutput::error(format!("no child was spawned: {}", e.0)),
        }
    }

    async fn wait_children(&mut self, call_id: &str, a: WaitArgs) -> ToolOutput {
        let ids = match a.ids {
            None => None,
            Some(raw) => match raw.iter().map(|s| s.trim().parse::<TaskId>()).collect() {
                Ok(ids) => Some(ids),
                Err(_) => {
                    return ToolOutput::error("`ids` must be task ids as spawn_task returned them");
                }
            },
        };
        let req = Wait {
            call_id: call_id.to_string(),
            ids,
            wait_ms: WAIT_POLL.as_millis() as u64,
        };
        let t0 = Instant::now();
        self.human.wait_begins();
        let answer = loop {
            match self.desk.wait_children(&req, WAIT_POLL).await {
                Ok(w) if w.done => break Ok(w),
                Ok(_) => continue,
                Err(e) => break Err(e),
            }
        };
        self.human.waited_for(t0.elapsed());
        match answer {
            Ok(w) => ToolOutput::ok(outcomes(&w.children)),
            Err(e) => ToolOutput::error(format!("waiting for the children failed: {}", e.0)),
        }
    }
}

fn bad_args(tool: &str, e: serde_json::Error) -> ToolOutput {
    ToolOutput::error(format!(
        "invalid arguments for `{tool}`: {e}. Send a JSON object matching the tool's schema."
    ))
}

/// The children's outcomes as the model reads them.
fn outcomes(children: &[ChildOutcome]) -> String {
    if children.is_empty() {
        return "No children to wait for.".to_string();
    }
    let mut s = format!("{} child task(s) ended.\n", children.len());
    for c in children {
        let _ = write!(s, "\n## {} ({}): {}", c.id, c.title, c.state);
        if let Some(r) = &c.reason {
            let _ = write!(s, " ({r})");
        }
        s.push('\n');
        if c.already_received {
            s.push_str("(its outcome was handed to an earlier wait_tasks)\n");
            continue;
        }
        if let Some(m) = &c.message {
            let _ = writeln!(s, "message: {m}");
        }
        match &c.patch {
            Some(p) if !p.trim().is_empty() => {
                let _ = writeln!(s, "changes:\n```diff\n{}\n```", p.trim_end());
            }
            _ => s.push_str("changes: none\n"),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_name_each_child_once_with_its_message() {
        let id = TaskId::new();
        let c = ChildOutcome {
            id,
            title: "worker".into(),
            state: "complete".into(),
            reason: Some("complete".into()),
            message: Some("wrote a.txt".into()),
            patch: Some("+a\n".into()),
            already_received: false,
        };
        let text = outcomes(&[c]);
        assert_eq!(text.matches(&id.to_string()).count(), 1, "{text}");
        assert!(text.contains("message: wrote a.txt"), "{text}");
        assert!(text.contains("```diff\n+a\n```"), "{text}");
        assert_eq!(outcomes(&[]), "No children to wait for.");
    }
}
