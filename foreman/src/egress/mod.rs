//! Egress through the gateway (issue 50). A task's container keeps no
//! network: the servo serves an HTTP(S) proxy on the container's loopback
//! and relays each connection, unread, over a unix socket in the task's
//! gateway directory to one of these proxies, one per phase (`setup`,
//! `agent`, `verify`), each with that phase's list. Here the request's
//! head is parsed (`head`), decided (`decide`), the name resolved by the
//! foreman and each address checked (`address`: no loopback, private,
//! link-local or own address by name), and the bytes relayed and counted
//! (`proxy`); every connection asked for is kept (`ledger`).

mod address;
mod decide;
mod head;
mod ledger;
mod proxy;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use saheeli_protocol::egress::Phase;
use tokio_util::sync::CancellationToken;

pub(crate) use ledger::Ledger;
pub(crate) use proxy::Proxy;

/// What became of a question about a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    pub approved: bool,
    /// Who decided (or why no one could).
    pub by: String,
    /// A person decided: it holds for the task's life. Not when the
    /// question could not be asked (another was open): asked again later.
    pub lasting: bool,
}

/// Asks a person whether the task may reach `host`:`port`.
pub(crate) trait Approver: Send + Sync {
    fn ask(
        &self,
        phase: Phase,
        host: &str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>>;
}

/// A phase's proxy being served, and how to stop it.
pub(crate) struct Served {
    pub phase: Phase,
    stop: CancellationToken,
    socket: std::path::PathBuf,
}

impl Served {
    /// Stops accepting and ends its relays; removes its socket.
    pub fn stop(&self) {
        self.stop.cancel();
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serves `proxy` on `<dir>/<phase's socket>` (0600, the servo's uid when
/// the foreman can give it away, as the gateway's).
pub(crate) fn serve(dir: &Path, proxy: Proxy) -> anyhow::Result<Served> {
    let phase = proxy.phase;
    let socket = dir.join(phase.socket());
    let listener = crate::door::bind_named(dir, phase.socket())?;
    let stop = CancellationToken::new();
    tokio::spawn(proxy::serve(listener, Arc::new(proxy), stop.clone()));
    Ok(Served {
        phase,
        stop,
        socket,
    })
}
