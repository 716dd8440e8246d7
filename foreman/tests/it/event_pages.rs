//! Issue 23, case 19: a view of one task shows a page of its events, the
//! newest, with the total and where the older ones start; it never loads
//! the whole trail (a flood made one `task status ID --json` 285 MB).

use serde_json::Value;

use crate::util::Saheeli;

fn seqs(t: &Value) -> Vec<i64> {
    t["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect()
}

#[test]
fn task_status_pages_the_events_of_a_task() {
    let s = Saheeli::new();
    s.write("p.md", "---\nmodel: replay:none.json\n---\nx\n");
    s.write(
        "none.json",
        &crate::util::script(&[("task_complete", serde_json::json!({"message": "x"}))]),
    );
    let id = s.submit("p.md");
    for i in 0..6 {
        s.expect(&["task", "inject", &id, &format!("note {i}")], 0);
    }
    // Seven events: submitted, then six messages.
    let all = s.task(&id);
    assert_eq!(all["events_total"], 7, "{all:#}");
    assert_eq!(all["events"].as_array().unwrap().len(), 7);
    assert!(all["events_before"].is_null(), "nothing older: {all:#}");

    let newest = s.expect_json(&["task", "status", &id, "--json", "--events", "3"], 0);
    let page = seqs(&newest);
    assert_eq!(page.len(), 3);
    assert_eq!(page, seqs(&all)[4..], "the newest three, oldest first");
    assert_eq!(newest["events_total"], 7);
    assert!(
        newest["events"][2]["detail"]
            .as_str()
            .unwrap()
            .contains("note 5")
    );
    let before = newest["events_before"].as_i64().expect("older ones exist");
    assert_eq!(before, page[0]);

    let older = s.expect_json(
        &[
            "task",
            "status",
            &id,
            "--json",
            "--events",
            "3",
            "--events-before",
            &before.to_string(),
        ],
        0,
    );
    assert_eq!(seqs(&older), seqs(&all)[1..4]);
    let before = older["events_before"].as_i64().unwrap();
    let oldest = s.expect_json(
        &[
            "task",
            "status",
            &id,
            "--json",
            "--events",
            "3",
            "--events-before",
            &before.to_string(),
        ],
        0,
    );
    assert_eq!(seqs(&oldest), seqs(&all)[..1]);
    assert!(oldest["events_before"].is_null());
    s.expect_err(&["task", "status", &id, "--events", "0"], 2);
}
