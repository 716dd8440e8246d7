//! Which settings need which capability, and the refusals' words.

use super::*;
use crate::config::{Config, ConfigFile};
use std::path::{Path, PathBuf};

fn cfg(backend: BackendKind) -> Config {
    let mut file: ConfigFile = serde_yaml::from_str(
        "providers:\n  openai: { kind: openai, base_url: 'http://127.0.0.1:9/v1' }\n",
    )
    .unwrap();
    file.backend = backend;
    Config {
        source: None,
        base_dir: PathBuf::from("/tmp"),
        file,
        set_keys: Default::default(),
    }
}

fn spec(front: &str) -> TaskSpec {
    let text = format!("---\nmodel: gpt-test\n{front}---\nGo.\n");
    TaskSpec::from_text(
        &cfg(BackendKind::Docker),
        Path::new("/tmp/t.md"),
        &text,
        &[],
    )
    .unwrap()
}

#[test]
fn each_setting_names_the_capability_it_needs() {
    for (front, setting, capability) in [
        (
            "egress: {setup: [pypi.org]}\n",
            "egress",
            Capability::Egress,
        ),
        ("egress_approval: ask\n", "egress", Capability::Egress),
        (
            "delegate: {max_children: 2}\n",
            "delegate",
            Capability::ChildTasks,
        ),
        (
            "resources: {disk: 1g}\n",
            "resources.disk",
            Capability::DiskQuota,
        ),
        (
            "agent_user: root\n",
            "agent_user: root",
            Capability::RootAgent,
        ),
        ("image: python:3.12\n", "image", Capability::TaskImages),
        ("setup: [make]\n", "setup", Capability::SetUp),
        ("verify: [\"true\"]\n", "verify", Capability::Verify),
    ] {
        let needs = spec(front).needs();
        assert!(
            needs
                .iter()
                .any(|n| n.capability == capability && n.setting == setting),
            "{front}: {needs:?}"
        );
    }
    assert!(spec("").needs().is_empty());
}

#[test]
fn the_local_engine_runs_every_task_and_a_swarm_refuses_naming_what_and_why() {
    let s = spec("egress: {agent: [example.org]}\nresources: {disk: 1g}\n");
    assert_eq!(refusal(BackendKind::Docker, &s), None);
    let why = refusal(BackendKind::Swarm, &s).unwrap();
    assert!(
        why.contains(
            "`egress` needs the engine capability `egress`, which `backend: swarm` lacks \
             (the swarm's relay carries no egress yet)"
        ) && why.contains("`resources.disk` needs the engine capability `disk_quota`")
            && why.ends_with(
                "run it with `backend: docker` in config.yaml, or drop `egress`, `resources.disk`"
            ),
        "{why}"
    );
    // Verify runs on both: nothing to refuse.
    assert_eq!(
        refusal(BackendKind::Swarm, &spec("verify: [\"true\"]\n")),
        None
    );
}

#[test]
fn a_third_party_agent_runs_on_either_engine() {
    let mut s = spec("");
    s.agent = saheeli_protocol::Agent::Named(saheeli_protocol::AgentName::ClaudeCode);
    assert_eq!(refusal(BackendKind::Docker, &s), None);
    assert_eq!(refusal(BackendKind::Swarm, &s), None);
}

#[test]
fn a_warm_pool_runs_on_either_engine() {
    for backend in [BackendKind::Swarm, BackendKind::Docker] {
        let mut c = cfg(backend);
        assert_eq!(config_refusal(&c), None);
        c.file.pool = serde_yaml::from_str("[{size: 2}]").unwrap();
        assert_eq!(config_refusal(&c), None, "{backend:?}");
    }
}

#[test]
fn doctor_prints_a_row_per_capability_and_why_the_configured_engine_lacks_some() {
    let t = table_text(BackendKind::Swarm);
    assert!(t.contains("`backend: swarm`"), "{t}");
    for c in Capability::ALL {
        assert!(t.contains(&format!("  {}", c.name())), "{t}");
    }
    assert!(
        t.contains("  no egress: the swarm's relay carries no egress yet"),
        "{t}"
    );
    assert!(!table_text(BackendKind::Docker).contains("no egress:"));
}

/// Each "yes" of a declaration names what covers it, beside it: a case of
/// the conformance suite (`conformance::NAME`, a function of
/// `backend/conformance.rs`, run on every engine) or an integration test
/// module (`it::NAME`, `tests/it/NAME.rs`); a name that is not there fails.
#[test]
fn each_yes_names_the_conformance_case_or_test_that_covers_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let suite = std::fs::read_to_string(root.join("src/backend/conformance.rs")).unwrap();
    for (kind, file) in [
        (BackendKind::Docker, "src/backend/local/capabilities.rs"),
        (BackendKind::Swarm, "src/backend/swarm/capabilities.rs"),
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let yes: Vec<&str> = text.lines().filter(|l| l.contains(", Yes),")).collect();
        let declared = declared(kind)
            .iter()
            .filter(|(_, s)| *s == Support::Yes)
            .count();
        assert_eq!(yes.len(), declared, "{file}: one line per yes");
        for line in yes {
            let (_, names) = line
                .split_once("//")
                .unwrap_or_else(|| panic!("{file}: `{line}` names no test"));
            for name in names.split(';') {
                let name = name.split_whitespace().next().unwrap_or_default();
                if let Some(case) = name.strip_prefix("conformance::") {
                    assert!(
                        suite.contains(&format!("pub(crate) async fn {case}<")),
                        "{file}: `{name}` is no case of the conformance suite"
                    );
                } else if let Some(module) = name.strip_prefix("it::") {
                    assert!(
                        root.join(format!("tests/it/{module}.rs")).is_file(),
                        "{file}: `{name}` is no module of tests/it"
                    );
                } else {
                    panic!("{file}: `{line}`: name `conformance::CASE` or `it::MODULE`");
                }
            }
        }
    }
}
