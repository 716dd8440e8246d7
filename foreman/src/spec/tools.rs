//! The tools the model is offered for a task.

use super::TaskSpec;

/// The servo's toolbox (`servo/src/tools/`), in the order it offers them.
const TOOLBOX: &[&str] = &[
    "execute_shell",
    "create_file",
    "read_file",
    "edit_file",
    "list_files",
    "task_complete",
];

/// The tool names the model gets for `spec` (what `--dry-run` lists).
/// Tools that depend on the task's settings are added here.
pub(crate) fn tools_for(_spec: &TaskSpec) -> Vec<String> {
    TOOLBOX.iter().map(|t| t.to_string()).collect()
}
