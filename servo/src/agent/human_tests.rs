//! Tests of the human layer (`human.rs`).
use super::*;
use saheeli_protocol::human::{Gate, PLAN};

fn approval(arguments: &str) -> Waiting {
    Waiting::Approval {
        tool: "execute_shell".into(),
        arguments: arguments.into(),
    }
}

fn human(gates: &[(&str, Option<&str>)], plan_only: bool) -> Human {
    let gates: Vec<Gate> = gates
        .iter()
        .map(|(tool, pattern)| Gate {
            tool: tool.to_string(),
            pattern: pattern.map(str::to_string),
        })
        .collect();
    let task: ServoTask = serde_json::from_value(serde_json::json!({
        "task_id": saheeli_protocol::TaskId::new(),
        "title": "t", "model": "m", "max_steps": 5, "timeout_s": 60,
        "max_output_bytes": 1024, "plan_only": plan_only,
    }))
    .unwrap();
    let desk = Arc::new(Desk::new("http://127.0.0.1:1").unwrap());
    Human::new(desk, Gates::new(&gates).unwrap(), &task)
}

#[tokio::test]
async fn the_deadline_stands_still_during_a_wait_however_long() {
    let mut h = human(&[], false);
    let start = tokio::time::Instant::now();
    *h.deadline.lock().unwrap() = start + Duration::from_millis(200);
    h.wait_begins();
    // Past the deadline while waiting (a frozen servo wakes up so):
    // it has not passed.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let early = deadline_passed(h.deadline.clone());
    assert!(
        tokio::time::timeout(Duration::from_millis(100), early)
            .await
            .is_err()
    );
    // The wait ends: the 200 ms it had left run from now.
    h.waited_for(start.elapsed());
    let at = *h.deadline.lock().unwrap();
    let left = at - tokio::time::Instant::now();
    assert!(
        left <= Duration::from_millis(200) && left > Duration::from_millis(100),
        "{left:?}"
    );
    let passed = deadline_passed(h.deadline.clone());
    assert!(
        tokio::time::timeout(Duration::from_secs(2), passed)
            .await
            .is_ok()
    );
}

fn tool(name: &str, arguments: &str) -> Tool {
    let call = saheeli_protocol::chat::ToolCall {
        id: "c".into(),
        kind: "function".into(),
        function: saheeli_protocol::chat::FunctionCall {
            name: name.into(),
            arguments: arguments.into(),
        },
    };
    Tool::from_call(&call).unwrap()
}

/// What stands in front of each call: the human tools' own checks
/// first, then the plan gate, then approval gates.
#[test]
fn gates_in_their_order() {
    let d = tempfile::tempdir().unwrap();
    let tb = Toolbox {
        ws: crate::workspace::Workspace::new(d.path()).unwrap(),
        max_output: 4096,
        shell_timeout: Duration::from_secs(10),
        steps: Vec::new(),
        desk: None,
        shell: Arc::default(),
        shell_reset: Arc::default(),
        steps_started: Arc::default(),
        runner: None,
    };
    let rm = r#"{"command":"rm -rf x"}"#;
    let planned = human(&[(PLAN, None), ("execute_shell", Some("rm"))], false);
    let plan_first = "not run: a plan must be approved first. Propose one with propose_plan {\"steps\": [...]} and wait for the answer.";
    let cases = [
        (
            &planned,
            tool("execute_shell", rm),
            Flow::Refuse(plan_first),
        ),
        (&planned, tool("read_file", "{}"), Flow::Go),
        (
            &planned,
            tool("ask_user", "{}"),
            Flow::Refuse("ask_user needs {\"question\": \"...\"} with a non-empty question"),
        ),
        (
            &planned,
            tool("ask_user", r#"{"question":"which?"}"#),
            Flow::Ask(Waiting::Answer {
                question: "which?".into(),
            }),
        ),
        (
            &planned,
            tool("propose_plan", r#"{"steps":["a"]}"#),
            Flow::Ask(Waiting::Plan {
                plan: vec!["a".into()],
            }),
        ),
    ];
    for (h, t, want) in cases {
        assert_eq!(h.gate(&t, &tb), want, "{t:?}");
    }
    let mut approved = human(&[(PLAN, None), ("execute_shell", Some("rm"))], false);
    approved.plan_approved = true;
    assert_eq!(
        approved.gate(&tool("execute_shell", r#"{"command":"ls"}"#), &tb),
        Flow::Go
    );
    assert_eq!(
        approved.gate(&tool("execute_shell", rm), &tb),
        Flow::Ask(approval(rm))
    );
    // Bad arguments are shown to the human as the model sent them.
    assert!(matches!(
        approved.gate(&tool("execute_shell", "rm{"), &tb),
        Flow::Ask(_)
    ));
    let plan_only = human(&[], true);
    assert_eq!(
        plan_only.gate(&tool("propose_plan", r#"{"steps":["a"]}"#), &tb),
        Flow::PlanOnly(vec!["a".into()])
    );
    assert_eq!(
        plan_only.gate(&tool("create_file", "{}"), &tb),
        Flow::Refuse(plan_first)
    );
}

#[test]
fn only_the_call_the_human_saw_matches() {
    let seen = approval(r#"{"command":"echo benign"}"#);
    assert!(same_ask(&seen, &seen.clone()));
    assert!(!same_ask(&seen, &approval(r#"{"command":"echo EVIL"}"#)));
    // The desk keeps 64 KiB of a text, the cut stated.
    let long = format!(r#"{{"command":"{}"}}"#, "a".repeat(70_000));
    let kept = format!(
        "{}…[{} more bytes not shown]",
        &long[..65536],
        long.len() - 65536
    );
    assert!(same_ask(&approval(&kept), &approval(&long)));
    let other = format!("{}b", &long[..long.len() - 1]);
    assert!(
        same_ask(&approval(&kept), &approval(&other)),
        "same head, same length"
    );
    assert!(!same_ask(&approval(&kept), &approval(&long[..60_000])));
    let question = Waiting::Answer {
        question: "which?".into(),
    };
    assert!(!same_ask(&question, &seen));
}

/// Issue 51: a servo frozen during a model call wakes up past its
/// deadline; the time it stood still is not counted.
#[test]
fn time_the_servo_stood_still_moves_the_deadline_back() {
    // A current-thread runtime whose thread is stopped, as a frozen
    // container's are: its timers fire late.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let deadline = Arc::new(Mutex::new(
            tokio::time::Instant::now() + Duration::from_millis(2500),
        ));
        let passed = tokio::spawn(deadline_passed(deadline.clone()));
        tokio::task::yield_now().await;
        // Stopped for 4 s, past the deadline: nothing runs meanwhile (it
        // counts the 3 s its look at 1 s came late).
        std::thread::sleep(Duration::from_secs(4));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!passed.is_finished(), "the frozen time was counted");
        let left = deadline
            .lock()
            .unwrap()
            .saturating_duration_since(tokio::time::Instant::now());
        assert!(left > Duration::from_millis(500), "{left:?}");
        tokio::time::timeout(Duration::from_secs(3), passed)
            .await
            .expect("the deadline passes once the time left is used")
            .unwrap();
    });
}
