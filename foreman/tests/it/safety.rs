//! Hardening: the container's configuration, path confinement, secrets.

use std::process::{Command, Stdio};
use std::time::Duration;

use saheeli_protocol::AuditEvent;
use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, leftovers, replay_prompt, require_docker, script};

#[test]
fn servo_container_is_hardened_and_holds_no_key() {
    require_docker();
    let secret = "sk-test-never-in-a-container-31337";
    let llm = FakeLlm::start(vec![Reply::Slow(
        Duration::from_secs(4),
        Box::new(Reply::tool("task_complete", json!({"message": "ok"}))),
    )]);
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", secret)
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write(
        "p.md",
        "---\nmodel: gpt-test\nresources: { memory: 512m, pids: 128, cpus: 0.5 }\n---\nFinish.\n",
    );
    let id = s.submit("p.md");
    let mut serve = s
        .cmd(&["serve", "--drain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut container = String::new();
    assert!(wait_for(Duration::from_secs(60), || {
        let o = Command::new("docker")
            .args([
                "ps",
                "-q",
                "--no-trunc",
                "--filter",
                &format!("label=saheeli.task={id}"),
            ])
            .output()
            .unwrap();
        container = String::from_utf8_lossy(&o.stdout).trim().to_string();
        !container.is_empty()
    }));
    let o = Command::new("docker")
        .args(["inspect", &container])
        .output()
        .unwrap();
    let inspect: Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &inspect[0];
    let hc = &c["HostConfig"];
    assert_eq!(hc["CapDrop"], json!(["ALL"]));
    assert_eq!(hc["ReadonlyRootfs"], true);
    assert_eq!(hc["Privileged"], false);
    assert_eq!(hc["NetworkMode"], "none");
    assert_eq!(hc["Init"], true);
    assert_eq!(hc["PidsLimit"], 128);
    assert_eq!(hc["Memory"], 512 << 20);
    assert_eq!(hc["NanoCpus"], 500_000_000);
    assert!(hc["SecurityOpt"].to_string().contains("no-new-privileges"));
    // Root with two capabilities, only until the servo separates itself
    // from the agent (`privsep.rs` checks what /proc shows then).
    assert_eq!(c["Config"]["User"], "0:0");
    assert_eq!(
        hc["CapAdd"],
        json!(["CAP_SETUID", "CAP_SETGID", "CAP_KILL"])
    );
    assert!(
        c["Config"]["Env"]
            .as_array()
            .unwrap()
            .contains(&json!("SAHEELI_PRIVSEP=1"))
    );
    // The container's log cannot fill the host's disk (issue 23, case 17).
    assert_eq!(hc["LogConfig"]["Type"], "json-file");
    assert_eq!(hc["LogConfig"]["Config"]["max-size"], "8m");
    assert_eq!(
        hc["Ulimits"],
        json!([{"Name": "nofile", "Soft": 4096, "Hard": 4096}])
    );
    assert_eq!(c["Config"]["Labels"]["saheeli.task"], id.as_str());
    let whole = inspect.to_string();
    assert!(
        !whole.contains(secret),
        "the key leaked into the container config"
    );
    assert!(serve.wait().unwrap().success());
    let t = s.task(&id);
    assert_eq!(t["state"], "complete");
    // The key went upstream from the foreman, and nowhere into the results.
    assert_eq!(
        llm.seen()[0].authorization.as_deref(),
        Some(format!("Bearer {secret}").as_str())
    );
    let grep = Command::new("grep")
        .args(["-r", "-l", secret, t["results"].as_str().unwrap()])
        .output()
        .unwrap();
    assert!(grep.stdout.is_empty(), "key found in results");
    let db = std::fs::read(s.path().join("saheeli.db")).unwrap();
    assert!(
        !String::from_utf8_lossy(&db).contains(secret),
        "key found in the database"
    );
}

#[test]
fn paths_outside_the_workspace_are_refused() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "escape.json",
        &script(&[
            (
                "create_file",
                json!({"path": "../escape.txt", "content": "x"}),
            ),
            (
                "create_file",
                json!({"path": "/etc/escape.txt", "content": "x"}),
            ),
            ("read_file", json!({"path": "/etc/passwd"})),
            (
                "execute_shell",
                json!({"command": "ln -s /etc etc-link && ln -s / root-link"}),
            ),
            ("read_file", json!({"path": "etc-link/passwd"})),
            (
                "create_file",
                json!({"path": "root-link/tmp/through.txt", "content": "x"}),
            ),
            (
                "edit_file",
                json!({"path": "etc-link/hostname", "old_str": "a", "new_str": "b"}),
            ),
            ("list_files", json!({"path": "../.."})),
            (
                "create_file",
                json!({"path": "inside/ok.txt", "content": "fine"}),
            ),
            ("task_complete", json!({"message": "tried"})),
        ]),
    );
    s.write("p.md", &replay_prompt("escape.json", ""));
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    let id = t["id"].as_str().unwrap();
    let results = std::path::Path::new(t["results"].as_str().unwrap());
    let audit = std::fs::read_to_string(results.join(format!("servo-{id}-audit.log"))).unwrap();
    let calls: Vec<(String, String, bool)> = audit
        .lines()
        .filter_map(|l| match serde_json::from_str(l).unwrap() {
            AuditEvent::ToolCall {
                tool,
                arguments,
                ok,
                ..
            } => Some((tool, arguments, ok)),
            _ => None,
        })
        .collect();
    let ok: Vec<bool> = calls.iter().map(|c| c.2).collect();
    assert_eq!(
        ok,
        vec![
            false, false, false, true, false, false, false, false, true, true
        ],
        "{calls:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(results.join("inside/ok.txt")).unwrap(),
        "fine"
    );
    // The symlinks came back as links; nothing was written through them.
    assert!(results.join("root-link").is_symlink());
    assert!(!std::path::Path::new("/tmp/through.txt").exists());
    assert!(leftovers(id).is_empty());
}

#[test]
fn results_over_the_size_cap_are_kept_partial_and_marked() {
    require_docker();
    let s = Saheeli::with_config("max_results_size: 1m\n");
    s.write(
        "big.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "head -c 3000000 /dev/zero > big.bin"}),
            ),
            ("task_complete", json!({"message": "made a big file"})),
        ]),
    );
    s.write("p.md", &replay_prompt("big.json", ""));
    let t = s.expect_json(&["run", "p.md", "--json"], 1);
    assert_eq!(t["state"], "incomplete");
    assert_eq!(t["reason"], "results_too_large");
    let results = std::path::Path::new(t["results"].as_str().unwrap());
    assert!(results.join("RESULTS_TRUNCATED.txt").is_file());
    assert!(!results.join("big.bin").exists());
    assert!(leftovers(t["id"].as_str().unwrap()).is_empty());
}
