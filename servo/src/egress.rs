//! The egress bridge (issue 50): an HTTP(S) proxy's address on the
//! container's own loopback (`127.0.0.1:3128`, what `HTTP_PROXY` names for
//! the agent's processes) whose every connection is handed, unread, to the
//! foreman over the phase's egress socket in the gateway directory: the
//! connection itself travels (`SCM_RIGHTS`), so its bytes cross no copy
//! here. The foreman reads the proxy request, decides, resolves, connects
//! and counts; the container itself resolves and reaches nothing. Only the
//! servo's uid can open that socket, so an agent's process reaches it only
//! through here.

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;

use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use saheeli_protocol::egress::PROXY_PORT;
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream, UnixStream};

/// Binds the proxy's port and relays its connections to `socket` until
/// the servo exits.
pub(crate) async fn start(socket: PathBuf) -> std::io::Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", PROXY_PORT)).await?;
    tokio::spawn(serve(listener, socket));
    Ok(())
}

async fn serve(listener: TcpListener, socket: PathBuf) {
    loop {
        let (mut client, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "egress bridge: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let socket = socket.clone();
        tokio::spawn(async move {
            let _ = client.set_nodelay(true);
            if let Err(e) = hand_over(&client, &socket).await {
                use tokio::io::AsyncWriteExt;
                let body = format!("saheeli egress: the foreman's proxy is not reachable: {e}\n");
                let answer = format!(
                    "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = client.write_all(answer.as_bytes()).await;
            }
            // Dropped here: the foreman holds the connection now.
        });
    }
}

/// Sends the client's connection to the foreman's proxy on `socket`.
async fn hand_over(client: &TcpStream, socket: &std::path::Path) -> std::io::Result<()> {
    let foreman = UnixStream::connect(socket).await?;
    loop {
        foreman.writable().await?;
        let sent = foreman.try_io(Interest::WRITABLE, || {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            let fds = [client.as_fd()];
            control.push(SendAncillaryMessage::ScmRights(&fds));
            rustix::net::sendmsg(
                &foreman,
                &[IoSlice::new(b"C")],
                &mut control,
                SendFlags::empty(),
            )
            .map_err(std::io::Error::from)
        });
        match sent {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `servo egress-bridge SOCKET`: the bridge alone, as a set-up (or verify)
/// container's main process; its commands run as exec'd processes with
/// the proxy's environment.
pub(crate) fn bridge_main(mut argv: impl Iterator<Item = String>) -> ExitCode {
    let Some(socket) = argv.next() else {
        eprintln!("servo egress-bridge: the egress socket's path is missing");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("servo egress-bridge: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let listener = match TcpListener::bind(("127.0.0.1", PROXY_PORT)).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("servo egress-bridge: binding 127.0.0.1:{PROXY_PORT}: {e}");
                return ExitCode::from(1);
            }
        };
        serve(listener, PathBuf::from(socket)).await;
        ExitCode::SUCCESS
    })
}
