//! Issue 23, case 22: cancel always works, and never replaces work that
//! was collected. A foreman that collected a task's workspace but could
//! not record its ending (the task was `waiting_human` on a dangling ask)
//! left the results and no volume; cancelling the waiting task then
//! collected an empty volume over them.

use std::path::PathBuf;

use serde_json::json;

use crate::fake_llm::FakeLlm;
use crate::human::{Serve, project, until};
use crate::util::{leftovers, replay_prompt, require_docker, script};

#[test]
fn cancelling_a_waiting_task_keeps_the_work_collected_before() {
    require_docker();
    let llm = FakeLlm::start(vec![]);
    let s = project(&llm, "");
    s.write(
        "s.json",
        &script(&[
            ("ask_user", json!({"question": "Which branch?"})),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write("p.md", &replay_prompt("s.json", "park_after: 1s\n"));
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    until(&s, &id, &serve, "parked", |t| {
        t["state"] == "waiting_human" && t["parked"] == true
    });
    // What the foreman that failed to record the ending left: the
    // collected workspace in results, the volume gone.
    let results = s.path().join("results").join(&id);
    std::fs::create_dir_all(&results).unwrap();
    std::fs::write(results.join("important.txt"), "the work\n").unwrap();
    s.expect(&["task", "cancel", &id], 0);
    let t = until(&s, &id, &serve, "cancelled", |t| t["state"] == "cancelled");
    assert_eq!(
        std::fs::read_to_string(
            PathBuf::from(t["results"].as_str().unwrap()).join("important.txt")
        )
        .unwrap(),
        "the work\n",
        "{t:#}"
    );
    assert!(
        t["detail"]
            .as_str()
            .unwrap()
            .contains("collected earlier is kept"),
        "{t:#}"
    );
    drop(serve);
    assert!(leftovers(&id).is_empty(), "{:?}", leftovers(&id));
}
