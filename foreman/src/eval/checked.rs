//! Small deserialization helpers for the suite reader: values checked
//! inside the parser's own call (so its errors carry the position of the
//! value itself), and the front-matter's key list as serde sees it.

use std::fmt;

use saheeli_protocol::front_matter::FrontMatter;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_yaml::Value;

/// A string checked by `f` inside the parser's call, so an error carries
/// the position of the string itself.
pub(super) struct Checked<F>(pub F);

impl<'de, T, F: FnOnce(String) -> Result<T, String>> Visitor<'de> for Checked<F> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.0)(v.to_string()).map_err(E::custom)
    }
}

/// A value of any shape checked by `f` inside the parser's call (as
/// [`Checked`] does for strings).
pub(super) struct CheckedValue<F>(pub F);

impl<F: FnOnce(Value) -> Result<Value, String>> CheckedValue<F> {
    fn check<E: de::Error>(self, v: Value) -> Result<Value, E> {
        (self.0)(v).map_err(E::custom)
    }
}

impl<'de, F: FnOnce(Value) -> Result<Value, String>> Visitor<'de> for CheckedValue<F> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.check(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.check(Value::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.check(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.check(Value::Number(v.into()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.check(Value::String(v.to_string()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.check(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.check(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let v = Value::deserialize(d)?;
        self.check(v)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        let v = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        self.check(v)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        let v = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        self.check(v)
    }
}

/// The front-matter's keys, as serde sees them (so this list never drifts
/// from `FrontMatter`): its derived `Deserialize` names them to the
/// deserializer it is given, which here only listens.
pub(crate) fn front_matter_fields() -> &'static [&'static str] {
    use std::sync::OnceLock;
    static FIELDS: OnceLock<&'static [&'static str]> = OnceLock::new();
    FIELDS.get_or_init(|| {
        struct Listen<'a>(&'a mut Option<&'static [&'static str]>);
        #[derive(Debug)]
        struct Stop;
        impl fmt::Display for Stop {
            fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("listening only")
            }
        }
        impl std::error::Error for Stop {}
        impl de::Error for Stop {
            fn custom<T: fmt::Display>(_: T) -> Self {
                Stop
            }
        }
        impl<'de> Deserializer<'de> for Listen<'_> {
            type Error = Stop;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
                Err(Stop)
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Stop> {
                *self.0 = Some(fields);
                Err(Stop)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
                bytes byte_buf option unit unit_struct newtype_struct seq tuple
                tuple_struct map enum identifier ignored_any
            }
        }
        let mut fields = None;
        let _ = FrontMatter::deserialize(Listen(&mut fields));
        fields.expect("FrontMatter is a struct")
    })
}
