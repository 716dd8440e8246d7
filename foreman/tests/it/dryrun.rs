//! Issue 12: dry runs (`run --dry-run`, `task submit --dry-run`) and
//! `task override`, on the real binary, SQLite and Docker.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::lifecycle::wait_for;
use crate::util::{Saheeli, image, leftovers, replay_prompt, require_docker, script};

/// A project whose settings come from every layer: config.yaml sets
/// `max_steps` and `cpus` (and, through the test harness, `image`), the
/// front-matter `title`, `model`, `timeout`, `resources.memory`, `env` and
/// `workspace`; the `--param`s below set `timeout` again and `max_tokens`.
fn layered() -> Saheeli {
    let s = Saheeli::with_config(
        "task:\n  max_steps: 7\n  cpus: 0.5\nproviders:\n  \
         local: { kind: openai, base_url: 'http://127.0.0.1:9/v1' }\n",
    );
    s.write("ws/a.txt", "hello");
    s.write("ws/sub/b.txt", "hi");
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write(
        "p.md",
        &replay_prompt(
            "s.json",
            "title: Layered\ntimeout: 5m\nresources: { memory: 1g }\nenv: { GREETING: hi }\nworkspace: ws\n",
        ),
    );
    s
}

const PARAMS: &[&str] = &["--param", "timeout=2m", "--param", "max_tokens=1000"];

/// The project directory's entries, sorted.
fn entries(s: &Saheeli) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(s.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn dry_run_shows_each_setting_and_where_it_came_from() {
    require_docker();
    let s = layered();
    let before = entries(&s);
    let mut args = vec!["run", "--dry-run", "p.md", "--json"];
    args.extend_from_slice(PARAMS);
    let v = s.expect_json(&args, 0);

    assert_eq!(v["dry_run"], true);
    let expect = [
        ("title", json!("Layered"), "front-matter"),
        ("model", json!("replay:s.json"), "front-matter"),
        ("max_steps", json!(7), "config.yaml"),
        ("resources.cpus", json!(0.5), "config.yaml"),
        ("timeout", json!("2m"), "--param"),
        ("max_tokens", json!(1000), "--param"),
        ("resources.memory", json!("1g"), "front-matter"),
        ("env", json!({"GREETING": "hi"}), "front-matter"),
        ("retries", json!(0), "default"),
        ("network", json!("none"), "default"),
        ("image", json!(image()), "config.yaml"),
    ];
    for (key, value, source) in expect {
        assert_eq!(v["settings"][key], value, "value of `{key}`: {v:#}");
        assert_eq!(v["sources"][key], source, "source of `{key}`: {v:#}");
    }
    assert_eq!(
        v["settings"].as_object().unwrap().len(),
        v["sources"].as_object().unwrap().len()
    );
    // The task exactly as it would be queued.
    assert_eq!(v["task"]["max_steps"], 7);
    assert_eq!(v["task"]["timeout_s"], 120);
    assert_eq!(v["task"]["memory"], 1u64 << 30);
    assert_eq!(v["task"]["body"], "Do the scripted thing.\n");
    assert_eq!(
        v["tools"],
        json!([
            "execute_shell",
            "create_file",
            "read_file",
            "edit_file",
            "list_files",
            "task_complete",
            "ask_user"
        ])
    );
    assert_eq!(v["image"], image());
    assert_eq!(v["image_present"], true);
    assert_eq!(v["provider_keys"]["local"], "none");
    assert_eq!(v["provider_keys"]["openai"], "OPENAI_API_KEY");
    assert_eq!(v["workspace"]["files"], 2);
    assert_eq!(v["workspace"]["bytes"], 7);
    let config = s.path().join("config.yaml").canonicalize().unwrap();
    assert_eq!(
        std::path::Path::new(v["config"].as_str().unwrap()),
        config.as_path()
    );

    // The same, for people, from `task submit`.
    let mut args = vec!["task", "submit", "--dry-run", "--prompt", "p.md"];
    args.extend_from_slice(PARAMS);
    let text = s.expect(&args, 0);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter(|w| *w != "│")
                .collect::<Vec<_>>()
        })
        .collect();
    for row in [
        &["max_steps", "7", "config.yaml"][..],
        &["timeout", "2m", "--param"],
        &["resources.memory", "1g", "front-matter"],
        &["retries", "0", "default"],
        &["env", "GREETING=hi", "front-matter"],
    ] {
        assert!(rows.iter().any(|r| r == row), "no row {row:?} in:\n{text}");
    }
    assert!(
        text.contains("tools:      execute_shell, create_file, read_file, edit_file, list_files, task_complete"),
        "{text}"
    );
    assert!(
        text.contains(&format!("image:      {} (present)", image())),
        "{text}"
    );
    assert!(text.contains("(would copy 2 files, 7 bytes)"), "{text}");
    // Issue 27: which key each provider gets; none for one without
    // `api_key_env` (it was sent OPENAI_API_KEY).
    assert!(
        text.contains("keys:       anthropic=ANTHROPIC_API_KEY, local=none, openai=OPENAI_API_KEY"),
        "{text}"
    );

    // Nothing was written: no database, no state or results directory.
    assert_eq!(entries(&s), before);
}

#[test]
fn dry_run_adds_no_row_to_an_existing_database() {
    let s = layered();
    let id = s.submit("p.md");
    let events = s.task(&id)["events"].as_array().unwrap().len();
    let mut args = vec!["task", "submit", "--dry-run", "--prompt", "p.md", "--json"];
    args.extend_from_slice(PARAMS);
    s.expect_json(&args, 0);
    s.expect_json(&["run", "--dry-run", "p.md", "--json"], 0);
    let tasks = s.tasks();
    assert_eq!(tasks.len(), 1, "{tasks:#?}");
    assert_eq!(s.task(&id)["events"].as_array().unwrap().len(), events);
    // Only the real submit's copy of the workspace is there.
    let inputs: Vec<_> = std::fs::read_dir(s.path().join(".saheeli/inputs"))
        .unwrap()
        .collect();
    assert_eq!(inputs.len(), 1, "{inputs:?}");
}

/// A dry run fails exactly as a submit does, and writes nothing either way.
#[test]
fn dry_run_errors_are_the_submits() {
    let s = Saheeli::with_config("max_workspace_size: 4\n");
    s.write("bad.md", "---\ntitle: x\nmodle: gpt-4o\n---\nDo it.\n");
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "x"}))]),
    );
    s.write("ok.md", &replay_prompt("s.json", ""));
    s.write("ws/big.txt", "more than four bytes");
    s.write("big.md", &replay_prompt("s.json", "workspace: ws\n"));
    let before = entries(&s);
    let cases = [
        ("bad.md", &[][..], "unknown field `modle`"),
        (
            "ok.md",
            &["--param", "max_steps=0"][..],
            "`max_steps` 0 is out of range",
        ),
        ("ok.md", &["--param", "nope=1"][..], "unknown key `nope`"),
        ("big.md", &[][..], "`max_workspace_size`"),
    ];
    let mut dry_errors = Vec::new();
    for (prompt, params, _) in cases {
        let mut dry = vec!["task", "submit", "--dry-run", "--prompt", prompt];
        dry.extend_from_slice(params);
        let err = s.expect_err(&dry, 2);
        let mut run = vec!["run", "--dry-run", prompt];
        run.extend_from_slice(params);
        assert_eq!(s.expect_err(&run, 2), err, "{prompt} {params:?}");
        dry_errors.push(err);
    }
    assert_eq!(entries(&s), before, "a dry run wrote something");
    for ((prompt, params, says), dry) in cases.into_iter().zip(dry_errors) {
        let mut submit = vec!["task", "submit", "--prompt", prompt];
        submit.extend_from_slice(params);
        let err = s.expect_err(&submit, 2);
        assert!(err.contains(says), "{prompt} {params:?}: {err}");
        assert_eq!(dry, err, "{prompt} {params:?}");
    }
    assert!(!s.path().join("saheeli.db").exists());
    // `--wait` means nothing without a task.
    let err = s.expect_err(
        &["task", "submit", "--prompt", "ok.md", "--dry-run", "--wait"],
        2,
    );
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn dry_run_warns_of_a_missing_image() {
    let s = Saheeli::new();
    s.write("img.yaml", "image: saheeli-servo:does-not-exist\n");
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "x"}))]),
    );
    s.write("p.md", &replay_prompt("s.json", ""));
    let out = s.run(&["--config", "img.yaml", "run", "--dry-run", "p.md", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: image `saheeli-servo:does-not-exist` not found"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["image_present"], false);
    assert_eq!(v["sources"]["image"], "config.yaml");
    assert_eq!(v["sources"]["model"], "front-matter");
    assert_eq!(v["sources"]["max_steps"], "default");
    assert_eq!(v["settings"]["title"], "p");
    assert_eq!(v["workspace"], Value::Null);
    assert!(!s.path().join("saheeli.db").exists());
}

/// A task that ends incomplete (`max_steps`) on a real container.
fn ended_incomplete(s: &Saheeli) -> String {
    s.write(
        "loop.json",
        &script(&[
            ("execute_shell", json!({"command": "echo working"})),
            ("execute_shell", json!({"command": "echo still working"})),
        ]),
    );
    s.write("loop.md", &replay_prompt("loop.json", "max_steps: 1\n"));
    let t = s.expect_json(&["run", "loop.md", "--json"], 1);
    assert_eq!(
        (&t["state"], &t["reason"]),
        (&json!("incomplete"), &json!("max_steps"))
    );
    t["id"].as_str().unwrap().to_string()
}

fn os_user() -> String {
    let out = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The override events of a task, as (from, to, detail).
fn override_events(t: &Value) -> Vec<(String, String, String)> {
    t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("overridden by"))
        })
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("from"), s("to"), s("detail"))
        })
        .collect()
}

#[test]
fn override_an_ended_task() {
    require_docker();
    let s = Saheeli::new().env("SUDO_USER", "");
    let id = ended_incomplete(&s);
    s.expect(&["task", "results", &id], 1);

    let out = s.expect(
        &[
            "task",
            "override",
            &id,
            "--state",
            "complete",
            "--reason",
            "the fix is right; checked by hand",
        ],
        0,
    );
    let user = os_user();
    assert!(
        out.starts_with(&format!("overridden: incomplete → complete by {user} at ")),
        "{out}"
    );
    let t = s.task(&id);
    assert_eq!(t["state"], "complete");
    assert_eq!(t["reason"], "max_steps", "what the run ended with stays");
    let o = &t["override"];
    assert_eq!(o["from"], "incomplete");
    assert_eq!(o["to"], "complete");
    assert_eq!(o["reason"], "the fix is right; checked by hand");
    assert_eq!(o["by"], user.as_str());
    assert!(o["at"].as_str().unwrap().ends_with('Z'), "{o}");
    let detail = format!("overridden by {user}: the fix is right; checked by hand");
    assert_eq!(
        override_events(&t),
        vec![("incomplete".into(), "complete".into(), detail.clone())]
    );
    // Scripts read `state`: the results now count as a success.
    s.expect(&["task", "results", &id], 0);
    let text = s.expect(&["task", "status", &id], 0);
    assert!(
        text.contains(&format!("overridden: incomplete → complete by {user} at ")),
        "{text}"
    );
    let table = s.expect(&["task", "status"], 0);
    assert!(table.contains("complete* (max_steps)"), "{table}");
    assert!(table.contains("* outcome overridden by hand"), "{table}");

    // Again: the latest wins, `from` stays the first outcome, both are events.
    s.expect(
        &[
            "task",
            "override",
            &id,
            "--state",
            "incomplete",
            "--reason",
            "flaky after all",
        ],
        0,
    );
    let t = s.task(&id);
    assert_eq!(t["state"], "incomplete");
    assert_eq!(t["override"]["from"], "incomplete");
    assert_eq!(t["override"]["to"], "incomplete");
    assert_eq!(t["override"]["reason"], "flaky after all");
    let events = override_events(&t);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        events[1],
        (
            "complete".into(),
            "incomplete".into(),
            format!("overridden by {user}: flaky after all")
        )
    );
    // The same outcome again changes nothing.
    let err = s.expect_err(
        &[
            "task",
            "override",
            &id,
            "--state",
            "incomplete",
            "--reason",
            "x",
        ],
        2,
    );
    assert!(err.contains("already incomplete"), "{err}");

    // An overridden task can still be retried.
    let retry = s.expect_json(&["task", "retry", &id, "--json"], 0);
    assert_eq!(retry["retry_of"], id.as_str());
    assert!(leftovers(&id).is_empty());
}

#[test]
fn override_refuses_bad_states_and_arguments() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "sleep.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "sleep 300", "timeout_s": 600}),
            ),
            ("task_complete", json!({"message": "woke up"})),
        ]),
    );
    s.write("sleep.md", &replay_prompt("sleep.json", ""));
    let id = s.submit("sleep.md");
    let refused = |state: &str| {
        let err = s.expect_err(
            &[
                "task", "override", &id, "--state", "complete", "--reason", "r",
            ],
            2,
        );
        assert!(
            err.contains(&format!("task `{id}` is {state}")),
            "{state}: {err}"
        );
    };
    refused("queued");

    let mut serve = s
        .cmd(&["serve", "--drain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let running = wait_for(Duration::from_secs(60), || {
        s.task(&id)["state"] == "running"
    });
    if running {
        refused("running");
    }
    s.expect(&["task", "cancel", &id], 0);
    serve.wait().unwrap();
    assert!(running, "the task never ran");
    refused("cancelled");
    let t = s.task(&id);
    assert_eq!(t["state"], "cancelled");
    assert!(t.get("override").is_none(), "{t}");
    assert!(override_events(&t).is_empty());

    // Arguments: a state an override cannot set, a missing or empty reason.
    for (args, says) in [
        (
            vec!["--state", "failed", "--reason", "r"],
            "invalid value 'failed'",
        ),
        (
            vec!["--state", "cancelled", "--reason", "r"],
            "invalid value 'cancelled'",
        ),
        (vec!["--state", "complete"], "--reason <REASON>"),
        (
            vec!["--state", "complete", "--reason", "  "],
            "`--reason` must be 1 to",
        ),
    ] {
        let mut full = vec!["task", "override", id.as_str()];
        full.extend(args);
        let err = s.expect_err(&full, 2);
        assert!(err.contains(says), "{full:?}: {err}");
    }
    let err = s.expect_err(
        &[
            "task",
            "override",
            "0123456789ab",
            "--state",
            "complete",
            "--reason",
            "r",
        ],
        2,
    );
    assert!(err.contains("no task with id `0123456789ab`"), "{err}");
}

#[test]
fn dry_run_shows_the_gates_and_human_settings() {
    let s = Saheeli::new().env("OPENAI_API_KEY", "sk-test-not-used");
    s.write(
        "p.md",
        "---\napprove: {execute_shell: \"rm \"}\nhuman_timeout: 2h\npause_on: [tool_error]\n---\nGo.\n",
    );
    let v = s.expect_json(&["run", "--dry-run", "--no-human", "p.md", "--json"], 0);
    let tools = v["tools"].to_string();
    assert!(
        tools.contains("execute_shell (approval when it matches `rm `)"),
        "{tools}"
    );
    assert!(
        tools.contains("ask_user") && !tools.contains("propose_plan"),
        "{tools}"
    );
    assert_eq!(v["sources"]["approve"], "front-matter");
    assert_eq!(v["settings"]["human_timeout"], "2h");
    assert_eq!(v["settings"]["pause_on"], serde_json::json!(["tool_error"]));
    assert_eq!(v["settings"]["no_human"], true);
    let v = s.expect_json(&["run", "--dry-run", "--plan-only", "p.md", "--json"], 0);
    assert!(
        v["tools"].to_string().contains("propose_plan"),
        "{}",
        v["tools"]
    );
    assert!(!s.path().join("saheeli.db").exists(), "nothing queued");
}

/// Issue 24: every setting can be overridden from the environment
/// (`SAHEELI_<KEY>`, named by the settings table): over config.yaml,
/// under the front-matter and `--param`, shown with its source; a bad
/// value names its variable.
#[test]
fn the_environment_overrides_config_and_dry_run_says_so() {
    require_docker();
    let s = layered()
        .env("SAHEELI_MAX_STEPS", "9")
        .env("SAHEELI_RETRIES", "2")
        // The front-matter sets the title: it wins over nothing here, and
        // `timeout` from `--param` wins over the environment's.
        .env("SAHEELI_TIMEOUT", "7m");
    let mut args = vec!["run", "--dry-run", "p.md", "--json"];
    args.extend_from_slice(PARAMS);
    let v = s.expect_json(&args, 0);
    for (key, value, source) in [
        ("max_steps", json!(9), "environment"),
        ("retries", json!(2), "environment"),
        ("timeout", json!("2m"), "--param"),
        ("resources.cpus", json!(0.5), "config.yaml"),
    ] {
        assert_eq!(v["settings"][key], value, "{key}: {v:#}");
        assert_eq!(v["sources"][key], source, "{key}: {v:#}");
    }
    let text = s.expect(&["run", "--dry-run", "p.md"], 0);
    assert!(
        text.lines()
            .any(|l| l.contains("max_steps") && l.contains("environment")),
        "{text}"
    );

    let bad = layered().env("SAHEELI_MAX_STEPS", "lots");
    let err = bad.expect_err(&["run", "--dry-run", "p.md"], 2);
    assert!(err.contains("`SAHEELI_MAX_STEPS` (takes integer)"), "{err}");
}

/// Issue 24: with `backend: swarm`, an `image:` the nodes cannot pull is
/// refused at submit (and at `serve`), with the way to fix it.
#[test]
fn a_swarm_image_outside_its_registry_is_refused_at_submit() {
    require_docker();
    let s = Saheeli::with_config(
        "backend: swarm\nswarm:\n  manager: tcp://127.0.0.1:9\n  registry: 127.0.0.1:5000\n  \
         network: n\n  gateway_listen: 127.0.0.1:7000\n",
    );
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write("p.md", &replay_prompt("s.json", ""));
    for args in [
        &["task", "submit", "--prompt", "p.md"][..],
        &["run", "--dry-run", "p.md"],
        &["serve", "--drain"],
    ] {
        let err = s.expect_err(args, 2);
        assert!(
            err.contains("is not in the swarm's registry `127.0.0.1:5000`")
                && err.contains("build-servo --push"),
            "{args:?}: {err}"
        );
    }
    assert!(!s.path().join("saheeli.db").exists() || s.tasks().is_empty());
}

/// Issue 30: `delegate:` on the multi-node backend is refused at submit
/// (its gateway does not serve spawn_task and wait_tasks yet), naming the
/// key, and nothing is queued.
#[test]
fn delegate_on_backend_swarm_is_refused_at_submit() {
    require_docker();
    let s = Saheeli::with_config(
        "backend: swarm\nswarm:\n  manager: tcp://127.0.0.1:9\n  registry: 127.0.0.1:5000\n  \
         network: n\n  gateway_listen: 127.0.0.1:7000\n",
    )
    // An image the nodes could pull, so the refusal is delegate's own.
    .env("SAHEELI_IMAGE", "127.0.0.1:5000/saheeli-servo:latest");
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\ndelegate: { max_children: 2 }\n---\nPlan.\n",
    );
    for args in [
        &["task", "submit", "--prompt", "p.md"][..],
        &["run", "--dry-run", "p.md"],
    ] {
        let err = s.expect_err(args, 2);
        assert!(
            err.contains(
                "p.md: `delegate` needs the engine capability `child_tasks`, which \
                 `backend: swarm` lacks (the swarm's gateway does not serve spawn_task and \
                 wait_tasks yet); run it with `backend: docker` in config.yaml, or drop `delegate`"
            ),
            "{args:?}: {err}"
        );
    }
    assert!(!s.path().join("saheeli.db").exists() || s.tasks().is_empty());
}
