//! `setup:` (issue 50): the commands run before the agent, as a list or as
//! a mapping `{ run: [...], key_files: [requirements.txt] }` whose files'
//! content, with the image and the commands, keys the set-up cache.

use std::fmt;
use std::path::PathBuf;

use serde::de::value::MapAccessDeserializer;
use serde::{Deserialize, Deserializer, Serialize};

use super::Commands;

/// `setup:`: a command, a list of them, or `{ run, key_files }`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Setup {
    /// The commands, run in order.
    pub run: Commands,
    /// Workspace-relative files whose content keys the cached result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_files: Vec<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetupMap {
    run: Commands,
    #[serde(default)]
    key_files: Vec<PathBuf>,
}

impl<'de> Deserialize<'de> for Setup {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Setup;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a command, a list of commands, or a mapping \
                     `{ run: [CMD, ...], key_files: [requirements.txt] }`",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Setup, E> {
                Ok(Setup {
                    run: Commands(vec![v.to_string()]),
                    key_files: Vec::new(),
                })
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Setup, A::Error> {
                let mut out = Vec::new();
                while let Some(c) = seq.next_element::<String>()? {
                    out.push(c);
                }
                Ok(Setup {
                    run: Commands(out),
                    key_files: Vec::new(),
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Setup, A::Error> {
                let m = SetupMap::deserialize(MapAccessDeserializer::new(map))?;
                Ok(Setup {
                    run: m.run,
                    key_files: m.key_files,
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Setup, serde_yaml::Error> {
        serde_yaml::from_str(yaml)
    }

    #[test]
    fn a_command_a_list_and_a_mapping_parse() {
        assert_eq!(parse("make").unwrap().run.0, ["make"]);
        assert_eq!(parse("[a, b]").unwrap().run.0, ["a", "b"]);
        let m = parse("{ run: [pip install -r requirements.txt], key_files: [requirements.txt] }")
            .unwrap();
        assert_eq!(m.run.0, ["pip install -r requirements.txt"]);
        assert_eq!(m.key_files, [PathBuf::from("requirements.txt")]);
        assert!(parse("{ run: make }").unwrap().key_files.is_empty());
    }

    #[test]
    fn an_unknown_key_in_the_mapping_is_named() {
        let e = parse("{ run: make, keyfiles: [a] }")
            .unwrap_err()
            .to_string();
        assert!(e.contains("keyfiles") && e.contains("key_files"), "{e}");
    }
}
