//! Issue 51 in the dashboard: a task whose servo is frozen while it waits
//! (`suspend_after`) carries a frozen mark in the task list and on its
//! page; the mark goes once `task answer` thaws it, and the task
//! completes. Debian's `chromium` over WebDriver, as `web_browser` (a
//! missing browser fails the test: it never skips). Also: `suspend:
//! checkpoint` is refused at load with its reason (docs/design/checkpoint.md).

use fantoccini::{Client, Locator};
use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply};
use crate::human::{project, until as until_task};
use crate::util::{Saheeli, require_docker};
use crate::web::WebServe;
use crate::web_browser::{Driver, browser, save_screenshot, until};

async fn texts(c: &Client, css: &str) -> String {
    let mut out = String::new();
    for e in c.find_all(Locator::Css(css)).await.unwrap_or_default() {
        out.push_str(&e.text().await.unwrap_or_default());
    }
    out
}

#[test]
fn the_dashboard_marks_a_frozen_task_in_its_list_and_page() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::tool("ask_user", json!({"question": "Which colour?"})),
        Reply::tool("task_complete", json!({"message": "painted"})),
    ]);
    let s = project(&llm, "suspend_after: 1s\n");
    s.write(
        "p.md",
        "---\ntitle: Paint\nmodel: gpt-test\npark_after: 10m\n---\nPaint the button.\n",
    );
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let id = s.submit("p.md");
    let t = until_task(&s, &id, &w.serve, "frozen", |t| t["frozen"] == true);
    assert_eq!(t["state"], "waiting_human", "{t:#}");
    let driver = Driver::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = browser(&driver).await;
        c.goto(&w.url("/")).await.unwrap();
        let mark = format!("#task-rows tr[data-id='{id}'] td.waits .frozen");
        until("the list marks the task frozen", || async {
            texts(&c, &mark).await.contains("frozen")
        })
        .await;
        let row = texts(&c, &format!("#task-rows tr[data-id='{id}'] td.waits")).await;
        assert!(row.contains("asks: Which colour?"), "{row}");
        save_screenshot(&c, "list-frozen.png").await;

        c.goto(&w.url(&format!("/tasks/{id}"))).await.unwrap();
        until("the page says the servo is frozen", || async {
            texts(&c, "#frozen").await.contains("frozen since")
        })
        .await;
        save_screenshot(&c, "task-frozen.png").await;

        // Answered (by the CLI): thawed, the mark gone, the task complete.
        s.expect(&["task", "answer", &id, "blue"], 0);
        until("the task completes", || async {
            match c.find(Locator::Css("#state .badge")).await {
                Ok(b) => b.attr("data-state").await.ok().flatten().as_deref() == Some("complete"),
                Err(_) => false,
            }
        })
        .await;
        assert_eq!(texts(&c, "#frozen").await, "", "no frozen mark once thawed");
        c.goto(&w.url("/")).await.unwrap();
        until("the list shows it complete, unmarked", || async {
            let row = format!("#task-rows tr[data-id='{id}']");
            c.find(Locator::Css(&row)).await.is_ok() && texts(&c, &mark).await.is_empty()
        })
        .await;
        c.close().await.unwrap();
    });
}

#[test]
fn suspend_checkpoint_is_refused_at_load_with_its_reason() {
    for (config, env) in [("suspend: checkpoint\n", None), ("", Some("checkpoint"))] {
        let mut s = Saheeli::with_config(config);
        if let Some(v) = env {
            s = s.env("SAHEELI_SUSPEND", v);
        }
        s.write("p.md", "---\nmodel: gpt-test\n---\nHi.\n");
        for args in [
            &["task", "submit", "--prompt", "p.md"][..],
            &["serve", "--drain"],
        ] {
            let err = s.expect_err(args, 2);
            assert!(
                err.contains("`suspend: checkpoint` is not supported")
                    && err.contains("Can't dump half of stream unix connection")
                    && err.contains("docs/design/checkpoint.md"),
                "{args:?}: {err}"
            );
        }
    }
    // `freeze`, the default, is accepted.
    let s = Saheeli::with_config("suspend: freeze\nsuspend_after: 30s\n")
        .env("OPENAI_API_KEY", "sk-test");
    s.write("p.md", "---\nmodel: gpt-test\n---\nHi.\n");
    s.expect(&["task", "submit", "--prompt", "p.md"], 0);
}
