//! Issue 9 §7 "front-matter can lift the sandbox": operators' ceilings in
//! `limits:`, which a prompt may only tighten, and a workspace that cannot
//! grow past `resources.disk`.

use serde_json::{Value, json};

use crate::util::{Saheeli, leftovers, replay_prompt, require_docker, script};

fn refused(s: &Saheeli, prompt: &str) -> String {
    let out = s.run(&["task", "submit", "--prompt", prompt]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!s.path().join("saheeli.db").exists(), "nothing is queued");
    err
}

#[test]
fn network_host_is_refused_by_default_and_allowed_by_the_limits() {
    let s = Saheeli::new();
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "ok"}))]),
    );
    s.write("p.md", &replay_prompt("s.json", "network: host\n"));
    let err = refused(&s, "p.md");
    assert!(
        err.contains("`network` host is not allowed") && err.contains("limits.networks"),
        "{err}"
    );

    let s = Saheeli::with_config("limits:\n  networks: [none, host]\n");
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "ok"}))]),
    );
    s.write("p.md", &replay_prompt("s.json", "network: host\n"));
    let id = s.submit("p.md");
    assert_eq!(s.task(&id)["state"], "queued");
}

#[test]
fn memory_zero_is_refused_not_unlimited() {
    let s = Saheeli::new();
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "ok"}))]),
    );
    s.write(
        "p.md",
        &replay_prompt("s.json", "resources: { memory: 0 }\n"),
    );
    let err = refused(&s, "p.md");
    assert!(
        err.contains("p.md:") && err.contains("greater than zero"),
        "{err}"
    );
}

#[test]
fn pids_and_memory_above_the_ceiling_are_refused() {
    let s = Saheeli::new();
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "ok"}))]),
    );
    s.write(
        "p.md",
        &replay_prompt("s.json", "resources: { pids: 5000000 }\n"),
    );
    let err = refused(&s, "p.md");
    assert!(
        err.contains("`resources.pids` 5000000 is above the ceiling 4096")
            && err.contains("`limits.pids`"),
        "{err}"
    );
    s.write(
        "p.md",
        &replay_prompt("s.json", "resources: { memory: 64g }\n"),
    );
    let err = refused(&s, "p.md");
    assert!(
        err.contains("`resources.memory` 64g is above the ceiling 8g"),
        "{err}"
    );
}

/// Bytes the file at `path` takes on disk (not its apparent size).
fn allocated(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).unwrap().blocks() * 512
}

#[test]
fn a_task_writing_past_its_disk_limit_gets_enospc_and_is_collected() {
    require_docker();
    let s = Saheeli::new();
    // 200 MB into a 64 MB workspace; report what was written, then free
    // space again so the servo can write its own files.
    let shell = "dd if=/dev/zero of=big bs=1M count=200 2>&1; echo dd-exit=$?; \
                 echo big-bytes=$(stat -c %s big); truncate -s 1M big";
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", json!({"command": shell})),
            (
                "execute_shell",
                json!({"command": "echo still-writable > after.txt"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt("s.json", "resources: { disk: 64m }\n"),
    );
    let id = s.submit("p.md");
    let mut serve = s.cmd(&["serve", "--drain"]).spawn().unwrap();
    // While it runs, the image behind /workspace never takes more than its size.
    let image = s
        .path()
        .join(".saheeli/workspaces")
        .join(&id)
        .join("disk.img");
    let mut peak = 0;
    while serve.try_wait().unwrap().is_none() {
        if image.exists() {
            peak = peak.max(allocated(&image));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        peak > 0,
        "the workspace image was never seen at `{}`",
        image.display()
    );
    assert!(peak <= 64 << 20, "image took {peak} bytes of host disk");

    let t: Value = s.task(&id);
    assert_eq!(t["state"], "complete", "{t:#}");
    let results = std::path::PathBuf::from(t["results"].as_str().unwrap());
    let session =
        std::fs::read_to_string(results.join(format!("servo-{id}-session.json"))).unwrap();
    assert!(
        session.contains("No space left on device") && session.contains("dd-exit=1"),
        "the agent was told ENOSPC:\n{session}"
    );
    let big: u64 = session
        // The last one: the first is the command itself.
        .rsplit("big-bytes=")
        .next()
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .expect("the shell reported the size written");
    assert!(
        big > 32 << 20 && big <= 64 << 20,
        "{big} bytes written: writes must stop at the 64 MB limit"
    );
    assert_eq!(
        std::fs::read_to_string(results.join("after.txt")).unwrap(),
        "still-writable\n"
    );
    assert!(results.join("complete.json").is_file());
    // Everything is cleaned up: container, volume, mount and image.
    assert_eq!(leftovers(&id), Vec::<String>::new());
    assert!(
        !image.parent().unwrap().exists(),
        "the workspace image is deleted after collection"
    );
}
