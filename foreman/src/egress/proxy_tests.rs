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
