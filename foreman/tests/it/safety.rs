//! Hardening: the container's configuration, path confinement, secrets.

use std::process::{Command, Stdio};
use std::time::Duration;

use saheeli_protocol::AuditEvent;
use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, image, leftovers, replay_prompt, require_docker, script};

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
    let inspect = running_container(&id);
    let c = &inspect;
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
    // The servo is the image's own, bound read-only from the foreman's
    // copy of it (the host's page cache, not the container's FUSE root),
    // and the container is made of the very image that copy came from.
    let (copy, image_id) = servo_mount(c, s.path());
    assert_eq!(image_id, image_id_of(&image()));
    assert_eq!(c["Config"]["Labels"]["saheeli.image"], image().as_str());
    assert_eq!(std::fs::read(&copy).unwrap(), image_servo(&image()));
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

/// The servo's bind in container `c` (`docker inspect`): its source, a
/// copy under the project's `.saheeli/servos/<hex>/`, read-only, and the
/// image id the container was made of, which names that directory.
fn servo_mount(c: &Value, project: &std::path::Path) -> (std::path::PathBuf, String) {
    let m = c["Mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Destination"] == "/usr/local/bin/servo")
        .unwrap_or_else(|| panic!("no servo bind in {}", c["Mounts"]));
    assert_eq!(m["Type"], "bind");
    assert_eq!(m["RW"], false);
    let image_id = c["Config"]["Image"].as_str().unwrap().to_string();
    let hex = image_id.strip_prefix("sha256:").unwrap();
    let source = std::path::PathBuf::from(m["Source"].as_str().unwrap());
    let expected = project.join(".saheeli/servos").join(hex).join("servo");
    assert_eq!(
        std::fs::canonicalize(&source).unwrap(),
        std::fs::canonicalize(&expected).unwrap()
    );
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(&source).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!((meta.uid(), meta.permissions().mode() & 0o7777), (0, 0o555));
    (source, image_id)
}

fn image_id_of(image: &str) -> String {
    let o = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", image])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The servo binary inside `image` itself, read through a container made
/// of it (never started, removed at once).
fn image_servo(image: &str) -> Vec<u8> {
    let o = Command::new("docker")
        .args(["create", "--label", "saheeli.it=servo-copy", image])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let tar = Command::new("docker")
        .args(["cp", &format!("{id}:/usr/local/bin/servo"), "-"])
        .output()
        .unwrap();
    Command::new("docker")
        .args(["rm", "-f", &id])
        .output()
        .unwrap();
    assert!(tar.status.success());
    let mut archive = tar::Archive::new(tar.stdout.as_slice());
    let mut entry = archive.entries().unwrap().next().unwrap().unwrap();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
    assert!(bytes.len() > 1 << 20, "the image's servo is too small");
    bytes
}

/// The running servo container of task `id` (a minute at most).
fn running_container(id: &str) -> Value {
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
    inspect[0].clone()
}

/// `build-servo` moving the tag while serve runs: the next task runs the
/// new image with the new image's servo, never the old binary on the new
/// image; and the copy of an image Docker no longer has is removed when
/// serve next starts.
#[test]
fn a_moved_image_tag_brings_its_own_servo_copy() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::Slow(
            Duration::from_secs(3),
            Box::new(Reply::tool("task_complete", json!({"message": "one"}))),
        ),
        Reply::Slow(
            Duration::from_secs(3),
            Box::new(Reply::tool("task_complete", json!({"message": "two"}))),
        ),
    ]);
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &llm.base_url());
    // The project's own tag, first on the test image.
    let tag = format!("saheeli-it-retag-{}:latest", std::process::id());
    let docker = |args: &[&str]| {
        let o = Command::new("docker").args(args).output().unwrap();
        assert!(
            o.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    docker(&["tag", &image(), &tag]);
    // Whatever happens, the tag goes (an image it alone names with it).
    struct Untag(String);
    impl Drop for Untag {
        fn drop(&mut self) {
            let _ = Command::new("docker").args(["rmi", &self.0]).output();
        }
    }
    let _untag = Untag(tag.clone());
    let config = std::fs::read_to_string(s.path().join("config.yaml")).unwrap();
    let config = config.replace(&format!("image: {}", image()), &format!("image: {tag}"));
    std::fs::write(s.path().join("config.yaml"), config).unwrap();
    s.write("p.md", "---\nmodel: gpt-test\n---\nFinish.\n");
    let first = s.submit("p.md");
    let mut serve = s
        .cmd(&["serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let c1 = running_container(&first);
    let (copy1, id1) = servo_mount(&c1, s.path());
    assert_eq!(id1, image_id_of(&image()));
    // A new build under the same tag: the same files, another image id.
    let made = docker(&["create", "--label", "saheeli.it=retag", &tag]);
    let moved = docker(&[
        "commit",
        "--change",
        "LABEL saheeli.it.build=2",
        &made,
        &tag,
    ]);
    docker(&["rm", "-f", &made]);
    assert_ne!(moved, id1);
    let second = s.submit("p.md");
    let c2 = running_container(&second);
    let (copy2, id2) = servo_mount(&c2, s.path());
    assert_eq!(id2, moved);
    assert_eq!(c2["Config"]["Labels"]["saheeli.image"], tag.as_str());
    assert_ne!(copy1, copy2);
    assert_eq!(
        std::fs::read(&copy1).unwrap(),
        std::fs::read(&copy2).unwrap()
    );
    assert!(wait_for(Duration::from_secs(60), || {
        ["complete"].contains(&s.task(&second)["state"].as_str().unwrap_or(""))
    }));
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(serve.id() as i32, libc::SIGINT) };
    assert!(serve.wait().unwrap().success());
    assert_eq!(s.task(&first)["state"], "complete");
    // The tag goes back and the moved build is removed: its copy goes at
    // the next serve's start, the image's that is still there stays.
    docker(&["tag", &image(), &tag]);
    docker(&["rmi", &moved]);
    let out = s.cmd(&["serve", "--drain"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !copy2.exists(),
        "the removed image's servo copy is still there"
    );
    assert!(copy1.exists());
    assert!(leftovers(&first).is_empty() && leftovers(&second).is_empty());
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
