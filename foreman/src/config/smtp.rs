//! `smtp:` in config.yaml: the mail relay of the email channel (issue 52).

use serde::Deserialize;

/// `smtp:`: the mail relay of `notify: [{ email: … }]` (issue 52). Its
/// login, when it needs one, is `SAHEELI_SMTP_USERNAME` and
/// `SAHEELI_SMTP_PASSWORD` (environment or .env), never in this file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SmtpConfig {
    /// `host:port` of the relay.
    pub relay: String,
    /// The sender, `Saheeli <saheeli@example.com>` or an address.
    pub from: String,
    /// `starttls` (the default: required), `tls` (implicit, port 465) or
    /// `none` (a relay on this host or a private network only).
    #[serde(default)]
    pub tls: SmtpTls,
}

impl SmtpConfig {
    /// `relay` as host and port.
    pub fn host_port(&self) -> Result<(String, u16), String> {
        let bad = || format!("`smtp.relay` `{}` is not HOST:PORT", self.relay);
        let (host, port) = self.relay.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() {
            return Err(bad());
        }
        Ok((host.trim_matches(['[', ']']).to_string(), port))
    }

    /// What is wrong with it, for the config's error.
    pub fn problem(&self) -> Option<String> {
        if let Err(e) = self.host_port() {
            return Some(e);
        }
        self.from
            .parse::<lettre::message::Mailbox>()
            .err()
            .map(|e| format!("`smtp.from` `{}` is not an address: {e}", self.from))
    }
}

/// How the relay's connection is secured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SmtpTls {
    #[default]
    Starttls,
    Tls,
    None,
}
