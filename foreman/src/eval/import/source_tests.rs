use super::*;
use crate::eval::import::fixtures::{HARBOR_TOML, TB1_YAML, harbor_task, put, tb1_task};

#[test]
fn formats_are_sniffed_and_datasets_walked() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("dataset");
    harbor_task(&ds, "b-task", HARBOR_TOML);
    tb1_task(&ds, "a-task", TB1_YAML);
    put(&ds, "README.md", "a dataset\n");
    put(&ds, ".cache/task.toml", "");
    std::fs::create_dir_all(ds.join("not-a-task")).unwrap();
    let imported = import(std::slice::from_ref(&ds), &Options::default()).unwrap();
    let ids: Vec<&str> = imported.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        vec!["a-task", "b-task"],
        "children in order; others skipped"
    );
    assert_eq!(imported.name, "dataset");
    // `--format` keeps only that format's tasks.
    let opts = Options {
        format: Some(Format::Harbor),
        ..Options::default()
    };
    let imported = import(std::slice::from_ref(&ds), &opts).unwrap();
    assert_eq!(imported.tasks.len(), 1);
    assert_eq!(imported.tasks[0].id, "b-task");
    // A task's own marker file names its directory.
    let imported = import(&[ds.join("a-task/task.yaml")], &Options::default()).unwrap();
    assert_eq!(imported.tasks[0].id, "a-task");
}

#[test]
fn an_unknown_source_says_what_to_give() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let notes = put(tmp.path(), "notes.txt", "hi\n");
    for src in [empty.clone(), notes, tmp.path().join("missing")] {
        let err = import(std::slice::from_ref(&src), &Options::default()).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains(&src.display().to_string()), "{msg}");
        assert!(msg.contains("task.toml") && msg.contains(".jsonl"), "{msg}");
    }
    let opts = Options {
        format: Some(Format::Swebench),
        ..Options::default()
    };
    let err = import(&[empty], &opts).unwrap_err();
    assert!(format!("{err:#}").contains("`--format swebench` reads a `*.jsonl`"));
}
