//! The fake LLM the scale measurements talk to: the project's own test
//! double (`foreman/tests/it/fake_llm.rs`: real HTTP, the OpenAI wire
//! format with tool calls), answering every task the same script by the
//! number of assistant turns already in its conversation, so hundreds of
//! tasks in parallel never take each other's turns.

use std::time::Duration;

use serde_json::{Value, json};

#[allow(dead_code)]
#[path = "../../foreman/tests/it/fake_llm.rs"]
mod fake_llm;

use fake_llm::{FakeLlm, Reply};

/// The fake, owned by async code: it runs on a runtime of its own, which
/// may be neither started nor dropped on an async thread.
pub struct Fake(Option<FakeLlm>);

impl std::ops::Deref for Fake {
    type Target = FakeLlm;
    fn deref(&self) -> &FakeLlm {
        self.0.as_ref().expect("present until dropped")
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            std::thread::spawn(move || drop(f));
        }
    }
}

/// Assistant turns already in a chat-completions request.
fn turns(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or(0)
}

/// A fake that answers each task `calls` times after `delay`: `calls - 1`
/// turns of `execute_shell {"command": "true"}`, then `task_complete`.
pub async fn start(calls: usize, delay: Duration) -> anyhow::Result<Fake> {
    let fake = tokio::task::spawn_blocking(move || started(calls, delay)).await?;
    Ok(Fake(Some(fake)))
}

fn started(calls: usize, delay: Duration) -> FakeLlm {
    FakeLlm::start_matching(vec![], move |body| {
        let reply = if turns(body) + 1 < calls {
            Reply::tool("execute_shell", json!({"command": "true"}))
        } else {
            Reply::tool("task_complete", json!({"message": "done"}))
        };
        Some(if delay.is_zero() {
            reply
        } else {
            Reply::Slow(delay, Box::new(reply))
        })
    })
}
