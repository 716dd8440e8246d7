//! Issue 13, the dashboard in a real browser: Debian's `chromium` driven
//! over WebDriver (`chromedriver`, from `chromium-driver`, which
//! scripts/setup.sh installs) with fantoccini. A missing browser fails the
//! test: it never skips.
//!
//! Screenshots are saved for people to look at in
//! `<target>/tmp/dashboard-screenshots/` (cargo's CARGO_TARGET_TMPDIR).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply};
use crate::human::{project, request_text};
use crate::lifecycle::wait_for;
use crate::util::require_docker;
use crate::web::WebServe;

/// A chromedriver on a free port, killed when dropped.
pub(crate) struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    pub(crate) fn start() -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `chromedriver` ({e}): the browser tests need Debian's \
                     `chromium` and `chromium-driver`; run scripts/setup.sh"
                )
            });
        let up = wait_for(Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "chromedriver did not listen on port {port}");
        Driver { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn browser(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--window-size=1400,1000"
        ]}),
    );
    // The browser's console, read back by `eval_browser::console_errors`.
    caps.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("connecting to chromedriver")
}

fn screenshot_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(crate) async fn save_screenshot(c: &Client, name: &str) -> PathBuf {
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let path = screenshot_dir().join(name);
    std::fs::write(&path, png).unwrap();
    eprintln!("screenshot: {}", path.display());
    path
}

/// Polls `f` (a page check) until it holds; panics with `what` otherwise.
pub(crate) async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..300 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{what}: never happened");
}

/// The text of every element `css` matches.
async fn texts(c: &Client, css: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in c.find_all(Locator::Css(css)).await.unwrap_or_default() {
        out.push(e.text().await.unwrap_or_default());
    }
    out
}

const TITLE: &str =
    "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\"> Paint the button";
const QUESTION: &str = "Which colour should the <b>button</b> be?";

#[test]
fn the_dashboard_lists_follows_and_answers_a_task_in_a_browser() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::tool("ask_user", json!({"question": QUESTION})),
        Reply::tool(
            "execute_shell",
            json!({"command": "echo painted > button.txt"}),
        ),
        Reply::tool("task_complete", json!({"message": "painted"})),
    ]);
    let s = project(&llm, "");
    s.write(
        "p.md",
        &format!(
            "---\ntitle: '{TITLE}'\nmodel: gpt-test\npark_after: 120s\n---\nPaint the button.\n"
        ),
    );
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let id = s.submit("p.md");
    let driver = Driver::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = browser(&driver).await;

        // The list shows the submitted task, its title as text.
        c.goto(&w.url("/")).await.unwrap();
        let row = format!("#task-rows tr[data-id='{id}']");
        until("the task is listed", || async {
            c.find(Locator::Css(&row)).await.is_ok()
        })
        .await;
        let shown = texts(&c, &format!("{row} .task-title")).await;
        assert_eq!(shown, [TITLE], "the title is shown as text, tags and all");
        until("the list shows it waiting for an answer", || async {
            texts(&c, &format!("{row} td.waits"))
                .await
                .concat()
                .contains("Which colour")
        })
        .await;
        let pwned = c
            .execute("return window.pwned === undefined", vec![])
            .await
            .unwrap();
        assert_eq!(pwned, json!(true), "nothing in a title ran");
        save_screenshot(&c, "list.png").await;

        // Its page: the question, and the live audit trail while it waits
        // (its container still runs: park_after is 2 minutes).
        c.goto(&w.url(&format!("/tasks/{id}"))).await.unwrap();
        until("the answer box appears", || async {
            c.find(Locator::Css("#answer-text")).await.is_ok()
        })
        .await;
        assert_eq!(texts(&c, "#question").await, [QUESTION]);
        assert_eq!(texts(&c, "#title").await, [TITLE]);
        until("the live audit trail shows the question", || async {
            texts(&c, "#audit .line")
                .await
                .iter()
                .any(|l| l.contains("asks a human"))
        })
        .await;
        let state = c.find(Locator::Css("#state .badge")).await.unwrap();
        assert_eq!(
            state.attr("data-state").await.unwrap().as_deref(),
            Some("waiting_human")
        );
        save_screenshot(&c, "task-waiting.png").await;

        // Typed into the box and clicked: the task goes on and completes.
        let answer = c.find(Locator::Css("#answer-text")).await.unwrap();
        answer.send_keys("blue, like the sky").await.unwrap();
        c.find(Locator::Css("#answer-send"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        until("the task completes", || async {
            match c.find(Locator::Css("#state .badge")).await {
                Ok(b) => b.attr("data-state").await.ok().flatten().as_deref() == Some("complete"),
                Err(_) => false,
            }
        })
        .await;
        until("the trail shows the answer and the end", || async {
            let lines = texts(&c, "#audit .line").await.concat();
            lines.contains("answer by")
                && lines.contains("echo painted")
                && lines.contains("finish")
        })
        .await;
        let timeline = texts(&c, "#timeline li").await.concat();
        assert!(timeline.contains("answered by"), "{timeline}");
        until("the results are linked", || async {
            texts(&c, "#files a")
                .await
                .iter()
                .any(|f| f == "button.txt")
        })
        .await;
        let pwned = c
            .execute("return window.pwned === undefined", vec![])
            .await
            .unwrap();
        assert_eq!(pwned, json!(true));
        save_screenshot(&c, "task-complete.png").await;
        c.close().await.unwrap();
    });
    assert!(
        request_text(&llm, 1).contains("blue, like the sky"),
        "the answer reached the model"
    );
    drop(w);
}
