//! `definitions:` (issue 52): the Git repository templates, eval suites,
//! agent types and pools are read from while `saheeli serve` runs
//! (`serve --definitions REPO[@REF]` sets the same).
//!
//! ```yaml
//! definitions: { repo: ../saheeli-definitions, ref: main, poll: 60s }
//! ```

use std::time::Duration;

use saheeli_protocol::front_matter::parse_duration_value;
use serde::Deserialize;

/// `definitions:` as written.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DefinitionsConfig {
    /// A path (relative to config.yaml's directory) or `file://` URL.
    pub repo: String,
    /// The branch, tag or commit read.
    #[serde(default = "default_ref", rename = "ref")]
    pub reference: String,
    /// How often the repository is looked at for a new commit.
    #[serde(default = "default_poll", deserialize_with = "parse_duration_value")]
    pub poll: Duration,
}

fn default_ref() -> String {
    "HEAD".to_string()
}

/// The poll interval when none is set.
pub(crate) const DEFAULT_POLL: Duration = Duration::from_secs(60);

fn default_poll() -> Duration {
    DEFAULT_POLL
}

impl DefinitionsConfig {
    /// `REPO[@REF]` as `--definitions` takes it: the ref after the last
    /// `@` (none: `HEAD`), the poll interval from `poll`.
    pub fn from_arg(arg: &str, poll: Option<Duration>) -> Result<DefinitionsConfig, String> {
        let (repo, reference) = match arg.rsplit_once('@') {
            Some((repo, r)) if !r.is_empty() => (repo, r),
            _ => (arg.trim_end_matches('@'), "HEAD"),
        };
        if repo.trim().is_empty() {
            return Err("`--definitions` names no repository: give `REPO[@REF]`".into());
        }
        Ok(DefinitionsConfig {
            repo: repo.to_string(),
            reference: reference.to_string(),
            poll: poll.unwrap_or(DEFAULT_POLL),
        })
    }

    /// Checked at load: a ref git would take, a poll of at least 1 s.
    pub(super) fn problem(&self) -> Option<String> {
        let r = &self.reference;
        if r.is_empty()
            || r.starts_with('-')
            || r.contains(['\n', ' ', ':', '\\'])
            || r.contains("..")
        {
            return Some(format!(
                "`definitions.ref` `{r}` is not a branch, tag or commit name"
            ));
        }
        if self.poll < Duration::from_secs(1) {
            return Some("`definitions.poll` must be at least 1s".into());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_names_a_repository_and_maybe_a_ref() {
        let d = DefinitionsConfig::from_arg("../defs@release/1", None).unwrap();
        assert_eq!(
            (d.repo.as_str(), d.reference.as_str()),
            ("../defs", "release/1")
        );
        assert_eq!(d.poll, DEFAULT_POLL);
        let d = DefinitionsConfig::from_arg("/srv/defs.git", Some(Duration::from_secs(5))).unwrap();
        assert_eq!(
            (d.repo.as_str(), d.reference.as_str()),
            ("/srv/defs.git", "HEAD")
        );
        assert!(DefinitionsConfig::from_arg("@main", None).is_err());
        let bad: DefinitionsConfig = serde_yaml::from_str("{ repo: r, ref: '-x' }").unwrap();
        assert!(bad.problem().unwrap().contains("definitions.ref"));
        let slow: DefinitionsConfig = serde_yaml::from_str("{ repo: r, poll: 10ms }").unwrap();
        assert!(slow.problem().unwrap().contains("at least 1s"));
        assert!(serde_yaml::from_str::<DefinitionsConfig>("{ repo: r, pol: 1s }").is_err());
    }
}
