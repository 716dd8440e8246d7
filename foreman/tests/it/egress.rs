//! Egress through the gateway (issue 50), end to end: a package index on
//! this host's 127.0.0.2 (a directory served by Python's http.server,
//! holding a wheel made here and pip's own wheel) stands in for the
//! internet. The set-up phase installs from it through the proxy; the
//! agent, offline, uses the package, and what it tries to reach is refused
//! unless its own list names it; every attempt is in the ledger.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::human::{Serve, until};
use crate::util::{Saheeli, require_docker, script};

/// `python3 -m http.server` on 127.0.0.2, killed when dropped.
struct Index {
    child: Child,
    port: u16,
}

impl Drop for Index {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A wheel of `saheeli-demo` 1.0 (`saheeli_demo.VALUE == 42`).
fn demo_wheel(dir: &Path) {
    let py = r#"
import base64, hashlib, sys, zipfile
files = {
    "saheeli_demo/__init__.py": b"VALUE = 42\n",
    "saheeli_demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: saheeli-demo\nVersion: 1.0\n",
    "saheeli_demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: saheeli-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(data)}")
record.append("saheeli_demo-1.0.dist-info/RECORD,,")
files["saheeli_demo-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, data in files.items():
        z.writestr(name, data)
"#;
    let out = Command::new("python3")
        .args(["-c", py])
        .arg(dir.join("saheeli_demo-1.0-py3-none-any.whl"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The index: `simple/saheeli-demo/`, the demo wheel, and `pip.whl` (pip's
/// own wheel from PyPI, fetched on this host: the base image has no pip).
fn index(dir: &Path) -> Index {
    std::fs::create_dir_all(dir.join("simple/saheeli-demo")).unwrap();
    demo_wheel(dir);
    std::fs::write(
        dir.join("simple/saheeli-demo/index.html"),
        "<html><body><a href=\"../../saheeli_demo-1.0-py3-none-any.whl\">saheeli_demo-1.0-py3-none-any.whl</a></body></html>\n",
    )
    .unwrap();
    let dl = dir.join("dl");
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
        ])
        .args(["--dest", dl.to_str().unwrap(), "pip==24.3.1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fetching pip's wheel from PyPI: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wheel = std::fs::read_dir(&dl)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::rename(wheel, dir.join("pip.whl")).unwrap();
    let port = free_port("127.0.0.2");
    let child = Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.2",
        ])
        .arg("--directory")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let index = Index { child, port };
    let up = crate::lifecycle::wait_for(std::time::Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.2", port)).is_ok()
    });
    assert!(up, "the package index did not start");
    index
}

/// A TCP service on 127.0.0.2 that greets each connection and closes.
fn greeter() -> u16 {
    let l = TcpListener::bind(("127.0.0.2", 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.write_all(b"hello from the greeter\n");
        }
    });
    port
}

/// Sends `CONNECT target` to the container's proxy; prints the answer's
/// status line and, when tunnelled, what the far end said first.
const PROBE: &str = r#"import socket, sys
s = socket.create_connection(("127.0.0.1", 3128), 10)
t = sys.argv[1]
s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t)).encode())
data = b""
while b"\r\n\r\n" not in data:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
head, _, rest = data.partition(b"\r\n\r\n")
print(t, head.split(b"\r\n")[0].decode())
if b" 200 " in head:
    s.settimeout(5)
    print(t, (rest or s.recv(4096)).decode().strip())
else:
    print(t, rest.decode().strip())
"#;

fn shell(command: &str) -> (&'static str, Value) {
    ("execute_shell", json!({ "command": command }))
}

fn results(t: &Value) -> PathBuf {
    PathBuf::from(t["results"].as_str().unwrap())
}

fn read(p: &Path) -> String {
    let mut s = String::new();
    std::fs::File::open(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .read_to_string(&mut s)
        .unwrap();
    s
}

fn entries<'a>(t: &'a Value, phase: &str, target: &str) -> Vec<&'a Value> {
    t["egress"]
        .as_array()
        .unwrap_or_else(|| panic!("no egress ledger: {t:#}"))
        .iter()
        .filter(|e| {
            e["phase"] == phase
                && format!("{}:{}", e["host"].as_str().unwrap(), e["port"]) == target
        })
        .collect()
}

#[test]
fn set_up_installs_through_the_proxy_and_the_agent_reaches_only_its_list() {
    require_docker();
    let s = Saheeli::new();
    let idx = index(&s.path().join("index"));
    let (port, greet) = (idx.port, greeter());
    let probe =
        |target: &str, file: &str| shell(&format!("python3 probe.py {target} > out/{file} 2>&1"));
    s.write("ws/probe.py", PROBE);
    s.write("ws/out/.keep", "");
    s.write(
        "script.json",
        &script(&[
            shell(
                "PYTHONPATH=/workspace/deps python3 -c 'import saheeli_demo; print(\"demo\", saheeli_demo.VALUE)' > out/demo.txt 2>&1",
            ),
            probe(&format!("127.0.0.2:{port}"), "index.txt"),
            probe(&format!("127.0.0.2:{greet}"), "greet.txt"),
            probe(&format!("localhost:{greet}"), "rebind.txt"),
            probe("10.1.2.3:80", "private.txt"),
            probe(&format!("127.0.0.2:{}", greet + 1), "port.txt"),
            shell("python3 -c 'import socket; print(socket.getaddrinfo(\"pypi.org\", 443))' > out/dns.txt 2>&1"),
            shell(&format!(
                "python3 -c 'import socket; socket.create_connection((\"127.0.0.2\", {port}), 3)' > out/direct.txt 2>&1"
            )),
            shell("env | grep -i _proxy | sort > out/env.txt"),
            ("task_complete", json!({"message": "probed"})),
        ]),
    );
    let index_url = format!("http://127.0.0.2:{port}");
    let prompt = format!(
        "---\nmodel: replay:script.json\nworkspace: ws\n\
         setup:\n  - python3 -c \"import urllib.request as u; u.urlretrieve('{index_url}/pip.whl', '/tmp/pip.whl')\"\n  \
         - python3 /tmp/pip.whl/pip install -q --no-cache-dir --disable-pip-version-check --target /workspace/deps --index-url {index_url}/simple/ saheeli-demo\n\
         egress:\n  setup: [\"127.0.0.2:{port}\"]\n  agent: [\"127.0.0.2:{greet}\", \"localhost:{greet}\"]\n  verify: [\"127.0.0.2:{greet}\"]\n\
         verify: \"python3 -c \\\"import json; d = json.load(open('/logs/verifier/egress.json')); \
         assert any(e['phase'] == 'setup' and e['verdict'] == 'allowed' for e in d); \
         assert any(e['verdict'] == 'refused' for e in d); print('ledger', len(d))\\\" \
         && python3 probe.py 127.0.0.2:{greet} | grep -q 'hello from the greeter' \
         && python3 probe.py 127.0.0.2:{port} | grep -q '403 Forbidden'\"\n\
         ---\nProbe.\n"
    );
    s.write("task.md", &prompt);
    let out = s.run(&["run", "task.md", "--json"]);
    let t: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        t["state"],
        "complete",
        "{t:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = results(&t);
    let ws = r.join("out");
    // Installed in set-up, used offline by the agent.
    assert_eq!(read(&ws.join("demo.txt")).trim(), "demo 42");
    // The index is set-up's, not the agent's.
    let index = read(&ws.join("index.txt"));
    assert!(
        index.contains("403 Forbidden") && index.contains("egress.agent"),
        "{index}"
    );
    let greet_out = read(&ws.join("greet.txt"));
    assert!(
        greet_out.contains("200 Connection established")
            && greet_out.contains("hello from the greeter"),
        "{greet_out}"
    );
    // A listed name that resolves to loopback reaches nothing.
    let rebind = read(&ws.join("rebind.txt"));
    assert!(
        rebind.contains("403") && rebind.contains("loopback"),
        "{rebind}"
    );
    assert!(read(&ws.join("private.txt")).contains("403"));
    assert!(read(&ws.join("port.txt")).contains("403"));
    // The container resolves nothing and connects nowhere by itself.
    let dns = read(&ws.join("dns.txt"));
    assert!(dns.contains("gaierror"), "{dns}");
    let direct = read(&ws.join("direct.txt"));
    assert!(
        direct.contains("Connection refused") || direct.contains("Errno 111"),
        "{direct}"
    );
    let env = read(&ws.join("env.txt"));
    assert!(env.contains("HTTPS_PROXY=http://127.0.0.1:3128"), "{env}");
    // The ledger: set-up's downloads allowed with their bytes, the agent's
    // attempts each recorded with its verdict.
    let setup = entries(&t, "setup", &format!("127.0.0.2:{port}"));
    assert!(setup.len() >= 2, "{t:#}");
    assert!(setup.iter().all(|e| e["verdict"] == "allowed"), "{t:#}");
    let down: u64 = setup
        .iter()
        .map(|e| e["bytes_down"].as_u64().unwrap())
        .sum();
    assert!(
        down > 1_000_000,
        "pip's wheel came through set-up's proxy: {down} bytes"
    );
    let idx_agent = entries(&t, "agent", &format!("127.0.0.2:{port}"));
    assert_eq!(idx_agent.len(), 1, "{t:#}");
    assert_eq!(idx_agent[0]["verdict"], "refused");
    let g = entries(&t, "agent", &format!("127.0.0.2:{greet}"));
    assert_eq!(g[0]["verdict"], "allowed");
    assert!(g[0]["bytes_down"].as_u64().unwrap() > 10, "{t:#}");
    for target in [
        format!("localhost:{greet}"),
        "10.1.2.3:80".into(),
        format!("127.0.0.2:{}", greet + 1),
    ] {
        let e = entries(&t, "agent", &target);
        assert_eq!(e.len(), 1, "{target}: {t:#}");
        assert_eq!(e[0]["verdict"], "refused", "{target}");
    }
    // Verify's own list: the greeter, not the index.
    let v = entries(&t, "verify", &format!("127.0.0.2:{greet}"));
    assert_eq!(v[0]["verdict"], "allowed", "{t:#}");
    let v = entries(&t, "verify", &format!("127.0.0.2:{port}"));
    assert_eq!(v[0]["verdict"], "refused", "{t:#}");
    let report = read(&r.join("report.md"));
    assert!(
        report.contains("## Egress") && report.contains("| setup | `127.0.0.2` |"),
        "{report}"
    );
    let ledger: Value = serde_json::from_str(&read(&r.join("egress.json"))).unwrap();
    assert_eq!(
        ledger.as_array().unwrap().len(),
        t["egress"].as_array().unwrap().len()
    );
}

/// A task whose agent asks for the greeter, listed nowhere, under
/// `egress_approval: ask`.
fn asking_task(s: &Saheeli, greet: u16) {
    s.write("ws/probe.py", PROBE);
    s.write("ws/out/.keep", "");
    s.write(
        "script.json",
        &script(&[
            shell(&format!(
                "python3 probe.py 127.0.0.2:{greet} > out/greet.txt 2>&1"
            )),
            ("task_complete", json!({"message": "asked"})),
        ]),
    );
    s.write(
        "task.md",
        "---\nmodel: replay:script.json\nworkspace: ws\negress_approval: ask\n---\nAsk.\n",
    );
}

#[test]
fn an_unlisted_host_waits_for_a_person_and_an_approval_lets_it_through() {
    require_docker();
    let s = Saheeli::new();
    let greet = greeter();
    asking_task(&s, greet);
    let id = s.submit("task.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "the egress question", |t| {
        t["state"] == "waiting_human" && t["waiting_for"]["kind"] == "egress"
    });
    assert_eq!(t["waiting_for"]["host"], "127.0.0.2");
    assert_eq!(t["waiting_for"]["port"], greet);
    assert_eq!(t["waiting_for"]["phase"], "agent");
    let said = s.expect(&["task", "approve", &id], 0);
    assert!(
        said.contains(&format!("may reach 127.0.0.2:{greet}")),
        "{said}"
    );
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    let out = read(&results(&t).join("out/greet.txt"));
    assert!(out.contains("hello from the greeter"), "{out}");
    let e = entries(&t, "agent", &format!("127.0.0.2:{greet}"));
    assert_eq!(e[0]["verdict"], "approved", "{t:#}");
    assert!(
        e[0]["reason"].as_str().unwrap().starts_with("approved by "),
        "{t:#}"
    );
}

#[test]
fn egress_is_refused_where_it_cannot_be_kept() {
    // (On a swarm: `spec::tests::egress_is_refused_on_a_swarm`.)
    let s = Saheeli::new();
    let x = script(&[("task_complete", json!({"message": "x"}))]);
    s.write("x.json", &x);
    s.write(
        "a.md",
        "---\nmodel: replay:x.json\negress: {agent: [\"*\"]}\n---\nx\n",
    );
    let e = s.expect_err(&["task", "submit", "--prompt", "a.md"], 2);
    assert!(
        e.contains("`egress.agent`") && e.contains("any host"),
        "{e}"
    );
    s.write(
        "b.md",
        "---\nmodel: replay:x.json\negress: {verify: [\"pypi.org/simple\"]}\n---\nx\n",
    );
    let e = s.expect_err(&["task", "submit", "--prompt", "b.md"], 2);
    assert!(
        e.contains("`egress.verify`") && e.contains("no scheme or path"),
        "{e}"
    );
    let narrow = Saheeli::with_config("limits:\n  egress: [\"*.pythonhosted.org\"]\n");
    narrow.write("x.json", &x);
    narrow.write(
        "c.md",
        "---\nmodel: replay:x.json\negress: {setup: [pypi.org]}\n---\nx\n",
    );
    let e = narrow.expect_err(&["task", "submit", "--prompt", "c.md"], 2);
    assert!(
        e.contains("limits.egress") && e.contains("*.pythonhosted.org"),
        "{e}"
    );
}

/// The dashboard (headless Chromium): the egress question with its host,
/// approved by a click; the ledger card shows the approved connection.
#[test]
fn the_dashboard_asks_about_a_host_and_shows_the_ledger() {
    use crate::steps_browser::{click, state, text};
    use crate::web::WebServe;
    use crate::web_browser::{Driver, browser, save_screenshot, until as see};
    require_docker();
    let s = Saheeli::new();
    let greet = greeter();
    asking_task(&s, greet);
    let id = s.submit("task.md");
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let driver = Driver::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = browser(&driver).await;
        c.goto(&w.url(&format!("/tasks/{id}"))).await.unwrap();
        let host = format!("127.0.0.2:{greet}");
        see("the egress question", || async {
            text(&c, "#question").await.contains(&host)
        })
        .await;
        save_screenshot(&c, "egress-approval.png").await;
        click(&c, "#approve").await;
        see("complete", || async { state(&c).await == "complete" }).await;
        see("the ledger card", || async {
            text(&c, "#egress-count").await.to_lowercase() == "egress 1"
        })
        .await;
        let table = text(&c, "table.egress").await;
        assert!(
            table.contains(&host) && table.contains("approved"),
            "{table}"
        );
        save_screenshot(&c, "egress-ledger.png").await;
    });
    let t = s.task(&id);
    let out = read(&results(&t).join("out/greet.txt"));
    assert!(out.contains("hello from the greeter"), "{out}");
}

/// The assessor (an LLM judge) reads the task's egress among its evidence.
#[test]
fn the_assessor_is_told_what_the_task_reached() {
    use crate::fake_llm::{FakeLlm, Reply};
    require_docker();
    let greet = greeter();
    let agent = vec![
        Reply::tool(
            "execute_shell",
            json!({"command": format!("python3 probe.py 127.0.0.2:{greet}")}),
        ),
        Reply::tool("task_complete", json!({"message": "greeted"})),
    ];
    let llm = FakeLlm::start_matching(agent, |body| {
        let system = body["messages"][0]["content"].as_str().unwrap_or("");
        system.contains("Saheeli's assessor").then(|| {
            Reply::Text(
                r#"{"verdict": "met", "feedback": "greeted"}"#.to_string(),
                (300, 30),
            )
        })
    });
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-egress-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write("ws/probe.py", PROBE);
    s.write(
        "task.md",
        &format!(
            "---\nmodel: gpt-test\nworkspace: ws\nassess: true\n\
             egress: {{agent: [\"127.0.0.2:{greet}\"]}}\n---\nGreet.\n"
        ),
    );
    let out = s.run(&["run", "task.md", "--json"]);
    let t: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(t["state"], "complete", "{t:#}");
    let asked: Vec<String> = llm
        .seen()
        .iter()
        .map(|s| s.body.to_string())
        .filter(|b| b.contains("Saheeli's assessor"))
        .collect();
    assert_eq!(asked.len(), 1);
    let want = format!("agent phase, 127.0.0.2:{greet}: allowed");
    assert!(
        asked[0].contains("The network the task reached (egress)") && asked[0].contains(&want),
        "{}",
        asked[0]
    );
}
