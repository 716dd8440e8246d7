//! The email channel (issue 52, from George): `notify: [{ email: ADDRESS }]`
//! deliveries mailed through config.yaml's `smtp:` relay, with `lettre`.
//! The same outbox, retries and backoff as a webhook; the message is plain
//! text, its Message-ID the event's (a receiver can drop repeats by it).

use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::{Mailbox, Message};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use crate::config::{SmtpConfig, SmtpTls};
use crate::store::Delivery;

/// One message's limit, connection included.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Longest title in a subject line.
const SUBJECT_TITLE: usize = 120;

/// The relay and the sender.
pub(crate) struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

impl Mailer {
    /// The relay `smtp` names, logged in with `SAHEELI_SMTP_USERNAME` and
    /// `SAHEELI_SMTP_PASSWORD` when both are set.
    pub fn new(smtp: &SmtpConfig) -> anyhow::Result<Mailer> {
        let (host, port) = smtp.host_port().map_err(anyhow::Error::msg)?;
        let from: Mailbox = smtp
            .from
            .parse()
            .map_err(|e| anyhow::anyhow!("`smtp.from` `{}`: {e}", smtp.from))?;
        let builder = match smtp.tls {
            SmtpTls::Starttls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&host)?,
            SmtpTls::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&host)?,
            SmtpTls::None => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&host),
        };
        let mut builder = builder.port(port).timeout(Some(TIMEOUT));
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let (Some(user), Some(pass)) =
            (var("SAHEELI_SMTP_USERNAME"), var("SAHEELI_SMTP_PASSWORD"))
        {
            builder = builder.credentials(Credentials::new(user, pass));
        }
        Ok(Mailer {
            transport: builder.build(),
            from,
        })
    }

    /// Mails delivery `d` (its `url` is `mailto:ADDRESS`); Ok once the
    /// relay accepted it.
    pub async fn send(&self, d: &Delivery) -> Result<(), String> {
        let message = message(d, &self.from).map_err(|e| format!("{e:#}"))?;
        self.transport
            .send(message)
            .await
            .map(|_| ())
            .map_err(|e| crate::text::error_chain(&e))
    }
}

/// The message for `d`: subject and text from the event; the title made
/// one line (it is a prompt's, or a model's for a child).
fn message(d: &Delivery, from: &Mailbox) -> anyhow::Result<Message> {
    let to: Mailbox = d
        .url
        .strip_prefix("mailto:")
        .unwrap_or(&d.url)
        .parse()
        .map_err(|e| anyhow::anyhow!("`{}` is not an address: {e}", d.url))?;
    let title: String = one_line(&d.title).chars().take(SUBJECT_TITLE).collect();
    let what = d.kind.trim_start_matches("task.").replace('_', " ");
    let subject = format!("Saheeli: {title} {what}");
    Ok(Message::builder()
        .from(from.clone())
        .to(to)
        .subject(subject)
        .message_id(Some(format!("<evt_{}.{}@saheeli>", d.event_id, d.task_id)))
        .header(ContentType::TEXT_PLAIN)
        .body(text(d))?)
}

/// The body: what happened, the numbers, where the results are.
fn text(d: &Delivery) -> String {
    let mut s = format!(
        "Task {}\n{}\n\nevent:   {} (evt_{})\nstate:   {}{}\ntokens:  {} ({} in, {} out)\ncost:    ${:.4}\n",
        d.task_id,
        one_line(&d.title),
        d.kind,
        d.event_id,
        d.state,
        d.reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default(),
        d.input_tokens + d.output_tokens,
        d.input_tokens,
        d.output_tokens,
        d.cost_usd
    );
    if let Some(detail) = &d.detail {
        s.push_str(&format!("detail:  {}\n", one_line(detail)));
    }
    if let Some(r) = &d.results {
        s.push_str(&format!("results: {r}\n"));
    }
    if let Some(b) = &d.delivered {
        s.push_str(&format!(
            "branch:  {} ({})\n",
            b.branch,
            if b.pushed { "pushed" } else { "not delivered" }
        ));
    }
    s.push_str(&format!("\nsaheeli task status {}\n", d.task_id));
    s
}

/// Control characters (line breaks) as spaces.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_cannot_add_a_header_and_the_relay_is_host_port() {
        let d = Delivery {
            id: 1,
            event_id: 9,
            url: "mailto:ops@example.com".into(),
            format: "email".into(),
            kind: "task.completed".into(),
            attempts: 0,
            created_at: 0,
            task_id: saheeli_protocol::TaskId::new(),
            title: "Fix it\r\nBcc: evil@example.com".into(),
            state: "complete".into(),
            reason: Some("complete".into()),
            input_tokens: 3,
            output_tokens: 2,
            cost_usd: 0.0,
            results: Some("results/x".into()),
            detail: None,
            delivered: None,
        };
        let from: Mailbox = "Saheeli <saheeli@example.com>".parse().unwrap();
        let raw = String::from_utf8(message(&d, &from).unwrap().formatted()).unwrap();
        let head = raw.split("\r\n\r\n").next().unwrap();
        assert!(
            !head
                .lines()
                .any(|l| l.to_ascii_lowercase().starts_with("bcc:")),
            "{head}"
        );
        assert!(head.contains("To: ops@example.com"), "{head}");
        assert!(raw.contains("tokens:  5 (3 in, 2 out)"), "{raw}");
        let smtp = |relay: &str| SmtpConfig {
            relay: relay.into(),
            from: "saheeli@example.com".into(),
            tls: SmtpTls::None,
        };
        assert_eq!(smtp("127.0.0.1:2525").problem(), None);
        assert!(smtp("mail.example.com").problem().is_some());
        assert!(smtp(":25").problem().is_some());
    }
}
