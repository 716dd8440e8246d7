//! Unit tests of turning prompts into task specs.

use super::*;
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
