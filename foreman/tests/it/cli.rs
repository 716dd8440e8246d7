//! What people read: every `--help`, and the main error messages, as
//! snapshots (ids, paths and times redacted). A change here is a change of
//! the interface users and scripts rely on: review it as one.

use insta::assert_snapshot;

use crate::util::Saheeli;

#[test]
fn help_texts() {
    let s = Saheeli::new();
    for args in [
        &["--help"][..],
        &["task", "--help"],
        &["task", "submit", "--help"],
        &["task", "status", "--help"],
        &["task", "logs", "--help"],
        &["task", "results", "--help"],
        &["task", "diff", "--help"],
        &["task", "report", "--help"],
        &["task", "cancel", "--help"],
        &["task", "retry", "--help"],
        &["task", "override", "--help"],
        &["serve", "--help"],
        &["run", "--help"],
        &["gc", "--help"],
        &["metrics", "--help"],
        &["build-servo", "--help"],
        &["eval", "--help"],
        &["eval", "compare", "--help"],
        &["eval", "list", "--help"],
    ] {
        let name = format!("help_{}", args[..args.len() - 1].join("_"));
        let name = if name == "help_" {
            "help".to_string()
        } else {
            name
        };
        assert_snapshot!(name, s.expect(args, 0));
    }
}

/// Error messages name the file, line, key or id and say what to do.
#[test]
fn error_messages() {
    let s = Saheeli::new();
    let dir = s.path().display().to_string();
    let redact = |text: String| text.replace(&dir, "[project]");

    s.write("bad.md", "---\ntitle: x\nmodle: gpt-4o\n---\nDo it.\n");
    let err = s.expect_err(&["task", "submit", "--prompt", "bad.md"], 2);
    assert_snapshot!("error_bad_front_matter", redact(err));

    let err = s.expect_err(&["task", "status", "0123456789abcdef"], 2);
    assert_snapshot!("error_unknown_id", redact(err));

    s.write("p.md", "Hello.\n");
    let err = s.expect_err(
        &[
            "--config",
            "other.yaml",
            "task",
            "submit",
            "--prompt",
            "p.md",
        ],
        2,
    );
    assert_snapshot!("error_missing_config", redact(err));

    s.write("broken.yaml", "concurency: 3\n");
    let err = s.expect_err(&["--config", "broken.yaml", "task", "status"], 2);
    assert_snapshot!("error_bad_config", redact(err));

    s.write("img.yaml", "image: saheeli-servo:does-not-exist\n");
    let err = s.expect_err(&["--config", "img.yaml", "serve", "--drain"], 2);
    assert_snapshot!("error_missing_image", redact(err));
}
