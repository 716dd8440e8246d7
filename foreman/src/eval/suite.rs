//! A suite file (`saheeli eval SUITE.yaml`): its name, threshold, defaults
//! and cases, read strictly. Every mistake is found while reading, so
//! yaml_serde names its line: unknown keys (a case takes its own keys and
//! any front-matter key), a bad id, a duplicate id, a missing prompt,
//! workspace or replay script, a regex that does not compile.
//!
//! The checks that need the suite's directory or the ids seen so far run
//! inside deserialization through a per-thread context set by [`parse`]:
//! serde offers no other way to hand a `Deserialize` impl state while
//! keeping the parser's positions in its errors.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use saheeli_protocol::front_matter::FrontMatter;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_yaml::{Mapping, Value};

use super::checked::{Checked, CheckedValue, front_matter_fields};
pub(crate) use super::expect::Expect;

/// A suite, checked; its paths absolute.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Suite {
    pub name: SuiteName,
    #[serde(default = "one")]
    pub pass_threshold: Threshold,
    /// Front-matter keys every case starts from.
    #[serde(default)]
    pub defaults: FrontMatterKeys,
    pub cases: Vec<Case>,
}

fn one() -> Threshold {
    Threshold(1.0)
}

/// The suite's name: what `eval list` shows.
#[derive(Clone, Debug)]
pub(crate) struct SuiteName(pub String);

impl<'de> Deserialize<'de> for SuiteName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(Checked(|s: String| {
            if s.trim().is_empty() || s.chars().count() > 100 || s.chars().any(char::is_control) {
                return Err(
                    "`name` must be 1 to 100 characters, without control characters".into(),
                );
            }
            Ok(SuiteName(s))
        }))
    }
}

/// `pass_threshold`, from 0 to 1.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Threshold(pub f64);

impl<'de> Deserialize<'de> for Threshold {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Threshold;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number from 0 to 1")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Threshold, E> {
                if !(0.0..=1.0).contains(&v) {
                    return Err(E::custom(format!(
                        "`pass_threshold` {v} is out of range; use 0 to 1 (a fraction of the cases)"
                    )));
                }
                Ok(Threshold(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Threshold, E> {
                self.visit_f64(v as f64)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Threshold, E> {
                self.visit_f64(v as f64)
            }
        }
        d.deserialize_f64(V)
    }
}

/// One case: what to run and how it is scored.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub id: String,
    pub category: String,
    /// The prompt file (absolute), or None for an inline `text`.
    pub prompt: Option<PathBuf>,
    pub text: Option<String>,
    /// Template parameters.
    pub params: BTreeMap<String, Value>,
    pub expect: Expect,
    /// Front-matter keys set by the case (`workspace`, `verify`, …).
    pub keys: FrontMatterKeys,
    /// Independent attempts of the case (`samples:`, default 1); `--repeat`
    /// multiplies them.
    pub samples: u32,
}

impl Case {
    /// The results this case has in a run with `--repeat repeat`.
    pub fn runs(&self, repeat: u32) -> u32 {
        self.samples.saturating_mul(repeat)
    }
}

/// The most `samples:` a case may ask for.
pub(crate) const MAX_SAMPLES: u32 = 1000;

/// Front-matter keys with their values, each checked alone against the
/// front-matter's own types; relative paths resolved against the suite.
#[derive(Clone, Debug, Default)]
pub(crate) struct FrontMatterKeys(pub Mapping);

impl<'de> Deserialize<'de> for FrontMatterKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FrontMatterKeys;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of front-matter keys")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Mapping::new();
                while let Some(key) = map.next_key_seed(KeyOf { case: false })? {
                    let value = map.next_value_seed(ValueOf(&key))?;
                    out.insert(Value::String(key), value);
                }
                Ok(FrontMatterKeys(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The keys a case takes besides the front-matter's.
const CASE_KEYS: &[&str] = &[
    "id", "category", "prompt", "text", "params", "expect", "samples",
];

/// Reads a key: one the front-matter knows (or, in a case, a case key).
struct KeyOf {
    case: bool,
}

impl<'de> DeserializeSeed<'de> for KeyOf {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        // Checked inside the visitor, so the parser names the key's line.
        d.deserialize_str(Checked(|key: String| {
            let fields = front_matter_fields();
            if fields.contains(&key.as_str()) || (self.case && CASE_KEYS.contains(&key.as_str())) {
                return Ok(key);
            }
            let mut expected: Vec<&str> = Vec::new();
            if self.case {
                expected.extend(CASE_KEYS);
            }
            expected.extend(fields.iter().copied());
            Err(format!(
                "unknown key `{key}`; expected one of {}",
                expected.join(", ")
            ))
        }))
    }
}

/// Reads a front-matter key's value and checks it with the front-matter's
/// own type; `workspace` and `model: replay:FILE` are resolved against the
/// suite's directory and must exist.
struct ValueOf<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for ValueOf<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let key = self.0;
        d.deserialize_any(CheckedValue(|value: Value| checked_value(key, value)))
    }
}

fn checked_value(key: &str, value: Value) -> Result<Value, String> {
    let mut single = Mapping::new();
    single.insert(Value::String(key.into()), value.clone());
    if let Err(e) = serde_yaml::from_value::<FrontMatter>(Value::Mapping(single)) {
        return Err(format!("`{key}`: {e}"));
    }
    let dir = context_dir();
    Ok(match (key, &value) {
        ("workspace", Value::String(ws)) => {
            let abs = absolute(&dir.join(ws));
            if !abs.is_dir() {
                return Err(format!(
                    "`workspace` `{ws}` is not a directory (relative to the suite's directory `{}`)",
                    dir.display()
                ));
            }
            Value::String(abs.display().to_string())
        }
        ("model", Value::String(m)) => match m.strip_prefix("replay:") {
            Some(file) => {
                let abs = absolute(&dir.join(file));
                if !abs.is_file() {
                    return Err(format!(
                        "replay script `{file}` named by `model` does not exist (relative to the suite's directory `{}`)",
                        dir.display()
                    ));
                }
                Value::String(format!("replay:{}", abs.display()))
            }
            None => value,
        },
        _ => value,
    })
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

impl<'de> Deserialize<'de> for Case {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(CaseVisitor)
    }
}

struct CaseVisitor;

impl<'de> Visitor<'de> for CaseVisitor {
    type Value = Case;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a case: a mapping with `id`, `category`, `prompt` or `text`, …")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Case, A::Error> {
        let mut id: Option<String> = None;
        let mut category = None;
        let mut prompt = None;
        let mut text = None;
        let mut params = BTreeMap::new();
        let mut expect = Expect::default();
        let mut keys = Mapping::new();
        let mut samples = 1;
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key_seed(KeyOf { case: true })? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            match key.as_str() {
                "id" => id = Some(map.next_value_seed(CaseIdSeed)?),
                "category" => category = Some(map.next_value::<String>()?),
                "prompt" => prompt = Some(map.next_value_seed(PromptSeed)?),
                "text" => text = Some(map.next_value::<String>()?),
                "params" => params = map.next_value()?,
                "expect" => expect = map.next_value()?,
                "samples" => samples = map.next_value::<Samples>()?.0,
                _ => {
                    let value = map.next_value_seed(ValueOf(&key))?;
                    keys.insert(Value::String(key), value);
                }
            }
        }
        let id = id.ok_or_else(|| de::Error::custom("a case needs an `id`"))?;
        match (&prompt, &text) {
            (None, None) => {
                return Err(de::Error::custom(format!(
                    "case `{id}` has no prompt: give `prompt: FILE` or `text: …`"
                )));
            }
            (Some(_), Some(_)) => {
                return Err(de::Error::custom(format!(
                    "case `{id}` has both `prompt` and `text`; give one"
                )));
            }
            _ => {}
        }
        if text.as_ref().is_some_and(|t| t.trim().is_empty()) {
            return Err(de::Error::custom(format!("case `{id}`: `text` is empty")));
        }
        Ok(Case {
            id,
            category: category.unwrap_or_else(|| "uncategorized".into()),
            prompt,
            text,
            params,
            expect,
            keys: FrontMatterKeys(keys),
            samples,
        })
    }
}

/// `samples:`, 1 to [`MAX_SAMPLES`].
struct Samples(u32);

impl<'de> Deserialize<'de> for Samples {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Samples;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a whole number of attempts from 1 to {MAX_SAMPLES}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Samples, E> {
                match u32::try_from(v) {
                    Ok(n) if (1..=MAX_SAMPLES).contains(&n) => Ok(Samples(n)),
                    _ => Err(E::custom(format!(
                        "`samples` {v} is out of range; use 1 to {MAX_SAMPLES} (independent attempts of the case)"
                    ))),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Samples, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!(
                        "`samples` {v} is out of range; use 1 to {MAX_SAMPLES} (independent attempts of the case)"
                    ))),
                }
            }
        }
        d.deserialize_u64(V)
    }
}

/// A case id: `[a-z0-9-]`, unique in the suite.
struct CaseIdSeed;

impl<'de> DeserializeSeed<'de> for CaseIdSeed {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(Checked(|id: String| {
            let ok = !id.is_empty()
                && id.len() <= 64
                && id
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !ok {
                return Err(format!(
                    "case id `{id}` must be 1 to 64 of a-z, 0-9 and `-`"
                ));
            }
            let fresh = CONTEXT.with(|c| {
                c.borrow_mut()
                    .as_mut()
                    .is_none_or(|c| c.ids.insert(id.clone()))
            });
            if !fresh {
                return Err(format!("duplicate case id `{id}`; ids must be unique"));
            }
            Ok(id)
        }))
    }
}

/// A prompt file, relative to the suite; it must exist.
struct PromptSeed;

impl<'de> DeserializeSeed<'de> for PromptSeed {
    type Value = PathBuf;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<PathBuf, D::Error> {
        d.deserialize_str(Checked(|p: String| {
            let dir = context_dir();
            let abs = absolute(&dir.join(&p));
            if !abs.is_file() {
                return Err(format!(
                    "prompt file `{p}` does not exist (relative to the suite's directory `{}`)",
                    dir.display()
                ));
            }
            Ok(abs)
        }))
    }
}

/// What the `Deserialize` impls above need while one suite is read.
struct Context {
    dir: PathBuf,
    ids: BTreeSet<String>,
}

thread_local! {
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

fn context_dir() -> PathBuf {
    CONTEXT.with(|c| {
        c.borrow()
            .as_ref()
            .map(|c| c.dir.clone())
            .unwrap_or_else(|| PathBuf::from("."))
    })
}

/// Why a suite was refused: the file, the line when known, what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub(crate) struct SuiteError {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub message: String,
}

/// Reads and checks a suite file's text (`path` names it and its
/// directory anchors relative paths).
pub(crate) fn parse(path: &Path, text: &str) -> Result<Suite, SuiteError> {
    let dir = absolute(
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    );
    CONTEXT.with(|c| {
        *c.borrow_mut() = Some(Context {
            dir,
            ids: BTreeSet::new(),
        })
    });
    let parsed = serde_yaml::from_str::<Suite>(text);
    CONTEXT.with(|c| *c.borrow_mut() = None);
    let suite = parsed.map_err(|e| {
        let line = e.location().map(|l| l.line());
        // The parser's own "at line N column M" is said once, up front.
        let message = e.to_string();
        let message = match message.rfind(" at line ") {
            Some(i) if line.is_some() => message[..i].to_string(),
            _ => message,
        };
        SuiteError {
            path: path.to_path_buf(),
            line,
            message,
        }
    })?;
    if suite.cases.is_empty() {
        return Err(SuiteError {
            path: path.to_path_buf(),
            line: None,
            message: "`cases` is empty; a suite needs at least one case".into(),
        });
    }
    Ok(suite)
}

/// The line (1-based) of case `id`'s `id:` in a suite's text, for errors
/// found after reading (ids are unique, so the match is exact).
pub(crate) fn case_line(text: &str, id: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let l = l
                .trim_start()
                .trim_start_matches("- ")
                .trim_start_matches('{')
                .trim();
            l.strip_prefix("id:").is_some_and(|v| {
                let v = v
                    .split(',')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .trim_end_matches('}')
                    .trim();
                v.trim_matches(|c| c == '"' || c == '\'') == id
            })
        })
        .map(|i| i + 1)
}
