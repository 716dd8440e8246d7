//! Snapshots of what scripts and people read: `task status --json`, the
//! table and the detail view, with ids, times and paths redacted.

use insta::{assert_json_snapshot, assert_snapshot};
use serde_json::json;

use crate::util::{Saheeli, replay_prompt, require_docker, script};

#[test]
fn status_outputs() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "s.json",
        &script(&[
            ("execute_shell", json!({"command": "echo hi"})),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write("p.md", &replay_prompt("s.json", "title: Snapshot me\n"));
    let out = s.run(&["run", "p.md"]);
    assert_eq!(out.status.code(), Some(0));
    let id = s.tasks()[0]["id"].as_str().unwrap().to_string();
    let mut one = s.task(&id);
    // Event details carry container ids and byte counts: keep only their shape.
    for e in one["events"].as_array_mut().unwrap() {
        e["detail"] = json!(
            e["detail"]
                .as_str()
                .map(|d| d.split(' ').next().unwrap().to_string())
        );
    }
    assert_json_snapshot!("status_one_json", one, {
        ".id" => "[id]",
        ".created_at" => "[time]",
        ".started_at" => "[time]",
        ".finished_at" => "[time]",
        ".duration_s" => "[duration]",
        ".results" => "[results]",
        ".detail" => "[detail]",
        ".events[].at" => "[time]",
        ".attempts[].id" => "[id]",
        ".attempts[].results" => "[results]",
    });
    let list = s.tasks();
    assert_json_snapshot!("status_list_json", list, {
        "[].id" => "[id]",
        "[].created_at" => "[time]",
        "[].started_at" => "[time]",
        "[].finished_at" => "[time]",
        "[].duration_s" => "[duration]",
        "[].results" => "[results]",
        "[].detail" => "[detail]",
    });

    let table = s.expect(&["task", "status"], 0);
    let short = id.replace('-', "")[20..].to_string();
    insta::with_settings!({filters => vec![
        (short.as_str(), "[short-id]"),
        (r"\b\d+s\b", "[age]"),
    ]}, {
        assert_snapshot!("status_table", table);
    });
}
