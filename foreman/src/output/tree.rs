//! Parent and child tasks in `task status` (issue 30): a task's children
//! and the totals of its tree in `--json`, the lines a parent shows for
//! children that wait for a person, and `--tree`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::state::TaskState;
use crate::store::{Store, StoreError, TaskRow};

/// One child as its parent's `--json` shows it (its last attempt).
#[derive(Debug, Serialize)]
pub(crate) struct ChildView {
    pub id: String,
    pub title: String,
    pub state: String,
    pub reason: Option<String>,
    pub steps: i64,
    pub tokens: i64,
    pub cost_usd: f64,
    pub finished_at: Option<String>,
    /// When its parent's `wait_tasks` received its outcome.
    pub received_at: Option<String>,
    /// What a `waiting_human` or `blocked` child waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<saheeli_protocol::human::Waiting>,
}

/// A task and everything below it: how many in each state, what they
/// spent.
#[derive(Debug, Default, Serialize, PartialEq)]
pub(crate) struct TreeTotals {
    /// The task itself and its descendants.
    pub tasks: u32,
    pub states: BTreeMap<String, u32>,
    pub tokens: i64,
    pub cost_usd: f64,
}

impl TreeTotals {
    fn add(&mut self, t: &TaskRow) {
        self.tasks += 1;
        *self.states.entry(t.state.to_string()).or_default() += 1;
        self.tokens += t.input_tokens + t.output_tokens;
        self.cost_usd += t.cost_usd;
    }
}

/// A task's place in a tree for `--json`: its parent, children and totals
/// (None, None, None for a task with neither).
pub(crate) type Family = (Option<String>, Option<Vec<ChildView>>, Option<TreeTotals>);

pub(crate) fn family(store: &Store, t: &TaskRow) -> Result<Family, StoreError> {
    let parent = store.parent_of(t.id)?.map(|p| p.to_string());
    let children = store.children(t.id)?;
    if children.is_empty() {
        return Ok((parent, None, None));
    }
    let views = children
        .iter()
        .map(|c| {
            let l = &c.last;
            ChildView {
                id: c.id.to_string(),
                title: l.title.clone(),
                state: l.state.to_string(),
                reason: l.reason.clone(),
                steps: l.steps,
                tokens: c.tokens,
                cost_usd: c.cost,
                finished_at: l.finished_at.map(crate::text::time),
                received_at: c.delivered_at.map(crate::text::time),
                waiting_for: l.waiting_for.clone(),
            }
        })
        .collect();
    Ok((parent, Some(views), Some(totals(store, t)?)))
}

/// The totals of `t` and every descendant: one task each (its last
/// attempt's state), and what every attempt of it spent (case N18: a
/// child's retries counted).
pub(crate) fn totals(store: &Store, t: &TaskRow) -> Result<TreeTotals, StoreError> {
    let mut sum = TreeTotals::default();
    sum.add(t);
    for (id, _) in store.descendants(t.id)? {
        let mut chain = store.attempts(id)?;
        if let Some(last) = chain.pop() {
            sum.add(&last);
        }
        for earlier in &chain {
            sum.tokens += earlier.input_tokens + earlier.output_tokens;
            sum.cost_usd += earlier.cost_usd;
        }
    }
    Ok(sum)
}

/// The lines `task status PARENT` adds: its children by state, and each
/// child waiting for a person (a child's `blocked` or `waiting_human`
/// shows on its parent).
pub(crate) fn family_lines(store: &Store, t: &TaskRow) -> anyhow::Result<String> {
    let mut s = String::new();
    if let Some(p) = store.parent_of(t.id)? {
        s.push_str(&format!("parent:    {p}\n"));
    }
    let children = store.children(t.id)?;
    if children.is_empty() {
        return Ok(s);
    }
    let mut by: BTreeMap<String, u32> = BTreeMap::new();
    for c in &children {
        *by.entry(c.last.state.to_string()).or_default() += 1;
    }
    let counts: Vec<String> = by.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let sum = totals(store, t)?;
    s.push_str(&format!(
        "children:  {} ({}); tree: {} tasks, {} tokens, ${:.4} (`task status {} --tree`)\n",
        children.len(),
        counts.join(", "),
        sum.tasks,
        sum.tokens,
        sum.cost_usd,
        t.id.short()
    ));
    for c in &children {
        if matches!(c.last.state, TaskState::WaitingHuman | TaskState::Blocked) {
            s.push_str(&format!(
                "  child {} is {}: `saheeli task status {}`\n",
                c.last.id.short(),
                c.last.state,
                c.last.id
            ));
        }
    }
    Ok(s)
}

/// `task status [ID] --tree`: the tree of ID's root (every tree among
/// `rows` without ID), one task a line, indented by depth.
pub(crate) fn tree_text(store: &Store, roots: &[TaskRow]) -> anyhow::Result<String> {
    let mut s = String::new();
    for root in roots {
        line(&mut s, root, 0);
        forks(store, &mut s, root.id, 1)?;
        for (id, depth) in store.descendants(root.id)? {
            if let Some(last) = store.attempts(id)?.pop() {
                line(&mut s, &last, depth);
                forks(store, &mut s, last.id, depth + 1)?;
            }
        }
        let sum = totals(store, root)?;
        let counts: Vec<String> = sum.states.iter().map(|(k, n)| format!("{n} {k}")).collect();
        s.push_str(&format!(
            "  {} tasks ({}), {} tokens, ${:.4}\n",
            sum.tasks,
            counts.join(", "),
            sum.tokens,
            sum.cost_usd
        ));
    }
    Ok(s)
}

/// The forks of task `id` (`task fork`), and theirs, below it.
fn forks(
    store: &Store,
    s: &mut String,
    id: saheeli_protocol::TaskId,
    depth: u32,
) -> anyhow::Result<()> {
    if depth > 32 {
        return Ok(());
    }
    for f in store.forks_of(id)? {
        if let Some(t) = store.get(&f.to_string())? {
            line(s, &t, depth);
            forks(store, s, t.id, depth + 1)?;
        }
    }
    Ok(())
}

fn line(s: &mut String, t: &TaskRow, depth: u32) {
    let indent = "  ".repeat(depth as usize);
    let branch = match (depth, &t.spec.forked_from) {
        (0, _) => String::new(),
        (_, Some(f)) => format!("⑂ fork {}/{} at step {}: ", f.index, f.count, f.step),
        _ => "└ ".into(),
    };
    let reason = t
        .reason
        .as_deref()
        .filter(|r| *r != t.state.as_str())
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    s.push_str(&format!(
        "{indent}{branch}{}  {}{reason}  {}\n",
        t.id.short(),
        t.state,
        super::clean(&t.title)
    ));
}
