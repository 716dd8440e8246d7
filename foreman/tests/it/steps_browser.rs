//! Issue 29, the steps card in a real browser (headless Chromium over
//! WebDriver, as `web_browser`): steps n/m with their state, the current
//! step highlighted, the deadline; a breakpoint set, a step skipped with
//! a reason, `Step ▸` (one step, then paused again), a gated step denied
//! then approved, and the breakpoint paused at, all by clicking. The
//! screenshots are saved beside the other dashboard tests'.

use std::time::{Duration, SystemTime};

use fantoccini::{Client, Locator};
use serde_json::json;

use crate::util::{Saheeli, require_docker, script};
use crate::web::{WebServe, get};
use crate::web_browser::{Driver, browser, save_screenshot, until};

/// The element's text, or "" when there is none. An element redrawn
/// between finding and reading it (the page refreshes as the task
/// changes) is found again, not read as empty.
pub async fn text(c: &Client, css: &str) -> String {
    for _ in 0..50 {
        let Ok(e) = c.find(Locator::Css(css)).await else {
            return String::new();
        };
        match e.text().await {
            Ok(t) => return t,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    String::new()
}

/// The card's `Steps n/m` (as read: CSS may set its case).
async fn count(c: &Client) -> String {
    text(c, "#steps-count").await.to_lowercase()
}

async fn class(c: &Client, css: &str) -> String {
    for _ in 0..50 {
        let Ok(e) = c.find(Locator::Css(css)).await else {
            return String::new();
        };
        match e.attr("class").await {
            Ok(v) => return v.unwrap_or_default(),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    String::new()
}

pub async fn state(c: &Client) -> String {
    match c.find(Locator::Css("#state .badge")).await {
        Ok(b) => b
            .attr("data-state")
            .await
            .ok()
            .flatten()
            .unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Clicks the element; found again when the card was redrawn between
/// finding and clicking it (the page refreshes as the task changes).
pub async fn click(c: &Client, css: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let element = c
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        match element.click().await {
            Ok(()) => return,
            Err(e)
                if e.to_string().contains("stale element")
                    && std::time::Instant::now() < deadline =>
            {
                continue;
            }
            Err(e) => panic!("clicking {css}: {e}"),
        }
    }
}

/// `a` (a breakpoint before it), `b` (approval needed), `c`, `d` (never
/// touched by the model: a person skips it).
const PROMPT: &str = "---\nmodel: replay:steps.json\npark_after: 120s\ndeadline: DEADLINE\nsteps:\n\
    \x20 - { name: a, description: Read, breakpoint: before }\n\
    \x20 - { name: b, description: Deploy, approve: true }\n\
    \x20 - { name: c, description: Check, done_when: { verify: \"test -f deployed\" } }\n\
    \x20 - { name: d, description: Announce }\n---\nDo the steps.\n";

#[test]
fn the_steps_card_drives_breakpoints_skip_step_and_a_gate_in_a_browser() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "steps.json",
        &script(&[
            ("step_start", json!({"name": "a"})),
            ("step_done", json!({"name": "a", "evidence": "read it"})),
            ("step_start", json!({"name": "b"})),
            ("step_start", json!({"name": "b"})),
            ("execute_shell", json!({"command": "touch deployed"})),
            ("step_done", json!({"name": "b", "evidence": "deployed"})),
            ("step_start", json!({"name": "c"})),
            ("step_done", json!({"name": "c", "evidence": "checked"})),
            ("task_complete", json!({"message": "done, d skipped"})),
        ]),
    );
    let deadline = humantime::format_rfc3339_seconds(SystemTime::now() + Duration::from_secs(3600))
        .to_string();
    s.write("p.md", &PROMPT.replace("DEADLINE", &deadline));
    let id = s.submit("p.md");
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let driver = Driver::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = browser(&driver).await;
        c.goto(&w.url(&format!("/tasks/{id}"))).await.unwrap();

        // Paused at the template's breakpoint before `a`: 0/4, `a` current.
        until("paused before a", || async { state(&c).await == "paused" }).await;
        until("the steps card", || async {
            count(&c).await == "steps 0/4"
        })
        .await;
        assert!(class(&c, "li[data-step='a']").await.contains("current"));
        assert!(
            class(&c, "button.bp[data-step='a'][data-pos='before']")
                .await
                .contains("on")
        );
        let facts = text(&c, "#facts").await.to_lowercase();
        assert!(facts.contains("deadline"), "{facts}");
        assert!(
            text(&c, "li[data-step='c']")
                .await
                .contains("test -f deployed passes (checked)"),
            "the checked step says what is checked"
        );
        save_screenshot(&c, "steps-paused-before-a.png").await;

        // A breakpoint after `c`, and `d` skipped with a reason.
        click(&c, "button.bp[data-step='c'][data-pos='after']").await;
        until("the breakpoint after c is on", || async {
            class(&c, "button.bp[data-step='c'][data-pos='after']")
                .await
                .contains("on")
        })
        .await;
        click(&c, "button.ov[data-step='d'][data-to='skipped']").await;
        c.send_alert_text("announced by hand in the channel")
            .await
            .unwrap();
        c.accept_alert().await.unwrap();
        until("d is skipped", || async {
            class(&c, "li[data-step='d']").await.contains("s-skipped")
        })
        .await;
        assert!(
            text(&c, "li[data-step='d']")
                .await
                .contains("announced by hand in the channel"),
            "who and why are shown"
        );

        // Step ▸: `a` ends, and the task pauses again before `b` starts.
        click(&c, "#step-once").await;
        until("a done and paused again", || async {
            class(&c, "li[data-step='a']").await.contains("s-completed")
                && state(&c).await == "paused"
        })
        .await;
        assert_eq!(count(&c).await, "steps 2/4");
        assert!(class(&c, "li[data-step='b']").await.contains("current"));
        // What it does next is shown while it is paused.
        let next = text(&c, "#next-step").await;
        assert!(
            next.starts_with("next: b") && next.contains("needs approval"),
            "{next}"
        );
        save_screenshot(&c, "steps-stepped-one.png").await;

        // Resumed: `b` asks for approval; denied with a reason, then approved.
        click(&c, "#resume").await;
        until("b waits for approval", || async {
            state(&c).await == "waiting_human" && c.find(Locator::Css("#deny")).await.is_ok()
        })
        .await;
        assert!(text(&c, "#waiting").await.contains("step_start"));
        save_screenshot(&c, "steps-gate.png").await;
        c.find(Locator::Css("#decision-text"))
            .await
            .unwrap()
            .send_keys("not before the freeze ends")
            .await
            .unwrap();
        click(&c, "#deny").await;
        // Asked again (the model's second step_start): known from the API,
        // so the click below meets a task that waits.
        until("asked again after the denial", || async {
            let t = get(&w.addr, &format!("/api/tasks/{id}")).json();
            let asked = t["events"]
                .as_array()
                .map_or(0, |e| e.iter().filter(|e| e["kind"] == "asked").count());
            t["state"] == "waiting_human" && asked == 2
        })
        .await;
        until("the page shows the approval again", || async {
            state(&c).await == "waiting_human"
                && text(&c, "#timeline").await.contains("denied")
                && c.find(Locator::Css("#approve")).await.is_ok()
        })
        .await;
        click(&c, "#approve").await;

        // `b` and `c` run; the breakpoint after `c` pauses it.
        until("paused after c", || async {
            class(&c, "li[data-step='c']").await.contains("s-completed")
                && state(&c).await == "paused"
        })
        .await;
        assert_eq!(count(&c).await, "steps 4/4");
        save_screenshot(&c, "steps-paused-after-c.png").await;
        click(&c, "#resume").await;
        until("complete", || async { state(&c).await == "complete" }).await;
        save_screenshot(&c, "steps-complete.png").await;
        c.close().await.unwrap();
    });
    let t = s.task(&id);
    assert_eq!(t["state"], "complete", "{t:#}");
    let kinds: Vec<&str> = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    for k in [
        "breakpoint",
        "denied",
        "approved",
        "step_override",
        "step_check",
    ] {
        assert!(kinds.contains(&k), "{k}: {kinds:?}");
    }
    drop(w);
}
