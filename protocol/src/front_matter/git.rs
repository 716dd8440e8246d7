//! `workspace:` as a directory or a Git repository at a ref (issue 52),
//! and `deliver:`, the branch a task's changes are committed and pushed to.

use std::fmt;
use std::path::PathBuf;

use serde::de::value::MapAccessDeserializer;
use serde::{Deserialize, Deserializer, Serialize};

/// `workspace:`: a host directory (`./app`), or
/// `{ git: URL_OR_PATH, ref: main, depth: 1 }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Workspace {
    Path(PathBuf),
    Git(GitSource),
}

/// A repository and the ref a task starts from.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GitSource {
    /// A local path (relative to the prompt file), `file://…`, or a remote
    /// URL (`https://`, `ssh://`, `git@host:path`).
    pub git: String,
    /// A branch, a tag or a commit (default `HEAD`, the repository's
    /// default branch).
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Fetch only this many commits of history into the mirror.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
}

impl Workspace {
    /// The directory, when it is one.
    pub fn path(&self) -> Option<&PathBuf> {
        match self {
            Workspace::Path(p) => Some(p),
            Workspace::Git(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for Workspace {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Workspace;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a directory, or `{ git: URL_OR_PATH, ref: main, depth: 1 }`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Workspace, E> {
                Ok(Workspace::Path(PathBuf::from(v)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Workspace, A::Error> {
                GitSource::deserialize(MapAccessDeserializer::new(map)).map(Workspace::Git)
            }
        }
        d.deserialize_any(V)
    }
}

/// `deliver:`: after the task ends, its changes committed on `branch`
/// (from the commit it started at) and pushed to its repository.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Deliver {
    /// The branch; `{task_id}`, `{task_id_short}` and `{slug}` (of the
    /// title) are filled in at submit.
    pub branch: String,
    /// Push the commit (false: commit in the foreman's mirror only).
    #[serde(default = "yes")]
    pub push: bool,
    /// The outcomes that deliver (default `[complete]`).
    #[serde(default = "complete_only")]
    pub on: Vec<DeliverOn>,
}

fn yes() -> bool {
    true
}

fn complete_only() -> Vec<DeliverOn> {
    vec![DeliverOn::Complete]
}

/// An outcome that delivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliverOn {
    Complete,
    Incomplete,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_or_a_repository() {
        let p: Workspace = serde_yaml::from_str("./app").unwrap();
        assert_eq!(p, Workspace::Path("./app".into()));
        let g: Workspace = serde_yaml::from_str("{ git: ../repo, ref: main, depth: 1 }").unwrap();
        let want = GitSource {
            git: "../repo".into(),
            reference: Some("main".into()),
            depth: Some(1),
        };
        assert_eq!(g, Workspace::Git(want));
        let e = serde_yaml::from_str::<Workspace>("{ git: x, branch: main }").unwrap_err();
        assert!(e.to_string().contains("unknown field `branch`"), "{e}");
    }

    #[test]
    fn deliver_defaults_to_a_push_on_complete() {
        let d: Deliver = serde_yaml::from_str("{ branch: 'saheeli/{slug}' }").unwrap();
        assert!(d.push);
        assert_eq!(d.on, [DeliverOn::Complete]);
        let d: Deliver =
            serde_yaml::from_str("{ branch: b, push: false, on: [complete, incomplete] }").unwrap();
        assert!(!d.push);
        assert_eq!(d.on, [DeliverOn::Complete, DeliverOn::Incomplete]);
    }
}
