//! The keys that run a benchmark's task as its suite wrote it (issue 49):
//! the task's own image or Dockerfile, where its agent works and as whom,
//! its tests hidden until verify, and its reward.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::de::value::MapAccessDeserializer;
use serde::{Deserialize, Deserializer, Serialize};

use super::{Commands, Timeout};

/// `environment:`: the task's image is built from a directory holding a
/// Dockerfile (its build context), cached by content.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    pub dockerfile: PathBuf,
}

/// `agent_user:`: whom the agent's processes run as in the container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentUser {
    /// The agent's own user (uid 1000): the default.
    #[default]
    Agent,
    /// Root inside the container (still no capabilities, a read-only
    /// root file system and no network): for tasks written to run as root.
    Root,
}

/// `verify:`: a command or a list of them, or a mapping whose `files` are
/// the hidden tests, copied only into the fresh verify container.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Verify {
    /// The commands, run in order.
    pub run: Commands,
    /// Host paths (relative to the prompt or suite): a directory's
    /// contents go to /tests, a file to /tests/NAME, a `.tar` or `.tar.gz`
    /// is unpacked into /tests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<PathBuf>,
    /// The reward file the commands write (default: Harbor's
    /// /logs/verifier/reward.json, then reward.txt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<String>,
    /// The limit on each command (else `verify_timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Timeout>,
    /// Environment of the verify commands, besides the task's `env:`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl Verify {
    /// Whether the mapping form with hidden files was used.
    pub fn hides_tests(&self) -> bool {
        !self.files.is_empty()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VerifyMap {
    run: Commands,
    #[serde(default)]
    files: Option<OneOrMany>,
    #[serde(default)]
    reward: Option<String>,
    #[serde(default)]
    timeout: Option<Timeout>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(PathBuf),
    Many(Vec<PathBuf>),
}

impl<'de> Deserialize<'de> for Verify {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Verify;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a command, a list of commands, or a mapping \
                     `{ run: CMD, files: tests/, reward: PATH, timeout: 10m, env: {} }`",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Verify, E> {
                Ok(Verify {
                    run: Commands(vec![v.to_string()]),
                    ..Verify::default()
                })
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Verify, A::Error> {
                let mut out = Vec::new();
                while let Some(c) = seq.next_element::<String>()? {
                    out.push(c);
                }
                Ok(Verify {
                    run: Commands(out),
                    ..Verify::default()
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Verify, A::Error> {
                let m = VerifyMap::deserialize(MapAccessDeserializer::new(map))?;
                Ok(Verify {
                    run: m.run,
                    files: match m.files {
                        None => Vec::new(),
                        Some(OneOrMany::One(p)) => vec![p],
                        Some(OneOrMany::Many(v)) => v,
                    },
                    reward: m.reward,
                    timeout: m.timeout,
                    env: m.env,
                })
            }
        }
        d.deserialize_any(V)
    }
}
