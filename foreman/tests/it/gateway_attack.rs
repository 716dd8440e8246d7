//! The gateway under attack (issue 9 §5, §7): whoever talks to a task's
//! socket directly cannot stream past the meter, pick another model, ask for 64 choices
//! or unbounded output, reach another path or outspend its budget with
//! parallel calls. Since issue 23 the agent's shell cannot open the socket
//! at all (it is the servo's uid's), so these calls come from the host:
//! the gateway's own checks, for a servo that is not to be trusted either;
//! a provider that echoes
//! the key never gets it into the container or the foreman's log; other
//! host users cannot reach a task's socket or plant its directory.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply, echo};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, require_docker};

/// Run on the host against a running task's socket (its path the first
/// argument): talks HTTP to the gateway directly and writes what it got
/// to `bypass.json`.
const BYPASS_PY: &str = r#"
import http.client, json, socket, sys, threading

SOCK = sys.argv[1]

class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(SOCK)

def call(path, body):
    c = Conn("gateway", timeout=60)
    c.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    r = c.getresponse()
    return [r.status, r.read().decode()]

def user(text):
    return [{"role": "user", "content": text}]

out = {}
out["stream"] = call("/v1/chat/completions",
    {"model": "gpt-test", "messages": user("bypass-stream"), "stream": True, "n": 64})
out["greedy"] = call("/v1/chat/completions",
    {"model": "gpt-test", "messages": user("bypass-greedy"), "n": 64,
     "max_tokens": 10**9, "max_completion_tokens": 10**9})
out["other"] = call("/v1/chat/completions",
    {"model": "gpt-4-expensive", "messages": user("bypass-other"), "max_tokens": 5})
out["path"] = call("/v1/embeddings", {"model": "gpt-test", "input": "bypass-path"})
parallel = [None] * 8
def one(i):
    parallel[i] = call("/v1/chat/completions",
        {"model": "gpt-test", "messages": user("bypass-parallel %d" % i), "max_tokens": 20000})
threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
out["parallel"] = parallel
json.dump(out, open("bypass.json", "w"))
print([out[k][0] for k in ("stream", "greedy", "path")], [p[0] for p in parallel])
"#;

/// The text of a direct call from the script (one user message); the
/// agent's own calls carry the script itself, so they never match.
fn text_of(body: &Value) -> String {
    match body["messages"].as_array() {
        Some(m) if m.len() == 1 => m[0]["content"].as_str().unwrap_or("").to_string(),
        _ => String::new(),
    }
}

#[test]
fn the_gateway_cannot_be_bypassed_by_direct_calls() {
    require_docker();
    // The agent's own turns come from the script; the direct calls are
    // answered by content, so they cannot steal the agent's turns.
    let llm = FakeLlm::start_matching(
        vec![
            // The agent's shell cannot reach the socket; meanwhile the test
            // calls it from the host.
            Reply::tool(
                "execute_shell",
                json!({"command": "python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('/run/saheeli/gateway.sock')\"; sleep 8", "timeout_s": 100}),
            ),
            Reply::tool("task_complete", json!({"message": "tried"})),
        ],
        |body| {
            let text = text_of(body);
            if text.contains("bypass-parallel") {
                // Slow, so the eight calls are all in flight together.
                Some(Reply::Slow(
                    Duration::from_secs(2),
                    Box::new(Reply::Tools(vec![], (7, 3))),
                ))
            } else if text.contains("bypass-") {
                Some(Reply::Tools(vec![], (10, 5)))
            } else {
                None
            }
        },
    );
    // The output cap (issue 27) high enough that a parallel call's own
    // `max_tokens: 20000` is what it reserves.
    let s = Saheeli::with_config("llm:\n  max_output_tokens: 20000\n")
        .env("OPENAI_API_KEY", "sk-test-gateway-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    // Room for the agent's two turns (120 tokens each), the greedy call
    // (15) and two parallel calls reserving 20000 output tokens each, but
    // not for a third.
    let budget = 2 * 120 + 15 + 2 * 20_030;
    s.write(
        "p.md",
        &format!("---\nmodel: gpt-test\nmax_tokens: {budget}\n---\nTry to bypass the budget.\n"),
    );
    s.write("bypass.py", BYPASS_PY);
    let run = s
        .cmd(&["run", "p.md", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(60), || llm.seen_count() == 1),
        "the task never called its gateway"
    );
    let id = s.tasks()[0]["id"].as_str().unwrap().to_string();
    let sock = crate::gateway_guard::socket(&s, &id);
    let direct = Command::new("python3")
        .arg("bypass.py")
        .arg(&sock)
        .current_dir(s.path())
        .output()
        .unwrap();
    assert!(
        direct.status.success(),
        "{}",
        String::from_utf8_lossy(&direct.stderr)
    );
    let out = run.wait_with_output().unwrap();
    let t: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    let results = Path::new(t["results"].as_str().unwrap());
    let session =
        std::fs::read_to_string(results.join(format!("servo-{id}-session.json"))).unwrap();
    assert!(
        session.contains("PermissionError"),
        "the agent's shell reached the socket: {session}"
    );
    let got = std::fs::read(s.path().join("bypass.json")).unwrap();
    let got: Value = serde_json::from_slice(&got).unwrap();
    eprintln!("{got:#}");

    let seen = llm.seen();
    // A stream is metered since issue 25 (`gateway_native`), but one
    // asking for 64 answers is refused with a clear answer and never
    // reaches the provider.
    assert_eq!(got["stream"][0], 400, "{got:#}");
    assert!(
        got["stream"][1].as_str().unwrap().contains("`n`"),
        "{got:#}"
    );
    assert!(
        !seen
            .iter()
            .any(|c| text_of(&c.body).contains("bypass-stream"))
    );
    // Only the chat path is served.
    assert_eq!(got["path"][0], 404, "{got:#}");
    assert!(!seen.iter().any(|c| c.path != "/v1/chat/completions"));
    // Another model is refused before anything is reserved or sent.
    assert_eq!(got["other"][0], 400, "{got:#}");
    assert!(
        !seen
            .iter()
            .any(|c| text_of(&c.body).contains("bypass-other")),
        "the call naming another model reached the provider"
    );
    // The greedy call went upstream tamed: one choice, output capped by
    // what the budget leaves.
    assert_eq!(got["greedy"][0], 200, "{got:#}");
    let greedy = seen
        .iter()
        .find(|c| text_of(&c.body).contains("bypass-greedy"))
        .expect("the greedy call reached the provider");
    assert_eq!(greedy.body["model"], "gpt-test");
    assert!(
        greedy.body["n"].is_null() || greedy.body["n"] == 1,
        "{:#}",
        greedy.body
    );
    for field in ["max_tokens", "max_completion_tokens"] {
        let v = &greedy.body[field];
        assert!(v.is_null() || v.as_u64().unwrap() <= budget, "{field}: {v}");
    }
    assert!(
        !greedy.body["max_tokens"].is_null() || !greedy.body["max_completion_tokens"].is_null(),
        "no output cap sent: {:#}",
        greedy.body
    );
    // Every call upstream used the task's model, and one streamed (the
    // gateway streams to show the model's text live) asked for its usage,
    // which the meter settles from.
    for c in &seen {
        assert_eq!(c.body["model"], "gpt-test", "{:#}", c.body);
        assert!(
            c.body["stream"].is_null()
                || c.body["stream"] == false
                || c.body["stream_options"]["include_usage"] == true,
            "{:#}",
            c.body
        );
    }
    // Eight parallel calls under a budget for two: at most two went upstream.
    let parallel_up = seen
        .iter()
        .filter(|c| text_of(&c.body).contains("bypass-parallel"))
        .count();
    assert!(
        parallel_up <= 2,
        "{parallel_up} parallel calls reached the provider"
    );
    let ok = got["parallel"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p[0] == 200)
        .count();
    assert_eq!(ok, parallel_up, "{got:#}");
    assert!(
        got["parallel"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p[0] == 200 || p[0] == 402),
        "{got:#}"
    );
    // Everything the provider answered was billed to the task.
    let answered: u64 = seen
        .iter()
        .map(|c| {
            let text = text_of(&c.body);
            if text.contains("bypass-parallel") {
                10
            } else if text.contains("bypass-") {
                15
            } else {
                120
            }
        })
        .sum();
    assert_eq!(t["tokens"], answered, "{t:#}");
}

/// The key's echoes as the fake LLM writes them (raw, base64 in both
/// alphabets), and a middle slice of each encoding, which only the key's
/// own bytes determine: none of these may survive anywhere.
fn key_forms(key: &str) -> Vec<String> {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
    assert_ne!(
        STANDARD.encode(key),
        URL_SAFE.encode(key),
        "the test key must differ in the two alphabets"
    );
    let std = STANDARD.encode(format!("Bearer {key}"));
    let url = URL_SAFE_NO_PAD.encode(format!("key={key};"));
    assert!(echo(key).contains(&std) && echo(key).contains(&url));
    vec![
        key.to_string(),
        std[14..30].to_string(),
        url[14..30].to_string(),
        std,
        url,
    ]
}

fn grep(dir: &Path, needle: &str) -> String {
    let out = Command::new("grep")
        .args(["-r", "-l", "-F", "--", needle])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_provider_echoing_the_key_leaks_it_nowhere() {
    require_docker();
    // '>' and '?' make base64's standard and URL-safe alphabets differ.
    let key = "sk-test-echo->>??>>??-5f3a9c2e71";
    let forms = key_forms(key);
    // A 500 with the key (retried), then a completion whose text holds it;
    // then, in a second task, a 400 with the key (not retried).
    let llm = FakeLlm::start(vec![
        Reply::EchoKey(500),
        Reply::EchoKeyContent,
        Reply::EchoKey(400),
    ]);
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", key)
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write("p.md", "---\nmodel: gpt-test\n---\nAnything.\n");
    for code in [0, 1] {
        let out = s.run(&["run", "p.md", "--json"]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "{stderr}");
        let t: Value = serde_json::from_slice(&out.stdout).unwrap();
        let results = Path::new(t["results"].as_str().unwrap());
        for f in &forms {
            assert!(
                !stderr.contains(f.as_str()),
                "the foreman logged `{f}`:\n{stderr}"
            );
            let hits = grep(results, f);
            assert!(hits.is_empty(), "`{f}` reached the container: {hits}");
        }
        // Nothing was left for collection to redact: the gateway did it.
        let id = t["id"].as_str().unwrap();
        let last = s.task(id)["events"].as_array().unwrap().last().unwrap()["detail"].clone();
        assert!(!last.as_str().unwrap().contains("redacted"), "{last}");
        // The echo did reach the servo, redacted.
        assert!(!grep(results, "[REDACTED:OPENAI_API_KEY]").is_empty());
    }
    assert_eq!(llm.seen_count(), 3);
}

/// Runs `args` as the `nobody` user; true when it succeeded.
fn as_nobody(args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

const CONNECT_PY: &str = "import socket, sys\n\
s = socket.socket(socket.AF_UNIX)\n\
s.connect(sys.argv[1])\n\
s.sendall(b'POST /v1/chat/completions HTTP/1.0\\r\\ncontent-length: 2\\r\\n\\r\\n{}')\n\
print(s.recv(100))\n";

#[test]
fn other_host_users_cannot_reach_or_plant_a_task_socket() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::Slow(
            Duration::from_secs(8),
            Box::new(Reply::tool("task_complete", json!({"message": "ok"}))),
        ),
        Reply::tool("task_complete", json!({"message": "ok"})),
    ]);
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-gateway-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    let config = std::fs::read_to_string(s.path().join("config.yaml")).unwrap();
    let run_dir = config
        .lines()
        .find_map(|l| l.strip_prefix("run_dir: "))
        .unwrap()
        .to_string();
    s.write("p.md", "---\nmodel: gpt-test\n---\nAnything.\n");
    let id = s.submit("p.md");
    let mut serve = s
        .cmd(&["serve", "--drain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sock = Path::new(&run_dir).join(&id).join("gateway.sock");
    assert!(
        wait_for(Duration::from_secs(30), || llm.seen_count() == 1),
        "the task never called its gateway"
    );
    assert!(sock.exists(), "{} missing", sock.display());
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = std::fs::metadata(&run_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "run_dir mode {mode:o}");
    let meta = std::fs::metadata(&sock).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        meta.uid(),
        999,
        "the socket belongs to the servo's user (not the agent's 1000)"
    );
    let out = as_nobody(&["/usr/bin/python3", "-c", CONNECT_PY, sock.to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "nobody reached the socket: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("PermissionError"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(serve.wait().unwrap().success());
    assert_eq!(s.task(&id)["state"], "complete");
    assert_eq!(llm.seen_count(), 1, "nobody's call reached the provider");

    // A run directory another user made first is refused, with advice.
    let planted = format!("{run_dir}-planted");
    let out = as_nobody(&["mkdir", "-m", "777", &planted]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s2 = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-gateway-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    let cfg = std::fs::read_to_string(s2.path().join("config.yaml")).unwrap();
    let cfg: String = cfg
        .lines()
        .filter(|l| !l.starts_with("run_dir:"))
        .map(|l| format!("{l}\n"))
        .collect();
    s2.write("config.yaml", &format!("{cfg}run_dir: {planted}\n"));
    s2.write("p.md", "---\nmodel: gpt-test\n---\nAnything.\n");
    let out = s2.run(&["run", "p.md"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&planted);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&planted) && stderr.contains("owned by"),
        "{stderr}"
    );
    assert_eq!(llm.seen_count(), 1);
}
