//! Issue 9 §4 and §7: what `workspace:` copies into a container. No `.env*`,
//! nothing an ignore file names, no key Saheeli knows, none of Saheeli's own
//! files, nothing over the size cap; never `/`, a home, or (without the
//! flag) a directory outside the prompt's tree. The copies are private and
//! deleted once no launch needs them.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::hostile_files::watched;
use crate::util::{Saheeli, replay_prompt, require_docker, script};

fn inputs(s: &Saheeli) -> PathBuf {
    s.path().join(".saheeli/inputs")
}

/// Every file in the inputs directory (none when it does not exist).
fn input_files(s: &Saheeli) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(inputs(s))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The entry names of a task's submitted tar.
fn tar_listing(s: &Saheeli, id: &str) -> Vec<String> {
    let f = std::fs::File::open(inputs(s).join(format!("{id}.tar"))).unwrap();
    tar::Archive::new(f)
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect()
}

fn submit_fails(s: &Saheeli, prompt: &str) -> String {
    let out = s.run(&["task", "submit", "--prompt", prompt]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{prompt}: {err}");
    assert!(out.stdout.is_empty(), "{prompt}");
    err
}

#[test]
fn issue9_a_workspace_holding_a_key_is_refused_and_nothing_is_left() {
    let key = "sk-proj-fake-but-recognisable-0042";
    let s = Saheeli::new()
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write(".env", &format!("OPENAI_API_KEY={key}\n"));
    s.write("ws/src/main.py", &format!("client = Client(\"{key}\")\n"));
    s.write("ws/README.md", "a project\n");
    s.write("p.md", "---\nworkspace: ws\n---\nDo it.\n");
    let err = submit_fails(&s, "p.md");
    assert!(
        err.contains("src/main.py") && err.contains("OPENAI_API_KEY"),
        "{err}"
    );
    assert!(!err.contains(key), "the error repeats the key: {err}");
    assert!(
        !s.path().join("saheeli.db").exists(),
        "a refused submit made a database"
    );
    assert_eq!(input_files(&s), Vec::<String>::new());
    crate::util::assert_nothing_queued(&s);
    // A key from the environment counts too, in any file.
    let s = Saheeli::new()
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-env-key-1234")
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write(
        "ws/deep/er/config.toml",
        "key = 'sk-ant-fake-env-key-1234'\n",
    );
    s.write("p.md", "---\nworkspace: ws\n---\nDo it.\n");
    let err = submit_fails(&s, "p.md");
    assert!(
        err.contains("deep/er/config.toml") && err.contains("ANTHROPIC_API_KEY"),
        "{err}"
    );
    assert_eq!(input_files(&s), Vec::<String>::new());
}

#[test]
fn issue9_env_files_and_ignored_files_stay_out_of_the_workspace() {
    require_docker();
    let s = Saheeli::new()
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write("ws/keep.txt", "kept");
    s.write("ws/.env", "NOT_A_KNOWN_KEY=whatever-value\n");
    s.write("ws/sub/.env.local", "X=1\n");
    s.write("ws/.gitignore", "build/\n*.log\n");
    s.write("ws/.saheeliignore", "notes/\n");
    s.write("ws/build/out.bin", "artifact");
    s.write("ws/debug.log", "log");
    s.write("ws/notes/private.md", "mine");
    s.write(
        "ls.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "find . -path ./.saheeli -prune -o -print | sort > /tmp/l && mv /tmp/l listing.txt"}),
            ),
            ("task_complete", json!({"message": "listed"})),
        ]),
    );
    s.write("plain.md", &replay_prompt("ls.json", "workspace: ws\n"));
    s.write(
        "all.md",
        &replay_prompt(
            "ls.json",
            "workspace: ws\nworkspace_include_ignored: true\n",
        ),
    );
    let plain = s.submit("plain.md");
    let all = s.submit("all.md");
    // The copies are private while they wait.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&inputs(&s)), 0o700);
    assert_eq!(mode(&inputs(&s).join(format!("{plain}.tar"))), 0o600);
    s.expect(&["serve", "--drain"], 0);
    let listing = |id: &str| {
        let t = s.task(id);
        assert_eq!(t["state"], "complete");
        std::fs::read_to_string(Path::new(t["results"].as_str().unwrap()).join("listing.txt"))
            .unwrap()
    };
    let plain_ls = listing(&plain);
    for present in ["./keep.txt", "./.gitignore", "./.saheeliignore"] {
        assert!(plain_ls.contains(present), "{present} missing:\n{plain_ls}");
    }
    for absent in [".env", "build", "debug.log", "notes"] {
        assert!(!plain_ls.contains(absent), "{absent} copied:\n{plain_ls}");
    }
    let all_ls = listing(&all);
    for present in ["./build/out.bin", "./debug.log", "./keep.txt"] {
        assert!(all_ls.contains(present), "{present} missing:\n{all_ls}");
    }
    for absent in [".env", "notes"] {
        assert!(!all_ls.contains(absent), "{absent} copied:\n{all_ls}");
    }
    // Collected: no launch needs the copies any more.
    assert_eq!(input_files(&s), Vec::<String>::new());
}

#[test]
fn issue9_outside_home_and_root_workspaces_are_refused() {
    let s = Saheeli::new()
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write("other/f.txt", "x");
    s.write("prompts/p.md", "---\nworkspace: ../other\n---\nDo it.\n");
    let err = submit_fails(&s, "prompts/p.md");
    assert!(
        err.contains("outside the prompt's directory") && err.contains("--allow-workspace-outside"),
        "{err}"
    );
    crate::util::assert_nothing_queued(&s);
    s.expect(
        &[
            "task",
            "submit",
            "--prompt",
            "prompts/p.md",
            "--allow-workspace-outside",
        ],
        0,
    );
    // A home directory, and anything holding one, even with the flag.
    let home = s.path().join("home/someone");
    std::fs::create_dir_all(&home).unwrap();
    let s2 = Saheeli::new()
        .env("HOME", home.to_str().unwrap())
        .env("OPENAI_API_KEY", "sk-test-not-used");
    for ws in [home.clone(), home.parent().unwrap().to_path_buf()] {
        s2.write(
            "p.md",
            &format!("---\nworkspace: {}\n---\nDo it.\n", ws.display()),
        );
        let out = s2.run(&[
            "task",
            "submit",
            "--prompt",
            "p.md",
            "--allow-workspace-outside",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", ws.display());
        assert!(err.contains("home directory"), "{err}");
    }
    // The whole host.
    s2.write("p.md", "---\nworkspace: /\n---\nDo it.\n");
    let out = s2.run(&[
        "task",
        "submit",
        "--prompt",
        "p.md",
        "--allow-workspace-outside",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the whole host"), "{err}");
    crate::util::assert_nothing_queued(&s2);
    assert_eq!(input_files(&s2), Vec::<String>::new());
}

#[test]
fn issue9_saheelis_own_files_are_never_copied() {
    let s = Saheeli::new()
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write("first.md", "Make the database exist.\n");
    s.submit("first.md");
    s.write("results/old/out.txt", "an old result");
    s.write("src/app.py", "print('hi')\n");
    s.write("p.md", "---\nworkspace: .\n---\nDo it.\n");
    // Today's code copies its own growing tar into itself: stop it early.
    let inputs_dir = inputs(&s);
    let out = watched(
        s.cmd(&["task", "submit", "--prompt", "p.md", "--json"]),
        Duration::from_secs(30),
        512 * 1024,
        move || {
            let size: u64 = std::fs::read_dir(&inputs_dir)
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| e.metadata().ok())
                        .map(|m| m.len())
                        .sum()
                })
                .unwrap_or(0);
            (size > 50 << 20).then(|| format!("inputs grew to {size} bytes"))
        },
    );
    assert_eq!(
        (out.killed.as_deref(), out.code),
        (None, Some(0)),
        "{}",
        out.stderr
    );
    let id = serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let listing = tar_listing(&s, &id);
    assert!(listing.contains(&"src/app.py".to_string()), "{listing:?}");
    for own in ["saheeli.db", "results", ".saheeli"] {
        assert!(
            !listing.iter().any(|e| e.starts_with(own)),
            "{own} copied: {listing:?}"
        );
    }
}

#[test]
fn issue9_an_oversized_workspace_is_refused_by_the_size_cap() {
    let s = Saheeli::with_config("max_workspace_size: 1m\n")
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write("ws/small.txt", "x");
    std::fs::write(s.path().join("ws/big.bin"), vec![7u8; 2 << 20]).unwrap();
    s.write("p.md", "---\nworkspace: ws\n---\nDo it.\n");
    let err = submit_fails(&s, "p.md");
    assert!(
        err.contains("larger than `max_workspace_size`") && err.contains("ws"),
        "{err}"
    );
    // No temporary file is left behind.
    assert_eq!(input_files(&s), Vec::<String>::new());
    crate::util::assert_nothing_queued(&s);
    // Ignored files are not counted.
    s.write("ws/.saheeliignore", "big.bin\n");
    s.submit("p.md");
}

#[test]
fn issue9_a_cancelled_queued_task_drops_its_workspace_copy() {
    let s = Saheeli::new()
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write("ws/a.txt", "a");
    s.write("p.md", "---\nworkspace: ws\n---\nDo it.\n");
    let id = s.submit("p.md");
    assert_eq!(input_files(&s), vec![format!("{id}.tar")]);
    s.expect(&["task", "cancel", &id], 0);
    assert_eq!(input_files(&s), Vec::<String>::new());
}

#[test]
fn issue9_a_retry_by_policy_gets_the_submitted_workspace_then_it_is_deleted() {
    require_docker();
    let s = Saheeli::new()
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write("ws/data.txt", "input");
    s.write(
        "s.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "cat data.txt >> copy.txt"}),
            ),
            ("task_complete", json!({"message": "too late"})),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt(
            "s.json",
            "workspace: ws\nmax_steps: 1\nretries: 1\nbudget_per_attempt: true\n\
             retry_backoff: { initial: 1s, max: 1s }\n",
        ),
    );
    let last = s.expect_json(&["run", "p.md", "--json"], 1);
    assert_eq!(last["attempt"], 2);
    let results = Path::new(last["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("copy.txt")).unwrap(),
        "input"
    );
    assert_eq!(input_files(&s), Vec::<String>::new());
    // `task retry` of a task that ran copies the directory again, and says so.
    let out = s.run(&["task", "retry", last["id"].as_str().unwrap(), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("copied"));
    let retry: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = retry["id"].as_str().unwrap();
    assert_eq!(tar_listing(&s, id), vec!["data.txt".to_string()]);
}
