//! The system prompt: the rules, the tools the task is offered (from the
//! one tool table, `saheeli_protocol::tools`, narrowed by `tools:`), and a
//! template's steps.

use saheeli_protocol::ServoTask;

const PROMPT_HEAD: &str = "\
You are Saheeli's servo, a coding agent working alone inside a sandboxed Linux container. \
Your working directory is /workspace; every file you create, read or edit must be inside it. \
You have no network access. Act only through your tools: ";

const ASK: &str = "When you are missing information only the user can give, ask with ask_user \
instead of guessing or giving up. ";

const BLOCKED: &str = "When something outside your reach stops you, say so with task_blocked. ";

const WORK: &str = "Work step by step, check your work (run the tests or the program), and keep \
going until the task is done. ";

const COMPLETE: &str = "When it is done, call task_complete with a short summary of what you did \
and how you checked it; the task counts as done only when you call task_complete.";

/// The system prompt: the rules, the tools this task is offered (from the
/// one tool table, narrowed by `tools:`), and a template's steps when it
/// has them.
pub(super) fn system_prompt(task: &ServoTask) -> String {
    use saheeli_protocol::tools::{BUILT_IN, Offered, allowed_by};
    let offered: Vec<_> = BUILT_IN
        .iter()
        .filter(|t| matches!(t.offered, Offered::Toolbox | Offered::Always))
        .filter(|t| allowed_by(task.tools.as_deref(), t.name))
        .collect();
    let listed: Vec<String> = offered
        .iter()
        .map(|t| format!("{} ({})", t.name, t.summary))
        .collect();
    let tools = match listed.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    };
    let has = |name: &str| offered.iter().any(|t| t.name == name);
    let mut prompt = format!("{PROMPT_HEAD}{tools}. ");
    if has("ask_user") {
        prompt.push_str(ASK);
    }
    if has(saheeli_protocol::human::BLOCKED) {
        prompt.push_str(BLOCKED);
    }
    prompt.push_str(WORK);
    if has("task_complete") {
        prompt.push_str(COMPLETE);
    }
    if let Some(d) = &task.delegate {
        prompt.push_str(&format!(
            "You may delegate: spawn_task starts a child task (up to {} in all) that works on its \
             own, and wait_tasks waits for children and hands you their outcomes. ",
            d.max_children
        ));
    }
    let mut prompt = prompt.trim_end().to_string();
    if let Some(at) = task.deadline_ms {
        prompt.push_str(&format!(" {}", deadline_line(at, task.timeout_s)));
    }
    match crate::tools::step_instructions(&task.steps) {
        Some(steps) => format!(
            "{prompt} Begin each of the task's steps with step_start and mark it done with step_done as you finish it.\n\n{steps}"
        ),
        None => prompt,
    }
}

/// What the model is told of a `deadline:`, beside its time limit.
fn deadline_line(at_ms: i64, timeout_s: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at_ms.max(0) as u64);
    format!(
        "This task has a deadline: it is stopped at {} (UTC) at the latest, and after {} of \
         work in any case; finish and call task_complete before then.",
        humantime::format_rfc3339_seconds(at),
        humantime::format_duration(std::time::Duration::from_secs(timeout_s))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(tools: Option<&[&str]>) -> ServoTask {
        serde_json::from_value(serde_json::json!({
            "task_id": saheeli_protocol::TaskId::new(),
            "title": "t", "model": "m", "max_steps": 5, "timeout_s": 60,
            "max_output_bytes": 1024,
            "tools": tools,
        }))
        .unwrap()
    }

    /// Issue 24: a task narrowed with `tools:` was still told, in its
    /// system prompt, to use the tools it was not offered.
    #[test]
    fn the_system_prompt_lists_only_the_offered_tools() {
        let all = system_prompt(&task(None));
        for t in [
            "execute_shell",
            "create_file",
            "edit_file",
            "list_files",
            "ask_user",
        ] {
            assert!(all.contains(t), "{t} missing: {all}");
        }
        assert!(all.contains("call task_complete"), "{all}");
        let review = system_prompt(&task(Some(&["read_file", "list_files", "task_complete"])));
        for gone in ["execute_shell", "create_file", "edit_file"] {
            assert!(!review.contains(gone), "{gone} still listed: {review}");
        }
        for kept in ["read_file", "list_files", "ask_user", "task_complete"] {
            assert!(review.contains(kept), "{kept} missing: {review}");
        }
        let no_end = system_prompt(&task(Some(&["read_file"])));
        assert!(!no_end.contains("task_complete"), "{no_end}");
    }
}
