//! Unit tests of turning prompts into task specs.

use super::*;
use crate::task::ParamSource;
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::config::ConfigFile;

/// Defaults, with `openai` at a local server that needs no key.
fn cfg() -> Config {
    let file: ConfigFile = serde_yaml::from_str(
        "providers:\n  openai: { kind: openai, base_url: 'http://127.0.0.1:9/v1' }\n",
    )
    .unwrap();
    Config {
        source: None,
        base_dir: PathBuf::from("/tmp"),
        file,
        set_keys: Default::default(),
    }
}

#[test]
fn key_forms_include_base64_at_every_alignment() {
    use base64::Engine;
    let key = "sk-test-Zq8rT2vW9xY4uJ7mK3nB";
    let forms = secret_forms(key);
    for prefix in ["", "a", "ab", "abc:"] {
        let enc = base64::engine::general_purpose::STANDARD.encode(format!("{prefix}{key}!"));
        assert!(
            forms.iter().any(|f| f != key && enc.contains(f.as_str())),
            "{prefix:?}: {enc}"
        );
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn defaults_come_from_config() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "fix.md", "# Fix it\nPlease.\n");
    let s = TaskSpec::from_prompt(&cfg(), &p, &[]).unwrap();
    assert_eq!(s.title, "Fix it");
    assert_eq!(s.model, "gpt-4o-mini");
    assert_eq!(s.max_steps, 50);
    assert_eq!(s.timeout_s, 1800);
    assert!(s.replay.is_none());
}

#[test]
fn replay_script_is_read_relative_to_prompt() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "s.yaml",
        "turns:\n  - tool_calls:\n      - name: task_complete\n        arguments: { message: ok }\n",
    );
    let p = write(d.path(), "t.md", "---\nmodel: replay:s.yaml\n---\nGo.\n");
    let s = TaskSpec::from_prompt(&cfg(), &p, &[]).unwrap();
    assert_eq!(s.replay.unwrap().turns.len(), 1);
}

#[test]
fn missing_replay_script_is_named() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "t.md", "---\nmodel: replay:nope.yaml\n---\nGo.\n");
    let e = format!("{:#}", TaskSpec::from_prompt(&cfg(), &p, &[]).unwrap_err());
    assert!(e.contains("nope.yaml"), "{e}");
}

#[test]
fn params_override_front_matter() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "t.md", "---\nmax_steps: 3\n---\nGo.\n");
    let s = TaskSpec::from_prompt(&cfg(), &p, &["max_steps=9".into(), "title=X".into()]).unwrap();
    assert_eq!(s.max_steps, 9);
    assert_eq!(s.title, "X");
    let e = TaskSpec::from_prompt(&cfg(), &p, &["bogus=1".into()]).unwrap_err();
    assert!(e.to_string().contains("unknown key `bogus`"), "{e}");
}

#[test]
fn invalid_utf8_is_explained() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("bad.md");
    std::fs::write(&p, b"ok \xff\xfe").unwrap();
    let e = TaskSpec::from_prompt(&cfg(), &p, &[]).unwrap_err();
    assert!(e.to_string().contains("not valid UTF-8"), "{e}");
}

mod templates {
    use super::*;

    fn spec(text: &str, params: &[&str]) -> anyhow::Result<TaskSpec> {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("calc")).unwrap();
        let p = write(d.path(), "t.md", text);
        let params: Vec<String> = params.iter().map(|s| s.to_string()).collect();
        TaskSpec::from_prompt(&cfg(), &p, &params)
    }

    fn err(text: &str, params: &[&str]) -> String {
        format!("{:#}", spec(text, params).unwrap_err())
    }

    const T: &str = "---\ntitle: \"Fix {{ test }}\"\nworkspace: ./{{ repo }}\nparameters:\n\
                     \x20 - { name: test, required: true }\n\
                     \x20 - { name: repo, type: path, default: calc }\n\
                     \x20 - { name: note }\n\
                     steps:\n  - { name: fix, description: \"Fix {{ test }}\", done_when: \"{{ test }} passes\" }\n\
                     ---\nFix {{ test }} in {{repo}}.{{ note }}\n";

    #[test]
    fn placeholders_are_replaced_in_every_text() {
        let s = spec(T, &["test=t1", "max_steps=7"]).unwrap();
        assert_eq!(s.title, "Fix t1");
        assert_eq!(
            s.body, "Fix t1 in calc.\n",
            "an unset optional one is empty"
        );
        assert!(s.workspace.as_ref().unwrap().ends_with("calc"));
        assert_eq!(s.steps[0].description, "Fix t1");
        assert_eq!(
            s.steps[0]
                .done_when
                .as_ref()
                .map(|w| w.to_string())
                .as_deref(),
            Some("t1 passes")
        );
        assert_eq!(s.max_steps, 7, "other --param still override keys");
        let sources: Vec<ParamSource> = s.parameters.iter().map(|p| p.source).collect();
        assert_eq!(
            sources,
            [ParamSource::Param, ParamSource::Default, ParamSource::Unset]
        );
        // A servo is told the steps.
        assert_eq!(s.servo_task(saheeli_protocol::TaskId::new()).steps, s.steps);
    }

    #[test]
    fn a_param_value_may_not_bring_an_unknown_placeholder() {
        let e = err(T, &["test=t1", "title=Fix {{ nope }}"]);
        assert!(
            e.contains("`title`: `{{ nope }}` names no parameter"),
            "{e}"
        );
        assert!(err(T, &["test=t1", "nope=1"]).contains("the parameters of"));
    }

    #[test]
    fn a_prompt_without_parameters_is_sent_as_written() {
        let s = spec(
            "---\ntitle: x\n---\nKeep {{ this }} and \\{{ that }}.\n",
            &[],
        )
        .unwrap();
        assert_eq!(s.body, "Keep {{ this }} and \\{{ that }}.\n");
        assert!(s.parameters.is_empty());
    }

    #[test]
    fn contradictory_or_malformed_declarations_are_refused_with_their_line() {
        let head = "---\nparameters:\n";
        for (decl, expected) in [
            (
                "  - { name: a, required: true, default: x }\n",
                "t.md:3: parameter `a` is `required` and has a `default`",
            ),
            (
                "  - { name: a, type: one_of }\n",
                "t.md:3: parameter `a` is `one_of` but lists no `values`",
            ),
            (
                "  - { name: a, type: int, values: [1] }\n",
                "parameter `a` has `values`, which only a `one_of` takes (it is `int`)",
            ),
            (
                "  - { name: a, type: int, default: many }\n",
                "parameter `a` (int): its `default`: `many` is not a whole number",
            ),
            (
                "  - { name: a }\n  - { name: a }\n",
                "parameter `a` is declared twice",
            ),
            (
                "  - { name: \"a b\" }\n",
                "parameter name `a b` is not a word",
            ),
            (
                "  - { name: model }\n",
                "parameter `model` has the name of the front-matter key `model`",
            ),
            (
                "  - { name: a }\nsteps:\n  - name: s\n  - name: s\n",
                "step `s` is listed twice",
            ),
        ] {
            let e = err(&format!("{head}{decl}---\nGo {{{{ a }}}}.\n"), &[]);
            assert!(e.contains(expected), "{decl}: {e}");
        }
    }

    #[test]
    fn an_unquoted_placeholder_value_gets_a_hint() {
        let e = err(
            "---\ntitle: {{ a }}\nparameters:\n  - { name: a }\n---\nGo.\n",
            &[],
        );
        assert!(e.contains("t.md:2:"), "{e}");
        assert!(e.contains("must be quoted"), "{e}");
    }
}

/// Issue 50: `maintenance` without `setup` is refused, and so is a key
/// file leaving the workspace (on a swarm the set-up is refused by the
/// engine's capabilities: `backend::capabilities`).
#[test]
fn set_up_keys_are_parsed_and_refused_without_a_set_up() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "t.md",
        "---\nsetup: { run: [make], key_files: [Makefile] }\nmaintenance: git fetch\n---\nGo.\n",
    );
    let c = cfg();
    let spec = TaskSpec::from_prompt(&c, &p, &[]).unwrap();
    assert_eq!(spec.setup, ["make"]);
    assert_eq!(spec.setup_plan.key_files, ["Makefile"]);
    assert_eq!(spec.setup_plan.maintenance, ["git fetch"]);
    // No workspace: the key file counts as absent, still a digest.
    assert!(spec.setup_plan.files_digest.is_some());
    let q = write(d.path(), "q.md", "---\nmaintenance: git fetch\n---\nGo.\n");
    let e = format!("{:#}", TaskSpec::from_prompt(&cfg(), &q, &[]).unwrap_err());
    assert!(e.contains("`maintenance` belongs to a set-up"), "{e}");
    let r = write(
        d.path(),
        "r.md",
        "---\nsetup: { run: [make], key_files: [../x] }\n---\nGo.\n",
    );
    let e = format!("{:#}", TaskSpec::from_prompt(&cfg(), &r, &[]).unwrap_err());
    assert!(e.contains("`setup.key_files` `../x`"), "{e}");
}
