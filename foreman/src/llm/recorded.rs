//! Requests and answers recorded from real local model servers
//! (`scripts/record-local-servers.py`, issue 27), for the unit tests:
//! `foreman/tests/fixtures/local-servers/<server>/<name>.json`, each one
//! exchange with the server's version.

use serde_json::Value;

/// The recorded exchange: `server`, `version`, `what`, `request`
/// (`method`, `path`, `headers`, `body`) and `response` (`status`, `body`).
pub(crate) fn exchange(server: &str, name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/local-servers/{server}/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(
        v["version"].as_str().is_some_and(|s| !s.is_empty()),
        "{path}: no server version"
    );
    v
}

/// What the server answered (a stream as its text).
pub(crate) fn answer(server: &str, name: &str) -> Value {
    exchange(server, name)["response"]["body"].clone()
}

/// What was sent.
pub(crate) fn sent(server: &str, name: &str) -> Value {
    exchange(server, name)["request"]["body"].clone()
}
