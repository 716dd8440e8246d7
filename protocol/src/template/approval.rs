//! A step's `approve:` (issue 52): `true`, or `{ from: [alice, ops],
//! message: "…" }`: the step starts only on a person's approval, from
//! one of those named when `from` names any, and people asked are shown
//! the message. Written back as it was read: `true` (what servos before
//! issue 52 read), or the map.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Whether a step needs an approval, and from whom.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepApproval {
    /// The step starts only once a person approved it.
    pub required: bool,
    /// Who may approve or deny it (empty: anyone).
    pub from: Vec<String>,
    /// Shown where the approval is asked.
    pub message: Option<String>,
}

impl StepApproval {
    pub fn is_off(&self) -> bool {
        !self.required
    }

    /// As the servo is told it: only whether it is gated (the foreman
    /// checks who decides).
    pub fn for_servo(&self) -> StepApproval {
        StepApproval {
            required: self.required,
            ..StepApproval::default()
        }
    }

    /// Whether `who` may approve or deny it.
    pub fn allows(&self, who: &str) -> bool {
        self.from.is_empty() || self.from.iter().any(|f| f == who)
    }
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Named {
    #[serde(default)]
    from: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

impl Serialize for StepApproval {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !self.required || (self.from.is_empty() && self.message.is_none()) {
            return s.serialize_bool(self.required);
        }
        Named {
            from: self.from.clone(),
            message: self.message.clone(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for StepApproval {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = StepApproval;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "`true`, `false`, or `{ from: [NAME, …], message: TEXT }` (who may \
                     approve, and what they are shown)",
                )
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<StepApproval, E> {
                Ok(StepApproval {
                    required: b,
                    ..StepApproval::default()
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<StepApproval, A::Error> {
                let n = Named::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                if n.from.iter().any(|f| f.trim().is_empty()) {
                    return Err(serde::de::Error::custom(
                        "`approve.from`: a name is empty; list who may approve",
                    ));
                }
                Ok(StepApproval {
                    required: true,
                    from: n.from,
                    message: n.message,
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_or_named_approvers_and_back() {
        let a: StepApproval = serde_yaml::from_str("true").unwrap();
        assert!(a.required && a.from.is_empty() && a.allows("anyone"));
        assert_eq!(serde_json::to_value(&a).unwrap(), serde_json::json!(true));
        let a: StepApproval =
            serde_yaml::from_str("{ from: [alice, ops], message: Check the plan }").unwrap();
        assert!(a.required && a.allows("ops") && !a.allows("bob"));
        let back: StepApproval = serde_json::from_value(serde_json::to_value(&a).unwrap()).unwrap();
        assert_eq!(back, a);
        // The servo is told only that the step is gated.
        assert_eq!(
            serde_json::to_value(a.for_servo()).unwrap(),
            serde_json::json!(true)
        );
        let e = serde_yaml::from_str::<StepApproval>("{ form: [alice] }")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `form`"), "{e}");
        assert!(serde_yaml::from_str::<StepApproval>("{ from: [''] }").is_err());
    }
}
