//! The values front-matter writes in its own words: a deadline (RFC
//! 3339), a duration (seconds or `30m`), a size (`2g`).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// An absolute time, RFC 3339 (`2026-12-01T17:00:00Z`; a space for the
/// `T` and no zone, read as UTC, are accepted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct Deadline(pub std::time::SystemTime);

impl Deadline {
    /// Milliseconds since the Unix epoch.
    pub fn unix_ms(self) -> i64 {
        self.0
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

impl From<Deadline> for String {
    fn from(d: Deadline) -> String {
        humantime::format_rfc3339_seconds(d.0).to_string()
    }
}

impl<'de> Deserialize<'de> for Deadline {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_rfc3339_weak(text.trim())
            .map(Deadline)
            .map_err(|e| {
                serde::de::Error::custom(format!(
                    "`{text}` is not a time such as `2026-12-01T17:00:00Z`: {e}"
                ))
            })
    }
}

/// A duration written as `30m` or a number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct Timeout(pub Duration);

impl From<Timeout> for String {
    fn from(t: Timeout) -> String {
        humantime::format_duration(t.0).to_string()
    }
}

impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_duration_value(d).map(Timeout)
    }
}

/// Deserializes `30m`, `1h 30m` or an integer number of seconds.
pub fn parse_duration_value<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = Duration;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a duration such as `90s`, `30m` or `1h 30m`, or a number of seconds")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Duration, E> {
            // 0 would mean "no time at all", never "no limit".
            if v == 0 {
                return Err(E::custom("a duration must be greater than zero"));
            }
            Ok(Duration::from_secs(v))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Duration, E> {
            let v = u64::try_from(v).map_err(|_| E::custom("a duration cannot be negative"))?;
            self.visit_u64(v)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Duration, E> {
            let d = humantime::parse_duration(v.trim()).map_err(|e| {
                E::custom(format!(
                    "invalid duration `{v}`: {e} (write e.g. `90s`, `30m`, `1h 30m`)"
                ))
            })?;
            if d.is_zero() {
                return Err(E::custom("a duration must be greater than zero"));
            }
            Ok(d)
        }
    }
    d.deserialize_any(V)
}

/// A memory size written as `512m`, `2g`, `1.5g` or bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(into = "u64")]
pub struct Memory(pub u64);

impl From<Memory> for u64 {
    fn from(m: Memory) -> u64 {
        m.0
    }
}

impl Memory {
    pub fn parse(s: &str) -> Result<Memory, String> {
        let s = s.trim().to_ascii_lowercase();
        let s = s.strip_suffix('b').unwrap_or(&s);
        let s = s.strip_suffix('i').unwrap_or(s);
        let (num, mult) = match s.chars().last() {
            Some('k') => (&s[..s.len() - 1], 1u64 << 10),
            Some('m') => (&s[..s.len() - 1], 1 << 20),
            Some('g') => (&s[..s.len() - 1], 1 << 30),
            Some('t') => (&s[..s.len() - 1], 1 << 40),
            _ => (s, 1),
        };
        let n: f64 = num
            .trim()
            .parse()
            .map_err(|_| format!("invalid memory size `{s}` (write e.g. `512m` or `2g`)"))?;
        if !(n.is_finite() && n > 0.0) {
            return Err(format!("memory size `{s}` must be greater than zero"));
        }
        let bytes = (n * mult as f64) as u64;
        if bytes == 0 {
            return Err(format!("memory size `{s}` must be at least one byte"));
        }
        Ok(Memory(bytes))
    }
}

/// The shortest exact form: `2g`, `512m`, `64k`, else bytes.
impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, shift) in [("t", 40), ("g", 30), ("m", 20), ("k", 10)] {
            if n != 0 && n.trailing_zeros() >= shift {
                return write!(f, "{}{unit}", n >> shift);
            }
        }
        write!(f, "{n}")
    }
}

impl<'de> Deserialize<'de> for Memory {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Memory;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a memory size such as `512m` or `2g`")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Memory, E> {
                // Docker reads a memory limit of 0 as "unlimited"; a size of
                // 0 never means that here.
                if v == 0 {
                    return Err(E::custom(
                        "a size must be greater than zero (0 does not mean unlimited)",
                    ));
                }
                Ok(Memory(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Memory, E> {
                let v = u64::try_from(v).map_err(|_| E::custom("a size cannot be negative"))?;
                self.visit_u64(v)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Memory, E> {
                Memory::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}
