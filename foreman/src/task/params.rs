//! A template's parameter values as a task was queued with them.

use serde::{Deserialize, Serialize};

/// Where a parameter's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ParamSource {
    #[serde(rename = "--param")]
    Param,
    #[serde(rename = "default")]
    Default,
    /// Typed in on a terminal when the submit asked for it.
    #[serde(rename = "asked")]
    Asked,
    /// Optional, with no default and no value: `{{ name }}` is empty.
    #[serde(rename = "unset")]
    Unset,
}

impl ParamSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ParamSource::Param => "--param",
            ParamSource::Default => "default",
            ParamSource::Asked => "asked",
            ParamSource::Unset => "unset",
        }
    }
}

/// A parameter's value, as the task was queued with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ParamValue {
    pub name: String,
    pub value: String,
    pub source: ParamSource,
}
