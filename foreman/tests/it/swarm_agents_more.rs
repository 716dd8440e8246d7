//! mini-swe-agent and aider on a real three-node swarm (issue 53), beside
//! Codex and Claude Code (`swarm_agents`): their test images
//! (`SAHEELI_TEST_MINI_IMAGE`, `SAHEELI_TEST_AIDER_IMAGE`) loaded into the
//! manager and pushed to the swarm's registry, named by digest in
//! `agents:`, run on the workers (the manager drained) against the fake
//! LLM, whose key only the foreman holds; with `swarm.network: none`, the
//! calls through each node's relay.
//!
//! `serve` pulls both images onto every worker before any task asks
//! (`prepull`): the first task on a node does not wait for a pull. Then a
//! mini-swe-agent task and an aider task complete (their files, the
//! agent's home, the ledger equal to what the fake billed, the key in no
//! result). Then the worker of a third (mini-swe-agent, its second call
//! held) has its dockerd killed mid-run: the task still ends exactly once
//! (requeued onto the other worker, or ended with what it had). Nothing of
//! any task is left on any node. One swarm (`Fixture::up(245)`).

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fake_llm::{FakeLlm, Reply};
use crate::lifecycle::wait_for;
use crate::swarm::{Fixture, TestSwarm, elapsed, serve, wait_running};
use crate::util::require_docker;

const KEY: &str = "sk-real-key-i53-more-Hn4Vb8Ty2X";

/// aider's one turn: the file in its `whole` edit format.
const AIDER_EDIT: &str = "I will create the file.\n\nhello.txt\n```\nhello from aider\n```\n";

/// Loads the host's image `local` into the manager, pushes it to the
/// swarm's registry as `saheeli-servo-<name>:test`; its reference by
/// digest.
fn push_local(swarm: &TestSwarm, pfx: &str, local: &str, name: &str) -> String {
    let t = Instant::now();
    let manager = format!("unix://{}/n1/docker.sock", swarm.base);
    let load = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "docker image inspect {local} >/dev/null && docker save {local} | docker -H {manager} load -q"
        ))
        .output()
        .unwrap();
    assert!(
        load.status.success(),
        "loading `{local}` into the manager (scripts/test.sh builds it with \
         `saheeli build-servo --agent {name} --tag {local}`): {}",
        String::from_utf8_lossy(&load.stderr)
    );
    let repo = format!("{pfx}.1:5000/saheeli-servo-{name}:test");
    let tag = swarm.docker(1, &["tag", local, &repo]);
    assert!(tag.status.success(), "{tag:?}");
    let push = swarm.docker(1, &["push", &repo]);
    let out = String::from_utf8_lossy(&push.stdout).to_string();
    assert!(push.status.success(), "{out}{push:?}");
    let digest = out
        .split("digest: ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no digest in the push's output: {out}"));
    // Gone from the manager again: it runs no job, its pull is the nodes'.
    let _ = swarm.docker(1, &["rmi", &repo, local]);
    eprintln!("{name}'s image pushed in {}", elapsed(t));
    format!("{pfx}.1:5000/saheeli-servo-{name}@{digest}")
}

/// Whether the request is mini-swe-agent's (its `bash` tool) and how many
/// messages it carries.
fn mini(body: &Value) -> Option<usize> {
    let tools = body["tools"].as_array()?;
    tools
        .iter()
        .any(|t| t["function"]["name"] == "bash")
        .then(|| body["messages"].as_array().map_or(0, Vec::len))
}

fn bash(command: &str) -> Reply {
    Reply::Tools(
        vec![("bash".into(), serde_json::json!({ "command": command }))],
        (120, 15),
    )
}

/// How many times task `t` ended (entered a terminal state).
fn endings(t: &Value) -> usize {
    t["events"].as_array().map_or(0, |e| {
        e.iter()
            .filter(|e| {
                ["complete", "incomplete", "failed", "cancelled"]
                    .contains(&e["to"].as_str().unwrap_or(""))
            })
            .count()
    })
}

#[test]
fn mini_swe_agent_and_aider_run_on_workers_and_a_lost_worker_ends_an_agent_task_once() {
    require_docker();
    let t0 = Instant::now();
    let Fixture {
        swarm,
        s,
        pfx,
        base,
        ..
    } = Fixture::up(245);
    let me = swarm.lines(1, &["info", "--format", "{{.Swarm.NodeID}}"]);
    let drained = swarm.docker(1, &["node", "update", "--availability", "drain", &me[0]]);
    assert!(drained.status.success(), "{drained:?}");

    // The lost task's second call is held (once: its second launch's is
    // not) while its worker's engine dies.
    let hold = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicBool::new(false));
    let llm = FakeLlm::start_matching(vec![], {
        let (hold, held) = (hold.clone(), held.clone());
        move |body: &Value| {
            let Some(n) = mini(body) else {
                return Some(Reply::Text(AIDER_EDIT.into(), (200, 30)));
            };
            Some(if n <= 2 {
                bash(
                    "echo hello from mini > hello.txt && wc -c hello.txt && \
                     (env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done) \
                     > seen-env.txt 2>/dev/null; true",
                )
            } else {
                let done =
                    bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo wrote hello.txt");
                if hold.load(Ordering::SeqCst) && !held.swap(true, Ordering::SeqCst) {
                    Reply::Slow(Duration::from_secs(40), Box::new(done))
                } else {
                    done
                }
            })
        }
    });
    let mini_image = push_local(
        &swarm,
        &pfx,
        &std::env::var("SAHEELI_TEST_MINI_IMAGE")
            .unwrap_or_else(|_| "saheeli-servo-mini-swe-agent-test:latest".into()),
        "mini-swe-agent",
    );
    let aider_image = push_local(
        &swarm,
        &pfx,
        &std::env::var("SAHEELI_TEST_AIDER_IMAGE")
            .unwrap_or_else(|_| "saheeli-servo-aider-test:latest".into()),
        "aider",
    );
    let none = base.replace("network: saheeli-jobs", "network: none");
    assert_ne!(none, base);
    s.write(
        "config.yaml",
        &format!("{none}agents:\n  mini-swe-agent: {mini_image}\n  aider: {aider_image}\n"),
    );
    let s = s
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write(
        "mini.md",
        "---\nmodel: gpt-test\nagent: mini-swe-agent\ntimeout: 5m\n---\nWrite hello.txt, then check it.\n",
    );
    s.write(
        "aider.md",
        "---\nmodel: gpt-test\nagent: aider\nmax_steps: 5\ntimeout: 5m\n---\nCreate hello.txt with a greeting.\n",
    );

    // serve pulls both images onto both workers before a task asks.
    let mut server = serve(&s, false);
    let log = || std::fs::read_to_string(s.path().join("serve.log")).unwrap_or_default();
    assert!(
        wait_for(Duration::from_secs(300), || log()
            .contains("agent images on every node")),
        "{}",
        log()
    );
    for n in [2, 3] {
        for image in [&mini_image, &aider_image] {
            let there = swarm.docker(n, &["image", "inspect", image]);
            assert!(there.status.success(), "`{image}` not on node {n}");
        }
    }
    let none_pulled = swarm.lines(
        1,
        &["images", "-q", "--filter", "reference=*/saheeli-servo-*"],
    );
    assert!(
        none_pulled.is_empty(),
        "the drained manager pulled {none_pulled:?}"
    );
    eprintln!("agent images on both workers at {}", elapsed(t0));

    let m = s.submit("mini.md");
    let a = s.submit("aider.md");
    let nodes = wait_running(&s, &[m.clone(), a.clone()]);
    assert!(nodes.iter().all(|n| *n != 1), "the manager is drained");
    let done = |id: &str| {
        let id = id.to_string();
        let s = &s;
        move || {
            ["complete", "incomplete", "failed", "cancelled"]
                .contains(&s.task(&id)["state"].as_str().unwrap_or(""))
        }
    };
    assert!(wait_for(Duration::from_secs(180), done(&m)), "{}", log());
    assert!(wait_for(Duration::from_secs(180), done(&a)), "{}", log());
    for (id, name, hello) in [
        (&m, "mini-swe-agent", "hello from mini\n"),
        (&a, "aider", "hello from aider\n"),
    ] {
        let t = s.task(id);
        assert_eq!(t["state"], "complete", "{name}: {t:#}\n{}", log());
        assert_eq!(endings(&t), 1, "{t:#}");
        let results = s.path().join("results").join(id);
        assert_eq!(
            std::fs::read_to_string(results.join("hello.txt")).unwrap(),
            hello,
            "{name}"
        );
        let out = Command::new("grep")
            .args(["-rlsF", KEY])
            .arg(&results)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "the key is in {name}'s results");
    }
    let mini_results = s.path().join("results").join(&m);
    let seen = std::fs::read_to_string(mini_results.join("seen-env.txt")).unwrap();
    assert!(
        seen.contains("OPENAI_API_KEY=sk-saheeli-placeholder"),
        "{seen}"
    );
    assert!(
        mini_results
            .join(".saheeli/agent/trajectory.json")
            .is_file(),
        "mini-swe-agent's home came back"
    );
    // The ledger is what the fake billed; each call carried the real key.
    let tokens = |id: &str| s.task(id)["tokens"].as_u64().unwrap_or(0);
    assert!(llm.billed() > 0);
    assert_eq!(tokens(&m) + tokens(&a), llm.billed());
    for call in llm.seen() {
        assert_eq!(
            call.authorization.as_deref(),
            Some(&*format!("Bearer {KEY}"))
        );
    }

    // A worker's engine killed under an agent task: ended exactly once.
    hold.store(true, Ordering::SeqCst);
    let lost = s.submit("mini.md");
    let on = wait_running(&s, std::slice::from_ref(&lost))[0];
    assert_ne!(on, 1, "the manager is drained");
    assert!(
        wait_for(Duration::from_secs(120), || held.load(Ordering::SeqCst)),
        "the agent never made its second call\n{}",
        log()
    );
    let killed = Instant::now();
    swarm.kill_dockerd(on);
    assert!(wait_for(Duration::from_secs(240), done(&lost)), "{}", log());
    let t = s.task(&lost);
    eprintln!(
        "the lost worker's agent task ended {} ({}) {} after its engine was killed",
        t["state"],
        t["reason"],
        elapsed(killed)
    );
    assert_eq!(endings(&t), 1, "ended once: {t:#}");
    assert!(
        ["complete", "incomplete"].contains(&t["state"].as_str().unwrap_or("")),
        "{t:#}\n{}",
        log()
    );
    swarm.restart(on);
    // Once the node is back, its leftovers go (the sweeper, or `gc`).
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        wait_for(Duration::from_secs(60), || swarm
            .lines(1, &["node", "ls", "--format", "{{.Status}}"])
            .iter()
            .filter(|l| *l == "Ready")
            .count()
            == 3),
        "node {on} did not come back"
    );
    s.expect(&["gc"], 0);
    for task in [&m, &a, &lost] {
        let label = format!("label=saheeli.task={task}");
        assert_eq!(
            swarm.lines(1, &["service", "ls", "-q", "--filter", &label]),
            Vec::<String>::new()
        );
        for n in 1..=3 {
            assert_eq!(
                swarm.lines(n, &["ps", "-aq", "--filter", &label]),
                Vec::<String>::new(),
                "containers left on node {n}"
            );
        }
    }
    eprintln!(
        "swarm agents (mini-swe-agent, aider, a lost worker) done in {}",
        elapsed(t0)
    );
}
