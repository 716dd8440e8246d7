//! Issue 13, HTTP API: `saheeli serve --http` with real Docker. Every
//! route, errors as JSON with their status codes, SSE resume with
//! `Last-Event-ID`, and the security rules (non-loopback needs a token,
//! no token → 401, cross-site posts refused).
//!
//! Requests go over a plain `TcpStream` in HTTP/1.0 (no client library
//! between the test and the wire), so headers such as `Origin` and `Host`
//! are exactly what the test says.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

use crate::human::Serve;
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, require_docker, script};

/// A `saheeli serve --http 127.0.0.1:0` and the address it listens on.
pub struct WebServe {
    pub serve: Serve,
    pub addr: String,
}

impl WebServe {
    pub fn start(s: &Saheeli, http: &str, extra: &[&str]) -> WebServe {
        let mut args = vec!["--http", http];
        args.extend_from_slice(extra);
        let serve = Serve::start(s, &args);
        let mut addr = None;
        let up = wait_for(Duration::from_secs(60), || {
            addr = serve
                .log()
                .split("url=http://")
                .nth(1)
                .and_then(|rest| rest.split('/').next())
                .map(String::from);
            addr.is_some()
        });
        assert!(up, "the dashboard never listened\n{}", serve.log());
        WebServe {
            serve,
            addr: addr.unwrap(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// A response: status, lower-cased header lines, body.
pub struct Res {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

impl Res {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    /// Asserts an API error: the status and `error.kind`; returns the message.
    pub fn error(&self, status: u16, kind: &str) -> String {
        assert_eq!(self.status, status, "{}", self.body);
        let v = self.json();
        assert_eq!(v["error"]["kind"], kind, "{v}");
        v["error"]["message"].as_str().unwrap().to_string()
    }
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    // A bound on a hung server, not a timing assertion.
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s
}

fn write_request(
    s: &mut TcpStream,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) {
    let mut req = format!("{method} {path} HTTP/1.0\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
}

/// One request; the whole response.
pub fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Res {
    let mut s = connect(addr);
    write_request(&mut s, addr, method, path, headers, body);
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Res {
        status,
        headers: head.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

pub fn get(addr: &str, path: &str) -> Res {
    request(addr, "GET", path, &[], "")
}

pub fn post(addr: &str, path: &str, body: Value) -> Res {
    request(addr, "POST", path, &[JSON], &body.to_string())
}

/// One server-sent event.
#[derive(Clone, Debug, PartialEq)]
pub struct Sse {
    pub event: String,
    pub id: String,
    pub data: Value,
}

/// Reads a stream's events until `stop` says so (or the stream ends).
pub fn sse(
    addr: &str,
    path: &str,
    last_id: Option<&str>,
    mut stop: impl FnMut(&Sse) -> bool,
) -> Vec<Sse> {
    let mut s = connect(addr);
    let mut headers = vec![("Accept", "text/event-stream")];
    if let Some(id) = last_id {
        headers.push(("Last-Event-ID", id));
    }
    write_request(&mut s, addr, "GET", path, &headers, "");
    let mut r = BufReader::new(s);
    let mut line = String::new();
    // The status line and headers.
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the stream closed before its headers");
        if line == "\r\n" {
            break;
        }
    }
    let mut out = Vec::new();
    let (mut event, mut id, mut data) = (String::new(), String::new(), String::new());
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap() == 0 {
            return out;
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            if !data.is_empty() {
                let e = Sse {
                    event: std::mem::take(&mut event),
                    id: std::mem::take(&mut id),
                    data: serde_json::from_str(&std::mem::take(&mut data)).unwrap(),
                };
                let done = stop(&e);
                out.push(e);
                if done {
                    return out;
                }
            }
            continue;
        }
        if let Some(v) = l.strip_prefix("event:") {
            event = v.trim().into();
        } else if let Some(v) = l.strip_prefix("id:") {
            id = v.trim().into();
        } else if let Some(v) = l.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
}

/// A replay task: a few shell steps, then `task_complete`.
fn steps_script(s: &Saheeli) {
    s.write(
        "steps.json",
        &script(&[
            ("execute_shell", json!({"command": "echo one"})),
            ("execute_shell", json!({"command": "echo two"})),
            ("execute_shell", json!({"command": "echo three > out.txt"})),
            ("task_complete", json!({"message": "three steps"})),
        ]),
    );
}

/// A replay task that asks a question, then completes.
fn ask_script(s: &Saheeli) {
    s.write(
        "ask.json",
        &script(&[
            ("ask_user", json!({"question": "Which branch?"})),
            ("task_complete", json!({"message": "asked"})),
        ]),
    );
}

pub fn until_api(w: &WebServe, id: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let ok = wait_for(Duration::from_secs(90), || {
        last = get(&w.addr, &format!("/api/tasks/{id}")).json();
        f(&last)
    });
    assert!(
        ok,
        "{what}: never happened\n{last:#}\n--- serve log\n{}",
        w.serve.log()
    );
    last
}

#[test]
fn every_route_answers_json_with_the_right_status() {
    require_docker();
    let s = Saheeli::new();
    ask_script(&s);
    steps_script(&s);
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let a = &w.addr;

    // Submit: the same validation as the CLI, as JSON.
    let bad = post(
        a,
        "/api/tasks",
        json!({"prompt": "---\nmodle: x\n---\nHi\n"}),
    );
    let msg = bad.error(400, "bad_input");
    assert!(
        msg.contains("unknown field `modle`") && msg.contains("prompt.md:2"),
        "{msg}"
    );
    post(a, "/api/tasks", json!({"prompt": ""})).error(400, "bad_input");
    post(a, "/api/tasks", json!({"promt": "x"})).error(400, "bad_input");
    request(a, "POST", "/api/tasks", &[JSON], "{not json").error(400, "bad_input");
    let outside = post(
        a,
        "/api/tasks",
        json!({"prompt": "---\nmodel: replay:steps.json\nworkspace: /etc\n---\nLook.\n"}),
    );
    assert!(
        outside.error(400, "bad_input").contains("outside"),
        "{}",
        outside.body
    );
    let created = post(
        a,
        "/api/tasks",
        json!({"prompt": "---\nmodel: replay:ask.json\npark_after: 60s\n---\nAsk.\n", "priority": 5}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.json()["id"].as_str().unwrap().to_string();
    assert_eq!(created.json()["task"]["priority"], 5);

    // Lists and filters.
    let all = get(a, "/api/tasks").json();
    assert!(
        all.as_array().unwrap().iter().any(|t| t["id"] == id),
        "{all}"
    );
    get(a, "/api/tasks?state=bogus").error(400, "bad_input");
    get(a, "/api/tasks?limit=0").error(400, "bad_input");
    get(a, "/api/tasks?since=yesterday").error(400, "bad_input");
    get(a, "/api/tasks?whatever=1").error(400, "bad_input");
    let future = get(a, "/api/tasks?since=2999-01-01T00:00:00Z").json();
    assert_eq!(future, json!([]));
    let recent = get(a, "/api/tasks?since=1h&limit=1").json();
    assert_eq!(recent.as_array().unwrap().len(), 1, "{recent}");

    // One task: the object `task status ID --json` prints.
    let t = until_api(&w, &id, "waiting", |t| t["state"] == "waiting_human");
    let cli = s.task(&id);
    for key in [
        "id",
        "title",
        "state",
        "waiting_for",
        "events",
        "attempts",
        "prompt",
    ] {
        assert_eq!(t[key], cli[key], "{key}");
    }
    get(a, "/api/tasks/0190c0de-0000-7000-8000-000000000000").error(404, "not_found");
    get(a, "/api/tasks/not-an-id").error(404, "not_found");

    // Actions: what the CLI does, refused with 409 in the wrong state.
    let m = post(a, &format!("/api/tasks/{id}/approve"), json!({})).error(409, "wrong_state");
    assert!(m.contains("waits for an answer"), "{m}");
    post(a, &format!("/api/tasks/{id}/pause"), json!({})).error(409, "wrong_state");
    post(a, &format!("/api/tasks/{id}/resume"), json!({})).error(409, "wrong_state");
    post(a, &format!("/api/tasks/{id}/answer"), json!({})).error(400, "bad_input");
    post(a, &format!("/api/tasks/{id}/answer"), json!({"txt": "x"})).error(400, "bad_input");
    post(a, &format!("/api/tasks/{id}/frobnicate"), json!({})).error(404, "not_found");
    post(
        a,
        "/api/tasks/0190c0de-0000-7000-8000-000000000000/cancel",
        json!({}),
    )
    .error(404, "not_found");
    let injected = post(
        a,
        &format!("/api/tasks/{id}/inject"),
        json!({"text": "use main"}),
    );
    assert_eq!(injected.status, 200, "{}", injected.body);
    assert!(
        injected.json()["message"]
            .as_str()
            .unwrap()
            .contains("message queued")
    );
    let answered = post(
        a,
        &format!("/api/tasks/{id}/answer"),
        json!({"text": "main"}),
    );
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert!(
        answered.json()["message"]
            .as_str()
            .unwrap()
            .starts_with("answer recorded")
    );
    let done = until_api(&w, &id, "complete", |t| t["state"] == "complete");
    let answered_by = done["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "answered")
        .unwrap()["by"]
        .clone();
    assert!(
        answered_by.as_str().unwrap().ends_with("(http)"),
        "{answered_by}"
    );
    post(a, &format!("/api/tasks/{id}/cancel"), json!({})).error(409, "wrong_state");
    post(
        a,
        &format!("/api/tasks/{id}/inject"),
        json!({"text": "late"}),
    )
    .error(409, "wrong_state");

    // Results: the report, the patch, a listing, a file.
    let report = get(a, &format!("/api/tasks/{id}/report"));
    assert_eq!(report.status, 200);
    assert!(
        report.headers.contains("content-type: text/plain"),
        "{}",
        report.headers
    );
    assert!(report.headers.contains("sandbox"), "{}", report.headers);
    assert!(report.body.contains("complete"), "{}", report.body);
    assert_eq!(get(a, &format!("/api/tasks/{id}/patch")).status, 200);
    let files = get(a, &format!("/api/tasks/{id}/files")).json();
    assert!(
        files["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["path"] == "complete.json"),
        "{files}"
    );
    let cj = get(a, &format!("/api/tasks/{id}/files/complete.json"));
    assert_eq!(cj.status, 200);
    assert!(cj.body.contains("asked"), "{}", cj.body);
    get(a, &format!("/api/tasks/{id}/files/nope.txt")).error(404, "not_found");
    get(a, &format!("/api/tasks/{id}/files/../../etc/passwd")).error(400, "bad_input");

    // Retry: a new task from the same prompt; pause, resume and cancel it.
    let r = post(a, &format!("/api/tasks/{id}/retry"), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let new = r.json()["id"].as_str().unwrap().to_string();
    assert_eq!(r.json()["retry_of"], id);
    let p = post(a, &format!("/api/tasks/{new}/pause"), json!({}));
    assert_eq!(p.status, 200, "{}", p.body);
    let p = post(a, &format!("/api/tasks/{new}/resume"), json!({}));
    assert_eq!(p.status, 200, "{}", p.body);
    let c = post(a, &format!("/api/tasks/{new}/cancel"), json!({}));
    assert_eq!(c.status, 200, "{}", c.body);
    until_api(&w, &new, "cancelled", |t| t["state"] == "cancelled");
    post(a, &format!("/api/tasks/{new}/approve"), json!({})).error(409, "wrong_state");
    // Unknown routes are JSON errors too.
    get(a, "/api/nothing").error(404, "not_found");
}

#[test]
fn sse_streams_resume_after_last_event_id() {
    require_docker();
    let s = Saheeli::new();
    steps_script(&s);
    let w = WebServe::start(&s, "127.0.0.1:0", &[]);
    let a = w.addr.clone();
    let created = post(
        &a,
        "/api/tasks",
        json!({"prompt": "---\ntitle: three steps\nmodel: replay:steps.json\n---\nGo.\n"}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.json()["id"].as_str().unwrap().to_string();
    // Opened at once: the audit lines come live from the container.
    let path = format!("/api/tasks/{id}/events");
    let full = sse(&a, &path, None, |e| e.event == "end");
    assert_eq!(full.last().unwrap().event, "end", "{full:#?}");
    assert_eq!(full.last().unwrap().data["state"], "complete");
    let audit: Vec<&Sse> = full.iter().filter(|e| e.event == "audit").collect();
    let texts: Vec<&str> = audit
        .iter()
        .map(|e| e.data["text"].as_str().unwrap())
        .collect();
    for want in ["echo one", "echo two", "echo three", "task_complete"] {
        assert!(texts.iter().any(|t| t.contains(want)), "{want}: {texts:#?}");
    }
    let states: Vec<&str> = full
        .iter()
        .filter(|e| e.event == "task" && e.data["kind"].is_null())
        .map(|e| e.data["to"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["queued", "starting", "running", "complete"],
        "{full:#?}"
    );
    // Each message has its own id (`end` repeats the last: nothing follows).
    let ids: Vec<&str> = full[..full.len() - 1]
        .iter()
        .map(|e| e.id.as_str())
        .collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids, unique);

    // Resuming after any message gives exactly the rest, nothing twice and
    // nothing lost, though the lines now come from the collected audit log
    // (events and lines may interleave differently: compared as sets).
    let content = |es: &[Sse]| {
        let mut v: Vec<String> = es
            .iter()
            .filter(|e| e.event != "end")
            .map(|e| format!("{} {}", e.event, e.data))
            .collect();
        v.sort();
        v
    };
    for cut in [1, full.len() / 2, full.len() - 2] {
        let rest = sse(&a, &path, Some(&full[cut].id), |e| e.event == "end");
        assert_eq!(
            content(&rest),
            content(&full[cut + 1..]),
            "resumed after {}",
            full[cut].id
        );
        assert_eq!(rest.last().unwrap().event, "end");
    }
    let m = request(&a, "GET", &path, &[("Last-Event-ID", "garbage")], "");
    m.error(400, "bad_input");

    // The stream of every task: resumed from an event id, it replays the
    // trail after it, in order.
    let all = sse(&a, "/api/events", Some("0"), |e| e.data["to"] == "complete");
    let seqs: Vec<i64> = all
        .iter()
        .map(|e| e.data["seq"].as_i64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|p| p[0] < p[1]), "{seqs:?}");
    assert_eq!(all[0].id, seqs[0].to_string());
    let again = sse(&a, "/api/events", Some(&all[1].id), |e| {
        e.data["to"] == "complete"
    });
    assert_eq!(again, all[2..].to_vec());
}

#[test]
fn a_non_loopback_address_needs_a_token() {
    // Refused before anything starts, naming the setting.
    let s = Saheeli::new();
    let err = s.expect_err(&["serve", "--http", "0.0.0.0:0"], 2);
    assert!(
        err.contains("SAHEELI_HTTP_TOKEN") && err.contains("`--http`"),
        "{err}"
    );
    s.write(
        "config.yaml",
        &format!(
            "{}http:\n  addr: 0.0.0.0:0\n  token_env: MY_TOKEN\n",
            std::fs::read_to_string(s.path().join("config.yaml")).unwrap()
        ),
    );
    let err = s.expect_err(&["serve"], 2);
    assert!(
        err.contains("MY_TOKEN") && err.contains("http.addr"),
        "{err}"
    );
    let s = s.env("MY_TOKEN", "short");
    let err = s.expect_err(&["serve"], 2);
    assert!(err.contains("at least 16"), "{err}");
    let err = s.expect_err(&["serve", "--http", "localhost"], 2);
    assert!(err.contains("not an `IP:PORT`"), "{err}");
}

#[test]
fn with_a_token_every_request_needs_it_and_cross_site_posts_are_refused() {
    require_docker();
    const TOKEN: &str = "test-token-0123456789abcdef";
    let s = Saheeli::new().env("SAHEELI_HTTP_TOKEN", TOKEN);
    steps_script(&s);
    // Loopback, yet with a token set it is required.
    let w = WebServe::start(&s, "127.0.0.1:0", &[]);
    let a = &w.addr;
    let bearer = format!("Bearer {TOKEN}");
    let auth = ("Authorization", bearer.as_str());
    let prompt = json!({"prompt": "---\nmodel: replay:steps.json\n---\nGo.\n"}).to_string();

    let m = request(a, "POST", "/api/tasks", &[JSON], &prompt).error(401, "unauthorized");
    assert!(m.contains("Bearer"), "{m}");
    get(a, "/api/tasks").error(401, "unauthorized");
    get(a, "/api/events").error(401, "unauthorized");
    request(
        a,
        "GET",
        "/api/tasks",
        &[("Authorization", "Bearer wrong-token-0123456789")],
        "",
    )
    .error(401, "unauthorized");
    // Pages send people to the login page; the page itself is public.
    let page = get(a, "/");
    assert_eq!(page.status, 303, "{}", page.headers);
    assert!(
        page.headers.contains("location: /login"),
        "{}",
        page.headers
    );
    assert_eq!(get(a, "/login").status, 200);
    assert_eq!(get(a, "/assets/app.js").status, 303);

    // Cross-site: refused even with the token, and nothing is queued.
    let evil = request(
        a,
        "POST",
        "/api/tasks",
        &[auth, JSON, ("Origin", "http://evil.example")],
        &prompt,
    );
    assert!(evil.error(403, "cross_site").contains("evil.example"));
    let fetch = request(
        a,
        "POST",
        "/api/tasks",
        &[auth, JSON, ("Sec-Fetch-Site", "cross-site")],
        &prompt,
    );
    fetch.error(403, "cross_site");
    let form = request(
        a,
        "POST",
        "/api/tasks",
        &[auth, ("Content-Type", "text/plain")],
        &prompt,
    );
    assert_eq!(form.status, 415, "{}", form.body);
    let listed = request(a, "GET", "/api/tasks", &[auth], "").json();
    assert_eq!(listed, json!([]));

    // The token as a bearer header works.
    let ok = request(
        a,
        "POST",
        "/api/tasks",
        &[auth, JSON, ("Origin", &format!("http://{a}"))],
        &prompt,
    );
    assert_eq!(ok.status, 201, "{}", ok.body);

    // The login page: a wrong token is refused, the right one sets a
    // strict, HTTP-only session cookie that then works.
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let bad = request(a, "POST", "/login", &[form], "token=nope");
    assert_eq!(bad.status, 401);
    assert!(!bad.headers.contains("set-cookie"), "{}", bad.headers);
    let cross = request(
        a,
        "POST",
        "/login",
        &[form, ("Origin", "http://evil.example")],
        &format!("token={TOKEN}"),
    );
    assert_eq!(cross.status, 403);
    let good = request(a, "POST", "/login", &[form], &format!("token={TOKEN}"));
    assert_eq!(good.status, 303, "{}", good.body);
    let cookie_line = good
        .headers
        .lines()
        .find(|l| l.starts_with("set-cookie:"))
        .unwrap()
        .to_string();
    assert!(
        cookie_line.contains("httponly") && cookie_line.contains("samesite=strict"),
        "{cookie_line}"
    );
    let cookie = cookie_line["set-cookie:".len()..]
        .split(';')
        .next()
        .unwrap()
        .trim()
        .to_string();
    let with = request(a, "GET", "/api/tasks", &[("Cookie", &cookie)], "");
    assert_eq!(with.status, 200, "{}", with.body);
    assert_eq!(with.json().as_array().unwrap().len(), 1);
    let html = request(a, "GET", "/", &[("Cookie", &cookie)], "");
    assert_eq!(html.status, 200);
    assert!(html.body.contains("Log out"), "{}", html.body);
    assert!(
        html.headers
            .contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{}",
        html.headers
    );
}

#[test]
fn without_a_token_only_loopback_hosts_are_answered() {
    require_docker();
    let s = Saheeli::new();
    let w = WebServe::start(&s, "127.0.0.1:0", &[]);
    // A page elsewhere that rebinds its name to 127.0.0.1 sends its own Host.
    let r = request(
        &w.addr,
        "GET",
        "/api/tasks",
        &[("Host", "evil.example:7878")],
        "",
    );
    r.error(403, "cross_site");
    let r = request(
        &w.addr,
        "GET",
        "/api/tasks",
        &[("Host", "localhost:7878")],
        "",
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // A cross-site POST without any token is refused as well.
    let p = request(
        &w.addr,
        "POST",
        "/api/tasks",
        &[JSON, ("Origin", "http://evil.example")],
        &json!({"prompt": "Hi"}).to_string(),
    );
    p.error(403, "cross_site");
    assert_eq!(get(&w.addr, "/api/tasks").json(), json!([]));
    // Issue 24: with no token there is nothing to log out of.
    let page = get(&w.addr, "/");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<main"), "{}", page.body);
    assert!(!page.body.contains("Log out"), "{}", page.body);
}
