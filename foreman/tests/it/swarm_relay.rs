//! `swarm.network: none` on a real 3-node swarm: job containers with no
//! network at all, their servos reaching the gateway through the relay
//! on their node (a global service on the node's own network, its unix
//! socket in a node-local volume the job mounts read-only).
//!
//! Eight tasks over the nodes complete once, a submitted workspace of a
//! few MiB going to each servo and back through the relay; inside, the
//! agent sees only loopback, and cannot connect to the relay's socket
//! (the servo's alone); the relay runs on every node; nothing of a task is
//! left on any node. One test, one swarm (`Fixture::up(238)`).

use std::time::Instant;

use serde_json::json;

use crate::swarm::{Fixture, assert_complete_once, elapsed, node_of};
use crate::util::*;

#[test]
fn jobs_with_no_network_reach_their_gateway_through_the_relay_on_their_node() {
    require_docker();
    let t0 = Instant::now();
    let Fixture { swarm, s, base, .. } = Fixture::up(238);
    let cfg = base.replace("network: saheeli-jobs", "network: none");
    assert_ne!(cfg, base);
    s.write("config.yaml", &cfg);

    // A submitted workspace with a 3 MiB file: down to the servo and back
    // up with the results, both through the relay.
    let blob: String = (0..3 * 1024 * 1024 / 64)
        .map(|i| format!("{i:063}\n"))
        .collect();
    s.write("proj/blob.txt", &blob);
    s.write(
        "look.replay.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "hostname > node.txt; cat /proc/net/dev > net.txt; \
                  cp blob.txt copy.txt; ls -ln /run/saheeli-relay > relay.txt 2>&1; \
                  python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); \
                  s.connect('/run/saheeli-relay/gateway.sock'); print('connected')\" \
                  > connect.txt 2>&1; echo done > marker.txt"}),
            ),
            ("task_complete", json!({"message": "ok"})),
        ]),
    );
    s.write(
        "look.md",
        &replay_prompt("look.replay.json", "workspace: proj\n"),
    );
    let ids: Vec<String> = (0..8).map(|_| s.submit("look.md")).collect();
    let t = Instant::now();
    s.drain();
    eprintln!("8 tasks with no network in {}", elapsed(t));

    let mut nodes = std::collections::BTreeSet::new();
    for id in &ids {
        assert_complete_once(&s, id, "marker.txt");
        nodes.insert(node_of(&s.task(id)).expect("the node is in `task status`"));
        let dir = s.path().join("results").join(id);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        // No interface but loopback.
        let interfaces: Vec<String> = read("net.txt")
            .lines()
            .skip(2)
            .filter_map(|l| l.split_once(':').map(|(n, _)| n.trim().to_string()))
            .collect();
        assert_eq!(interfaces, ["lo"], "{}", read("net.txt"));
        // The relay's socket is there, the servo's (999), and refuses the agent.
        let listing = read("relay.txt");
        assert!(
            listing.contains("gateway.sock") && listing.contains(" 999 999 "),
            "{listing}"
        );
        assert!(listing.contains("srw------- "), "{listing}");
        let connect = read("connect.txt");
        assert!(
            connect.contains("PermissionError") && !connect.contains("connected"),
            "the agent reached the relay: {connect}"
        );
        // The workspace went both ways whole.
        assert_eq!(read("blob.txt"), blob);
        assert_eq!(read("copy.txt"), blob);
    }
    assert!(nodes.len() >= 2, "all on one node: {nodes:?}");

    // The relay runs on every node, on the node's network, by role.
    let relays = swarm.lines(
        1,
        &[
            "service",
            "ls",
            "--filter",
            "label=saheeli.role=relay",
            "--format",
            "{{.Name}} {{.Mode}} {{.Replicas}}",
        ],
    );
    assert_eq!(relays.len(), 1, "{relays:?}");
    assert!(
        relays[0].starts_with("saheeli-relay-") && relays[0].ends_with("global 3/3"),
        "{relays:?}"
    );
    // A second `serve` finds it as it is (no update, so no restart).
    let version = |swarm: &crate::swarm::TestSwarm| {
        swarm.lines(
            1,
            &[
                "service",
                "inspect",
                "--format",
                "{{.Version.Index}}",
                relays[0].split(' ').next().unwrap(),
            ],
        )
    };
    let before = version(&swarm);
    s.drain();
    assert_eq!(version(&swarm), before);

    // Nothing of a task left on any node.
    let label = "label=saheeli.task";
    assert_eq!(
        swarm.lines(1, &["service", "ls", "-q", "--filter", label]),
        Vec::<String>::new()
    );
    assert_eq!(
        swarm.lines(1, &["secret", "ls", "-q", "--filter", label]),
        Vec::<String>::new()
    );
    for n in 1..=3 {
        assert_eq!(
            swarm.lines(n, &["ps", "-aq", "--filter", label]),
            Vec::<String>::new(),
            "containers left on node {n}"
        );
        assert_eq!(
            swarm.lines(n, &["volume", "ls", "-q", "--filter", label]),
            Vec::<String>::new(),
            "volumes left on node {n}"
        );
    }
    eprintln!("relay test done in {}", elapsed(t0));
}
