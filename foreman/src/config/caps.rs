//! `agent_types:` and `pools:` (issue 52): named kinds of worker, and caps
//! on how many tasks of an agent type, a model or a provider key run at
//! once, beside `concurrency`. (`pool:`, in `pool.rs`, is another thing:
//! warm servos.)
//!
//! ```yaml
//! agent_types:
//!   reviewer: { agent: saheeli, model: claude-sonnet-4-5, max_steps: 20, tools: [read_file, task_complete] }
//! pools:
//!   - { agent_type: reviewer, max: 4 }
//!   - { model: claude-sonnet-4-5, max: 16 }
//!   - { key: ANTHROPIC_API_KEY, max: 32 }
//! ```

use std::collections::BTreeMap;
use std::fmt;

use saheeli_protocol::front_matter::{FrontMatter, Timeout};
use serde::Deserialize;

/// One agent type: the values a task of this type takes unless its
/// front-matter (or `--param`) sets them.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentType {
    /// `saheeli`, a third-party agent's name, or `{ command, api }`.
    pub agent: Option<saheeli_protocol::Agent>,
    pub model: Option<String>,
    /// The task's own image (as the front-matter's `image:`).
    pub image: Option<String>,
    pub max_steps: Option<u32>,
    pub max_tokens: Option<u64>,
    pub max_cost: Option<f64>,
    pub timeout: Option<Timeout>,
    /// The built-in tools offered.
    pub tools: Option<Vec<String>>,
    /// MCP capabilities (config.yaml `capabilities:`).
    pub capabilities: Option<Vec<String>>,
}

impl AgentType {
    /// The type's values as a front-matter would write them: what
    /// `spec::sources` asks "does it set this key?".
    pub fn front_matter(&self) -> FrontMatter {
        FrontMatter {
            agent: self.agent.clone(),
            model: self.model.clone(),
            image: self.image.clone(),
            max_steps: self.max_steps,
            max_tokens: self.max_tokens,
            max_cost: self.max_cost,
            timeout: self.timeout,
            tools: self.tools.clone(),
            capabilities: self.capabilities.clone(),
            ..FrontMatter::default()
        }
    }

    /// `fm` with every key it leaves unset taken from this type.
    pub fn under(&self, mut fm: FrontMatter) -> FrontMatter {
        let t = self.clone();
        fm.agent = fm.agent.or(t.agent);
        fm.model = fm.model.or(t.model);
        fm.image = fm.image.or(t.image);
        fm.max_steps = fm.max_steps.or(t.max_steps);
        fm.max_tokens = fm.max_tokens.or(t.max_tokens);
        fm.max_cost = fm.max_cost.or(t.max_cost);
        fm.timeout = fm.timeout.or(t.timeout);
        fm.tools = fm.tools.or(t.tools);
        fm.capabilities = fm.capabilities.or(t.capabilities);
        fm
    }
}

/// One entry of `pools:`: a selector and how many of its tasks may hold
/// a slot at once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PoolCap {
    /// Tasks of this agent type (`agent_types:`).
    pub agent_type: Option<String>,
    /// Tasks of this model, as the prompt names it.
    pub model: Option<String>,
    /// Tasks whose model's provider reads its key from this variable
    /// (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, a provider's `api_key_env`).
    pub key: Option<String>,
    pub max: usize,
}

/// What a pool selects.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Selector {
    AgentType(String),
    Model(String),
    Key(String),
}

impl fmt::Display for Selector {
    /// `agent_type=reviewer`: the pool's name in metrics and status.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::AgentType(v) => write!(f, "agent_type={v}"),
            Selector::Model(v) => write!(f, "model={v}"),
            Selector::Key(v) => write!(f, "key={v}"),
        }
    }
}

impl PoolCap {
    /// Its one selector (checked at load: exactly one is set).
    pub fn selector(&self) -> Selector {
        match (&self.agent_type, &self.model, &self.key) {
            (Some(t), _, _) => Selector::AgentType(t.clone()),
            (None, Some(m), _) => Selector::Model(m.clone()),
            (None, None, Some(k)) => Selector::Key(k.clone()),
            (None, None, None) => unreachable!("pools are checked at load"),
        }
    }

    /// The pool's name (`agent_type=reviewer`).
    pub fn name(&self) -> String {
        self.selector().to_string()
    }
}

/// An agent type's name: letters, digits, `-`, `_` and `.`.
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `agent_types:` and `pools:` hold together: names are plain, each pool
/// has exactly one selector and a `max` of at least 1, names an agent
/// type that exists, and no two pools select the same tasks.
pub(crate) fn check(types: &BTreeMap<String, AgentType>, pools: &[PoolCap]) -> Result<(), String> {
    if let Some(name) = types.keys().find(|n| !plain(n)) {
        return Err(format!(
            "`agent_types`: name `{name}` must be 1 to 64 letters, digits, `-`, `_` or `.`"
        ));
    }
    let mut seen = BTreeMap::new();
    for (i, p) in pools.iter().enumerate() {
        let set = [&p.agent_type, &p.model, &p.key]
            .iter()
            .filter(|v| v.is_some())
            .count();
        if set != 1 {
            return Err(format!(
                "`pools[{i}]` must select by exactly one of `agent_type`, `model` or `key` \
                 (it names {set}); write one entry per selector, e.g. `{{ model: gpt-4o, max: 8 }}`"
            ));
        }
        if [&p.agent_type, &p.model, &p.key]
            .iter()
            .any(|v| v.as_deref().is_some_and(|v| v.trim().is_empty()))
        {
            return Err(format!("`pools[{i}]`: the selector's value is empty"));
        }
        let name = p.name();
        if p.max == 0 {
            return Err(format!(
                "`pools[{i}]` ({name}): `max` must be at least 1; remove the entry to leave \
                 these tasks uncapped"
            ));
        }
        if let Some(t) = &p.agent_type
            && !types.contains_key(t)
        {
            return Err(format!(
                "`pools[{i}]`: agent type `{t}` is not under `agent_types` ({})",
                known(types)
            ));
        }
        if let Some(j) = seen.insert(name.clone(), i) {
            return Err(format!(
                "`pools[{i}]` ({name}) selects the same tasks as `pools[{j}]`; keep one"
            ));
        }
    }
    Ok(())
}

/// `known: a, b` or `none is defined`, for messages.
pub(crate) fn known(types: &BTreeMap<String, AgentType>) -> String {
    if types.is_empty() {
        "none is defined".to_string()
    } else {
        format!(
            "known: {}",
            types
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(yaml: &str) -> Vec<PoolCap> {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn types() -> BTreeMap<String, AgentType> {
        serde_yaml::from_str("reviewer: { model: m, max_steps: 3 }\n").unwrap()
    }

    #[test]
    fn a_bad_pool_is_named_with_what_to_do() {
        for (yaml, want) in [
            ("[{ max: 2 }]", "`pools[0]` must select by exactly one"),
            (
                "[{ model: m, max: 1 }, { model: m, key: K, max: 2 }]",
                "`pools[1]` must select by exactly one",
            ),
            (
                "[{ model: m, max: 0 }]",
                "`pools[0]` (model=m): `max` must be at least 1",
            ),
            (
                "[{ agent_type: coder, max: 1 }]",
                "`pools[0]`: agent type `coder` is not under `agent_types` (known: reviewer)",
            ),
            (
                "[{ key: K, max: 1 }, { key: K, max: 3 }]",
                "`pools[1]` (key=K) selects the same tasks as `pools[0]`",
            ),
            (
                "[{ model: ' ', max: 1 }]",
                "`pools[0]`: the selector's value is empty",
            ),
        ] {
            let err = check(&types(), &pools(yaml)).unwrap_err();
            assert!(err.contains(want), "{yaml}: {err}");
        }
        let ok = "[{ agent_type: reviewer, max: 4 }, { model: m, max: 16 }, { key: K, max: 32 }]";
        check(&types(), &pools(ok)).unwrap();
        assert_eq!(
            pools(ok).iter().map(PoolCap::name).collect::<Vec<_>>(),
            ["agent_type=reviewer", "model=m", "key=K"]
        );
    }

    #[test]
    fn an_agent_type_name_is_plain() {
        let bad: BTreeMap<String, AgentType> = serde_yaml::from_str("\"a b\": {}\n").unwrap();
        assert!(check(&bad, &[]).unwrap_err().contains("name `a b`"));
    }

    #[test]
    fn the_front_matter_wins_over_the_type() {
        let t = &types()["reviewer"];
        let fm: FrontMatter = serde_yaml::from_str("max_steps: 9\n").unwrap();
        let fm = t.under(fm);
        assert_eq!((fm.model.as_deref(), fm.max_steps), (Some("m"), Some(9)));
        assert!(t.front_matter().model.is_some() && t.front_matter().timeout.is_none());
    }
}
