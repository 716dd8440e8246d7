//! `pools:` (issue 52): which pools are full now, and what each holds.
//!
//! A pool caps the tasks holding a slot (`starting` or `running`) that it
//! selects, by agent type, model or provider key, across every foreman of
//! the database. It applies beside the admission limit (`concurrency`):
//! a task is claimed only while the limit and every pool it is in have
//! room, so the tightest wins. The claim (`Store::claim_within`) counts
//! the tasks holding a slot and asks [`closed`] which selectors are full
//! in the same transaction, then takes the best queued task (priority,
//! then age) in none of them: a full pool's tasks wait, in order, without
//! holding up a task of another pool behind them, and get the next slot
//! their pool frees before any later task of theirs.

use serde::Serialize;

use crate::config::{PoolCap, Selector};
use crate::state::TaskState;
use crate::store::{Closed, PoolGroup};

fn selects(selector: &Selector, g: &PoolGroup) -> bool {
    let v = match selector {
        Selector::AgentType(t) => (g.agent_type.as_deref(), t),
        Selector::Model(m) => (g.model.as_deref(), m),
        Selector::Key(k) => (g.key.as_deref(), k),
    };
    v.0 == Some(v.1.as_str())
}

fn held(selector: &Selector, groups: &[PoolGroup], states: &[TaskState]) -> usize {
    groups
        .iter()
        .filter(|g| g.state.is_some_and(|s| states.contains(&s)) && selects(selector, g))
        .map(|g| g.tasks)
        .sum()
}

/// The selectors of `caps` whose pools are full, given the tasks in
/// `groups` (those holding a slot count; queued ones do not).
pub(crate) fn closed(caps: &[PoolCap], groups: &[PoolGroup]) -> Closed {
    let mut c = Closed::default();
    for cap in caps {
        let selector = cap.selector();
        if held(&selector, groups, &TaskState::ACTIVE) < cap.max {
            continue;
        }
        match selector {
            Selector::AgentType(t) => c.agent_types.push(t),
            Selector::Model(m) => c.models.push(m),
            Selector::Key(k) => c.keys.push(k),
        }
    }
    c
}

/// One pool as `/metrics`, `task status` and the dashboard show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct PoolUsage {
    /// `agent_type=reviewer`, `model=…`, `key=…`.
    pub pool: String,
    pub max: usize,
    /// Tasks of the pool holding a slot.
    pub running: usize,
    pub queued: usize,
}

/// Every pool of `caps` with what `groups` (queued and slot-holding
/// tasks) put in it, in config.yaml's order.
pub(crate) fn usage(caps: &[PoolCap], groups: &[PoolGroup]) -> Vec<PoolUsage> {
    caps.iter()
        .map(|cap| {
            let selector = cap.selector();
            PoolUsage {
                pool: selector.to_string(),
                max: cap.max,
                running: held(&selector, groups, &TaskState::ACTIVE),
                queued: held(&selector, groups, &[TaskState::Queued]),
            }
        })
        .collect()
}

/// `pools: agent_type=a 1/1 (2 queued), model=m 0/2`: the footer of
/// `task status`; None without pools.
pub(crate) fn line(usage: &[PoolUsage]) -> Option<String> {
    if usage.is_empty() {
        return None;
    }
    let each: Vec<String> = usage
        .iter()
        .map(|u| {
            let queued = match u.queued {
                0 => String::new(),
                n => format!(" ({n} queued)"),
            };
            format!("{} {}/{}{queued}", u.pool, u.running, u.max)
        })
        .collect();
    Some(format!("pools: {}", each.join(", ")))
}

#[cfg(test)]
#[path = "pools_tests.rs"]
mod tests;
