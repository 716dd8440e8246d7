//! `expect:` of a case: the state its task must end in, files of the
//! collected workspace that must match a regex, and what the completion
//! message must match; each checked while the suite is read.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde::de::Deserializer;

use super::checked::Checked;
use crate::state::TaskState;

/// How a case is scored beyond its task's state.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Expect {
    /// The state the task must end in (default `complete`).
    #[serde(default)]
    pub state: Option<EndState>,
    /// Files of the collected workspace that must exist and match.
    #[serde(default)]
    pub files: BTreeMap<FileKey, Pattern>,
    /// What the completion message must match.
    #[serde(default)]
    pub message: Option<Pattern>,
}

/// A terminal task state named in `expect.state`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EndState(pub TaskState);

impl<'de> Deserialize<'de> for EndState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(Checked(|s: String| match s.parse::<TaskState>() {
            Ok(st) if st.is_terminal() => Ok(EndState(st)),
            _ => Err(format!(
                "`expect.state` `{s}` is not a state a task ends in; use complete, incomplete, failed or cancelled"
            )),
        }))
    }
}

/// A path below the workspace named in `expect.files`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FileKey(pub String);

impl<'de> Deserialize<'de> for FileKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(Checked(|s: String| {
            let plain = Path::new(&s)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            if s.is_empty() || !plain {
                return Err(format!(
                    "`expect.files` path `{s}` must be relative to the workspace, without `..`"
                ));
            }
            Ok(FileKey(s))
        }))
    }
}

/// A regex, compiled while reading so a bad one names its line.
#[derive(Clone, Debug)]
pub(crate) struct Pattern(pub regex::Regex);

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(Checked(|s: String| {
            regex::RegexBuilder::new(&s)
                .size_limit(1 << 20)
                .build()
                .map(Pattern)
                .map_err(|e| format!("regex `{s}` does not compile: {e}"))
        }))
    }
}
