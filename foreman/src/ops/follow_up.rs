//! `task follow-up ID --prompt …` and `POST /api/tasks/ID/follow-up`
//! (issue 52): review feedback on a delivered branch starts a new task on
//! that branch's head, linked by `follow_up_of`, whose prompt carries the
//! original objective, the diff so far and the feedback; it delivers to
//! the same branch (a fast-forward push).

use std::path::Path;

use saheeli_protocol::TaskId;

use super::error::Error;
use super::submit::{Submit, submit_spec};
use crate::config::Config;
use crate::git::Mirror;
use crate::ops::open_existing_store;
use crate::spec::TaskSpec;
use crate::store::TaskRow;

/// The most of the diff so far a follow-up's prompt carries.
const MAX_DIFF: usize = 64 << 10;

/// The most feedback a follow-up takes.
pub(crate) const MAX_FEEDBACK: usize = 64 << 10;

/// Queues the follow-up of the delivered task `id_or_prefix` with
/// `feedback`; returns the new id.
pub(crate) async fn follow_up(
    cfg: &Config,
    id_or_prefix: &str,
    feedback: &str,
) -> Result<TaskId, Error> {
    if feedback.trim().is_empty() {
        return Err(Error::Refused(anyhow::anyhow!(
            "`--prompt` is empty: give the review's feedback (a file or the text)"
        )));
    }
    if feedback.len() > MAX_FEEDBACK {
        return Err(Error::Refused(anyhow::anyhow!(
            "the feedback is {} bytes, over {MAX_FEEDBACK}: shorten it",
            feedback.len()
        )));
    }
    let (old, root) = {
        let store = open_existing_store(cfg).map_err(Error::Internal)?;
        let old: TaskRow = store.require(id_or_prefix)?;
        let mut root = old.clone();
        for _ in 0..1000 {
            match root.spec.follow_up_of {
                Some(up) => root = store.require(&up.to_string())?,
                None => break,
            }
        }
        (old, root)
    };
    let (branch, head) = match (&old.delivered, &old.spec.git) {
        (Some(d), Some(_)) if d.pushed && d.commit.is_some() => {
            (d.branch.clone(), d.commit.clone().unwrap_or_default())
        }
        (Some(d), Some(_)) => {
            return Err(Error::WrongState(format!(
                "task `{}`'s branch `{}` was not delivered ({}); only a pushed branch can be followed up",
                old.id,
                d.branch,
                d.error.as_deref().unwrap_or("`push: false`")
            )));
        }
        _ => {
            return Err(Error::WrongState(format!(
                "task `{}` delivered no branch: a follow-up needs a task with `workspace: {{ git }}` and `deliver:` that pushed",
                old.id
            )));
        }
    };
    let git = old.spec.git.clone().expect("checked above");
    let first = root
        .spec
        .git
        .as_ref()
        .and_then(|g| g.start.as_ref())
        .map(|s| s.commit.clone())
        .unwrap_or_else(|| head.clone());
    let mirror = Mirror::of(&cfg.state_dir(), &git.fetch);
    let (from, to) = (first.clone(), head.clone());
    let diff = tokio::task::spawn_blocking(move || mirror.diff(&from, &to, MAX_DIFF))
        .await
        .map_err(|e| Error::panicked("the diff", e))?
        .map_err(Error::Internal)?;
    let mut spec: TaskSpec = old.spec.clone();
    spec.title = follow_up_title(&root.title);
    spec.body = prompt(
        &root.spec.body,
        &String::from_utf8_lossy(&diff),
        diff.len() >= MAX_DIFF,
        feedback,
    );
    spec.chain = None;
    spec.follow_up_of = Some(old.id);
    if let Some(g) = spec.git.as_mut() {
        g.reference = branch.clone();
        g.start = None;
    }
    if let Some(d) = spec.deliver.as_mut() {
        d.branch = branch;
    }
    let prompt_path = spec.prompt_path.clone();
    submit_spec(cfg, Path::new(&prompt_path), spec, &Submit::default()).await
}

fn follow_up_title(root: &str) -> String {
    let t = format!("Follow-up: {root}");
    t.chars().take(200).collect()
}

/// The follow-up's prompt: the objective, the diff so far, the feedback.
pub(crate) fn prompt(objective: &str, diff: &str, cut: bool, feedback: &str) -> String {
    let cut = if cut {
        "\n(the diff is cut here)\n"
    } else {
        ""
    };
    format!(
        "{}\n\n## What was done so far\n\nThe workspace holds the branch with this work applied. The diff from where the work began:\n\n```diff\n{}\n{cut}```\n\n## Review feedback\n\nAddress this feedback on the work above:\n\n{}\n",
        objective.trim_end(),
        diff.trim_end(),
        feedback.trim_end()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_carries_objective_diff_and_feedback() {
        let p = prompt("Fix the test.\n", "+a\n", false, "Rename x to y.");
        let o = p.find("Fix the test.").unwrap();
        let d = p.find("```diff\n+a\n```").unwrap();
        let f = p.find("Rename x to y.").unwrap();
        assert!(o < d && d < f, "{p}");
        assert!(prompt("o", "+a", true, "f").contains("(the diff is cut here)"));
        assert_eq!(follow_up_title("Fix"), "Follow-up: Fix");
    }
}
