//! Third-party agents on a real three-node swarm (issue 53): Codex and
//! Claude Code, the real CLIs from their pinned wheels, each built on the
//! manager and pushed to the swarm's registry by `build-servo --agent NAME
//! --push`, run on the workers (the manager is drained) against the fake
//! LLM, whose key only the foreman holds.
//!
//! One swarm (`Fixture::up(243)`). Two Codex tasks side by side on the
//! overlay: one completes (its file, its answer and the agent's home come
//! back); the other's first streamed call reports more than its budget,
//! so the gateway ends the stream and the task (`incomplete` / `budget`).
//! Then a Claude Code task completes with `swarm.network: none`, its calls
//! going through the relay on its node. While the first one's last call is held, on
//! its worker: the servo and the agent run as their own uids; the key is
//! in neither `docker inspect` nor any process's environment nor any file
//! of the container, nor anywhere in any node's data root. Afterwards the
//! ledger is what the fake billed, each call reached the provider with the
//! real key, and nothing of any task is left on any node.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::agents_cli::{CLAUDE, CODEX, Cli, turns};
use crate::fake_llm::FakeLlm;
use crate::lifecycle::wait_for;
use crate::swarm::{Fixture, elapsed, serve, wait_exit, wait_running};
use crate::util::require_docker;

const KEY: &str = "sk-real-key-i53-swarm-Qw7Zx2Lp9K";

/// The budget task's prompt says this; the fake answers it with a turn
/// whose usage passes the budget.
const SPEND: &str = "Spend the whole budget.";

/// Every file below `dir`, links not followed.
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(files(&e.path()));
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    out
}

#[test]
fn codex_and_claude_code_run_on_workers_with_the_key_kept_on_the_manager_side() {
    require_docker();
    let t0 = Instant::now();
    let Fixture {
        swarm,
        s,
        pfx,
        base,
        ..
    } = Fixture::up(243);
    // Jobs on the workers only.
    let me = swarm.lines(1, &["info", "--format", "{{.Swarm.NodeID}}"]);
    let drained = swarm.docker(1, &["node", "update", "--availability", "drain", &me[0]]);
    assert!(drained.status.success(), "{drained:?}");

    let llm = FakeLlm::start_matching(vec![], {
        // Its last call held long enough to look inside its container.
        let codex = turns(CODEX, Some(Duration::from_secs(15)));
        let claude = turns(CLAUDE, None);
        move |body: &Value| {
            if body.to_string().contains(SPEND) {
                return Some(CODEX.shell("echo never > never.txt", (1500, 60_000)));
            }
            // Responses (Codex) have `input`; Anthropic Messages do not.
            match body.get("input") {
                Some(_) => codex(body),
                None => claude(body),
            }
        }
    });
    let s = s
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", &llm.base_url())
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", &llm.anthropic_url());

    // Not pushed yet: refused at submit, saying how to push it.
    s.write("p.md", &CODEX.prompt(""));
    let e = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
    assert!(
        e.contains("not in the swarm's registry")
            && e.contains("saheeli build-servo --agent codex --push"),
        "{e}"
    );

    // build-servo --agent NAME --push: on the manager, from the pushed
    // servo image, into the registry, named by digest.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let push = |cli: Cli| -> String {
        let t = Instant::now();
        let pushed = s.expect(
            &[
                "build-servo",
                "--agent",
                cli.name,
                "--push",
                "--context",
                root.to_str().unwrap(),
            ],
            0,
        );
        let pushed = pushed.trim().to_string();
        assert!(
            pushed.starts_with(&format!("{pfx}.1:5000/saheeli-servo-{}@sha256:", cli.name)),
            "{pushed}"
        );
        eprintln!("build-servo --agent {} --push in {}", cli.name, elapsed(t));
        pushed
    };
    let pushed = push(CODEX);
    let claude_image = push(CLAUDE);
    let agents = format!("agents:\n  codex: {pushed}\n  claude-code: {claude_image}\n");
    s.write("config.yaml", &format!("{base}{agents}"));

    s.write(
        "spend.md",
        &CODEX
            .prompt("max_tokens: 50000\n")
            .replace("Write hello.txt, then check it.", SPEND),
    );
    let id = s.submit("p.md");
    let spend = s.submit("spend.md");
    let mut server = serve(&s, true);
    let nodes = wait_running(&s, std::slice::from_ref(&id));
    let node = nodes[0];
    assert_ne!(node, 1, "the manager is drained");

    // While its last call is held: the job's container on its worker.
    assert!(
        wait_for(Duration::from_secs(180), || {
            llm.seen().iter().any(|c| CODEX.results(&c.body) > 0)
        }),
        "codex made no second call; seen {:?}\n{}",
        llm.seen().iter().map(|c| &c.path).collect::<Vec<_>>(),
        std::fs::read_to_string(s.path().join("serve.log")).unwrap_or_default()
    );
    let held = Instant::now();
    let label = format!("label=saheeli.task={id}");
    let cid = swarm
        .lines(node, &["ps", "-q", "--no-trunc", "--filter", &label])
        .first()
        .cloned()
        .expect("the task's container on its worker");
    let inspect = swarm.docker(node, &["inspect", &cid]);
    let inspect = String::from_utf8_lossy(&inspect.stdout).to_string();
    assert!(!inspect.contains(KEY), "the key is in docker inspect");
    let c: Value = serde_json::from_str(&inspect).unwrap();
    let image = c[0]["Config"]["Image"].as_str().unwrap_or_default();
    assert!(image.starts_with(&pushed), "runs `{image}`, not `{pushed}`");
    assert_eq!(c[0]["Config"]["User"], "0:0");
    // Separated as on one host: the servo as uid 999, the agent as 1000.
    let ps = swarm.docker(node, &["exec", &cid, "ps", "-eo", "uid=,args="]);
    let ps = String::from_utf8_lossy(&ps.stdout).to_string();
    let uids = |what: &str| -> Vec<String> {
        ps.lines()
            .filter(|l| l.contains(what))
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect()
    };
    let agent = uids("codex exec");
    assert!(
        !agent.is_empty() && agent.iter().all(|u| u == "1000"),
        "{ps}"
    );
    assert!(
        uids("/usr/local/bin/servo").contains(&"999".to_string()),
        "{ps}"
    );
    // Every process's environment the agent's uid can read (its own, its
    // CLI's), and those root can: the placeholder, never the key.
    let environs = |user: &str| {
        let out = swarm.docker(
            node,
            &[
                "exec",
                "--user",
                user,
                &cid,
                "sh",
                "-c",
                "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null",
            ],
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let as_agent = environs("1000:1000");
    assert!(as_agent.contains("sk-saheeli-placeholder"), "{as_agent}");
    assert!(
        !as_agent.contains(KEY),
        "the key is in the agent's environment"
    );
    assert!(
        !environs("0:0").contains(KEY),
        "the key is in a process's environment"
    );
    // No file of the container (its /tmp, the agent's home and the
    // workspace included) holds it, read as each of its users in turn
    // (root holds no CAP_DAC_OVERRIDE: the servo's and the agent's own
    // files are read as them).
    for user in ["0:0", "999:999", "1000:1000"] {
        let grep = swarm.docker(
            node,
            &[
                "exec",
                "--user",
                user,
                &cid,
                "grep",
                "-rlsF",
                "--exclude-dir=proc",
                "--exclude-dir=sys",
                "--exclude-dir=dev",
                KEY,
                "/",
            ],
        );
        let found = String::from_utf8_lossy(&grep.stdout);
        assert!(
            matches!(grep.status.code(), Some(1 | 2)) && found.trim().is_empty(),
            "the key is in the container's files (read as {user}): {found}"
        );
    }
    // All of it seen while the agent ran (its call still held).
    let alive = swarm.docker(node, &["exec", &cid, "true"]);
    assert!(
        alive.status.success(),
        "the container ended before it was looked at"
    );
    eprintln!("looked inside the worker's container for {}", elapsed(held));
    // Nor anywhere in any node's data root (images, volumes, logs).
    let on_no_node = || {
        for n in 1..=3 {
            let data = format!("{}/n{n}/data", swarm.base);
            // Exit 2 with nothing found: a file went away mid-walk (the
            // node's daemon works on): looked at again.
            let mut grep = Command::new("grep")
                .args(["-rlsF", KEY, &data])
                .output()
                .unwrap();
            for _ in 0..3 {
                if grep.status.code() != Some(2) || !grep.stdout.is_empty() {
                    break;
                }
                grep = Command::new("grep")
                    .args(["-rlsF", KEY, &data])
                    .output()
                    .unwrap();
            }
            assert_eq!(
                grep.status.code(),
                Some(1),
                "the key is on node {n}: {}",
                String::from_utf8_lossy(&grep.stdout)
            );
        }
    };
    on_no_node();

    wait_exit(&mut server, &s);
    eprintln!("two codex tasks on the swarm in {}", elapsed(t0));

    // Claude Code with `swarm.network: none`: a job with no network, its
    // servo forwarding the agent's calls through its node's relay.
    let none = base.replace("network: saheeli-jobs", "network: none");
    assert_ne!(none, base);
    s.write("config.yaml", &format!("{none}{agents}"));
    s.write("claude.md", &CLAUDE.prompt(""));
    let claude = s.submit("claude.md");
    let t = Instant::now();
    s.drain();
    eprintln!("a claude-code task with no network in {}", elapsed(t));
    let t = s.task(&id);
    let c = s.task(&claude);
    for (cli, task) in [(CODEX, &t), (CLAUDE, &c)] {
        assert_eq!(task["state"], "complete", "{task:#}");
        assert_ne!(
            crate::swarm::node_of(task),
            Some(1),
            "the manager is drained"
        );
        let results = s.path().join("results").join(task["id"].as_str().unwrap());
        assert_eq!(
            std::fs::read_to_string(results.join("hello.txt")).unwrap(),
            format!("hello from {}\n", cli.name)
        );
        let completion: Value =
            serde_json::from_slice(&std::fs::read(results.join("complete.json")).unwrap()).unwrap();
        assert_eq!(completion["message"], "wrote hello.txt", "{completion}");
        assert!(
            !files(&results.join(".saheeli/agent")).is_empty(),
            "nothing collected of {}'s home",
            cli.name
        );
        let seen = std::fs::read_to_string(results.join("seen-env.txt")).unwrap();
        assert!(seen.contains("sk-saheeli-placeholder"), "{seen}");
        for f in files(&results) {
            let bytes = std::fs::read(&f).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(KEY),
                "the real key is in `{}`",
                f.display()
            );
        }
    }
    let results = s.path().join("results").join(&id);
    // The door refuses from inside as on one host.
    let probe = std::fs::read_to_string(results.join("probe.json")).unwrap();
    let p: Value = serde_json::from_str(probe.trim())
        .unwrap_or_else(|e| panic!("{e}: the probe printed {probe}"));
    assert_eq!((&p["unknown"][0], &p["key"][0]), (&404.into(), &404.into()));
    assert_eq!(p["other"][0], 400, "{p}");

    // The budget: the stream ended, nothing after it reached the provider.
    let b = s.task(&spend);
    assert_eq!(
        (b["state"].as_str(), b["reason"].as_str()),
        (Some("incomplete"), Some("budget")),
        "{b:#}"
    );
    let calls = llm.seen();
    assert!(
        !calls
            .iter()
            .any(|c| c.body.to_string().contains(SPEND) && CODEX.results(&c.body) > 0),
        "a call after the budget was spent reached the provider"
    );
    // The ledger is what the fake billed, and each call carried the key.
    let tokens = |t: &Value| t["tokens"].as_u64().unwrap_or(0);
    assert!(llm.billed() > 0);
    assert_eq!(
        tokens(&t) + tokens(&b) + tokens(&c),
        llm.billed(),
        "{t:#}\n{b:#}\n{c:#}"
    );
    for call in &calls {
        let sent = call.api_key.clone().or(call.authorization.clone());
        assert!(
            sent.as_deref().is_some_and(|k| k.ends_with(KEY)),
            "the provider got {sent:?}"
        );
    }

    on_no_node();
    // Nothing of any task left on any node.
    for task in [&id, &spend, &claude] {
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
    eprintln!("swarm agents test done in {}", elapsed(t0));
}
