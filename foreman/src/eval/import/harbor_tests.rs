use super::*;
use crate::eval::import::fixtures::{HARBOR_TOML, harbor_task, put};
use crate::eval::import::model::TaskImage;

fn read(dir: &Path) -> (Option<ImportedTask>, Vec<Problem>) {
    let mut problems = Vec::new();
    let task = import_task(dir, &mut Ids::default(), &mut problems).unwrap();
    (task, problems)
}

#[test]
fn a_harbor_task_maps_to_the_contract_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = harbor_task(tmp.path(), "Hello_World", HARBOR_TOML);
    let (task, problems) = read(&dir);
    let task = task.expect("imported");
    assert_eq!(
        problems,
        vec![],
        "a no-network task with a Dockerfile has nothing to warn about"
    );
    assert_eq!(task.id, "hello-world");
    assert_eq!(task.category, "python");
    assert_eq!(task.text, "Write hello to /app/hello.txt.\n");
    assert_eq!(
        task.image,
        TaskImage::Build(Place::Source(dir.join("environment")))
    );
    assert_eq!(
        task.workdir.as_deref(),
        Some("/app"),
        "the Dockerfile's WORKDIR"
    );
    assert!(
        task.root,
        "no USER and no [agent].user: Harbor runs as the image's root"
    );
    assert_eq!(task.timeout_secs, Some(121), "120.5 s rounds up");
    assert_eq!(task.limits.cpus, Some(2.0));
    assert_eq!(task.limits.memory_mb, Some(2048));
    assert_eq!(task.limits.disk_mb, Some(4096));
    assert!(task.network_none);
    assert_eq!(task.verify.files, vec![Place::Source(dir.join("tests"))]);
    assert_eq!(task.verify.run, vec!["bash /tests/test.sh".to_string()]);
    assert_eq!(task.verify.timeout_secs, Some(30));
    assert_eq!(
        task.verify
            .env
            .get("PYTHONDONTWRITEBYTECODE")
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(task.solution, Some(Place::Source(dir.join("solution"))));
    assert!(
        task.generated.is_empty(),
        "a Harbor task's files are named, not copied"
    );
}

#[test]
fn legacy_version_sizes_and_allow_internet_are_read() {
    let tmp = tempfile::tempdir().unwrap();
    let toml = "version = \"1.0\"\n[environment]\nmemory = \"4G\"\nstorage = \"512M\"\n\
                allow_internet = false\nworkdir = \"/srv/task\"\n";
    let dir = harbor_task(tmp.path(), "legacy", toml);
    let (task, problems) = read(&dir);
    let task = task.expect("imported");
    assert_eq!(problems, vec![]);
    assert_eq!(task.limits.memory_mb, Some(4096));
    assert_eq!(task.limits.disk_mb, Some(512));
    assert!(task.network_none, "allow_internet = false is no-network");
    assert_eq!(
        task.workdir.as_deref(),
        Some("/srv/task"),
        "[environment].workdir wins"
    );
    assert_eq!(
        task.timeout_secs, None,
        "Harbor's agent has no limit by default"
    );
    assert_eq!(
        task.verify.timeout_secs,
        Some(600),
        "Harbor's verifier default"
    );
    assert_eq!(task.category, "harbor");
}

#[test]
fn a_docker_image_needs_no_environment_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = harbor_task(
        tmp.path(),
        "prebuilt",
        "[environment]\ndocker_image = \"ghcr.io/acme/task:1\"\nnetwork_mode = \"no-network\"\n",
    );
    std::fs::remove_dir_all(dir.join("environment")).unwrap();
    let (task, problems) = read(&dir);
    let task = task.expect("imported");
    assert_eq!(problems, vec![]);
    assert_eq!(task.image, TaskImage::Image("ghcr.io/acme/task:1".into()));
    assert_eq!(
        task.workdir.as_deref(),
        Some("/app"),
        "unknown: Harbor's convention"
    );
}

#[test]
fn public_network_is_a_warning_not_a_refusal() {
    let tmp = tempfile::tempdir().unwrap();
    // No network_mode: Harbor's default is public.
    let dir = harbor_task(tmp.path(), "online", "schema_version = \"1.4\"\n");
    put(
        &dir,
        "tests/test.sh",
        "#!/bin/bash\npip install pytest\npytest /tests -rA\n",
    );
    let (task, problems) = read(&dir);
    let task = task.expect("a public task still runs, offline");
    assert!(!task.network_none);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(!problems[0].refused);
    assert!(
        problems[0]
            .what
            .contains("runs offline until egress rules land"),
        "{}",
        problems[0].what
    );
    let dir = harbor_task(
        tmp.path(),
        "allowlisted",
        "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n\
         [agent]\nnetwork_mode = \"no-network\"\n",
    );
    let (task, problems) = read(&dir);
    assert!(
        task.unwrap().network_none,
        "the agent phase's own no-network"
    );
    assert!(
        problems[0].what.contains("network `allowlist` for verify"),
        "{problems:?}"
    );
}

#[test]
fn what_cannot_run_here_is_refused_by_name() {
    let cases = [
        ("[environment]\ngpus = 1\n", "GPUs"),
        ("[environment]\ngpu_types = [\"H100\"]\n", "GPUs"),
        (
            "[environment]\ntpu = { type = \"v5e\", topology = \"2x4\" }\n",
            "TPU",
        ),
        ("[environment]\nos = \"windows\"\n", "windows"),
        (
            "[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\n",
            "multi-step",
        ),
    ];
    for (toml, word) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = harbor_task(tmp.path(), "t", toml);
        let (task, problems) = read(&dir);
        assert!(task.is_none(), "{toml}");
        assert!(
            problems.iter().any(|p| p.refused && p.what.contains(word)),
            "{toml}: {problems:?}"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = harbor_task(tmp.path(), "t", "");
    put(
        &dir,
        "environment/docker-compose.yaml",
        "services:\n  main:\n    build: .\n  redis:\n    image: redis:7\n",
    );
    let (task, problems) = read(&dir);
    assert!(task.is_none());
    assert!(
        problems[0].what.contains("services main, redis"),
        "{problems:?}"
    );
    std::fs::remove_file(dir.join("tests/test.sh")).unwrap();
    std::fs::remove_file(dir.join("environment/Dockerfile")).unwrap();
    let (_, problems) = read(&dir);
    let all: Vec<&str> = problems.iter().map(|p| p.what.as_str()).collect();
    assert!(all.iter().any(|w| w.contains("tests/test.sh")), "{all:?}");
    assert!(
        all.iter().any(|w| w.contains("nothing to run it in")),
        "{all:?}"
    );
}

#[test]
fn users_map_to_agent_user() {
    let tmp = tempfile::tempdir().unwrap();
    let net = "[environment]\nnetwork_mode = \"no-network\"\n";
    let dir = harbor_task(tmp.path(), "a", &format!("[agent]\nuser = \"root\"\n{net}"));
    put(&dir, "environment/Dockerfile", "FROM x\nUSER app\n");
    assert!(
        read(&dir).0.unwrap().root,
        "[agent].user = root wins over USER"
    );
    let dir = harbor_task(tmp.path(), "b", net);
    put(
        &dir,
        "environment/Dockerfile",
        "FROM x\nUSER app\nWORKDIR /home/app\n",
    );
    let (task, problems) = read(&dir);
    let task = task.unwrap();
    assert!(!task.root);
    assert_eq!(task.workdir.as_deref(), Some("/home/app"));
    assert!(problems[0].what.contains("not `app`"), "{problems:?}");
    let dir = harbor_task(tmp.path(), "c", &format!("[verifier]\nuser = 0\n{net}"));
    put(&dir, "environment/Dockerfile", "FROM x\nUSER 1000\n");
    assert!(
        read(&dir).0.unwrap().root,
        "[verifier].user = 0 is root too"
    );
}

#[test]
fn a_bad_task_toml_names_the_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = harbor_task(tmp.path(), "bad", "[agent]\ntimeout_sec = \"soon\"\n");
    let err = import_task(&dir, &mut Ids::default(), &mut Vec::new()).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("bad/task.toml"), "{msg}");
    assert!(msg.contains("line 2"), "{msg}");
}

#[test]
fn host_variables_and_unsupported_extras_are_warned() {
    let tmp = tempfile::tempdir().unwrap();
    let toml = "[verifier]\nenv = { OPENAI_API_KEY = \"${OPENAI_API_KEY}\" }\n\
                [environment]\nnetwork_mode = \"no-network\"\nhealthcheck = { command = \"true\" }\n\
                [solution]\nenv = { X = \"1\" }\n";
    let dir = harbor_task(tmp.path(), "extras", toml);
    put(&dir, "tests/Dockerfile", "FROM x\n");
    let (task, problems) = read(&dir);
    assert!(task.is_some());
    let all: Vec<&str> = problems.iter().map(|p| p.what.as_str()).collect();
    for word in [
        "OPENAI_API_KEY",
        "healthcheck",
        "[solution].env",
        "separate verifier",
    ] {
        assert!(all.iter().any(|w| w.contains(word)), "{word}: {all:?}");
    }
    assert!(problems.iter().all(|p| !p.refused));
}
