//! The session's seal: an HMAC-SHA256 over the session file, with a key
//! the foreman derives for this task and hands only to the servo (through
//! the gateway socket, which the agent cannot open).
//!
//! A parked servo goes on from its session: which call a human approved,
//! how many steps were taken, whether the plan passed. The file lies in
//! the agent's workspace, so on a start that resumes it the seal must
//! match, or the servo refuses to go on. Without a key (a gateway that
//! does not give one: the servo's own tests) sessions are neither sealed
//! nor checked.

use hmac::{Hmac, Mac};
use saheeli_protocol::Session;
use sha2::Sha256;

/// The field of the session file that holds the seal.
const FIELD: &str = "seal";

#[derive(Clone, Default)]
pub(crate) struct Seal {
    key: Option<Vec<u8>>,
    /// The key of the attempt a retry goes on from (issue 30).
    resume: Option<Vec<u8>>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.key.is_some() {
            "Seal(***)"
        } else {
            "Seal(none)"
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Seal {
    pub fn new(key: Option<Vec<u8>>) -> Seal {
        Seal { key, resume: None }
    }

    /// With the key of the attempt a retry goes on from.
    pub fn with_resume(mut self, key: Option<Vec<u8>>) -> Seal {
        self.resume = key;
        self
    }

    /// The seal of the attempt a retry goes on from: its key, or (without
    /// a key of this task's either: the servo's own tests) none. None: a
    /// sealed servo was given no key for that attempt, so nothing of it
    /// can be trusted.
    pub fn for_resume(&self) -> Option<Seal> {
        match (&self.key, &self.resume) {
            (None, _) => Some(Seal::default()),
            (Some(_), None) => None,
            (Some(_), Some(k)) => Some(Seal::new(Some(k.clone()))),
        }
    }

    /// The MAC of a session's JSON value without its seal: over its compact
    /// form (sorted keys), so the file's layout does not matter.
    fn mac(key: &[u8], value: &serde_json::Value) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
        mac.update(&serde_json::to_vec(value).expect("JSON values serialize"));
        hex(&mac.finalize().into_bytes())
    }

    /// The session file's bytes, sealed when there is a key.
    #[cfg(test)]
    pub fn seal(&self, session: &Session) -> Vec<u8> {
        self.seal_head(session).0
    }

    /// The session file's bytes, and its seal ("" without a key): the head
    /// its journal's first line chains from (`link`).
    pub fn seal_head(&self, session: &Session) -> (Vec<u8>, String) {
        let mut value = serde_json::to_value(session).expect("sessions serialize");
        let mut head = String::new();
        if let Some(key) = &self.key {
            head = Self::mac(key, &value);
            if let Some(map) = value.as_object_mut() {
                map.insert(FIELD.into(), head.clone().into());
            }
        }
        let bytes = serde_json::to_vec_pretty(&value).expect("sessions serialize");
        (bytes, head)
    }

    /// The MAC of a journal line's `body` chained to the line (or the
    /// session file) before it, whose MAC is `head`: "-" without a key.
    /// No line can be changed, dropped from the middle or moved.
    pub fn link(&self, head: &str, body: &[u8]) -> String {
        let Some(key) = &self.key else {
            return "-".into();
        };
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
        mac.update(head.as_bytes());
        mac.update(b"\n");
        mac.update(body);
        hex(&mac.finalize().into_bytes())
    }

    /// Whether `mac` is `body`'s link to `head`.
    pub fn links(&self, head: &str, body: &[u8], mac: &[u8]) -> bool {
        same(self.link(head, body).as_bytes(), mac)
    }

    /// The session in `bytes`, if its seal holds (or there is no key and
    /// no seal to check).
    #[cfg(test)]
    pub fn open(&self, bytes: &[u8]) -> Result<Session, String> {
        self.open_head(bytes).map(|(s, _)| s)
    }

    /// The session in `bytes` and its seal ("" without a key), if it holds.
    pub fn open_head(&self, bytes: &[u8]) -> Result<(Session, String), String> {
        let mut value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("not a session: {e}"))?;
        let found = value
            .as_object_mut()
            .ok_or("not a session: not a JSON object")?
            .remove(FIELD);
        let mut head = String::new();
        match (&self.key, found) {
            (Some(key), Some(serde_json::Value::String(mac))) => {
                let want = Self::mac(key, &value);
                if !same(want.as_bytes(), mac.as_bytes()) {
                    return Err("its seal does not match: the file was changed outside the \
                                servo, and it is not trusted"
                        .into());
                }
                head = mac;
            }
            (Some(_), _) => {
                return Err(
                    "it carries no valid seal: it was not written by this task's servo, \
                            and it is not trusted"
                        .into(),
                );
            }
            (None, Some(_)) => {
                return Err("it is sealed but the gateway gave no key to check the seal".into());
            }
            (None, None) => {}
        }
        let session = serde_json::from_value(value).map_err(|e| format!("not a session: {e}"))?;
        Ok((session, head))
    }
}

/// Two hex MACs compared without an early out.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        serde_json::from_value(serde_json::json!({
            "task_id": "0196a0b0-0000-7000-8000-000000000001",
            "model": "replay:x",
            "steps": 3,
            "usage": {"input_tokens": 1, "output_tokens": 2},
            "messages": [],
            "plan_approved": false
        }))
        .unwrap()
    }

    #[test]
    fn a_sealed_session_opens_and_any_change_is_refused() {
        let seal = Seal::new(Some(b"k".repeat(32)));
        let bytes = seal.seal(&session());
        assert_eq!(seal.open(&bytes).unwrap(), session());
        // What the hostile run did: steps reset, plan approved.
        let text = String::from_utf8(bytes.clone()).unwrap();
        let forged = text.replace("\"steps\": 3", "\"steps\": 0");
        assert!(
            seal.open(forged.as_bytes())
                .unwrap_err()
                .contains("seal does not match")
        );
        let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        v["plan_approved"] = true.into();
        assert!(seal.open(&serde_json::to_vec(&v).unwrap()).is_err());
        // Unsealed (written by anyone else), or sealed with another key.
        let plain = Seal::default().seal(&session());
        assert!(seal.open(&plain).unwrap_err().contains("no valid seal"));
        let other = Seal::new(Some(b"o".repeat(32))).seal(&session());
        assert!(seal.open(&other).is_err());
        // Layout does not matter: compact and pretty open alike.
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert!(seal.open(&serde_json::to_vec(&v).unwrap()).is_ok());
    }

    #[test]
    fn without_a_key_nothing_is_sealed_and_a_seal_is_not_trusted() {
        let none = Seal::default();
        let plain = none.seal(&session());
        assert!(!String::from_utf8_lossy(&plain).contains("seal"));
        assert_eq!(none.open(&plain).unwrap(), session());
        let sealed = Seal::new(Some(vec![1; 32])).seal(&session());
        assert!(none.open(&sealed).is_err());
    }
}
