//! Templates: a prompt whose front-matter declares `parameters:` is a
//! template, and `{{ name }}` in its text is replaced by the parameter's
//! value; `steps:` is a checklist the model ticks off with `step_done`.
//!
//! ```markdown
//! ---
//! title: "Fix {{ test }}"
//! workspace: "./{{ repo }}"
//! parameters:
//!   - { name: test, type: string, required: true, description: the failing test }
//!   - { name: repo, type: path, default: calc }
//! steps:
//!   - { name: reproduce, description: Run the test and see it fail, done_when: it fails }
//! ---
//! Make `{{ test }}` pass.
//! ```
//!
//! Only the types live here (they are front-matter, and steps reach the
//! servo); checking values and replacing placeholders is the foreman's.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

mod approval;

pub use approval::StepApproval;

/// One declared parameter of a template.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Parameter {
    /// What `{{ name }}` and `--param name=VALUE` call it.
    pub name: String,
    /// `string` (the default), `int`, `bool`, `path` or `one_of`.
    #[serde(rename = "type", default)]
    pub kind: ParamType,
    /// A submit without a value for it is refused (or asks, on a terminal).
    #[serde(default)]
    pub required: bool,
    /// The value when none is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Scalar>,
    /// Shown when the value is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The allowed values of a `one_of`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<Scalar>,
}

/// What a parameter's value must be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamType {
    /// Any text.
    #[default]
    String,
    /// A whole number (`-3`, `42`).
    Int,
    /// `true` or `false`.
    Bool,
    /// A path that exists, relative to the prompt file's directory.
    Path,
    /// One of `values`.
    OneOf,
}

impl ParamType {
    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Int => "int",
            ParamType::Bool => "bool",
            ParamType::Path => "path",
            ParamType::OneOf => "one_of",
        }
    }
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A YAML scalar read as the text it spells (`true`, `3`, `abc`): values
/// are checked against their parameter's type, not YAML's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Scalar(pub String);

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a single value (text, a number or true/false)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// One step of a template's checklist. The model calls `step_start` with
/// the step's name before its work, and `step_done` with the name and its
/// evidence once `done_when` holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// What must hold for the step to count as done: text the model
    /// attests, or `{ verify: COMMAND }` that Saheeli runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_when: Option<DoneWhen>,
    /// `approve: true`: the step starts only on a person's approval (its
    /// `step_start` waits as a gated tool call does); `approve: { from:
    /// [alice, ops], message: … }`: only from those named (issue 52).
    #[serde(default, skip_serializing_if = "StepApproval::is_off")]
    pub approve: StepApproval,
    /// `breakpoint: before | after`: the task pauses once the step has
    /// started (before its work), or once it is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breakpoint: Option<Position>,
}

/// When a step counts as done: `done_when: TEXT` (the model attests it,
/// with its evidence) or `done_when: { verify: COMMAND }` (a checked step:
/// when the model marks it done, the command runs in the task's container
/// as `verify` does, and a failure keeps the step open).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum DoneWhen {
    Text(String),
    Check(StepCheck),
}

/// The command of a checked step.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StepCheck {
    pub verify: String,
}

impl DoneWhen {
    /// The command Saheeli runs, for a checked step.
    pub fn command(&self) -> Option<&str> {
        match self {
            DoneWhen::Text(_) => None,
            DoneWhen::Check(c) => Some(&c.verify),
        }
    }
}

/// As the model and status show it: the text, or what is checked.
impl fmt::Display for DoneWhen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DoneWhen::Text(t) => f.write_str(t.trim()),
            DoneWhen::Check(c) => write!(f, "`{}` passes (Saheeli runs it)", c.verify.trim()),
        }
    }
}

/// Where a breakpoint stands around a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Position {
    Before,
    After,
}

impl Position {
    pub fn as_str(self) -> &'static str {
        match self {
            Position::Before => "before",
            Position::After => "after",
        }
    }
}

/// The servo's routes on the gateway socket for steps.
pub mod routes {
    /// `POST` a [`StepDone`](super::StepDone); answered with a
    /// [`StepsDone`](super::StepsDone).
    pub const STEP_DONE: &str = "/saheeli/v1/step_done";
    /// `POST` a [`StepStart`](super::StepStart); answered with a
    /// [`StepsDone`](super::StepsDone).
    pub const STEP_START: &str = "/saheeli/v1/step_start";
}

/// `POST /saheeli/v1/step_start`: the model begins step `name`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StepStart {
    pub name: String,
}

/// `POST /saheeli/v1/step_done`: the model says step `name` is done.
/// Saying it again replaces the evidence.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StepDone {
    pub name: String,
    pub evidence: String,
}

/// Answer to a [`StepDone`]: the names of every step done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct StepsDone {
    pub done: Vec<String>,
    /// A checked step whose command failed: not recorded as done, and
    /// this is what the model is told (the command and its output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_failed: Option<String>,
    /// The step had not started, and its start stops there first: not
    /// recorded as done (see [`StepHeld`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<StepHeld>,
}

/// Why a `step_done` of a step that had not started was not recorded: the
/// call that reaches a step first is its start, so its approval gate and
/// its breakpoint before apply to it as to a `step_start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepHeld {
    /// The step has `approve: true` and no approval of its start (of a
    /// `step_start` or a `step_done` naming it) is on record: a person
    /// must approve first.
    NeedsApproval,
    /// The call started the step and a breakpoint before it pauses the
    /// task now, before its work; call `step_done` again afterwards.
    BreakpointBefore,
}

impl StepHeld {
    /// What the model (or agent) is told, for step `name`.
    pub fn told(self, name: &str) -> String {
        match self {
            StepHeld::NeedsApproval => format!(
                "[saheeli] Step `{name}` is not done: it needs a person's approval before it \
                 starts, and none is on record. Call step_start with its name (it waits for \
                 the approval), do its work, then call step_done again."
            ),
            StepHeld::BreakpointBefore => format!(
                "[saheeli] Step `{name}` had not started, so this call started it, and a \
                 breakpoint before it pauses the task here for a person. It is not done yet: \
                 once the task goes on, do its work (or check it) and call step_done again."
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_read_every_field_and_default_to_string() {
        let p: Vec<Parameter> = serde_yaml::from_str(
            "- { name: a }\n\
             - { name: b, type: one_of, values: [x, 2, true], required: true, description: d }\n\
             - { name: c, type: int, default: 3 }\n",
        )
        .unwrap();
        assert_eq!(p[0].kind, ParamType::String);
        assert!(!p[0].required);
        assert_eq!(p[1].kind, ParamType::OneOf);
        let values: Vec<&str> = p[1].values.iter().map(|v| v.0.as_str()).collect();
        assert_eq!(values, ["x", "2", "true"]);
        assert_eq!(p[2].default, Some(Scalar("3".into())));
    }

    #[test]
    fn unknown_types_and_fields_are_refused() {
        let e = serde_yaml::from_str::<Vec<Parameter>>("- { name: a, type: float }\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `float`"), "{e}");
        let e = serde_yaml::from_str::<Vec<Parameter>>("- { name: a, dflt: 1 }\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `dflt`"), "{e}");
        let e = serde_yaml::from_str::<Vec<Parameter>>("- { name: a, default: [1] }\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a single value"), "{e}");
    }

    #[test]
    fn steps_need_only_a_name() {
        let s: Vec<Step> =
            serde_yaml::from_str("- name: a\n- { name: b, description: d, done_when: w }\n")
                .unwrap();
        assert_eq!(s[0].description, "");
        assert_eq!(s[1].done_when, Some(DoneWhen::Text("w".into())));
        assert!(!s[0].approve.required && s[0].breakpoint.is_none());
        let s: Vec<Step> =
            serde_yaml::from_str("- { name: a, approve: true, breakpoint: after }\n").unwrap();
        assert!(s[0].approve.required);
        assert_eq!(s[0].breakpoint, Some(Position::After));
        let s: Vec<Step> =
            serde_yaml::from_str("- { name: a, done_when: { verify: test -f x } }\n").unwrap();
        let w = s[0].done_when.as_ref().unwrap();
        assert_eq!(w.command(), Some("test -f x"));
        assert_eq!(w.to_string(), "`test -f x` passes (Saheeli runs it)");
        assert!(
            serde_yaml::from_str::<Vec<Step>>("- { name: a, done_when: { run: x } }\n").is_err()
        );
        let e = serde_yaml::from_str::<Vec<Step>>("- { name: a, breakpoint: middle }\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `middle`"), "{e}");
    }
}
