use std::io::IoSlice;
use std::os::fd::AsFd;

use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

use super::*;

/// Sends `payload` with `fd` (when given) as the bridge would.
fn send(
    s: &std::os::unix::net::UnixStream,
    payload: &[u8],
    fd: Option<std::os::fd::BorrowedFd<'_>>,
) {
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds: Vec<_> = fd.into_iter().collect();
    if !fds.is_empty() {
        control.push(SendAncillaryMessage::ScmRights(&fds));
    }
    rustix::net::sendmsg(
        s,
        &[IoSlice::new(payload)],
        &mut control,
        SendFlags::empty(),
    )
    .unwrap();
}

fn pair() -> (std::os::unix::net::UnixStream, UnixStream) {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    b.set_nonblocking(true).unwrap();
    (a, UnixStream::from_std(b).unwrap())
}

/// A hostile servo hands over a pipe, a unix socket or nothing: each is
/// refused, closed unread; a TCP connection is taken.
#[tokio::test]
async fn only_a_tcp_connection_is_taken() {
    let (bridge, proxy) = pair();
    let (r, _w) = std::io::pipe().unwrap();
    send(&bridge, b"C", Some(r.as_fd()));
    let e = receive(&proxy).await.unwrap_err();
    assert!(e.to_string().contains("not a TCP connection"), "{e}");

    let (bridge, proxy) = pair();
    let (other, _) = std::os::unix::net::UnixStream::pair().unwrap();
    send(&bridge, b"C", Some(other.as_fd()));
    assert!(receive(&proxy).await.is_err());

    let (bridge, proxy) = pair();
    send(&bridge, b"C", None);
    let e = receive(&proxy).await.unwrap_err();
    assert!(e.to_string().contains("not one connection"), "{e}");

    let (bridge, proxy) = pair();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    send(&bridge, b"C", Some(c.as_fd()));
    let got = receive(&proxy).await.unwrap();
    assert_eq!(got.peer_addr().unwrap(), l.local_addr().unwrap());
}

/// A flood: connections that never send a head hold the phase's cap
/// (`MAX_CONNECTIONS`); the next is answered 503 on its own connection,
/// and the foreman holds no more than the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_stops_at_the_cap_with_a_503() {
    use saheeli_protocol::egress::{Approval, Phase};
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Store::open(&dir.path().join("db.sqlite")).unwrap();
    let task = saheeli_protocol::TaskId::new();
    let ledger = Ledger {
        task,
        store: Arc::new(Mutex::new(store)),
    };
    let proxy = Proxy::new(
        task,
        Phase::Agent,
        vec![],
        Approval::Deny,
        vec![],
        ledger,
        None,
    );
    let _served = super::super::serve(dir.path(), proxy).unwrap();
    let socket = dir.path().join(Phase::Agent.socket());
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut clients = Vec::new();
    for _ in 0..=MAX_CONNECTIONS {
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server_side, _) = l.accept().unwrap();
        let bridge = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        send(&bridge, b"C", Some(server_side.as_fd()));
        clients.push((c, bridge));
    }
    let (last, _) = clients.pop().unwrap();
    last.set_nonblocking(true).unwrap();
    let mut last = TcpStream::from_std(last).unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), last.read_to_string(&mut answer))
        .await
        .expect("the connection past the cap is answered at once")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too many connections"), "{answer}");
    // The ones within the cap are still held, unanswered.
    let (held, _) = &clients[0];
    held.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 16];
    let r = std::io::Read::read(&mut &*held, &mut buf);
    assert!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "{r:?}"
    );
}
