//! Best-of-N in `task status` (issue 51): a task's samples, how far they
//! got and which won; a sample's place among them.

use serde_json::{Value, json};

use crate::store::{Store, StoreError, TaskRow};

/// `samples` of `task status --json` for a task with `samples:` (None
/// otherwise): K, the rule, how many have ended and completed, the winner.
pub(crate) fn samples_view(store: &Store, t: &TaskRow) -> Result<Option<Value>, StoreError> {
    let Some(plan) = t.spec.samples else {
        return Ok(None);
    };
    let (mut queued, mut ended, mut complete) = (0, 0, 0);
    for c in store.children(t.id)? {
        if c.last.spec.sample_index(t.id).is_none() {
            continue;
        }
        queued += 1;
        if c.last.state.is_terminal() {
            ended += 1;
        }
        if c.last.state == crate::state::TaskState::Complete {
            complete += 1;
        }
    }
    let winner = store.sample_winner(t.id)?.map(|w| w.to_string());
    Ok(Some(json!({
        "count": plan.count, "select": plan.select.as_str(), "fork_at": plan.fork_at,
        "queued": queued, "ended": ended, "complete": complete, "winner": winner,
    })))
}

/// The detail view's line for a task with samples (empty otherwise).
pub(crate) fn samples_line(store: &Store, t: &TaskRow) -> anyhow::Result<String> {
    if let Some(of) = t.spec.sample_of {
        let index = t.spec.sample_index(of.task).unwrap_or(of.index);
        return Ok(format!(
            "sample:    {index} of {} of task {}\n",
            of.count, of.task
        ));
    }
    let Some(v) = samples_view(store, t)? else {
        return Ok(String::new());
    };
    let winner = v["winner"]
        .as_str()
        .map(|w| format!("; winner {w}"))
        .unwrap_or_default();
    Ok(format!(
        "samples:   {} (select: {}): {} ended, {} complete{winner}\n",
        v["count"],
        v["select"].as_str().unwrap_or(""),
        v["ended"],
        v["complete"]
    ))
}
