//! Issue 29, `report: synthesized`: one more metered call writes a short
//! "Findings / Partial findings / Limitations" section into report.md;
//! offline, a replay script answers it (`synthesis:`). The call is a row
//! of the call ledger and counts in the task's tokens; the default report
//! has no such section; a budget that cannot hold the call leaves the
//! report saying why. Real Docker.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::util::{Saheeli, replay_prompt, require_docker};

const SECTION: &str = "### Findings\n- the input has 3 lines; the count is in count.txt\n### Partial findings\n- none\n### Limitations\n- nothing was verified\n";

fn script(s: &Saheeli) {
    let script = json!({
        "turns": [
            {"tool_calls": [{"name": "execute_shell", "arguments": {"command": "printf 'a\\nb\\nc\\n' | wc -l > count.txt"}}]},
            {"tool_calls": [{"name": "task_complete", "arguments": {"message": "Counted the lines."}}]}
        ],
        "synthesis": {"content": SECTION, "usage": {"input_tokens": 900, "output_tokens": 60}}
    });
    s.write("s.json", &serde_json::to_string_pretty(&script).unwrap());
}

fn run(s: &Saheeli, extra: &str) -> (Value, String) {
    s.write("p.md", &replay_prompt("s.json", extra));
    let out = s.run(&["run", "p.md", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    let dir = PathBuf::from(t["results"].as_str().unwrap());
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    (t, report)
}

/// The ledger's rows of the task: (state, input, output).
fn ledger(s: &Saheeli, id: &str) -> Vec<(String, i64, i64)> {
    let db = rusqlite::Connection::open(s.path().join("saheeli.db")).unwrap();
    db.prepare("SELECT state, input_tokens, output_tokens FROM llm_calls WHERE task_id = ?1")
        .unwrap()
        .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_synthesized_report_has_the_section_and_the_call_is_metered() {
    require_docker();
    let s = Saheeli::new();
    script(&s);
    let (t, report) = run(&s, "report: synthesized\n");
    let id = t["id"].as_str().unwrap();
    assert_eq!(t["state"], "complete", "{t:#}");
    for part in [
        "## Synthesis",
        "not checked facts",
        "### Findings\n- the input has 3 lines; the count is in count.txt",
        "### Partial findings\n- none",
        "### Limitations\n- nothing was verified",
    ] {
        assert!(report.contains(part), "{part}:\n{report}");
    }
    // One call, settled, in the task's usage.
    assert_eq!(ledger(&s, id), [("settled".to_string(), 900, 60)]);
    let t = s.task(id);
    assert_eq!(
        (t["input_tokens"].as_i64(), t["output_tokens"].as_i64()),
        (Some(900), Some(60)),
        "{t:#}"
    );
    // The dry run shows the setting.
    let dry = s.expect(&["run", "p.md", "--dry-run"], 0);
    assert!(
        dry.contains("report") && dry.contains("synthesized"),
        "{dry}"
    );
}

#[test]
fn the_default_report_is_facts_only() {
    require_docker();
    let s = Saheeli::new();
    script(&s);
    let (t, report) = run(&s, "");
    assert!(!report.contains("## Synthesis"), "{report}");
    assert!(!report.contains("Findings"), "{report}");
    assert_eq!(ledger(&s, t["id"].as_str().unwrap()), []);
}

#[test]
fn a_budget_that_cannot_hold_the_call_says_so_in_the_report() {
    require_docker();
    let s = Saheeli::new();
    script(&s);
    // The evidence alone is more than 50 tokens (one per byte, as reserved).
    let (t, report) = run(&s, "report: synthesized\nmax_tokens: 50\n");
    assert_eq!(
        t["state"], "complete",
        "the ending is not the synthesis's: {t:#}"
    );
    assert!(
        report.contains("## Synthesis\n\nNo synthesis: the task's budget is spent"),
        "{report}"
    );
    assert!(!report.contains("### Findings"), "{report}");
    assert_eq!(ledger(&s, t["id"].as_str().unwrap()), []);
}
