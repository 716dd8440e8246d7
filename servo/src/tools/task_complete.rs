//! `task_complete`: the agent says it is done. The loop writes
//! complete.json with the message and stops.

use serde::Deserialize;

use super::ToolOutput;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TaskComplete {
    message: String,
}

pub(crate) fn run(a: TaskComplete) -> ToolOutput {
    if a.message.trim().is_empty() {
        return ToolOutput::error("`message` is empty; say what you did and how you checked it");
    }
    ToolOutput {
        complete: Some(a.message),
        ..ToolOutput::ok("Task marked complete.")
    }
}

#[cfg(test)]
mod tests {
    use crate::tools::tests::toolbox;

    #[tokio::test]
    async fn carries_the_message() {
        let (_d, tb) = toolbox();
        let out = tb.dispatch("task_complete", r#"{"message": "done"}"#).await;
        assert!(out.ok);
        assert_eq!(out.complete.as_deref(), Some("done"));
        let out = tb.dispatch("task_complete", r#"{"message": " "}"#).await;
        assert!(!out.ok && out.complete.is_none());
    }
}
