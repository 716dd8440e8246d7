//! Reaching a swarm engine's API: the manager's address as configured
//! (`swarm.manager`), and each node's alike (the same scheme and port at
//! the node's address), plain or over TLS (`swarm.tls`).
//!
//! With TLS, the engines are trusted only as signed by `swarm.tls.ca`
//! (what `docker --tlsverify` does; bollard's own TLS connection would
//! also trust the system's public roots) and the foreman presents its
//! client certificate. One HTTPS client serves the manager and every
//! node, keeping its connections open: bollard's opens a connection, and
//! so a TLS handshake, per API call, and the swarm engine asks the
//! manager how its tasks are doing several times a second.

use std::sync::Arc;

use anyhow::Context;
use bollard::Docker;
use futures_util::future::BoxFuture;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::config::{Config, SwarmConfig};

/// How long one call to an engine may take (seconds).
const CALL_TIMEOUT_S: u64 = 120;

/// An engine API: its address and, with TLS, the client that reaches it.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// DOCKER_HOST-style: `tcp://host:port`, `http://…` or `unix:///path`.
    pub url: String,
    tls: Option<Transport>,
}

/// The HTTPS client of `swarm.tls` (shared by every endpoint derived from
/// the manager's), as bollard calls it.
type Transport = Arc<
    dyn Fn(
            bollard::BollardRequest,
        ) -> BoxFuture<
            'static,
            Result<hyper::Response<hyper::body::Incoming>, bollard::errors::Error>,
        > + Send
        + Sync,
>;

/// One HTTPS client with its pool of open connections, for `swarm.tls`.
fn https_transport(connector: HttpsConnector<HttpConnector>) -> Transport {
    let client = Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(std::time::Duration::from_secs(30))
        .build(connector);
    Arc::new(move |req: bollard::BollardRequest| {
        let client = client.clone();
        Box::pin(async move {
            client
                .request(req)
                .await
                .map_err(bollard::errors::Error::from)
        })
    })
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.tls {
            Some(_) => write!(f, "{} (TLS)", self.url),
            None => f.write_str(&self.url),
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Endpoint {
    /// The manager of `swarm:` in `cfg`; with `swarm.tls`, its files are
    /// read and checked now (an error names the key and the file).
    pub fn manager(cfg: &Config, swarm: &SwarmConfig) -> anyhow::Result<Endpoint> {
        let tls = match &swarm.tls {
            Some(t) => {
                anyhow::ensure!(
                    swarm.manager.starts_with("tcp://") || swarm.manager.starts_with("https://"),
                    "{}: `swarm.tls` is set, so `swarm.manager` must be `tcp://host:port`, not `{}`",
                    cfg.describe_source(),
                    swarm.manager
                );
                let files = super::tls::Files {
                    ca: cfg.resolve(&t.ca),
                    cert: cfg.resolve(&t.cert),
                    key: cfg.resolve(&t.key),
                };
                let config = super::tls::client_config(&files)
                    .map_err(|e| anyhow::anyhow!("{}: {e:#}", cfg.describe_source()))?;
                let connector = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(config)
                    .https_only()
                    .enable_http1()
                    .build();
                Some(https_transport(connector))
            }
            None => None,
        };
        Ok(Endpoint {
            url: swarm.manager.clone(),
            tls,
        })
    }

    /// A plain endpoint (no TLS), for tests.
    #[cfg(test)]
    pub fn plain(url: &str) -> Endpoint {
        Endpoint {
            url: url.into(),
            tls: None,
        }
    }

    /// The engine at `addr` reached as this one is: the same scheme, port
    /// and TLS (None when this one has no port: a unix socket).
    pub fn at(&self, addr: &str) -> Option<Endpoint> {
        let port = self
            .url
            .rsplit_once(':')
            .map(|(_, p)| p.trim_end_matches('/'))
            .filter(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))?;
        Some(Endpoint {
            url: format!("tcp://{addr}:{port}"),
            tls: self.tls.clone(),
        })
    }

    /// Connects and negotiates the API version with that engine.
    pub async fn connect(&self) -> anyhow::Result<Docker> {
        let addr = self.url.as_str();
        let d = match &self.tls {
            Some(tls) => {
                let hostport = addr
                    .trim_start_matches("tcp://")
                    .trim_start_matches("https://");
                let transport = tls.clone();
                Docker::connect_with_custom_transport(
                    move |req: bollard::BollardRequest| transport(req),
                    Some(format!("https://{hostport}")),
                    CALL_TIMEOUT_S,
                    bollard::API_DEFAULT_VERSION,
                )
            }
            None if addr.starts_with("unix://") => {
                Docker::connect_with_unix(addr, CALL_TIMEOUT_S, bollard::API_DEFAULT_VERSION)
            }
            None if addr.starts_with("tcp://") || addr.starts_with("http://") => {
                Docker::connect_with_http(addr, CALL_TIMEOUT_S, bollard::API_DEFAULT_VERSION)
            }
            None => anyhow::bail!(
                "swarm address `{addr}` is not `tcp://host:port` or `unix:///path`; fix `swarm.manager` in config.yaml"
            ),
        }
        .with_context(|| format!("connecting to the swarm engine at `{addr}`"))?;
        d.negotiate_version().await.with_context(|| match self.tls {
            Some(_) => format!(
                "reaching the swarm engine at `{addr}` over TLS: is it served with `--tlsverify`, \
                 its certificate signed by `swarm.tls.ca` for this address, and the client \
                 certificate `swarm.tls.cert` signed by the CA it trusts?"
            ),
            None => format!("reaching the swarm engine at `{addr}`"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_reached_at_the_managers_scheme_and_port() {
        let m = Endpoint::plain("tcp://10.0.0.11:2376");
        assert_eq!(m.at("10.0.0.12").unwrap().url, "tcp://10.0.0.12:2376");
        assert!(
            Endpoint::plain("unix:///run/docker.sock")
                .at("10.0.0.12")
                .is_none()
        );
    }
}
