//! Delivering an ended task's branch (issue 52): on an outcome its
//! `deliver.on` lists, the patch committed from the commit it started at
//! in the foreman's mirror and pushed, before the report and the terminal
//! record (so both tell it). Never changes the outcome: a failure is
//! recorded with why (`delivered.error`, a `delivery_failed` event).

use std::path::PathBuf;

use saheeli_protocol::TaskId;
use saheeli_protocol::front_matter::DeliverOn;
use tracing::{info, warn};

use super::Ctx;
use crate::git::{Commit, Creds, Mirror, commit_patch, push};
use crate::state::TaskState;
use crate::store::{Outcome, TaskRow};
use crate::task::{DeliverPlan, Delivered};

/// Whether a task ended `to` delivers by `plan` (pure).
pub(super) fn delivers(plan: &DeliverPlan, to: TaskState) -> bool {
    match to {
        TaskState::Complete => plan.on.contains(&DeliverOn::Complete),
        TaskState::Incomplete => plan.on.contains(&DeliverOn::Incomplete),
        _ => false,
    }
}

/// `Name <email>` split; None when it is not that.
pub(super) fn author(text: &str) -> Option<(&str, &str)> {
    let (name, rest) = text.split_once('<')?;
    let email = rest.strip_suffix('>')?;
    let name = name.trim();
    (!name.is_empty()
        && !email.is_empty()
        && !email.contains(['<', '>', '\n'])
        && !name.contains('\n'))
    .then_some((name, email))
}

/// The commit message: the title, the agent's message, the trailers.
pub(super) fn message(row: &TaskRow, to: TaskState, o: &Outcome, said: Option<&str>) -> String {
    let mut m = format!("{}\n\n", row.title.lines().next().unwrap_or("Saheeli task"));
    match said {
        Some(s) if !s.trim().is_empty() => {
            let s: String = s.trim().chars().take(4000).collect();
            m.push_str(&s);
            m.push_str("\n\n");
        }
        _ => m.push_str(&format!(
            "Ended {to} ({}).\n\n",
            o.reason.as_deref().unwrap_or("-")
        )),
    }
    m.push_str(&format!("Saheeli-Task: {}\n", row.id));
    m.push_str(&format!("Saheeli-Model: {}\n", row.spec.model));
    m.push_str(&format!("Saheeli-Agent: {}\n", row.spec.agent.label()));
    m.push_str(&format!(
        "Saheeli-Tokens: {}\n",
        o.input_tokens + o.output_tokens
    ));
    m.push_str(&format!("Saheeli-Cost: {:.4}\n", o.cost_usd));
    if let Some(f) = row.spec.follow_up_of {
        m.push_str(&format!("Saheeli-Follow-Up-Of: {f}\n"));
    }
    m
}

/// Delivers task `id` if its spec asks for it on `to`, and records how it went.
pub(super) async fn deliver(ctx: &Ctx, id: TaskId, to: TaskState, outcome: &Outcome) {
    let Ok(row) = ctx.db(move |s| s.require(&id.to_string())).await else {
        return;
    };
    let (Some(plan), Some(git)) = (row.spec.deliver.clone(), row.spec.git.clone()) else {
        return;
    };
    let Some(start) = git.start.clone() else {
        return;
    };
    if !delivers(&plan, to) {
        return;
    }
    let Some(results) = outcome.results_path.as_ref().map(PathBuf::from) else {
        return record(ctx, id, failed(&plan, None, "no results were collected")).await;
    };
    let cfg = ctx.cfg.clone();
    let o = outcome.clone();
    let done = tokio::task::spawn_blocking(move || {
        let said = crate::collect::read_completion(&results, id)
            .ok()
            .flatten()
            .map(|c| c.message);
        let patch = results.join(crate::report::PATCH);
        if !patch.symlink_metadata().is_ok_and(|m| m.is_file()) {
            return failed(&plan, None, "no changes.patch was written (see the report)");
        }
        let Some((name, email)) = author(&cfg.file.deliver_author) else {
            return failed(
                &plan,
                None,
                "`deliver_author` in config.yaml is not `Name <email>`",
            );
        };
        let mirror = Mirror::of(&cfg.state_dir(), &git.fetch);
        let c = Commit {
            start: &start.commit,
            patch: &patch,
            message: message(&row, to, &o, said.as_deref()),
            author: (name, email),
            keep_as: format!("refs/saheeli/delivered/{id}"),
        };
        let commit = match commit_patch(&mirror, &c) {
            Ok(Some(commit)) => commit,
            Ok(None) => return failed(&plan, None, "the patch changes nothing: no commit made"),
            Err(e) => return failed(&plan, None, &format!("{e:#}")),
        };
        if !plan.push {
            return Delivered {
                branch: plan.branch.clone(),
                commit: Some(commit),
                pushed: false,
                error: None,
            };
        }
        match push(&mirror, &commit, &plan.branch, &Creds::of(&cfg)) {
            Ok(()) => Delivered {
                branch: plan.branch.clone(),
                commit: Some(commit),
                pushed: true,
                error: None,
            },
            Err(why) => failed(&plan, Some(commit), &format!("push refused: {why}")),
        }
    })
    .await;
    match done {
        Ok(d) => record(ctx, id, d).await,
        Err(e) => warn!(task_id = %id, error = %e, "delivery panicked"),
    }
}

fn failed(plan: &DeliverPlan, commit: Option<String>, why: &str) -> Delivered {
    Delivered {
        branch: plan.branch.clone(),
        commit,
        pushed: false,
        error: Some(why.to_string()),
    }
}

async fn record(ctx: &Ctx, id: TaskId, d: Delivered) {
    match &d.error {
        None => {
            info!(task_id = %id, branch = %d.branch, commit = ?d.commit, pushed = d.pushed, "delivered")
        }
        Some(why) => warn!(task_id = %id, branch = %d.branch, %why, "delivery failed"),
    }
    let lease = ctx.lease.clone();
    if let Err(e) = ctx.db(move |s| s.set_delivered(id, &lease, &d)).await {
        warn!(task_id = %id, error = %format!("{e:#}"), "delivery not recorded");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_outcomes_deliver() {
        let plan = |on: Vec<DeliverOn>| DeliverPlan {
            branch: "b".into(),
            push: true,
            on,
        };
        let complete = plan(vec![DeliverOn::Complete]);
        let both = plan(vec![DeliverOn::Complete, DeliverOn::Incomplete]);
        let cases = [
            (&complete, TaskState::Complete, true),
            (&complete, TaskState::Incomplete, false),
            (&both, TaskState::Incomplete, true),
            (&both, TaskState::Failed, false),
            (&both, TaskState::Cancelled, false),
        ];
        for (p, to, want) in cases {
            assert_eq!(delivers(p, to), want, "{to}");
        }
    }

    #[test]
    fn the_author_is_name_and_email() {
        assert_eq!(author("Saheeli <s@x>"), Some(("Saheeli", "s@x")));
        assert_eq!(author("no email"), None);
        assert_eq!(author("<s@x>"), None);
        assert_eq!(author("A <a@x>\nB <b@x>"), None);
    }
}
