//! Unit tests of config.yaml.

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
