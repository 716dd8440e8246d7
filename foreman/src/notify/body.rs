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
            .map(|r| format!(" ({})", slack_text(r)))
            .unwrap_or_default();
        let branch = match &d.delivered {
            Some(b) if b.pushed => format!("; pushed `{}`", slack_text(&b.branch)),
            Some(b) => format!("; `{}` not delivered", slack_text(&b.branch)),
            None => String::new(),
        };
        json!({
            "text": format!(
                "Saheeli: task *{}* `{}` {}{reason}; {} tokens, ${:.4}{branch}",
                slack_text(&d.title),
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

/// Text for a Slack message: `&`, `<` and `>` are Slack's control
/// characters (`<!channel>` notifies a channel, `<URL|text>` is a link) and
/// become the HTML entities Slack documents for them; line breaks and
/// other control characters become spaces (a title is one line).
pub(super) fn slack_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
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

    /// Slack's documented escaping: a task's title (the prompt's, so the
    /// submitter's or a model's for a child) can neither notify a channel
    /// nor make a link, and `&` shows as itself.
    #[test]
    fn a_slack_message_escapes_slacks_control_characters() {
        let d = Delivery {
            id: 1,
            event_id: 7,
            url: "https://hooks.slack.com/services/T/B/X".into(),
            format: "slack".into(),
            kind: "task.completed".into(),
            attempts: 0,
            created_at: 0,
            task_id: saheeli_protocol::TaskId::new(),
            title: "<!channel> see <https://evil.example|the fix> & more\nline".into(),
            state: "complete".into(),
            reason: Some("complete".into()),
            input_tokens: 10,
            output_tokens: 5,
            cost_usd: 0.5,
            results: None,
            detail: None,
            delivered: None,
        };
        let v: serde_json::Value = serde_json::from_str(&body(&d)).unwrap();
        let obj = v.as_object().unwrap();
        assert_eq!(
            obj.len(),
            1,
            "an incoming webhook's message: {{\"text\": …}}"
        );
        let text = v["text"].as_str().unwrap();
        assert!(
            !text.contains('<') && !text.contains('>') && !text.contains('\n'),
            "{text}"
        );
        assert!(
            text.contains(
                "*&lt;!channel&gt; see &lt;https://evil.example|the fix&gt; &amp; more line*"
            ),
            "{text}"
        );
        assert!(text.contains("15 tokens, $0.5000"), "{text}");
    }

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
