//! Issue 23, collection: the foreman (root) writes into a results directory
//! the agent filled, so every name it writes may be the agent's link to a
//! host file (HOSTILE.md cases 40, 41 and 10), and a sparse file may claim
//! far more than it holds (case 11). Replayed with real containers, through
//! both collection paths (the volume's directory and the archive API).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::util::{Saheeli, leftovers, replay_prompt, require_docker, script};

/// A directory of the test's own outside every project, with a victim
/// file (root's, 0600, as in the report) in it.
struct Outside {
    dir: tempfile::TempDir,
}

impl Outside {
    fn new() -> Outside {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("saheeli-victim-")
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("victim"), "keep").unwrap();
        std::fs::set_permissions(
            dir.path().join("victim"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("logs")).unwrap();
        std::fs::write(dir.path().join("logs/verify-1.log"), "keep").unwrap();
        Outside { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// The victims are as they were and nothing was made beside them.
    fn assert_untouched(&self, what: &str) {
        let read = |n: &str| std::fs::read_to_string(self.dir.path().join(n)).unwrap();
        assert_eq!(read("victim"), "keep", "{what}: the victim was written");
        assert_eq!(read("logs/verify-1.log"), "keep", "{what}");
        let mut names: Vec<String> = walkdir::WalkDir::new(self.dir.path())
            .min_depth(1)
            .into_iter()
            .map(|e| {
                let e = e.unwrap();
                e.path()
                    .strip_prefix(self.dir.path())
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["logs", "logs/verify-1.log", "victim"],
            "{what}: something was made outside the results"
        );
    }
}

/// The key the foreman knows; the agent writes it split, so the replay
/// script never holds it whole.
const KEY: &str = "sk-hostile-TESTKEY-123456";

/// Links at every name the foreman writes in a results directory, a file
/// holding the key, and data past a 1 MiB cap.
fn plant_everywhere(o: &Outside) -> String {
    let v = o.path("victim");
    [
        format!("ln -s {v} RESULTS_TRUNCATED.txt"),
        format!("ln -s {v} report.md"),
        "K=sk-hostile-TESTKEY; K=$K-123456; printf '<any text> # %s\\n' $K > leak.txt".into(),
        "chmod 0777 leak.txt".into(),
        format!("ln -s {v} leak.saheeli-redacting"),
        format!(
            "ln -s {} leak.txt.saheeli-redacting",
            o.path("made-by-redaction")
        ),
        "mkdir -p .saheeli".into(),
        format!("ln -s {v} .saheeli/changes.patch"),
        format!("ln -s {v} .saheeli/verify-1.log"),
        format!("ln -s {} .saheeli/verify-2.log", o.path("made-by-verify")),
        format!("ln -s {} host-dir", o.path("logs")),
        "head -c 2000000 /dev/urandom > zz_data".into(),
    ]
    // Each on its own: in a separated container the agent cannot write in
    // the servo's `.saheeli/` at all, and those links fail (the foreman's
    // own defence for them, e.g. on a swarm upload, is tested by units).
    .join("; ")
}

fn project(collection: &str) -> Saheeli {
    Saheeli::with_config(&format!("max_results_size: 1m\ncollection: {collection}\n"))
        .env("OPENAI_API_KEY", KEY)
}

#[test]
fn issue23_links_at_every_name_the_foreman_writes_are_replaced_not_followed() {
    require_docker();
    for collection in ["auto", "archive"] {
        let o = Outside::new();
        let s = project(collection);
        s.write(
            "plant.json",
            &script(&[
                ("execute_shell", json!({"command": plant_everywhere(&o)})),
                ("task_complete", json!({"message": "planted"})),
            ]),
        );
        s.write(
            "plant.md",
            &replay_prompt("plant.json", "verify: 'true'\nverify_retries: 0\n"),
        );
        // `.saheeli` itself a link to a host directory holding a verify log.
        s.write(
            "dir.json",
            &script(&[
                (
                    "execute_shell",
                    json!({"command": format!("ln -s {} .saheeli", o.path("logs"))}),
                ),
                ("task_complete", json!({"message": "linked"})),
            ]),
        );
        s.write(
            "dir.md",
            &replay_prompt("dir.json", "verify: 'true'\nverify_retries: 0\n"),
        );
        let t = s.expect_json(&["run", "plant.md", "--json"], 1);
        let what = format!("{collection}: plant");
        assert_eq!(
            (&t["state"], &t["reason"]),
            (&json!("incomplete"), &json!("results_too_large")),
            "{what}: {t}"
        );
        o.assert_untouched(&what);
        let results = PathBuf::from(t["results"].as_str().unwrap());
        let marker = results.join("RESULTS_TRUNCATED.txt");
        assert!(!marker.is_symlink(), "{what}");
        assert!(
            std::fs::read_to_string(&marker)
                .unwrap()
                .contains("size cap")
        );
        assert_eq!(
            std::fs::read_to_string(results.join("leak.txt")).unwrap(),
            "<any text> # [REDACTED:OPENAI_API_KEY]\n",
            "{what}"
        );
        // The agent's links are kept as links, inert; Saheeli's own names
        // hold Saheeli's files.
        assert!(
            results.join("leak.saheeli-redacting").is_symlink(),
            "{what}"
        );
        assert!(results.join("host-dir").is_symlink(), "{what}");
        let meta = results.join("report.md").symlink_metadata().unwrap();
        assert!(meta.is_file(), "{what}: report.md");
        // Cut results get no patch: the agent's link there is removed.
        for own in [
            ".saheeli/changes.patch",
            ".saheeli/verify-1.log",
            ".saheeli/verify-2.log",
        ] {
            assert!(!results.join(own).is_symlink(), "{what}: {own}");
        }
        let id = t["id"].as_str().unwrap();
        assert!(leftovers(id).is_empty(), "{what}");

        let t = s.expect_json(&["run", "dir.md", "--json"], 0);
        let what = format!("{collection}: .saheeli link");
        o.assert_untouched(&what);
        let dir_results = PathBuf::from(t["results"].as_str().unwrap());
        assert!(!dir_results.join(".saheeli").is_symlink(), "{what}");
        assert!(
            dir_results.join(".saheeli/verify-1.log").is_file(),
            "{what}"
        );

        // Case 10: `task results --dest` leaves links out unless asked.
        let dest = s.path().join("copy");
        let c = s.expect_json(
            &[
                "task",
                "results",
                id,
                "--dest",
                dest.to_str().unwrap(),
                "--json",
            ],
            1,
        );
        let copied = dest.join(id);
        assert_eq!(c["results"], copied.to_str().unwrap());
        // The agent's links that outlived collection: none is copied.
        let links = [
            "leak.saheeli-redacting",
            "leak.txt.saheeli-redacting",
            "host-dir",
        ];
        assert_eq!(c["links_skipped"], links.len(), "{c}");
        assert!(copied.join("leak.txt").is_file());
        for link in links {
            assert!(results.join(link).is_symlink(), "{what}: {link}");
            assert!(copied.join(link).symlink_metadata().is_err(), "{link}");
        }
        let out = s.run(&["task", "results", id, "--dest", dest.to_str().unwrap()]);
        let note = String::from_utf8_lossy(&out.stderr);
        assert!(
            note.contains("symbolic links in the results not copied") && note.contains("--links"),
            "{note}"
        );
        let c = s.expect_json(
            &[
                "task",
                "results",
                id,
                "--dest",
                dest.to_str().unwrap(),
                "--links",
                "--json",
            ],
            1,
        );
        assert_eq!(c["links_skipped"], 0, "{c}");
        assert_eq!(
            std::fs::read_link(copied.join("host-dir")).unwrap(),
            Path::new(&o.path("logs"))
        );
        o.assert_untouched(&format!("{collection}: task results"));
    }
}

#[test]
fn issue23_a_sparse_file_is_collected_whole_and_stays_sparse() {
    require_docker();
    let s = Saheeli::with_config("max_results_size: 1m\n");
    s.write(
        "sparse.json",
        &script(&[
            (
                "execute_shell",
                // 100 MiB, not the report's 3 GB: collection no longer reads
                // holes, but the patch's blob id still hashes every byte.
                json!({"command": "truncate -s 100M sparse && printf tail >> sparse"}),
            ),
            ("task_complete", json!({"message": "made a sparse file"})),
        ]),
    );
    s.write("p.md", &replay_prompt("sparse.json", ""));
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(t["state"], "complete", "{t}");
    let results = PathBuf::from(t["results"].as_str().unwrap());
    assert!(!results.join("RESULTS_TRUNCATED.txt").exists());
    let meta = std::fs::metadata(results.join("sparse")).unwrap();
    assert_eq!(meta.len(), (100 << 20) + 4);
    assert!(
        meta.blocks() * 512 < 1 << 20,
        "{} bytes on the host",
        meta.blocks() * 512
    );
    let mut tail = [0u8; 4];
    std::os::unix::fs::FileExt::read_exact_at(
        &std::fs::File::open(results.join("sparse")).unwrap(),
        &mut tail,
        100 << 20,
    )
    .unwrap();
    assert_eq!(&tail, b"tail");
    assert!(leftovers(t["id"].as_str().unwrap()).is_empty());
}

/// Hostile case N31: at the results cap, a 70 MB `big.bin` that sorts
/// before the servo's files cuts itself, not complete.json, the audit log
/// or the session, on both collection paths; report.md reads them, and the
/// marker names what was cut.
#[test]
fn n31_a_big_file_sorting_first_cannot_push_out_the_servos_evidence() {
    require_docker();
    for collection in ["auto", "archive"] {
        let s = Saheeli::with_config(&format!(
            "max_results_size: 50m\ncollection: {collection}\n"
        ));
        s.write(
            "big.json",
            &script(&[
                (
                    "execute_shell",
                    json!({"command": "head -c 70000000 /dev/urandom > big.bin && echo small > small.txt"}),
                ),
                ("task_complete", json!({"message": "left a big file"})),
            ]),
        );
        s.write("p.md", &replay_prompt("big.json", ""));
        let t = s.expect_json(&["run", "p.md", "--json"], 1);
        assert_eq!(t["reason"], "results_too_large", "{collection}: {t}");
        let id = t["id"].as_str().unwrap();
        let results = PathBuf::from(t["results"].as_str().unwrap());
        for name in [
            "complete.json".to_string(),
            format!("servo-{id}-audit.log"),
            format!("servo-{id}-session.json"),
        ] {
            let meta = std::fs::symlink_metadata(results.join(&name));
            assert!(
                meta.is_ok_and(|m| m.is_file() && m.len() > 0),
                "{collection}: {name} not collected"
            );
        }
        assert!(!results.join("big.bin").exists(), "{collection}");
        let marker = std::fs::read_to_string(results.join("RESULTS_TRUNCATED.txt")).unwrap();
        assert!(marker.contains("- big.bin\n"), "{collection}: {marker}");
        let report = std::fs::read_to_string(results.join("report.md")).unwrap();
        assert!(
            !report.contains("left no audit log"),
            "{collection}: {report}"
        );
        for part in ["`execute_shell`", "left a big file"] {
            assert!(report.contains(part), "{collection}: {part}\n{report}");
        }
    }
}
