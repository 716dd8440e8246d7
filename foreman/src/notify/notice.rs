//! Notices: webhooks of foreman events that belong to no task (issue 52:
//! `definitions.rejected`), from their own outbox (`store::Notice`),
//! posted, signed and retried as task events are.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::store::{Notice, Store, now_ms};

/// The body of a notice: Saheeli's JSON event (`type`, and the facts
/// under `definitions`), or a Slack message.
pub(crate) fn body(n: &Notice) -> String {
    let facts: Value = serde_json::from_str(&n.facts).unwrap_or(Value::Null);
    let at = saheeli_protocol::rfc3339(
        std::time::UNIX_EPOCH + Duration::from_millis(n.created_at.max(0) as u64),
    );
    if n.format == "slack" {
        let s = |k: &str| facts[k].as_str().unwrap_or("").to_string();
        let current = match facts["current"].as_str() {
            Some(c) => format!("; still serving `{}`", &c[..c.len().min(12)]),
            None => "; no definitions are applied yet".to_string(),
        };
        return json!({
            "text": super::body::slack_text(&format!(
                "Saheeli: definitions commit {} rejected: {}{current}",
                &s("commit")[..s("commit").len().min(12)],
                s("reason")
            ))
        })
        .to_string();
    }
    json!({
        "id": id(n),
        "type": n.kind,
        "created_at": at,
        "definitions": facts,
    })
    .to_string()
}

/// The event id a receiver drops repeats by.
pub(crate) fn id(n: &Notice) -> String {
    format!("ntc_{}", n.id)
}

/// Posts one notice and records how it went.
pub(super) async fn deliver(
    client: reqwest::Client,
    store: Arc<Mutex<Store>>,
    n: Notice,
    secret: Option<String>,
    max_age: Duration,
) {
    let body = body(&n);
    let mut req = client
        .post(&n.url)
        .header("content-type", "application/json")
        .header("user-agent", concat!("saheeli/", env!("CARGO_PKG_VERSION")))
        .header("saheeli-event-id", id(&n))
        .header("saheeli-event", &n.kind);
    if let Some(secret) = &secret {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_secs());
        req = req.header(
            "saheeli-signature",
            super::sign(secret.as_bytes(), now, &body),
        );
    }
    let outcome = match req.body(body).send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("HTTP {}", r.status())),
        Err(e) => Err(crate::text::error_chain(&e)),
    };
    let too_old = now_ms() - n.created_at > max_age.as_millis() as i64;
    let (nid, url) = (n.id, n.url.clone());
    let wait = super::sender::backoff(n.attempts);
    let done = tokio::task::spawn_blocking(move || {
        let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
        match &outcome {
            Ok(()) => s.notice_done(nid),
            Err(e) => s.notice_failed(nid, e, now_ms() + wait.as_millis() as i64, too_old),
        }
        .map(|()| outcome)
    })
    .await;
    match done {
        Ok(Ok(Ok(()))) => tracing::debug!(%url, "notice delivered"),
        Ok(Ok(Err(e))) => tracing::info!(%url, error = %e, "notice failed; trying again later"),
        Ok(Err(e)) => tracing::warn!(error = %e, "notice outcome not recorded"),
        Err(e) => tracing::warn!(error = %e, "notice outcome thread failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejection_says_the_commit_and_why_in_json_and_in_slack() {
        let n = Notice {
            id: 7,
            kind: "definitions.rejected".into(),
            url: "http://x".into(),
            format: "json".into(),
            facts: json!({"commit": "0123456789abcdef", "reason": "templates/a.md:2: <bad>", "current": null}).to_string(),
            attempts: 0,
            created_at: 0,
        };
        let v: Value = serde_json::from_str(&body(&n)).unwrap();
        assert_eq!(
            (v["id"].as_str(), v["type"].as_str()),
            (Some("ntc_7"), Some("definitions.rejected"))
        );
        assert_eq!(v["definitions"]["reason"], "templates/a.md:2: <bad>");
        let slack: Value = serde_json::from_str(&body(&Notice {
            format: "slack".into(),
            ..n
        }))
        .unwrap();
        let text = slack["text"].as_str().unwrap();
        assert!(
            text.contains("0123456789ab rejected") && text.contains("&lt;bad&gt;"),
            "{text}"
        );
    }
}
