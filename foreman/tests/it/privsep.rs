//! Issue 23: the agent's shell is not the servo. The servo runs as its own
//! uid (999) with no effective capability, the agent's tools as another
//! (1000): from the agent's own shell, everything the second hostile run
//! did through the shared uid is checked to fail (HOSTILE.md cases 23, 29,
//! 36, 39: the gateway socket, ptrace, /proc, the servo's files).

use serde_json::{Value, json};

use crate::util::{Saheeli, leftovers, replay_prompt, require_docker, script};

/// Run in the task's shell: what the agent can reach, as JSON.
const PROBE: &str = r#"
import ctypes, glob, json, os, socket
r = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups()}
r["env_saheeli"] = sorted(k for k in os.environ if k.startswith("SAHEELI"))
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect("/run/saheeli/gateway.sock")
    r["gateway"] = "connected"
except Exception as e:
    r["gateway"] = type(e).__name__
procs = {}
for st in glob.glob("/proc/[0-9]*/status"):
    try:
        txt = open(st).read()
    except Exception:
        continue
    procs[int(st.split("/")[2])] = dict(l.split(":\t", 1) for l in txt.splitlines() if ":\t" in l)
servo = [p for p, d in procs.items() if d.get("Name") == "servo" and d["Uid"].split()[0] == "999"]
r["servo_pids"] = len(servo)
pid = servo[0]
d = procs[pid]
r["servo_uids"] = d["Uid"].split()
r["servo_cap_eff"] = int(d["CapEff"], 16)
r["servo_cap_prm"] = int(d["CapPrm"], 16)
me = procs[os.getpid()]
r["my_cap_eff"] = int(me["CapEff"], 16)
r["my_cap_prm"] = int(me["CapPrm"], 16)
r["my_no_new_privs"] = me.get("NoNewPrivs", "").strip()
for what in ["environ", "mem", "maps", "fd/1", "cwd"]:
    try:
        open("/proc/%d/%s" % (pid, what), "rb").read(1)
        r["servo_" + what] = "read"
    except Exception as e:
        r["servo_" + what] = type(e).__name__
for what in ["environ", "fd/1"]:
    try:
        open("/proc/1/" + what, "rb").read(1)
        r["init_" + what] = "read"
    except Exception as e:
        r["init_" + what] = type(e).__name__
libc = ctypes.CDLL(None, use_errno=True)
r["ptrace_attach"] = libc.ptrace(16, pid, 0, 0)
r["ptrace_errno"] = ctypes.get_errno()
try:
    os.kill(pid, 0)
    r["signal_servo"] = "sent"
except Exception as e:
    r["signal_servo"] = type(e).__name__
audit = glob.glob("/workspace/servo-*-audit.log")[0]
session = glob.glob("/workspace/servo-*-session.json")[0]
def attempt(name, op):
    try:
        op()
        r[name] = "done"
    except Exception as e:
        r[name] = type(e).__name__
attempt("audit_append", lambda: open(audit, "a").write("forged\n"))
attempt("audit_unlink", lambda: os.unlink(audit))
attempt("audit_rename", lambda: os.rename(audit, "/workspace/moved"))
attempt("session_write", lambda: open(session, "w").write("{}"))
attempt("session_unlink", lambda: os.unlink(session))
attempt("saheeli_dir_write", lambda: open("/workspace/.saheeli/planted", "w").write("x"))
attempt("setuid_root", lambda: os.setuid(0))
json.dump(r, open("/workspace/probe.json", "w"), indent=1)
"#;

#[test]
fn the_agents_shell_cannot_reach_the_servo_its_socket_or_its_files() {
    require_docker();
    let s = Saheeli::new();
    s.write("w/probe.py", PROBE);
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", json!({"command": "python3 probe.py"})),
            // The model's own `kill -9 -1` takes its runner with it: the
            // call fails saying so, and the next one gets a fresh shell.
            ("execute_shell", json!({"command": "kill -9 -1"})),
            ("execute_shell", json!({"command": "echo alive; id -u"})),
            ("task_complete", json!({"message": "probed"})),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt("s.json", "workspace: w\ntimeout: 2m\n"),
    );
    let id = s.submit("p.md");
    s.expect(&["serve", "--drain"], 0);
    let t = s.task(&id);
    assert_eq!(t["state"], "complete", "{t}");
    let results = std::path::PathBuf::from(t["results"].as_str().unwrap());
    let probe: Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("probe.json")).unwrap())
            .unwrap();
    let want = json!({
        "uid": 1000, "euid": 1000, "gid": 1000, "groups": [],
        "env_saheeli": [],
        "gateway": "PermissionError",
        "servo_pids": 1,
        "servo_uids": ["999", "999", "999", "999"],
        // CAP_SETGID (6) and CAP_SETUID (7): permitted, never effective.
        "servo_cap_eff": 0,
        "servo_cap_prm": 0xc0,
        "my_cap_eff": 0,
        "my_cap_prm": 0,
        "my_no_new_privs": "1",
        "servo_environ": "PermissionError",
        "servo_mem": "PermissionError",
        "servo_maps": "PermissionError",
        "servo_fd/1": "PermissionError",
        "servo_cwd": "PermissionError",
        "init_environ": "PermissionError",
        "init_fd/1": "PermissionError",
        "ptrace_attach": -1,
        "ptrace_errno": 1,
        "signal_servo": "PermissionError",
        "audit_append": "PermissionError",
        "audit_unlink": "PermissionError",
        "audit_rename": "PermissionError",
        "session_write": "PermissionError",
        "session_unlink": "PermissionError",
        "saheeli_dir_write": "PermissionError",
        "setuid_root": "PermissionError",
    });
    assert_eq!(probe, want);
    // The audit log is the servo's alone: no forged line.
    let audit = std::fs::read_to_string(results.join(format!("servo-{id}-audit.log"))).unwrap();
    assert!(!audit.contains("forged"), "{audit}");
    let session: Value = serde_json::from_str(
        &std::fs::read_to_string(results.join(format!("servo-{id}-session.json"))).unwrap(),
    )
    .unwrap();
    let results_text: Vec<&str> = session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        results_text[1].contains("the tool runner stopped"),
        "{results_text:?}"
    );
    assert!(
        results_text[2].contains("alive\n1000") && results_text[2].contains("fresh shell"),
        "{results_text:?}"
    );
    // Files the model's tools made are the agent's (a chown would say).
    assert!(leftovers(&id).is_empty());
}

/// Case 39: a parked session changed outside the servo (here by root on
/// the host, standing in for any way a forged file could reach the next
/// start) is refused: the approved call never becomes another one.
#[test]
fn a_parked_session_changed_outside_the_servo_is_refused() {
    use crate::human::{Serve, until};
    require_docker();
    let s = Saheeli::new();
    s.write(
        "s.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "echo benign-secret-check > benign.txt"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt(
            "s.json",
            "approve: {execute_shell: \"secret\"}\npark_after: 1s\ntimeout: 2m\n",
        ),
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    until(&s, &id, &serve, "parked", |t| {
        t["state"] == "waiting_human" && t["parked"] == true
    });
    // The kept workspace (the loop-mounted image under state_dir).
    let session = s
        .path()
        .join(".saheeli/workspaces")
        .join(&id)
        .join(format!("mnt/servo-{id}-session.json"));
    let text = std::fs::read_to_string(&session).expect("the parked session is kept");
    assert!(text.contains("\"seal\""), "{text}");
    assert!(text.contains("benign-secret-check"), "{text}");
    std::fs::write(
        &session,
        text.replace(
            "echo benign-secret-check > benign.txt",
            "echo EVIL > evil.txt",
        ),
    )
    .unwrap();
    s.expect(&["task", "approve", &id], 0);
    let t = until(&s, &id, &serve, "ended", |t| {
        t["state"] != "waiting_human"
            && t["state"] != "queued"
            && t["state"] != "running"
            && t["state"] != "starting"
    });
    assert_eq!(t["state"], "incomplete", "{t:#}");
    assert_eq!(t["reason"], "bad_task", "{t:#}");
    let results = std::path::PathBuf::from(t["results"].as_str().unwrap());
    // Why, in the servo's words: in the ending's detail and the report.
    let last = t["events"].as_array().unwrap().last().unwrap().clone();
    let detail = last["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("; the servo: the parked session")
            && detail.contains("its seal does not match"),
        "{t:#}"
    );
    let report = std::fs::read_to_string(results.join("report.md")).unwrap();
    assert!(report.contains("its seal does not match"), "{report}");
    assert!(!results.join("evil.txt").exists());
    assert!(!results.join("benign.txt").exists());
    drop(serve);
    assert!(leftovers(&id).is_empty(), "{:?}", leftovers(&id));
}

/// A `complete.json` the agent's shell wrote is not the servo's word: the
/// servo ran out of steps, and the task says so.
#[test]
fn a_completion_written_by_the_agents_shell_is_not_a_success() {
    require_docker();
    let s = Saheeli::new();
    let forge = "python3 -c \"import json; t = json.load(open('.saheeli/task.json')); \
                 json.dump({'task_id': t['task_id'], 'message': 'forged', 'steps': 1, \
                 'usage': {'input_tokens': 0, 'output_tokens': 0}, 'finished_at': 'now'}, \
                 open('complete.json', 'w'))\"";
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", json!({ "command": forge })),
            ("task_complete", json!({"message": "never reached"})),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt("s.json", "max_steps: 1\ntimeout: 1m\n"),
    );
    let id = s.submit("p.md");
    // 1: a task ended incomplete.
    s.expect(&["serve", "--drain"], 1);
    let t = s.task(&id);
    assert_eq!(t["state"], "incomplete", "{t:#}");
    assert_eq!(t["reason"], "max_steps", "{t:#}");
    let results = std::path::PathBuf::from(t["results"].as_str().unwrap());
    let forged = std::fs::read_to_string(results.join("complete.json")).unwrap();
    assert!(forged.contains("forged"), "the forgery was made: {forged}");
}
