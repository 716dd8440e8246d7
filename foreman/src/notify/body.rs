//! What a delivery says, and its signature.

use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use crate::store::Delivery;

/// The body POSTed for a delivery: Saheeli's JSON event, or a Slack message.
pub(crate) fn body(d: &Delivery) -> String {
    let at = saheeli_protocol::rfc3339(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(d.created_at.max(0) as u64),
    );
    let value = if d.format == "slack" {
        let reason = d
            .reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let branch = match &d.delivered {
            Some(b) if b.pushed => format!("; pushed `{}`", b.branch),
            Some(b) => format!("; `{}` not delivered", b.branch),
            None => String::new(),
        };
        json!({
            "text": format!(
                "Saheeli: task *{}* `{}` {}{reason}; {} tokens, ${:.4}{branch}",
                d.title,
                d.task_id.short(),
                d.kind.trim_start_matches("task.").replace('_', " "),
                d.input_tokens + d.output_tokens,
                d.cost_usd
            )
        })
    } else {
        json!({
            "id": format!("evt_{}", d.event_id),
            "type": d.kind,
            "created_at": at,
            "task": {
                "id": d.task_id.to_string(),
                "title": d.title,
                "state": d.state,
                "reason": d.reason,
                "detail": d.detail,
                "tokens": d.input_tokens + d.output_tokens,
                "input_tokens": d.input_tokens,
                "output_tokens": d.output_tokens,
                "cost_usd": d.cost_usd,
                "results": d.results,
                "delivery": d.delivered,
            }
        })
    };
    value.to_string()
}

/// `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`: the
/// timestamp is signed with the body, so a receiver can refuse replays.
pub(crate) fn sign(secret: &[u8], unix_s: u64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(unix_s.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("t={unix_s},v1={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_timestamp_and_body() {
        // RFC 4231 test case 2 ("Jefe"), with the message split as t "." body.
        let sig = sign(b"Jefe", 0, "");
        assert!(sig.starts_with("t=0,v1="));
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"0.");
        let want: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(sig, format!("t=0,v1={want}"));
        let rfc = {
            let mut m = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
            m.update(b"what do ya want for nothing?");
            m.finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        assert_eq!(
            rfc,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
