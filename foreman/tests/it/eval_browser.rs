//! Issue 16, the eval report in a real browser: `report.html` opened from
//! disk in Debian's headless Chromium (over chromedriver, as the
//! dashboard's tests do) has the case table with a row per result, sorts,
//! filters and opens details, shows the agent's hostile text as text, and
//! logs nothing to the console. A screenshot is saved for people.

use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use crate::util::{Saheeli, require_docker, script};
use crate::web_browser::{Driver, browser, save_screenshot};

const HOSTILE: &str = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">done";

/// chromedriver's `se/log` endpoint: the browser console since the last read.
#[derive(Debug)]
struct BrowserLog;

impl fantoccini::wd::WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }
    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({"type": "browser"}).to_string()),
        )
    }
}

/// The console entries of level SEVERE (errors, CSP violations).
async fn console_errors(c: &Client) -> Vec<String> {
    let log = c
        .issue_cmd(BrowserLog)
        .await
        .expect("reading the browser console");
    log.as_array()
        .unwrap_or_else(|| panic!("no console log: {log}"))
        .iter()
        .filter(|e| e["level"] == "SEVERE")
        .map(|e| e["message"].to_string())
        .collect()
}

async fn visible_rows(c: &Client) -> usize {
    let mut n = 0;
    for r in c.find_all(Locator::Css("#cases tbody tr")).await.unwrap() {
        if r.is_displayed().await.unwrap() {
            n += 1;
        }
    }
    n
}

#[test]
fn the_html_report_has_a_row_per_result_and_no_console_errors() {
    require_docker();
    let s = Saheeli::new();
    s.write("repo/calc.py", "def add(a, b):\n    return a - b\n");
    s.write(
        "repo/test_calc.py",
        "import calc\nassert calc.add(2, 2) == 4, 'add is wrong'\n",
    );
    s.write(
        "fix.json",
        &script(&[
            (
                "edit_file",
                json!({"path": "calc.py", "old_str": "a - b", "new_str": "a + b"}),
            ),
            ("task_complete", json!({"message": "fixed add"})),
        ]),
    );
    s.write(
        "hostile.json",
        &script(&[("task_complete", json!({"message": HOSTILE}))]),
    );
    s.write(
        "suite.yaml",
        &format!(
            "name: '{HOSTILE}'\ndefaults: {{ verify_retries: 0 }}\ncases:\n\
             \x20 - id: calc-add\n    category: arithmetic\n    text: Fix add.\n    workspace: repo\n\
             \x20   model: replay:fix.json\n    verify: python3 test_calc.py\n\
             \x20 - id: calc-unfixed\n    category: arithmetic\n    text: Fix add.\n    workspace: repo\n\
             \x20   model: replay:hostile.json\n    verify: python3 test_calc.py\n\
             \x20 - id: hostile\n    category: chat\n    title: '{HOSTILE}'\n    text: '{HOSTILE}'\n\
             \x20   model: replay:hostile.json\n"
        ),
    );
    let report: Value = s.expect_json(&["eval", "suite.yaml", "--repeat", "2", "--json"], 1);
    let page = s
        .path()
        .join("results")
        .join(format!("eval-{}", report["run_id"].as_str().unwrap()))
        .join("report.html");
    let driver = Driver::start();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let c = browser(&driver).await;
        // The check can fail: a page that throws is seen.
        let bad = s.write(
            "throws.html",
            "<!doctype html><script>throw new Error('boom')</script>",
        );
        c.goto(&format!("file://{}", bad.display())).await.unwrap();
        let seen = console_errors(&c).await;
        assert!(
            seen.iter().any(|m| m.contains("boom")),
            "console check is blind: {seen:?}"
        );

        c.goto(&format!("file://{}", page.display())).await.unwrap();
        assert_eq!(visible_rows(&c).await, 6, "3 cases × 2 repeats");
        let pwned = c
            .execute("return window.pwned === undefined", vec![])
            .await
            .unwrap();
        assert_eq!(pwned, json!(true), "agent text ran as markup");
        let shown = c
            .find(Locator::Id("shown"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(shown, "6 of 6 shown");
        let badges = c
            .find_all(Locator::Css("#cases .badge.fail"))
            .await
            .unwrap();
        assert_eq!(badges.len(), 2, "calc-unfixed failed twice");
        // Filtering and sorting work on the rows.
        let outcome = c.find(Locator::Id("outcome")).await.unwrap();
        outcome.select_by_value("failed").await.unwrap();
        assert_eq!(visible_rows(&c).await, 2);
        outcome.select_by_value("").await.unwrap();
        c.find(Locator::Id("filter"))
            .await
            .unwrap()
            .send_keys("hostile")
            .await
            .unwrap();
        assert_eq!(visible_rows(&c).await, 2);
        c.find(Locator::Id("filter"))
            .await
            .unwrap()
            .clear()
            .await
            .unwrap();
        c.execute(
            "document.getElementById('filter').dispatchEvent(new Event('input'))",
            vec![],
        )
        .await
        .unwrap();
        c.find(Locator::Css("#cases thead th:nth-child(4)"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let first = c
            .find(Locator::Css("#cases tbody tr td:nth-child(4)"))
            .await
            .unwrap();
        assert_eq!(first.text().await.unwrap(), "failed", "sorted by outcome");
        // A row opens its details: prompt, message, verify output, patch.
        c.find(Locator::Css(
            "#cases tbody tr[data-details='case-calc-add-1']",
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
        let open = c
            .execute(
                "return document.getElementById('case-calc-add-1').open",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(open, json!(true));
        let details = c
            .find(Locator::Id("case-calc-add-1"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for part in [
            "Fix add.",
            "fixed add",
            "python3 test_calc.py",
            "+    return a + b",
        ] {
            assert!(details.contains(part), "details lack `{part}`:\n{details}");
        }
        c.execute("window.scrollTo(0, 0)", vec![]).await.unwrap();
        save_screenshot(&c, "eval-report.png").await;
        let errors = console_errors(&c).await;
        assert!(errors.is_empty(), "console errors: {errors:?}");
        c.close().await.unwrap();
    });
}
