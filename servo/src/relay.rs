//! `servo relay SOCKET HOST:PORT`: the gateway's relay on a swarm node
//! (`swarm.network: none`). Jobs there have no network at all; each
//! connection a servo makes to `SOCKET` (a unix socket in a node-local
//! volume the job mounts read-only) is joined, byte for byte, to a new TCP
//! connection to the gateway at `HOST:PORT`. It reads nothing it relays:
//! the gateway authenticates every request by its task's token, exactly
//! as it does a servo that reaches it over an overlay.
//!
//! The socket belongs to the servo's user, mode 0600: in a job, only the
//! servo connects; its agent (another uid) cannot. The relay runs as root
//! with no capability but `CAP_CHOWN` (to give the socket away), on a
//! read-only root filesystem.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use tokio::net::{TcpStream, UnixListener};

/// Connections relayed at once; more wait for one to end.
const MAX_CONNECTIONS: usize = 1024;

pub(crate) fn main(mut argv: impl Iterator<Item = String>) -> ExitCode {
    let (Some(socket), Some(upstream), None) = (argv.next(), argv.next(), argv.next()) else {
        eprintln!("usage: servo relay SOCKET HOST:PORT");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("servo relay: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(serve(PathBuf::from(socket), upstream)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("servo relay: {e}");
            ExitCode::from(1)
        }
    }
}

/// Binds `socket` for the servo's user alone; a stale socket left by an
/// earlier relay is replaced, anything else at that path is refused.
fn bind(socket: &Path) -> Result<UnixListener, String> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    match std::fs::symlink_metadata(socket) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(socket)
            .map_err(|e| format!("removing the old `{}`: {e}", socket.display()))?,
        Ok(_) => {
            return Err(format!(
                "`{}` exists and is not a socket; not replacing it",
                socket.display()
            ));
        }
        Err(_) => {}
    }
    let listener =
        UnixListener::bind(socket).map_err(|e| format!("binding `{}`: {e}", socket.display()))?;
    // The mode first: once the socket is the servo's, root without
    // CAP_FOWNER may no longer change it.
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("restricting `{}`: {e}", socket.display()))?;
    let uid = saheeli_protocol::uids::SERVO;
    std::os::unix::fs::lchown(socket, Some(uid), Some(uid))
        .map_err(|e| format!("giving `{}` to the servo's user: {e}", socket.display()))?;
    Ok(listener)
}

async fn serve(socket: PathBuf, upstream: String) -> Result<(), String> {
    let listener = bind(&socket)?;
    eprintln!("servo relay: {} → {upstream}", socket.display());
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("SIGTERM: {e}"))?;
    loop {
        let slot = slots.clone().acquire_owned().await.expect("never closed");
        let conn = tokio::select! {
            c = listener.accept() => c,
            _ = term.recv() => break,
        };
        let (mut inner, _) = match conn {
            Ok(c) => c,
            Err(e) => {
                eprintln!("servo relay: accepting: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let upstream = upstream.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let connected =
                tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(&upstream)).await;
            let mut outer = match connected {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    eprintln!("servo relay: connecting to the gateway at {upstream}: {e}");
                    return;
                }
                Err(_) => {
                    eprintln!("servo relay: connecting to the gateway at {upstream}: timed out");
                    return;
                }
            };
            let _ = outer.set_nodelay(true);
            // Either side closing ends both; errors are the peers' business.
            let _ = tokio::io::copy_bidirectional(&mut inner, &mut outer).await;
        });
    }
    let _ = std::fs::remove_file(&socket);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes go both ways unchanged, for connections side by side; the
    /// socket is the servo's user's alone.
    #[tokio::test]
    async fn a_connection_is_joined_to_the_upstream_both_ways() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = echo.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = echo.accept().await.unwrap();
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("gateway.sock");
        // A stale socket is replaced.
        drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
        // lchown to the servo's uid needs root (the suite runs as root).
        assert_eq!(unsafe { libc::geteuid() }, 0, "run the suite as root");
        tokio::spawn(serve(sock.clone(), addr));
        let mut up = None;
        for _ in 0..100 {
            match tokio::net::UnixStream::connect(&sock).await {
                Ok(s) => {
                    up = Some(s);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        let mut a = up.expect("the relay listens");
        let mut b = tokio::net::UnixStream::connect(&sock).await.unwrap();
        let big = vec![7u8; 1 << 20];
        a.write_all(&big).await.unwrap();
        b.write_all(b"second").await.unwrap();
        let mut got = vec![0u8; big.len()];
        a.read_exact(&mut got).await.unwrap();
        assert_eq!(got, big);
        let mut got = [0u8; 6];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"second");
        // Many at once, each its own upstream connection.
        let mut all = tokio::task::JoinSet::new();
        for i in 0..64u8 {
            let sock = sock.clone();
            all.spawn(async move {
                let mut c = tokio::net::UnixStream::connect(&sock).await.unwrap();
                let sent = vec![i; 64 << 10];
                c.write_all(&sent).await.unwrap();
                let mut back = vec![0u8; sent.len()];
                c.read_exact(&mut back).await.unwrap();
                assert_eq!(back, sent);
            });
        }
        while let Some(r) = all.join_next().await {
            r.unwrap();
        }
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let m = std::fs::symlink_metadata(&sock).unwrap();
        assert_eq!(m.uid(), saheeli_protocol::uids::SERVO);
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_path_that_is_not_a_socket_is_never_replaced() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("gateway.sock");
        std::fs::write(&f, "keep").unwrap();
        assert!(bind(&f).unwrap_err().contains("not a socket"));
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "keep");
    }
}
