//! Which addresses a listed *name* may not lead to: anything on this host
//! or its private networks. A name is resolved by the foreman, each address
//! it gives is checked here, and the connection goes to a checked address
//! (never resolved again), so a name that resolves to a private address
//! (DNS rebinding) reaches nothing. An address a task lists itself is not
//! checked: it was named on purpose.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::task::egress::canonical;

/// Why an address may not be reached by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Loopback,
    Private,
    LinkLocal,
    /// 0.0.0.0/8, ::, multicast, broadcast, reserved, documentation.
    Special,
    /// One of this host's own interface addresses.
    ThisHost,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Loopback => "a loopback address",
            Class::Private => "a private address",
            Class::LinkLocal => "a link-local address",
            Class::Special => "a reserved address",
            Class::ThisHost => "an address of the foreman's own host",
        }
    }
}

/// The class that forbids `ip`, or None when it is a public address not
/// among `own` (this host's addresses).
pub(crate) fn forbidden(ip: IpAddr, own: &[IpAddr]) -> Option<Class> {
    let ip = canonical(ip);
    let class = match ip {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => v6_class(v6),
    };
    class.or_else(|| {
        own.iter()
            .any(|o| canonical(*o) == ip)
            .then_some(Class::ThisHost)
    })
}

fn v4_class(a: Ipv4Addr) -> Option<Class> {
    let [o0, o1, o2, _] = a.octets();
    if a.is_loopback() {
        Some(Class::Loopback)
    } else if a.is_private() || (o0 == 100 && (64..128).contains(&o1)) {
        // RFC 1918 and the carrier-grade NAT range (RFC 6598).
        Some(Class::Private)
    } else if a.is_link_local() {
        Some(Class::LinkLocal)
    } else if o0 == 0
        || a.is_multicast()
        || a.is_broadcast()
        || o0 >= 240
        || (o0 == 192 && o1 == 0 && o2 == 0)
        || (o0 == 192 && o1 == 0 && o2 == 2)
        || (o0 == 198 && (o1 == 18 || o1 == 19))
        || (o0 == 198 && o1 == 51 && o2 == 100)
        || (o0 == 203 && o1 == 0 && o2 == 113)
    {
        Some(Class::Special)
    } else {
        None
    }
}

fn v6_class(a: Ipv6Addr) -> Option<Class> {
    let s0 = a.segments()[0];
    if a.is_loopback() {
        Some(Class::Loopback)
    } else if s0 & 0xfe00 == 0xfc00 {
        // Unique local (fc00::/7).
        Some(Class::Private)
    } else if s0 & 0xffc0 == 0xfe80 {
        Some(Class::LinkLocal)
    } else if a.is_unspecified()
        || a.is_multicast()
        || s0 == 0x2001 && a.segments()[1] == 0x0db8
        || s0 == 0x0064 && a.segments()[1] == 0xff9b
        || a.to_ipv4().is_some()
    {
        // Documentation, NAT64 (it would reach IPv4 ranges unchecked) and
        // IPv4-compatible forms.
        Some(Class::Special)
    } else {
        None
    }
}

/// This host's interface addresses, read when a proxy starts.
pub(crate) fn own_addresses() -> Vec<IpAddr> {
    match if_addrs::get_if_addrs() {
        Ok(list) => list.into_iter().map(|i| i.ip()).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "egress: cannot list this host's addresses; only the address classes are refused");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class() {
        let own: Vec<IpAddr> = vec!["203.0.114.7".parse().unwrap()];
        let cases = [
            ("127.0.0.1", Some(Class::Loopback)),
            ("127.9.9.9", Some(Class::Loopback)),
            ("::1", Some(Class::Loopback)),
            ("::ffff:127.0.0.1", Some(Class::Loopback)),
            ("10.1.2.3", Some(Class::Private)),
            ("172.16.0.1", Some(Class::Private)),
            ("192.168.1.1", Some(Class::Private)),
            ("100.64.0.1", Some(Class::Private)),
            ("fd00::1", Some(Class::Private)),
            ("169.254.169.254", Some(Class::LinkLocal)),
            ("fe80::1", Some(Class::LinkLocal)),
            ("0.0.0.0", Some(Class::Special)),
            ("::", Some(Class::Special)),
            ("224.0.0.1", Some(Class::Special)),
            ("255.255.255.255", Some(Class::Special)),
            ("64:ff9b::a00:1", Some(Class::Special)),
            ("203.0.114.7", Some(Class::ThisHost)),
            ("151.101.0.223", None),
            ("2a04:4e42::223", None),
            ("100.128.0.1", None),
        ];
        for (ip, want) in cases {
            assert_eq!(forbidden(ip.parse().unwrap(), &own), want, "{ip}");
        }
    }
}
