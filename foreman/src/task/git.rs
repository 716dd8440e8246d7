//! A task that starts from a Git repository and delivers a branch (issue
//! 52), as its spec and row hold it. What is done with them is `git/`.

use saheeli_protocol::TaskId;
use saheeli_protocol::front_matter::DeliverOn;
use serde::{Deserialize, Serialize};

/// `workspace: { git, ref, depth }`, checked at submit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GitWorkspace {
    /// The repository as the prompt named it.
    pub url: String,
    /// What git is given: an absolute path, or the URL.
    pub fetch: String,
    #[serde(rename = "ref")]
    pub reference: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// The commit `reference` named when the task was submitted (filled in
    /// by the submit, with how long the fetch took).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<GitStart>,
}

/// The commit a task started from: the `git` column, status's `git`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GitStart {
    pub url: String,
    #[serde(rename = "ref")]
    pub reference: String,
    pub commit: String,
    /// The foreman's mirror of the repository was made by this fetch.
    pub cold: bool,
    /// How long the fetch took, ms.
    pub fetch_ms: u64,
}

/// `deliver:`, its branch filled in at submit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeliverPlan {
    pub branch: String,
    pub push: bool,
    pub on: Vec<DeliverOn>,
}

/// How a delivery went: the `delivered` column, status's `delivery`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Delivered {
    pub branch: String,
    /// The commit made (None: the patch changed nothing, or it failed
    /// before a commit was made).
    pub commit: Option<String>,
    /// It is on the repository's branch.
    pub pushed: bool,
    /// Why it was not made or not pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `{task_id}`, `{task_id_short}` and `{slug}` become in a branch.
pub(crate) fn branch_name(template: &str, id: TaskId, title: &str) -> String {
    template
        .replace("{task_id_short}", &id.short())
        .replace("{task_id}", &id.to_string())
        .replace("{slug}", &slug(title))
}

/// The title in lowercase words joined by `-`, at most 40 bytes.
pub(crate) fn slug(title: &str) -> String {
    let mut out = String::new();
    for word in title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        if out.len() + word.len() + 1 > 40 {
            break;
        }
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&word.to_ascii_lowercase());
    }
    if out.is_empty() { "task".into() } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_branch_name_from_its_template() {
        let id: TaskId = "0a1b2c3d-0000-4000-8000-000000000000".parse().unwrap();
        let b = branch_name(
            "saheeli/{task_id_short}-{slug}",
            id,
            "Fix the failing test (parser)!",
        );
        assert_eq!(
            b,
            format!("saheeli/{}-fix-the-failing-test-parser", id.short())
        );
        assert_eq!(slug("  !! "), "task");
        assert!(slug(&"word ".repeat(30)).len() <= 40);
    }
}
