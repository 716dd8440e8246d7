//! Unit tests of `listen`: the per-client shares, the heads that give
//! way at the cap, the file-descriptor budget.

use super::*;

#[test]
fn the_oldest_connection_without_a_head_gives_way() {
    let heads = Heads::default();
    let (first, first_gone) = heads.wait();
    let (_second, second_gone) = heads.wait();
    let (third, third_gone) = heads.wait();
    first.arrived();
    assert!(heads.evict_oldest(), "the second still waits");
    assert!(!first_gone.is_cancelled(), "its head came: never evicted");
    assert!(second_gone.is_cancelled());
    drop(third);
    assert!(!third_gone.is_cancelled(), "closed on its own");
    assert!(!heads.evict_oldest(), "none waits any more");
}

#[test]
fn each_client_holds_its_own_share_and_gives_it_back() {
    let c = Clients::new(2);
    let (a, b): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap());
    let held: Vec<Held> = (0..2).map(|_| c.take(a).unwrap()).collect();
    assert!(c.take(a).is_none(), "past its share");
    assert!(c.take(b).is_some(), "another client is not held");
    drop(held);
    assert!(c.take(a).is_some());
    assert_eq!(
        c.open.lock().unwrap().len(),
        0,
        "nothing kept for closed clients"
    );
    // One host's IPv6 /64 is one client; a mapped IPv4 is the IPv4.
    for (given, client) in [
        ("2001:db8::1", "2001:db8::"),
        ("2001:db8::ffff:1:2", "2001:db8::"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("192.0.2.7", "192.0.2.7"),
    ] {
        assert_eq!(
            client_of(given.parse().unwrap()),
            client.parse::<IpAddr>().unwrap(),
            "{given}"
        );
    }
}

#[test]
fn the_gateway_cap_is_lowered_to_keep_the_reserve_or_refused() {
    let b = FdBudget::new(20_000, 4, 256).unwrap();
    assert_eq!(b.per_gateway, GATEWAY_CONNECTIONS);
    // 1024 - 256 - 256 = 512 over 64 tasks: 8 each.
    assert_eq!(FdBudget::new(1024, 64, 256).unwrap().per_gateway, 8);
    let e = FdBudget::new(1024, 512, 256).unwrap_err();
    assert!(e.contains("ulimit -n") && e.contains("concurrency"), "{e}");
}
