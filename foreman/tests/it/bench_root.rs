//! `agent_user: root` (issue 49): a benchmark's task written for root runs
//! its agent as uid 0 in the task's own image, with no capability. Root
//! writes root's files (the image's /usr/local, the `/app` it was given)
//! and still cannot reach the gateway socket, become or trace the servo,
//! read its memory or environment, or change its files; the default stays
//! the agent's user.

use serde_json::{Value, json};

use crate::util::{Saheeli, leftovers, replay_prompt, require_docker, script};

/// Run as the agent: what it is and what it reaches, as JSON.
const PROBE: &str = r#"
import ctypes, errno, glob, json, os, socket
r = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": sorted(os.getgroups())}
def attempt(name, op):
    try:
        op()
        r[name] = "done"
    except Exception as e:
        r[name] = type(e).__name__
def connect():
    s = socket.socket(socket.AF_UNIX)
    s.connect("/run/saheeli/gateway.sock")
attempt("gateway", connect)
try:
    os.chmod("/run/saheeli/gateway.sock", 0o777)
    r["gateway_chmod"] = "done"
except OSError as e:
    r["gateway_chmod"] = errno.errorcode[e.errno]
status = {}
for st in glob.glob("/proc/[0-9]*/status"):
    try:
        txt = open(st).read()
    except Exception:
        continue
    status[int(st.split("/")[2])] = dict(l.split(":\t", 1) for l in txt.splitlines() if ":\t" in l)
servo = [p for p, d in status.items() if d.get("Name") == "servo" and d["Uid"].split()[0] == "999"]
pid = servo[0]
me = status[os.getpid()]
r["my_cap_eff"] = int(me["CapEff"], 16)
r["my_cap_prm"] = int(me["CapPrm"], 16)
r["my_cap_inh"] = int(me["CapInh"], 16)
r["my_cap_amb"] = int(me["CapAmb"], 16)
r["my_no_new_privs"] = me["NoNewPrivs"].strip()
for what in ["environ", "mem", "maps", "fd/1", "cwd"]:
    attempt("servo_" + what, lambda: open("/proc/%d/%s" % (pid, what), "rb").read(1))
for what in ["environ", "mem"]:
    attempt("init_" + what, lambda: open("/proc/1/" + what, "rb").read(1))
libc = ctypes.CDLL(None, use_errno=True)
r["ptrace_servo"] = (libc.ptrace(16, pid, 0, 0), ctypes.get_errno())
r["ptrace_init"] = (libc.ptrace(16, 1, 0, 0), ctypes.get_errno())
attempt("signal_servo", lambda: os.kill(pid, 0))
attempt("signal_init", lambda: os.kill(1, 0))
audit = glob.glob("/workspace/servo-*-audit.log")[0]
attempt("audit_append", lambda: open(audit, "a").write("forged\n"))
attempt("audit_chmod", lambda: os.chmod(audit, 0o666))
attempt("audit_chown", lambda: os.chown(audit, 0, 0))
attempt("audit_unlink", lambda: os.unlink(audit))
attempt("saheeli_dir_write", lambda: open("/workspace/.saheeli/planted", "w").write("x"))
attempt("become_servo", lambda: os.setuid(999))
attempt("chown_to_agent", lambda: os.chown("/app/given.txt", 1000, 1000))
# What a task written for root does: the system's dirs and the /app it was given.
attempt("write_usr_local", lambda: open("/usr/local/bin/made-by-root", "w").write("x"))
attempt("write_etc", lambda: open("/etc/made-by-root.conf", "w").write("x"))
attempt("append_given", lambda: open("/app/given.txt", "a").write("root was here\n"))
attempt("append_submitted", lambda: open("/app/notes.txt", "a").write("root was here\n"))
attempt("mkdir_app", lambda: os.makedirs("/app/build/out"))
r["given_owner"] = os.stat("/app/given.txt").st_uid
json.dump(r, open("/app/probe.json", "w"), indent=1)
"#;

fn run(s: &Saheeli, prompt: &str) -> Value {
    let out = s.run(&["run", prompt, "--json"]);
    let t: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    // On a failure, what the task left says why.
    let left = |name: String| {
        t["results"]
            .as_str()
            .map(|r| std::fs::read_to_string(std::path::Path::new(r).join(name)))
            .and_then(Result::ok)
            .unwrap_or_default()
    };
    let id = t["id"].as_str().unwrap_or_default();
    let report = left("report.md".into()) + &left(format!("servo-{id}-session.json"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{t}\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    t
}

#[test]
fn a_root_agent_writes_roots_files_but_never_reaches_the_servo() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "env/Dockerfile",
        "FROM saheeli-base:bookworm\nWORKDIR /app\nRUN echo given > /app/given.txt\n",
    );
    s.write("w/probe.py", PROBE);
    s.write("w/notes.txt", "submitted\n");
    s.write(
        "s.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "id -u > who.txt; python3 probe.py"}),
            ),
            // Root's `kill -9 -1` ends the agent's processes (and its
            // runner) but neither the servo nor the container's init.
            ("execute_shell", json!({"command": "kill -9 -1"})),
            ("execute_shell", json!({"command": "echo alive; id -u"})),
            ("task_complete", json!({"message": "probed"})),
        ]),
    );
    // Set-up and verify run as root too: root's files are theirs to use.
    let front = "environment: { dockerfile: env/ }\nworkdir: /app\nworkspace: w\n\
                 timeout: 2m\nverify_retries: 0\nsetup: id -u > setup-uid.txt\n\
                 verify: test \"$(id -u)\" = 0 && test -f /app/build/out/../../who.txt\n";
    s.write(
        "root.md",
        &replay_prompt("s.json", &format!("{front}agent_user: root\n")),
    );
    let t = run(&s, "root.md");
    assert_eq!(t["state"], "complete", "{t}");
    let results = std::path::PathBuf::from(t["results"].as_str().unwrap());
    let probe: Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("probe.json")).unwrap())
            .unwrap();
    let want = json!({
        "uid": 0, "euid": 0, "gid": 0, "groups": [1000],
        "gateway": "PermissionError",
        // Its directory is bound read-only: not even its owner could.
        "gateway_chmod": "EROFS",
        "my_cap_eff": 0, "my_cap_prm": 0, "my_cap_inh": 0, "my_cap_amb": 0,
        "my_no_new_privs": "1",
        "servo_environ": "PermissionError",
        "servo_mem": "PermissionError",
        "servo_maps": "PermissionError",
        "servo_fd/1": "PermissionError",
        "servo_cwd": "PermissionError",
        "init_environ": "PermissionError",
        "init_mem": "PermissionError",
        "ptrace_servo": [-1, 1],
        "ptrace_init": [-1, 1],
        "signal_servo": "PermissionError",
        // Both root: documented ("what it weakens").
        "signal_init": "done",
        "audit_append": "PermissionError",
        "audit_chmod": "PermissionError",
        "audit_chown": "PermissionError",
        "audit_unlink": "PermissionError",
        "saheeli_dir_write": "PermissionError",
        "become_servo": "PermissionError",
        "chown_to_agent": "PermissionError",
        "write_usr_local": "done",
        "write_etc": "done",
        "append_given": "done",
        "append_submitted": "done",
        "mkdir_app": "done",
        "given_owner": 0,
    });
    assert_eq!(probe, want);
    assert_eq!(
        std::fs::read_to_string(results.join("who.txt")).unwrap(),
        "0\n"
    );
    assert_eq!(
        std::fs::read_to_string(results.join("setup-uid.txt")).unwrap(),
        "0\n"
    );
    let given = std::fs::read_to_string(results.join("given.txt")).unwrap();
    assert_eq!(given, "given\nroot was here\n");
    let id = t["id"].as_str().unwrap();
    let audit = std::fs::read_to_string(results.join(format!("servo-{id}-audit.log"))).unwrap();
    assert!(!audit.contains("forged"), "{audit}");
    // Root's `kill -9 -1` spared the servo: the next call got a fresh shell.
    let session =
        std::fs::read_to_string(results.join(format!("servo-{id}-session.json"))).unwrap();
    assert!(session.contains("alive\\n0"), "{session}");
    assert!(leftovers(id).is_empty());

    // The default stays the agent's user, in the same image.
    s.write(
        "s2.json",
        &script(&[
            ("execute_shell", json!({"command": "id -u > who.txt"})),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "agent.md",
        &replay_prompt(
            "s2.json",
            "environment: { dockerfile: env/ }\nworkdir: /app\ntimeout: 2m\n",
        ),
    );
    let t = run(&s, "agent.md");
    assert_eq!(t["state"], "complete", "{t}");
    let results = std::path::PathBuf::from(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("who.txt")).unwrap(),
        "1000\n"
    );
}
