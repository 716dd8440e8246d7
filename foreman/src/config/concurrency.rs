//! `concurrency:` in config.yaml and `--concurrency` on `serve`: a fixed
//! number of tasks at once, or `auto` (the admission controller decides
//! from Docker's create/start latency and errors).

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;
use serde::de::{self, Visitor};

/// The most tasks `concurrency: auto` ever runs at once: the admission
/// controller's ceiling, and what each gateway's connection cap is sized
/// for under the open-files limit.
pub(crate) const AUTO_CEILING: usize = 512;

/// How many tasks a foreman runs at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Concurrency {
    /// Exactly this many (at least 1).
    Fixed(usize),
    /// As many as the Docker daemon takes without slowing down or failing.
    Auto,
}

impl Default for Concurrency {
    fn default() -> Self {
        Concurrency::Fixed(4)
    }
}

impl fmt::Display for Concurrency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Concurrency::Fixed(n) => write!(f, "{n}"),
            Concurrency::Auto => f.write_str("auto"),
        }
    }
}

/// What a value other than a positive number or `auto` gets.
const EXPECTED: &str = "a number of tasks (at least 1) or `auto`";

impl FromStr for Concurrency {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(Concurrency::Auto),
            t => match t.parse::<usize>() {
                Ok(0) | Err(_) => Err(format!("`{s}` is not {EXPECTED}")),
                Ok(n) => Ok(Concurrency::Fixed(n)),
            },
        }
    }
}

/// Written as it is read: a number, or `"auto"`.
impl serde::Serialize for Concurrency {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Concurrency::Fixed(n) => s.serialize_u64(*n as u64),
            Concurrency::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for Concurrency {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Concurrency;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Concurrency, E> {
                match usize::try_from(n) {
                    Ok(n) if n >= 1 => Ok(Concurrency::Fixed(n)),
                    _ => Err(E::invalid_value(de::Unexpected::Unsigned(n), &self)),
                }
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Concurrency, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(n), &self)),
                }
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Concurrency, E> {
                match s {
                    "auto" => Ok(Concurrency::Auto),
                    _ => Err(E::invalid_value(de::Unexpected::Str(s), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_auto_parse_and_nothing_else_does() {
        let y = |s: &str| serde_yaml::from_str::<Concurrency>(s);
        assert_eq!(y("8").unwrap(), Concurrency::Fixed(8));
        assert_eq!(y("auto").unwrap(), Concurrency::Auto);
        for bad in ["0", "-3", "fast", "1.5", "[1]"] {
            let e = y(bad).unwrap_err().to_string();
            assert!(e.contains("at least 1) or `auto`"), "{bad}: {e}");
        }
        assert_eq!("auto".parse::<Concurrency>(), Ok(Concurrency::Auto));
        assert_eq!("16".parse::<Concurrency>(), Ok(Concurrency::Fixed(16)));
        assert!("0".parse::<Concurrency>().is_err());
        assert_eq!(Concurrency::Auto.to_string(), "auto");
    }
}
