//! Unit tests of config.yaml.

use super::load::{default_run_dir, duplicate_top_level_key, set_keys};
use super::*;

#[test]
fn unknown_key_is_named() {
    let e = serde_yaml::from_str::<ConfigFile>("concurency: 3\n").unwrap_err();
    assert!(e.to_string().contains("unknown field `concurency`"), "{e}");
}

#[test]
fn shipped_config_matches_defaults() {
    // Every key, nested ones included: config.yaml documents the defaults,
    // so it must say exactly what the code does with no file at all.
    let text = include_str!("../../../config.yaml");
    let file: ConfigFile = serde_yaml::from_str(text).unwrap();
    assert_eq!(
        format!("{file:#?}"),
        format!("{:#?}", ConfigFile::default())
    );
}

#[test]
fn set_keys_name_what_the_file_sets() {
    let keys = set_keys("image: x\ntask:\n  model: m\n  max_steps: 50\nlimits: {}\n");
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    // `max_steps: 50` is the default value, and still the file's setting.
    assert_eq!(
        keys,
        ["image", "limits", "task", "task.max_steps", "task.model"]
    );
    assert!(set_keys("").is_empty());
}

#[test]
fn the_default_run_dir_is_per_user() {
    let state = std::path::Path::new("/p/.saheeli");
    assert_eq!(
        default_run_dir(Some("/run/user/7".into()), 7, state),
        std::path::PathBuf::from("/run/user/7/saheeli")
    );
    // A relative XDG_RUNTIME_DIR is ignored, as the spec says.
    assert_eq!(
        default_run_dir(Some("rel".into()), 0, state),
        std::path::PathBuf::from("/run/saheeli")
    );
    // No runtime directory of this (made-up) uid: the project's own.
    assert_eq!(
        default_run_dir(None, 4_000_000_000, state),
        state.join("run")
    );
    assert_eq!(ConfigFile::default().run_dir, None);
}

/// Issue 24: a key set twice was reported at the line where the mapping
/// ended (`config.yaml:6: duplicate field notify` for a key near the end).
#[test]
fn a_duplicate_key_is_named_at_its_second_line() {
    let cases: &[(&str, Option<(&str, usize)>)] = &[
        (
            "image: a\nnotify: []\ntask:\n  model: m\nnotify: []\n",
            Some(("notify", 5)),
        ),
        ("image: a\ntask:\n  model: m\n  max_steps: 3\n", None),
        // Keys below a section may repeat names of top-level ones.
        ("disk: 1\nlimits:\n  disk: 2g\n", None),
        ("# image: a\nimage: b\n", None),
        ("\"image\": a\nimage: b\n", Some(("image", 2))),
        ("---\nimage: a\n", None),
    ];
    for (text, want) in cases {
        let got = duplicate_top_level_key(text);
        assert_eq!(
            got.as_ref().map(|(k, l)| (k.as_str(), *l)),
            *want,
            "{text:?}"
        );
    }
    // And serde alone names the wrong line, which is why the scan exists.
    let text = "image: a\nnotify: []\ntask:\n  model: m\nnotify: []\nlimits: {}\n";
    assert!(serde_yaml::from_str::<ConfigFile>(text).is_err());
}

/// Issue 24: with `backend: swarm` and a local image name, `serve`
/// started and tasks failed on the nodes' "No such image"; `serve` and
/// submit refuse it first.
#[test]
fn a_swarm_image_must_be_in_the_swarm_registry() {
    let swarm = "backend: swarm\nswarm: { manager: 'tcp://m:2375', registry: '10.0.0.5:5000', \
                 network: n, gateway_listen: '10.0.0.1:7000' }\n";
    let cases = [
        ("saheeli-servo:latest", true),
        ("10.0.0.5:5000/saheeli-servo@sha256:ab", false),
        ("10.0.0.5:5000/x:1", false),
        ("10.0.0.5:50000/x:1", true),
        ("10.0.0.5:5000/", true),
        ("docker.io/library/x", true),
    ];
    for (image, refused) in cases {
        let file: ConfigFile = serde_yaml::from_str(&format!("image: '{image}'\n{swarm}")).unwrap();
        let problem = file.swarm_image_problem();
        assert_eq!(problem.is_some(), refused, "{image}: {problem:?}");
        if let Some(p) = problem {
            assert!(p.contains("build-servo --push"), "{p}");
        }
    }
    // The local engine pulls nothing.
    let local: ConfigFile = serde_yaml::from_str("image: x\n").unwrap();
    assert_eq!(local.swarm_image_problem(), None);
}
