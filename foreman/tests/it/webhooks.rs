//! Issue 13 (webhooks): every event a webhook asks for is delivered,
//! signed, once per event id and in order per task, through a receiver
//! that is down for a while and a foreman killed with `kill -9`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::human::Serve;
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, replay_prompt, require_docker, script};

pub const SECRET: &str = "whsec_test_secret";

/// What the receiver got: (event id, type, task id, URL query), in
/// arrival order.
pub type Got = Arc<Mutex<Vec<(String, String, String, String)>>>;

/// A webhook receiver on 127.0.0.1 that checks every signature.
pub struct Receiver {
    port: u16,
    pub got: Got,
    pub bad: Arc<Mutex<Vec<String>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Receiver {
    pub fn new() -> Receiver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Receiver {
            port,
            got: Arc::default(),
            bad: Arc::default(),
            runtime: None,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub fn start(&mut self) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", self.port)))
            .unwrap();
        let app = Router::new()
            .route("/hook", post(hook))
            .with_state((self.got.clone(), self.bad.clone()));
        rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
        self.runtime = Some(rt);
    }

    /// Down: the port refuses connections.
    pub fn stop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

async fn hook(
    State((got, bad)): State<(Got, Arc<Mutex<Vec<String>>>)>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let sig = headers
        .get("saheeli-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !verify(sig, &body) {
        bad.lock().unwrap().push(sig.to_string());
        return StatusCode::UNAUTHORIZED;
    }
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        headers.get("saheeli-event-id").unwrap().to_str().unwrap(),
        v["id"].as_str().unwrap()
    );
    got.lock().unwrap().push((
        v["id"].as_str().unwrap().to_string(),
        v["type"].as_str().unwrap().to_string(),
        v["task"]["id"].as_str().unwrap().to_string(),
        uri.query().unwrap_or("").to_string(),
    ));
    StatusCode::OK
}

/// How a receiver checks a delivery (as the README tells it to).
pub fn verify(header: &str, body: &[u8]) -> bool {
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", x)) => t = Some(x.to_string()),
            Some(("v1", x)) => v1 = Some(x.to_string()),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    let want: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    want == v1
}

fn pending(s: &Saheeli, ids: &[String]) -> i64 {
    ids.iter()
        .map(|id| s.task(id)["webhooks"]["pending"].as_i64().unwrap_or(0))
        .sum()
}

#[test]
fn every_event_is_delivered_signed_once_and_in_order_through_outages() {
    require_docker();
    let mut rx = Receiver::new();
    let s = Saheeli::with_config(&format!(
        "lease: 2s\nnotify:\n  - url: {}\n    events: [all]\n",
        rx.url()
    ))
    .env("SAHEELI_WEBHOOK_SECRET", SECRET);
    s.write(
        "slow.json",
        &script(&[
            ("execute_shell", json!({"command": "sleep 2"})),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write("slow.md", &replay_prompt("slow.json", ""));
    // A second webhook on one task only, for its completion only.
    s.write(
        "one.md",
        &replay_prompt(
            "slow.json",
            &format!(
                "notify:\n  - url: {}?only=done\n    events: [task.completed]\n",
                rx.url()
            ),
        ),
    );
    let mut ids: Vec<String> = (0..3).map(|_| s.submit("slow.md")).collect();
    ids.push(s.submit("one.md"));

    // The receiver is down while the first foreman runs; it is killed mid-run.
    let first = Serve::start(&s, &["-j", "4"]);
    assert!(wait_for(Duration::from_secs(60), || ids
        .iter()
        .all(|id| s.task(id)["state"] == "running")));
    first.kill9();
    rx.start();
    let second = Serve::start(&s, &[]);
    let done = wait_for(Duration::from_secs(120), || {
        ids.iter().all(|id| s.task(id)["state"] == "complete") && pending(&s, &ids) == 0
    });
    assert!(
        done,
        "{:#?}\n{}",
        ids.iter().map(|i| s.task(i)).collect::<Vec<_>>(),
        second.log()
    );
    drop(second);
    rx.stop();

    assert!(
        rx.bad.lock().unwrap().is_empty(),
        "bad signatures: {:?}",
        rx.bad.lock().unwrap()
    );
    let got = rx.got.lock().unwrap().clone();
    // Every event at least once; a repeat only of an event whose 2xx the
    // killed foreman could not record (at least once), never a new id.
    let mut per_task: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    for (eid, kind, task, url) in &got {
        let n: u64 = eid.trim_start_matches("evt_").parse().unwrap();
        if seen.insert((eid.clone(), url.clone())) {
            per_task
                .entry(task.clone())
                .or_default()
                .push((n, kind.clone()));
        }
    }
    let repeats = got.len() - seen.len();
    eprintln!(
        "{} deliveries, {} repeated after the kill -9",
        got.len(),
        repeats
    );
    for id in &ids {
        let events = per_task
            .get(id)
            .unwrap_or_else(|| panic!("nothing for {id}: {got:?}"));
        let kinds: Vec<&str> = events.iter().map(|(_, k)| k.as_str()).collect();
        let mut wanted = vec!["task.queued", "task.started", "task.completed"];
        if id == ids.last().unwrap() {
            // Its own webhook adds one more `task.completed`, to another URL.
            wanted.push("task.completed");
        }
        for w in &wanted {
            assert!(kinds.contains(w), "{id}: {kinds:?}");
        }
        // In order per task and URL: event ids only grow.
        let main: Vec<u64> = events.iter().map(|(n, _)| *n).collect();
        let mut sorted = main.clone();
        sorted.sort();
        assert!(
            main == sorted || id == ids.last().unwrap(),
            "{id}: out of order {events:?}"
        );
    }
    let t = s.task(&ids[0]);
    assert!(t["webhooks"]["delivered"].as_i64().unwrap() >= 3, "{t:#}");
    // And in the metrics: every row delivered, none pending or dead.
    let m = crate::metrics::parse(&s.expect(&["metrics"], 0));
    let hooks = |state| crate::metrics::get(&m, "saheeli_webhook_deliveries", &[("state", state)]);
    assert_eq!(
        (hooks("delivered"), hooks("pending"), hooks("dead")),
        (13.0, 0.0, 0.0)
    );
    assert_eq!(t["webhooks"]["dead"], 0);
}

#[test]
fn serve_drain_delivers_the_last_webhooks_before_it_exits() {
    require_docker();
    let mut rx = Receiver::new();
    rx.start();
    let s = Saheeli::with_config(&format!(
        "notify:\n  - url: {}\n    events: [all]\n",
        rx.url()
    ))
    .env("SAHEELI_WEBHOOK_SECRET", SECRET);
    s.write(
        "t.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write("t.md", &replay_prompt("t.json", ""));
    let ids: Vec<String> = (0..3).map(|_| s.submit("t.md")).collect();
    // Nothing but the drain itself is waited for: when it returns, every
    // event of every task has reached the receiver.
    s.expect(&["serve", "--drain"], 0);
    assert_eq!(
        pending(&s, &ids),
        0,
        "webhooks left pending after the drain"
    );
    let got = rx.got.lock().unwrap().clone();
    for id in &ids {
        let kinds: Vec<&str> = got
            .iter()
            .filter(|(_, _, t, _)| t == id)
            .map(|(_, k, _, _)| k.as_str())
            .collect();
        assert!(kinds.contains(&"task.completed"), "{id}: {kinds:?}");
    }
    rx.stop();
}
