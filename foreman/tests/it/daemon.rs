//! The Docker daemon restarting under a running foreman. The test starts a
//! private dockerd of its own (its own socket, data and exec roots) so that
//! restarting it disturbs nothing else on the machine.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::lifecycle::wait_for;
use crate::util::{Saheeli, image, replay_prompt, require_docker, script};

pub(crate) struct PrivateDockerd {
    root: PathBuf,
    child: Option<Child>,
}

impl PrivateDockerd {
    pub(crate) fn socket(&self) -> String {
        format!("unix://{}/docker.sock", self.root.display())
    }

    pub(crate) fn start() -> PrivateDockerd {
        let root = PathBuf::from(format!("/tmp/saheeli-it-dockerd-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        // The machine's settings (storage driver, logging) minus the paths.
        let mut config: serde_json::Map<String, serde_json::Value> =
            std::fs::read("/etc/docker/daemon.json")
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
        for k in ["data-root", "hosts", "pidfile", "exec-root", "graph"] {
            config.remove(k);
        }
        std::fs::write(
            root.join("daemon.json"),
            serde_json::to_vec(&config).unwrap(),
        )
        .unwrap();
        let mut d = PrivateDockerd { root, child: None };
        d.boot();
        d
    }

    pub(crate) fn boot(&mut self) {
        let r = &self.root;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(r.join("log"))
            .unwrap();
        let child = Command::new("dockerd")
            .arg("--config-file")
            .arg(r.join("daemon.json"))
            .arg("--host")
            .arg(self.socket())
            .arg("--data-root")
            .arg(r.join("data"))
            .arg("--exec-root")
            .arg(r.join("exec"))
            .arg("--pidfile")
            .arg(r.join("docker.pid"))
            .args(["--bridge=none", "--iptables=false", "--ip-masq=false"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting a private dockerd (the tests run as root)");
        self.child = Some(child);
        let sock = self.socket();
        assert!(
            wait_for(Duration::from_secs(60), || Command::new("docker")
                .env("DOCKER_HOST", &sock)
                .arg("info")
                .output()
                .is_ok_and(|o| o.status.success())),
            "private dockerd did not answer; see {}/log",
            self.root.display()
        );
    }

    /// SIGTERM (dockerd stops its containers), wait for exit.
    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc_kill(c.id() as i32, 15) };
            let _ = c.wait();
        }
    }

    /// Copies the test image from the machine's daemon into this one.
    pub(crate) fn load_image(&self) {
        let load = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "docker save {} | DOCKER_HOST={} docker load",
                image(),
                self.socket()
            ))
            .output()
            .unwrap();
        assert!(
            load.status.success(),
            "{}",
            String::from_utf8_lossy(&load.stderr)
        );
    }

    pub(crate) fn docker(&self, args: &[&str]) -> String {
        let o = Command::new("docker")
            .env("DOCKER_HOST", self.socket())
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    pub(crate) fn libc_kill(pid: i32, sig: i32) -> i32;
}

impl Drop for PrivateDockerd {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[test]
fn dockerd_restart_mid_run_ends_every_task() {
    require_docker();
    let mut dockerd = PrivateDockerd::start();
    dockerd.load_image();

    let s = Saheeli::with_config("lease: 2s\n").env("DOCKER_HOST", &dockerd.socket());
    s.write(
        "long.json",
        &script(&[
            (
                "create_file",
                json!({"path": "work.txt", "content": "started"}),
            ),
            (
                "execute_shell",
                json!({"command": "sleep 120", "timeout_s": 600}),
            ),
            ("task_complete", json!({"message": "never"})),
        ]),
    );
    s.write(
        "short.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write("long.md", &replay_prompt("long.json", ""));
    s.write("short.md", &replay_prompt("short.json", ""));
    let long = s.submit("long.md");
    let short = s.submit("short.md");
    let mut serve = s
        .cmd(&["serve", "--drain", "-j", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(Duration::from_secs(60), || s.task(&long)["state"]
        == "running"));
    // The servo wrote its first file before the daemon goes away.
    assert!(wait_for(Duration::from_secs(60), || {
        String::from_utf8_lossy(&s.run(&["task", "logs", &long]).stdout).contains("create_file")
    }));

    dockerd.stop();
    std::thread::sleep(Duration::from_secs(2));
    dockerd.boot();

    let done = wait_for(Duration::from_secs(120), || {
        serve.try_wait().unwrap().is_some()
    });
    if !done {
        let _ = serve.kill();
    }
    let out = serve.wait_with_output().unwrap();
    assert!(
        done,
        "serve did not finish: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (l, sh) = (s.task(&long), s.task(&short));
    assert_eq!(l["state"], "incomplete", "{l:#}");
    assert!(
        std::path::Path::new(l["results"].as_str().unwrap())
            .join("work.txt")
            .is_file(),
        "the interrupted task's workspace was collected"
    );
    assert_eq!(sh["state"], "complete", "{sh:#}");
    let left = dockerd.docker(&["ps", "-aq", "--filter", "label=saheeli.task"])
        + &dockerd.docker(&["volume", "ls", "-q", "--filter", "label=saheeli.task"]);
    assert!(left.trim().is_empty(), "leftovers: {left}");
}

/// `gc --images` (issue 49): the cached task images no container uses go,
/// one a container was made of stays, and nothing else is touched. On a
/// private dockerd, so that no other test's cached image goes meanwhile.
#[test]
fn gc_images_removes_the_cached_task_images_no_container_uses() {
    require_docker();
    let mut d = PrivateDockerd::start();
    let import = |tag: &str| {
        let st = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "tar cf - --files-from /dev/null | DOCKER_HOST={} docker import - {tag}",
                d.socket()
            ))
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
    };
    for tag in [
        "saheeli-env:gc-a",
        "saheeli-task:gc-b",
        "saheeli-task:gc-used",
        "other:keep",
    ] {
        import(tag);
    }
    // Imported alike, the three share one image: give the used one its own.
    d.docker(&["rmi", "saheeli-task:gc-used"]);
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo x > /tmp/gc-used-{pid} && tar cf - -C /tmp gc-used-{pid} | DOCKER_HOST={sock} docker import - saheeli-task:gc-used",
            pid = std::process::id(),
            sock = d.socket()
        ))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let made = d.docker(&["create", "saheeli-task:gc-used", "/nothing"]);
    assert!(!made.trim().is_empty());

    let s = Saheeli::new().env("DOCKER_HOST", &d.socket());
    let tags = || d.docker(&["images", "--format", "{{.Repository}}:{{.Tag}}"]);
    let dry = s.expect(&["gc", "--images", "--dry-run"], 0);
    assert!(
        dry.contains("saheeli-env:gc-a") && dry.contains("saheeli-task:gc-b"),
        "{dry}"
    );
    assert!(
        !dry.contains("gc-used") && !dry.contains("other:keep"),
        "{dry}"
    );
    assert!(tags().contains("saheeli-env:gc-a"), "a dry run removed it");
    s.expect(&["gc", "--images"], 0);
    let left = tags();
    assert!(!left.contains("saheeli-env:gc-a"), "{left}");
    assert!(!left.contains("saheeli-task:gc-b"), "{left}");
    assert!(left.contains("saheeli-task:gc-used"), "{left}");
    assert!(left.contains("other:keep"), "{left}");
    // Without --images (here, in a project), images are never touched.
    d.docker(&["rm", made.trim()]);
    s.write(
        "t.json",
        &script(&[("task_complete", json!({"message": "x"}))]),
    );
    s.write("t.md", &replay_prompt("t.json", ""));
    let id = s.submit("t.md");
    s.expect(&["task", "cancel", &id], 0);
    s.expect(&["gc"], 0);
    assert!(tags().contains("saheeli-task:gc-used"));
    d.stop();
    let _ = std::fs::remove_file(format!("/tmp/gc-used-{}", std::process::id()));
}
