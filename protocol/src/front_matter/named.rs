//! `approve:` with named approvers (issue 52): `{ tools: [execute_shell],
//! "git_push_tool": "^origin", from: [alice, ops], message: "…" }`: the
//! gates as the other forms write them (`tools`: every call; any other
//! key: a tool and the regular expression its input must match), decided
//! by those `from` names only, with a message shown where approval is
//! asked.

use std::collections::BTreeMap;
use std::fmt;

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Gates with named approvers and a message.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NamedGates {
    /// Tools gated on every call.
    pub tools: Vec<String>,
    /// Tools gated when their input matches the pattern.
    pub matching: BTreeMap<String, String>,
    /// Who may approve or deny (empty: anyone).
    pub from: Vec<String>,
    pub message: Option<String>,
}

/// A value of the map: a string, or a list of them.
pub(super) enum Value {
    One(String),
    Many(Vec<String>),
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Value, E> {
                Ok(Value::One(s.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Value, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    out.push(s);
                }
                Ok(Value::Many(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// The map's entries as gates, and whether they are named (any of
/// `tools`, `from`, `message`; else a plain map of tool to pattern).
pub(super) fn read(entries: Vec<(String, Value)>) -> Result<(NamedGates, bool), String> {
    let named = entries
        .iter()
        .any(|(k, _)| matches!(k.as_str(), "tools" | "from" | "message"));
    let mut g = NamedGates::default();
    for (key, value) in entries {
        match (key.as_str(), value) {
            ("tools", Value::Many(t)) => g.tools = t,
            ("from", Value::Many(f)) => g.from = f,
            ("message", Value::One(m)) => g.message = Some(m),
            ("tools" | "from", Value::One(_)) => {
                return Err(format!("`approve.{key}` is a list (`{key}: [a, b]`)"));
            }
            ("message", Value::Many(_)) => return Err("`approve.message` is text".into()),
            (_, Value::One(p)) => {
                g.matching.insert(key, p);
            }
            (_, Value::Many(_)) if named => {
                return Err(format!(
                    "`approve.{key}`: a tool takes a regular expression; list tools gated on \
                     every call under `tools`"
                ));
            }
            (_, Value::Many(_)) => {
                return Err(format!(
                    "`approve.{key}`: a tool takes a regular expression"
                ));
            }
        }
    }
    if g.from.iter().any(|f| f.trim().is_empty()) {
        return Err("`approve.from`: a name is empty; list who may approve".into());
    }
    Ok((g, named))
}

impl Serialize for NamedGates {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if !self.tools.is_empty() {
            m.serialize_entry("tools", &self.tools)?;
        }
        for (tool, pattern) in &self.matching {
            m.serialize_entry(tool, pattern)?;
        }
        m.serialize_entry("from", &self.from)?;
        if let Some(msg) = &self.message {
            m.serialize_entry("message", msg)?;
        }
        m.end()
    }
}
