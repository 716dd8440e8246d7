//! Keys out of everything the gateway hands back to a container or logs: a
//! provider may echo the key in an error body or a completion, raw or in
//! base64 (as part of an encoded header, at any alignment).

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};

/// Replaces every form of every key with `[REDACTED:<VARIABLE>]`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Redactor {
    /// (needle, replacement), longest needles first.
    patterns: Vec<(String, String)>,
}

/// Shortest base64 run worth matching: shorter ones would hit innocent text.
const MIN_ENCODED: usize = 12;

impl Redactor {
    /// From `(variable, value)` pairs, as `Providers::secrets` lists them.
    pub fn new(secrets: &[(String, String)]) -> Redactor {
        let mut patterns = Vec::new();
        for (var, key) in secrets {
            let mark = format!("[REDACTED:{var}]");
            patterns.push((key.clone(), mark.clone()));
            for needle in encoded_forms(key.as_bytes()) {
                patterns.push((needle, mark.clone()));
            }
        }
        patterns.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        patterns.dedup_by(|a, b| a.0 == b.0);
        Redactor { patterns }
    }

    /// The longest text that is redacted (0: none): a stream redacted
    /// piece by piece holds back one character less than this, so a key
    /// split between two pieces is still caught (`live`).
    pub fn longest(&self) -> usize {
        self.patterns.first().map_or(0, |(n, _)| n.len())
    }

    /// The longest end of `text` (in bytes) that begins some form of a
    /// key without completing it (0: none): a stream must hold it back
    /// until the next piece shows whether the key goes on (`splice`).
    pub fn partial_tail(&self, text: &str) -> usize {
        self.patterns
            .iter()
            .filter_map(|(needle, _)| {
                (1..needle.len().min(text.len() + 1))
                    .rev()
                    .filter(|l| needle.is_char_boundary(*l))
                    .find(|l| text.ends_with(&needle[..*l]))
            })
            .max()
            .unwrap_or(0)
    }

    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for (needle, mark) in &self.patterns {
            if out.contains(needle.as_str()) {
                out = Cow::Owned(out.replace(needle.as_str(), mark));
            }
        }
        out
    }
}

/// The base64 runs (standard and URL-safe alphabets) that only the key's
/// own bytes determine, for each of the three alignments the key can have
/// inside a longer encoded text.
fn encoded_forms(key: &[u8]) -> Vec<String> {
    let mut forms = Vec::new();
    for offset in 0..3 {
        let mut bytes = vec![0u8; offset];
        bytes.extend_from_slice(key);
        // Character i covers bits [6i, 6i + 6); the key's bits are
        // [8 * offset, 8 * (offset + len)).
        let start = (8 * offset).div_ceil(6);
        let end = 8 * (offset + key.len()) / 6;
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let enc = engine.encode(&bytes);
            if end > start && end - start >= MIN_ENCODED {
                forms.push(enc[start..end].to_string());
            }
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};

    #[test]
    fn raw_and_base64_forms_at_any_alignment_are_redacted() {
        let key = "sk-test->>??>>??-0123456789";
        let r = Redactor::new(&[("OPENAI_API_KEY".into(), key.into())]);
        for prefix in ["", "B", "Be", "Bearer "] {
            for encoded in [
                STANDARD.encode(format!("{prefix}{key}")),
                URL_SAFE.encode(format!("{prefix}{key};")),
            ] {
                let text = format!("trace {encoded} end");
                let out = r.redact(&text);
                assert!(
                    out.contains("[REDACTED:OPENAI_API_KEY]"),
                    "{prefix:?}: {out}"
                );
                // What is left of the encoding cannot spell the key.
                let left = out
                    .split(' ')
                    .nth(1)
                    .unwrap()
                    .replace("[REDACTED:OPENAI_API_KEY]", "");
                // The prefix's own encoding, and a few edge characters.
                assert!(
                    left.len() <= (prefix.len() * 4).div_ceil(3) + 8,
                    "{prefix:?}: {out}"
                );
            }
        }
        assert_eq!(
            r.redact(&format!("key {key}!")),
            "key [REDACTED:OPENAI_API_KEY]!"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        // The start of a key at the end of a text is held back; a whole
        // key or an end that starts none is not.
        assert_eq!(r.partial_tail("say sk-te"), 5);
        assert_eq!(r.partial_tail(&format!("{key} ok")), 0);
        assert_eq!(r.partial_tail(""), 0);
    }

    /// Hostile case 38, kept honest: only the literal key and its base64
    /// forms are caught. A capability or provider that transforms a value
    /// (reversed, spaced, hex) gets past redaction, as docs/security.md
    /// says; what keeps keys safe is that they never enter a container.
    #[test]
    fn transformed_forms_are_not_caught_as_the_docs_say() {
        let key = "sk-test-0123456789abcdef";
        let r = Redactor::new(&[("OPENAI_API_KEY".into(), key.into())]);
        let reversed: String = key.chars().rev().collect();
        let spaced: String = key.chars().flat_map(|c| [c, ' ']).collect();
        let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
        for form in [reversed, spaced, hex] {
            assert_eq!(r.redact(&form), form, "redaction is best effort");
        }
    }
}
