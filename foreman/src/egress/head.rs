//! The proxy request a client sends first: `CONNECT host:port` (HTTPS, and
//! anything tunnelled) or an absolute URI (`GET http://host/path`, plain
//! HTTP). Parsed here from bytes the container wrote, so nothing is
//! trusted: a capped head, one line at a time, names and ports checked.

use crate::task::egress::Host;

/// The longest head read before a request is refused.
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// What a client asked the proxy for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub host: Host,
    pub port: u16,
    pub kind: Kind,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A tunnel: answer 200 and relay bytes both ways.
    Connect,
    /// Plain HTTP: this head, rewritten for the origin server (its path
    /// only, `Connection: close`, no proxy headers), goes first.
    Forward(Vec<u8>),
}

/// Why a head was refused (a 400 to the client).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Malformed(pub String);

/// Where the head ends (after its blank line), if it has.
pub(crate) fn end_of_head(buf: &[u8]) -> Option<usize> {
    memchr::memmem::find(buf, b"\r\n\r\n").map(|i| i + 4)
}

/// Parses a whole head (through its blank line).
pub(crate) fn parse(head: &[u8]) -> Result<Request, Malformed> {
    let bad = |why: &str| Err(Malformed(why.to_string()));
    let Ok(text) = std::str::from_utf8(head) else {
        return bad("the request head is not UTF-8");
    };
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad("the request line is not `METHOD TARGET HTTP/1.x`");
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return bad("only HTTP/1.0 and HTTP/1.1 proxy requests are served");
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return bad("the method is not a token");
    }
    if method == "CONNECT" {
        let (host, port) = authority(target, None)?;
        return Ok(Request {
            host,
            port,
            kind: Kind::Connect,
        });
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return bad(if target.starts_with("https://") {
            "an https:// URL goes through CONNECT; set HTTPS_PROXY, not a plain request"
        } else {
            "a proxy request needs an absolute http:// URL or CONNECT"
        });
    };
    let (auth, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], &rest[i..]),
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    let (host, port) = authority(auth, Some(80))?;
    let mut out = format!("{method} {path} {version}\r\n").into_bytes();
    for line in lines.take_while(|l| !l.is_empty()) {
        let Some((name, _)) = line.split_once(':') else {
            return bad("a header line has no `:`");
        };
        let name = name.trim().to_ascii_lowercase();
        if matches!(
            name.as_str(),
            "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive"
        ) {
            continue;
        }
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Request {
        host,
        port,
        kind: Kind::Forward(out),
    })
}

/// `host:port`, `[v6]:port`, or (with a default port) `host`.
fn authority(a: &str, default: Option<u16>) -> Result<(Host, u16), Malformed> {
    let bad = |why: String| Err(Malformed(why));
    if a.contains('@') {
        return bad("credentials in a proxy URL are not passed on".into());
    }
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        match rest.split_once(']') {
            Some((h, "")) => (h, None),
            Some((h, p)) if p.starts_with(':') => (h, Some(&p[1..])),
            _ => return bad(format!("`{a}` is not `[address]:port`")),
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    let port = match (port, default) {
        (Some(p), _) => match p.parse::<u16>() {
            Ok(p) if p != 0 => p,
            _ => return bad(format!("`{a}`: the port is not a number from 1 to 65535")),
        },
        (None, Some(d)) => d,
        (None, None) => return bad(format!("`{a}`: CONNECT needs `host:port`")),
    };
    match Host::parse(host) {
        Some(h) => Ok((h, port)),
        None => bad(format!("`{host}` is not a host name or an address")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn name(n: &str) -> Host {
        Host::Name(n.into())
    }

    #[test]
    fn connect_and_absolute_requests() {
        let r = parse(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n").unwrap();
        assert_eq!(
            (r.host, r.port, r.kind),
            (name("pypi.org"), 443, Kind::Connect)
        );
        let r = parse(b"CONNECT [::1]:8080 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.host, Host::Address("::1".parse::<IpAddr>().unwrap()));
        let r = parse(
            b"GET http://127.0.0.2:9000/simple/x/?a=1 HTTP/1.1\r\nHost: 127.0.0.2:9000\r\n\
              Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.port, 9000);
        let Kind::Forward(head) = r.kind else {
            panic!("not forwarded")
        };
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /simple/x/?a=1 HTTP/1.1\r\nHost: 127.0.0.2:9000\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let r = parse(b"GET http://example.com HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!((r.host, r.port), (name("example.com"), 80));
    }

    #[test]
    fn what_is_refused() {
        for (head, says) in [
            (&b"GET /path HTTP/1.1\r\n\r\n"[..], "absolute http://"),
            (b"GET https://pypi.org/ HTTP/1.1\r\n\r\n", "CONNECT"),
            (b"CONNECT pypi.org HTTP/1.1\r\n\r\n", "host:port"),
            (b"CONNECT pypi.org:0 HTTP/1.1\r\n\r\n", "1 to 65535"),
            (b"CONNECT pypi.org:99999 HTTP/1.1\r\n\r\n", "1 to 65535"),
            (b"CONNECT a b:443 HTTP/1.1\r\n\r\n", "METHOD TARGET"),
            (
                b"CONNECT user:pw@pypi.org:443 HTTP/1.1\r\n\r\n",
                "credentials",
            ),
            (b"CONNECT pypi.org:443 HTTP/2\r\n\r\n", "HTTP/1.0"),
            (b"\x16\x03\x01\x02\x00\x01\x00\r\n\r\n", "METHOD TARGET"),
            (b"GET http://\xff/ HTTP/1.1\r\n\r\n", "UTF-8"),
            (b"CONNECT ex ample:443 HTTP/1.1\r\n\r\n", "METHOD TARGET"),
            (
                b"CONNECT exa$mple.com:443 HTTP/1.1\r\n\r\n",
                "not a host name",
            ),
        ] {
            let e = parse(head).unwrap_err();
            assert!(
                e.0.contains(says),
                "{:?}: {}",
                String::from_utf8_lossy(head),
                e.0
            );
        }
    }

    #[test]
    fn the_head_ends_at_its_blank_line() {
        assert_eq!(end_of_head(b"CONNECT a:1 HTTP/1.1\r\n\r\nrest"), Some(24));
        assert_eq!(end_of_head(b"CONNECT a:1 HTTP/1.1\r\n"), None);
    }
}
