//! Tests of `front_matter`: examples, and properties over any text.

use std::time::Duration;

use super::*;

fn parse(text: &str) -> Result<PromptFile, FrontMatterError> {
    PromptFile::parse("p.md", text)
}

#[test]
fn no_front_matter_is_all_body() {
    let p = parse("Fix the bug.\n").unwrap();
    assert_eq!(p.front_matter, FrontMatter::default());
    assert_eq!(p.body, "Fix the bug.\n");
}

#[test]
fn all_keys_parse() {
    let p = parse(
        "---\ntitle: T\nmodel: gpt-4o-mini\nmax_steps: 60\ntimeout: 30m\nworkspace: ./repo\n\
         resources: { memory: 2g, cpus: 1.5, pids: 512 }\nnetwork: none\nenv: { RUST_LOG: info }\n---\nBody\n",
    )
    .unwrap();
    let fm = p.front_matter;
    assert_eq!(fm.title.as_deref(), Some("T"));
    assert_eq!(fm.max_steps, Some(60));
    assert_eq!(fm.timeout, Some(Timeout(Duration::from_secs(1800))));
    let r = fm.resources.unwrap();
    assert_eq!(r.memory, Some(Memory(2 << 30)));
    assert_eq!(r.cpus, Some(1.5));
    assert_eq!(fm.network, Some(NetworkMode::None));
    assert_eq!(fm.env["RUST_LOG"], "info");
    assert_eq!(p.body, "Body\n");
}

#[test]
fn unknown_key_names_line_and_key() {
    let e = parse("---\ntitle: x\nmodle: gpt\n---\nBody\n").unwrap_err();
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("unknown field `modle`"), "{}", e.message);
    assert!(e.to_string().starts_with("p.md:3: "), "{e}");
}

#[test]
fn wrong_type_names_line() {
    let e = parse("---\nmax_steps: lots\n---\nBody\n").unwrap_err();
    assert_eq!(e.line, Some(2));
    assert!(e.message.contains("max_steps"), "{}", e.message);
}

#[test]
fn approve_takes_a_list_or_a_map_and_says_so_otherwise() {
    let p = parse("---\napprove: [shell, write_file]\n---\nBody\n").unwrap();
    assert_eq!(
        p.front_matter.approve,
        Some(Approve::Tools(vec!["shell".into(), "write_file".into()]))
    );
    let p = parse("---\napprove: { shell: \"^git push\" }\n---\nBody\n").unwrap();
    let Some(Approve::Matching(m)) = p.front_matter.approve else {
        panic!("a map of patterns");
    };
    assert_eq!(m["shell"], "^git push");
    // Named approvers and a message (issue 52), and back through YAML.
    let p = parse(
        "---\napprove: { tools: [shell], git: \"^push\", from: [alice, ops], message: Ask ops }\n---\nB\n",
    )
    .unwrap();
    let a = p.front_matter.approve.unwrap();
    let g = a.named().unwrap();
    assert_eq!((g.from.len(), g.message.as_deref()), (2, Some("Ask ops")));
    assert_eq!(a.gates().len(), 2);
    let back: Approve = serde_yaml::from_value(serde_yaml::to_value(&a).unwrap()).unwrap();
    assert_eq!(back, a);
    let e = parse("---\napprove: { from: alice }\n---\nB\n").unwrap_err();
    assert!(
        e.message.contains("`approve.from` is a list"),
        "{}",
        e.message
    );
    let e = parse("---\napprove: { shell: [a], from: [x] }\n---\nB\n").unwrap_err();
    assert!(e.message.contains("under `tools`"), "{}", e.message);
    let e = parse("---\ntitle: x\napprove: shell\n---\nBody\n").unwrap_err();
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.message.contains("a list of tool names"), "{}", e.message);
    assert!(!e.message.contains("untagged"), "{}", e.message);
}

#[test]
fn bad_duration_is_explained() {
    let e = parse("---\ntimeout: soon\n---\nBody\n").unwrap_err();
    assert!(
        e.message.contains("invalid duration `soon`"),
        "{}",
        e.message
    );
}

#[test]
fn empty_body_is_an_error() {
    let e = parse("---\ntitle: x\n---\n\n  \n").unwrap_err();
    assert!(e.message.contains("prompt is empty"));
}

#[test]
fn unclosed_front_matter_is_an_error() {
    let e = parse("---\ntitle: x\nBody\n").unwrap_err();
    assert_eq!(e.line, Some(1));
}

#[test]
fn verify_is_one_command_or_a_list() {
    let fm = parse("---\nverify: sh test.sh\n---\nB\n")
        .unwrap()
        .front_matter;
    assert_eq!(fm.verify.unwrap().run, Commands(vec!["sh test.sh".into()]));
    let fm = parse("---\nverify: [a, 'b c']\nverify_files: [tests/]\nverify_retries: 0\nverify_timeout: 30s\nassess: true\nobjective: O\n---\nB\n")
        .unwrap()
        .front_matter;
    assert_eq!(
        fm.verify.as_ref().unwrap().run,
        Commands(vec!["a".into(), "b c".into()])
    );
    assert_eq!(fm.verify_files, Some(vec![PathBuf::from("tests/")]));
    assert_eq!(fm.verify_retries, Some(0));
    assert_eq!(fm.verify_timeout, Some(Timeout(Duration::from_secs(30))));
    assert_eq!(fm.assess, Some(true));
    let e = parse("---\nverify: {a: b}\n---\nB\n").unwrap_err();
    assert!(e.message.contains("unknown field `a`"), "{}", e.message);
    assert_eq!(e.line, Some(2));
}

#[test]
fn memory_sizes() {
    assert_eq!(Memory::parse("512m").unwrap(), Memory(512 << 20));
    assert_eq!(Memory::parse("1.5G").unwrap(), Memory(3 << 29));
    assert_eq!(Memory::parse("2gib").unwrap(), Memory(2 << 30));
    assert!(Memory::parse("-1g").is_err());
    assert!(Memory::parse("lots").is_err());
    assert_eq!(Memory(2 << 30).to_string(), "2g");
    assert_eq!(Memory(1536 << 20).to_string(), "1536m");
    assert_eq!(Memory(1000).to_string(), "1000");
}

#[test]
fn zero_is_never_unlimited() {
    let e = parse("---\nresources: { memory: 0 }\n---\nBody\n").unwrap_err();
    assert!(e.message.contains("greater than zero"), "{}", e.message);
    assert!(parse("---\nresources: { disk: 0 }\n---\nBody\n").is_err());
    assert!(parse("---\ntimeout: 0\n---\nBody\n").is_err());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the bytes, parsing answers (never panics) and an error
        /// names a line that exists.
        #[test]
        fn any_text_parses_or_fails_cleanly(text in "(---\n)?([a-z_]{0,8}: ?[^\n]{0,12}\n){0,6}(---\n)?[^\u{0}]{0,40}") {
            match PromptFile::parse("p.md", &text) {
                Ok(p) => prop_assert!(!p.body.trim().is_empty()),
                Err(e) => {
                    if let Some(line) = e.line {
                        prop_assert!(line >= 1 && line <= text.lines().count().max(1), "{e}");
                    }
                }
            }
        }

        /// Valid front-matter round-trips its values.
        #[test]
        fn valid_front_matter_round_trips(title in "[A-Za-z][A-Za-z ]{0,20}", steps in 1u32..10_000, secs in 1u64..100_000) {
            let text = format!("---\ntitle: {title}\nmax_steps: {steps}\ntimeout: {secs}\n---\nGo.\n");
            let p = PromptFile::parse("p.md", &text).unwrap();
            prop_assert_eq!(p.front_matter.title.as_deref(), Some(title.trim()));
            prop_assert_eq!(p.front_matter.max_steps, Some(steps));
            prop_assert_eq!(p.front_matter.timeout, Some(Timeout(Duration::from_secs(secs))));
        }
    }

    #[test]
    fn alias_bombs_are_refused() {
        // Nine levels of nine-fold aliases inside one value: 9^9 strings if expanded.
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        let mut parts = vec![format!("&a [{}]", ["\"lol\""; 9].join(","))];
        for w in names.windows(2) {
            let refs = vec![format!("*{}", w[0]); 9].join(",");
            parts.push(format!("&{} [{refs}]", w[1]));
        }
        let mut text = format!("---\ntitle: [{}]\n", parts.join(", "));
        text.push_str("---\nGo.\n");
        let started = std::time::Instant::now();
        assert!(PromptFile::parse("p.md", &text).is_err());
        assert!(started.elapsed().as_secs() < 5);
    }
}

#[test]
fn verify_may_hide_its_tests_and_name_a_reward() {
    let fm = parse(
        "---\nverify:\n  files: [tests/, run-tests.sh]\n  run: bash /tests/run-tests.sh\n  \
         reward: /logs/verifier/r.txt\n  timeout: 2m\n  env: {TEST_DIR: /tests}\n\
         pass_reward: 0.5\nimage: python:3.13\nworkdir: /app\nagent_user: root\n\
         solution: solution/\nenvironment: {dockerfile: env/}\n---\nB\n",
    )
    .unwrap()
    .front_matter;
    let v = fm.verify.unwrap();
    assert!(v.hides_tests());
    assert_eq!(v.run, Commands(vec!["bash /tests/run-tests.sh".into()]));
    assert_eq!(
        v.files,
        vec![PathBuf::from("tests/"), PathBuf::from("run-tests.sh")]
    );
    assert_eq!(v.reward.as_deref(), Some("/logs/verifier/r.txt"));
    assert_eq!(v.timeout, Some(Timeout(Duration::from_secs(120))));
    assert_eq!(v.env["TEST_DIR"], "/tests");
    assert_eq!(fm.pass_reward, Some(0.5));
    assert_eq!(fm.image.as_deref(), Some("python:3.13"));
    assert_eq!(fm.workdir.as_deref(), Some("/app"));
    assert_eq!(fm.agent_user, Some(super::AgentUser::Root));
    assert_eq!(fm.solution, Some(PathBuf::from("solution/")));
    assert_eq!(fm.environment.unwrap().dockerfile, PathBuf::from("env/"));
    let one = parse("---\nverify: {files: t.tar.gz, run: x}\n---\nB\n")
        .unwrap()
        .front_matter;
    assert_eq!(one.verify.unwrap().files, vec![PathBuf::from("t.tar.gz")]);
    let e = parse("---\nverify: {files: t/}\n---\nB\n").unwrap_err();
    assert!(e.message.contains("missing field `run`"), "{}", e.message);
}
