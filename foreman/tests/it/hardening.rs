//! Issue 9 §6 and §7: small holes in what the command line accepts and
//! says. None of these needs Docker except where a command must reach it.

use std::process::Command;

use serde_json::json;

use crate::util::{Saheeli, replay_prompt, script};

/// A replay prompt that needs no key, Docker or network.
fn project() -> Saheeli {
    let s = Saheeli::new();
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "ok"}))]),
    );
    s.write("p.md", &replay_prompt("s.json", ""));
    s
}

fn fails(s: &Saheeli, args: &[&str]) -> String {
    let out = s.run(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    err
}

#[test]
fn an_ambiguous_id_prefix_lists_the_matches() {
    let s = project();
    let a = s.submit("p.md");
    let b = s.submit("p.md");
    let common: String = a
        .chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect();
    assert!(
        !common.is_empty(),
        "v7 ids submitted together share a prefix"
    );
    let err = fails(&s, &["task", "status", &common]);
    assert!(
        err.contains(&a) && err.contains(&b) && err.contains("more than one task"),
        "{err}"
    );
}

#[test]
fn a_malformed_env_file_names_its_line_and_not_its_text() {
    let s = project();
    s.write(
        ".env",
        "# keys\nOPENAI_API_KEY=sk-fine\nthis is not valid sk-leak\n",
    );
    let err = fails(&s, &["task", "submit", "--prompt", "p.md"]);
    assert!(err.contains(".env:3:"), "{err}");
    assert!(
        !err.contains("sk-leak") && !err.contains("sk-fine"),
        "{err}"
    );
}

#[test]
fn a_param_type_error_names_the_key() {
    let s = project();
    let err = fails(
        &s,
        &[
            "task",
            "submit",
            "--prompt",
            "p.md",
            "--param",
            "max_steps=lots",
        ],
    );
    assert!(err.contains("`--param max_steps=…`"), "{err}");
}

#[test]
fn params_out_of_bounds_are_refused() {
    let s = project();
    for (param, needle) in [
        ("model=", "`--param model=`: the value is empty"),
        ("model=' '", "`model` is empty"),
        ("timeout=0", "greater than zero"),
        ("retries=4294967295", "`retries` 4294967295 is out of range"),
        ("max_steps=0", "`max_steps` 0 is out of range"),
    ] {
        let err = fails(
            &s,
            &["task", "submit", "--prompt", "p.md", "--param", param],
        );
        assert!(err.contains(needle), "{param}: {err}");
    }
}

#[test]
fn a_docker_socket_without_permission_says_so() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // A socket only root may open, and saheeli run as `nobody`.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = dir.path().join("docker.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(dir.path().join("Dockerfile"), "FROM scratch\n").unwrap();
    // build-servo reaches Docker without a database or a cargo build.
    let out = Command::new(env!("CARGO_BIN_EXE_saheeli"))
        .current_dir(dir.path())
        .args(["build-servo", "--servo-bin", "/bin/true", "--context", "."])
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("permission denied on the Docker socket") && err.contains("`docker` group"),
        "{err}"
    );
    assert!(!err.contains("is the Docker daemon running"), "{err}");
}

#[test]
fn an_unknown_provider_prefix_is_refused() {
    let s = project().env("OPENAI_API_KEY", "sk-test-000000");
    let err = fails(
        &s,
        &[
            "task",
            "submit",
            "--prompt",
            "p.md",
            "--param",
            "model=typo/llama3",
        ],
    );
    assert!(
        err.contains("provider `typo`, which is not configured"),
        "{err}"
    );
}

#[test]
fn a_missing_key_is_refused_at_submit() {
    let s = project();
    let out = s
        .cmd(&[
            "task",
            "submit",
            "--prompt",
            "p.md",
            "--param",
            "model=claude-sonnet-4-5",
        ])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs `ANTHROPIC_API_KEY`"), "{err}");
    // Replay models need no key.
    s.submit("p.md");
}

#[test]
fn control_characters_in_a_title_do_not_reach_the_terminal() {
    let s = project();
    let id = {
        let out = s.expect(
            &[
                "task",
                "submit",
                "--prompt",
                "p.md",
                "--param",
                "title=\"evil\\nrow\\e[2J\"",
            ],
            0,
        );
        out.trim().to_string()
    };
    for args in [vec!["task", "status"], vec!["task", "status", id.as_str()]] {
        let out = s.expect(&args, 0);
        assert!(!out.contains('\x1b'), "{args:?}: {out:?}");
        assert!(out.contains("evil\\nrow\\u{1b}[2J"), "{args:?}: {out}");
    }
}

#[test]
fn replay_files_are_confined_and_never_quoted() {
    let s = project();
    let outside = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(outside.path(), "root:SECRET-HASH:19000:0:99999:7:::\n").unwrap();
    let err = fails(
        &s,
        &[
            "task",
            "submit",
            "--prompt",
            "p.md",
            "--param",
            &format!("model=replay:{}", outside.path().display()),
        ],
    );
    assert!(err.contains("outside the prompt's directory"), "{err}");
    assert!(!err.contains("SECRET-HASH"), "{err}");
    // Inside the tree, a file that is no script is not quoted either.
    s.write("notes.txt", "root:SECRET-HASH:19000\n");
    let err = fails(
        &s,
        &[
            "task",
            "submit",
            "--prompt",
            "p.md",
            "--param",
            "model=replay:notes.txt",
        ],
    );
    assert!(!err.contains("SECRET-HASH"), "{err}");
}

#[test]
fn keys_in_a_prompt_are_not_stored() {
    use base64::Engine;
    let key = "sk-test-Zq8rT2vW9xY4uJ7mK3nB";
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("user:{key}"));
    let s = Saheeli::new().env("OPENAI_API_KEY", key);
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": key}))]),
    );
    s.write(
        "p.md",
        &replay_prompt("s.json", &format!("title: uses {key}\n"))
            .replace("Do the scripted thing.", &format!("Use {key} or {b64}.")),
    );
    let id = s.submit("p.md");
    let stored =
        String::from_utf8_lossy(&s.expect(&["task", "status", &id, "--json"], 0).into_bytes())
            .into_owned();
    assert!(stored.contains("[REDACTED:OPENAI_API_KEY]"), "{stored}");
    let mut db = Vec::new();
    for f in ["saheeli.db", "saheeli.db-wal"] {
        if let Ok(b) = std::fs::read(s.path().join(f)) {
            db.extend(b);
        }
    }
    let db = String::from_utf8_lossy(&db);
    assert!(!db.contains(key), "the key is in the database");
    assert!(
        !db.contains(&b64[8..b64.len() - 4]),
        "its base64 is in the database"
    );
}

#[test]
fn read_only_commands_never_create_a_database() {
    let s = project();
    let elsewhere = tempfile::tempdir().unwrap();
    for args in [
        vec!["task", "status"],
        vec!["task", "logs", "0196"],
        vec!["task", "results", "0196"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_saheeli"))
            .current_dir(elsewhere.path())
            .args(&args)
            .env_remove("SAHEELI_CONFIG")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("no database at") && err.contains("built-in defaults"),
            "{args:?}: {err}"
        );
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }
    // With the project's config, the message names it too.
    let err = fails(&s, &["task", "status"]);
    assert!(err.contains("config.yaml"), "{err}");
}

/// Rebuilding one tag never deletes an image another tag still names
/// (identical builds share one id: a CI checkout's `latest` and a
/// developer's own tag, say).
#[test]
fn rebuilding_a_tag_keeps_an_image_another_tag_shares() {
    crate::util::require_docker();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        "FROM saheeli-base:bookworm\nCOPY servo /usr/local/bin/servo\n",
    )
    .unwrap();
    let n = std::process::id();
    let (a, b) = (
        format!("saheeli-it-share:a{n}"),
        format!("saheeli-it-share:b{n}"),
    );
    let build = |tag: &str, bin: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_saheeli"))
            .current_dir(dir.path())
            .args([
                "build-servo",
                "-t",
                tag,
                "--servo-bin",
                bin,
                "--context",
                ".",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let exists = |tag: &str| {
        Command::new("docker")
            .args(["image", "inspect", tag])
            .output()
            .unwrap()
            .status
            .success()
    };
    build(&a, "/bin/true");
    build(&b, "/bin/true");
    build(&a, "/bin/false");
    let kept = exists(&b);
    for t in [&a, &b] {
        let _ = Command::new("docker").args(["image", "rm", t]).output();
    }
    assert!(kept, "rebuilding {a} deleted the image {b} still named");
}
