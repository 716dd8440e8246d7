//! `saheeli import` on the command line (issue 49): a Harbor task and a
//! Terminal-Bench 1 dataset in, a suite directory out; what cannot run is
//! named per task; bad input names the file. No Docker: running an imported
//! suite is the eval tests' part.

use crate::util::Saheeli;

fn tasks(s: &Saheeli) {
    s.write(
        "harbor/hello/task.toml",
        "schema_version = \"1.4\"\n[environment]\nnetwork_mode = \"no-network\"\n",
    );
    s.write(
        "harbor/hello/instruction.md",
        "Write hello to /app/hello.txt.\n",
    );
    s.write(
        "harbor/hello/environment/Dockerfile",
        "FROM python:3.13-slim\nWORKDIR /app\n",
    );
    s.write(
        "harbor/hello/tests/test.sh",
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    );
    s.write("harbor/gpu/task.toml", "[environment]\ngpus = 1\n");
    s.write("harbor/gpu/instruction.md", "Train.\n");
    s.write(
        "harbor/gpu/environment/Dockerfile",
        "FROM python:3.13-slim\n",
    );
    s.write("harbor/gpu/tests/test.sh", "true\n");
    s.write(
        "tb/hi/task.yaml",
        "instruction: Say hi in /app/hi.txt\ndifficulty: easy\n",
    );
    s.write("tb/hi/Dockerfile", "FROM python:3.13-slim\nWORKDIR /app\n");
    s.write("tb/hi/run-tests.sh", "grep -q hi /app/hi.txt\n");
    s.write("tb/hi/solution.sh", "echo hi > /app/hi.txt\n");
}

#[test]
fn import_writes_a_suite_and_names_what_it_refused() {
    let s = Saheeli::new();
    tasks(&s);
    let out = s.expect(&["import", "harbor", "tb", "--out", "suite"], 0);
    let lines: Vec<&str> = out.lines().collect();
    let suite = s.path().join("suite/suite.yaml").canonicalize().unwrap();
    assert_eq!(lines[0], suite.display().to_string(), "{out}");
    assert_eq!(lines[1], "2 task(s) imported, 1 refused", "{out}");
    assert!(
        lines[2].starts_with("refused: `gpu`: it asks for GPUs"),
        "{out}"
    );
    let text = std::fs::read_to_string(&suite).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let ids: Vec<&str> = doc["cases"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["hello", "hi"]);
    assert!(s.path().join("suite/hi/solution/solve.sh").is_file());

    let err = s.expect_err(&["import", "tb", "--out", "suite"], 2);
    assert!(err.contains("is not empty; give `--force`"), "{err}");
    s.expect(&["import", "tb", "--out", "suite", "--force"], 0);

    s.write("bad/task.toml", "[agent]\ntimeout_sec = \"soon\"\n");
    let err = s.expect_err(&["import", "bad", "--out", "other"], 2);
    assert!(
        err.contains("bad/task.toml") && err.contains("line 2"),
        "{err}"
    );
    assert!(
        !s.path().join("other").exists(),
        "nothing written for bad input"
    );
}
