//! Issue 29, when and how urgent: `deadline:` (an absolute time) beside
//! `timeout:`, enforced (the task ends `timeout` by then) and told to the
//! model, shown by `task status` and the API; `priority:` in the
//! front-matter, which `--priority` (or the API's `priority`) overrides.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::util::{Saheeli, require_docker, script};
use crate::web::{WebServe, get, post, until_api};

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A script whose one command outlasts any deadline the test sets.
fn long_script(s: &Saheeli) {
    s.write(
        "long.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "sleep 600", "timeout_s": 900}),
            ),
            ("task_complete", json!({"message": "too late"})),
        ]),
    );
}

#[test]
fn a_deadline_ends_the_task_as_timeout_and_the_model_is_told_it() {
    require_docker();
    let s = Saheeli::new();
    long_script(&s);
    let at = SystemTime::now() + Duration::from_secs(25);
    s.write(
        "p.md",
        &format!(
            "---\nmodel: replay:long.json\ntimeout: 1h\ndeadline: {}\n---\nWait.\n",
            rfc3339(at)
        ),
    );
    let id = s.submit("p.md");
    let t = s.expect_json(&["task", "status", &id, "--json"], 0);
    assert_eq!(t["deadline"], rfc3339(at));
    let text = s.expect(&["task", "status", &id], 0);
    assert!(
        text.contains(&format!("deadline:  {}", rfc3339(at))),
        "{text}"
    );
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let api = get(&w.addr, &format!("/api/tasks/{id}")).json();
    assert_eq!(api["deadline"], rfc3339(at));
    let t = until_api(&w, &id, "ended by the deadline", |t| {
        t["state"] == "incomplete"
    });
    assert_eq!(t["reason"], "timeout", "{t:#}");
    let ended = humantime::parse_rfc3339(t["finished_at"].as_str().unwrap()).unwrap();
    assert!(
        ended + Duration::from_secs(1) >= at - Duration::from_secs(3),
        "{t:#}"
    );
    let dir = std::path::Path::new(t["results"].as_str().unwrap());
    let session = std::fs::read_to_string(dir.join(format!("servo-{id}-session.json"))).unwrap();
    assert!(
        session.contains(&format!(
            "This task has a deadline: it is stopped at {} (UTC) at the latest, and after 1h of work",
            rfc3339(at)
        )),
        "{session}"
    );
    let audit = std::fs::read_to_string(dir.join(format!("servo-{id}-audit.log"))).unwrap();
    assert!(audit.contains("the task's deadline passed"), "{audit}");
}

#[test]
fn a_deadline_that_has_passed_or_is_no_time_is_refused_at_submit() {
    let s = Saheeli::new();
    s.write(
        "x.json",
        &script(&[("task_complete", json!({"message": "m"}))]),
    );
    s.write(
        "past.md",
        "---\nmodel: replay:x.json\ndeadline: 2001-01-01T00:00:00Z\n---\nGo.\n",
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "past.md"], 2);
    assert!(
        err.contains("`deadline` 2001-01-01T00:00:00Z has passed already"),
        "{err}"
    );
    s.write(
        "bad.md",
        "---\nmodel: replay:x.json\ndeadline: tomorrow\n---\nGo.\n",
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "bad.md"], 2);
    assert!(
        err.contains("`tomorrow` is not a time such as `2026-12-01T17:00:00Z`"),
        "{err}"
    );
}

#[test]
fn priority_comes_from_the_front_matter_unless_the_cli_or_api_says() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "x.json",
        &script(&[("task_complete", json!({"message": "m"}))]),
    );
    let prompt = "---\nmodel: replay:x.json\npriority: 7\n---\nGo.\n";
    s.write("p.md", prompt);
    let id = s.submit("p.md");
    let t: Value = s.expect_json(&["task", "status", &id, "--json"], 0);
    assert_eq!(t["priority"], 7);
    let out = s.expect(
        &[
            "task",
            "submit",
            "--prompt",
            "p.md",
            "--priority",
            "-2",
            "--json",
        ],
        0,
    );
    let id2 = serde_json::from_str::<Value>(&out).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        s.expect_json(&["task", "status", &id2, "--json"], 0)["priority"],
        -2
    );
    // The API: without `priority`, the front-matter's; with it, that.
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    for (body, want) in [
        (json!({"prompt": prompt, "name": "a.md"}), 7),
        (json!({"prompt": prompt, "name": "b.md", "priority": 3}), 3),
    ] {
        let r = post(&w.addr, "/api/tasks", body);
        assert_eq!(r.status, 201, "{}", r.body);
        let id = r.json()["id"].as_str().unwrap().to_string();
        assert_eq!(
            get(&w.addr, &format!("/api/tasks/{id}")).json()["priority"],
            want
        );
    }
    // The dry run lists it with its source.
    let dry = s.expect(&["run", "p.md", "--dry-run"], 0);
    assert!(dry.contains("priority"), "{dry}");
}
