//! The hidden tests of `verify: { files, run, reward }` (issue 49): staged
//! on this host for one attempt and bound read-only at /tests in the
//! verify container only (never the agent's container, its session or the
//! feedback), and the reward the commands leave behind, read back capped.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use bollard::Docker;
use saheeli_protocol::TaskId;
use saheeli_protocol::verify::{Check, Graded, TestCounts};

use super::verify_link::VerifyLink;
use crate::backend::docker;

/// Harbor's reward files, in the order it reads them.
pub(crate) const HARBOR_REWARDS: [&str; 2] =
    ["/logs/verifier/reward.json", "/logs/verifier/reward.txt"];

/// The most the staged tests may hold.
const MAX_TESTS_BYTES: u64 = 4 << 30;

/// Where attempt `attempt`'s tests are staged.
pub(crate) fn staged_dir(state_dir: &Path, id: TaskId, attempt: u32) -> PathBuf {
    state_dir
        .join("verify")
        .join(id.to_string())
        .join(attempt.to_string())
}

/// Copies `files` into a fresh `dir` (a directory's contents, a file by
/// its name, a `.tar` or `.tar.gz` unpacked), readable by the verify
/// container's user. Links are copied as links, never followed.
pub(crate) fn stage(files: &[PathBuf], dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("clearing `{}`", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("making `{}`", dir.display()))?;
    let mut total = 0u64;
    for f in files {
        let meta = fs::symlink_metadata(f)
            .with_context(|| format!("the hidden tests `{}` cannot be read", f.display()))?;
        let name = f.file_name().map(|n| n.to_string_lossy().to_string());
        if meta.is_dir() {
            copy_dir(f, dir, &mut total)?;
        } else if name.as_deref().is_some_and(is_tar) {
            unpack(f, dir)?;
        } else if meta.is_file() {
            let to = dir.join(name.context("a file without a name")?);
            copy_file(f, &to, &mut total)?;
        } else {
            bail!(
                "the hidden tests `{}` are neither a file nor a directory",
                f.display()
            );
        }
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn is_tar(name: &str) -> bool {
    name.ends_with(".tar") || name.ends_with(".tar.gz") || name.ends_with(".tgz")
}

fn copy_dir(from: &Path, to: &Path, total: &mut u64) -> anyhow::Result<()> {
    for e in fs::read_dir(from).with_context(|| format!("reading `{}`", from.display()))? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let meta = fs::symlink_metadata(&src)?;
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&src)?;
            std::os::unix::fs::symlink(target, &dst)?;
        } else if meta.is_dir() {
            fs::create_dir(&dst)?;
            fs::set_permissions(&dst, fs::Permissions::from_mode(0o755))?;
            copy_dir(&src, &dst, total)?;
        } else if meta.is_file() {
            copy_file(&src, &dst, total)?;
        }
    }
    Ok(())
}

fn copy_file(from: &Path, to: &Path, total: &mut u64) -> anyhow::Result<()> {
    *total += fs::copy(from, to).with_context(|| format!("copying `{}`", from.display()))?;
    if *total > MAX_TESTS_BYTES {
        bail!(
            "the hidden tests hold more than {} GiB",
            MAX_TESTS_BYTES >> 30
        );
    }
    let exec = fs::metadata(from)?.permissions().mode() & 0o111 != 0;
    fs::set_permissions(
        to,
        fs::Permissions::from_mode(if exec { 0o755 } else { 0o644 }),
    )?;
    Ok(())
}

fn unpack(archive: &Path, dir: &Path) -> anyhow::Result<()> {
    let file =
        fs::File::open(archive).with_context(|| format!("opening `{}`", archive.display()))?;
    let reader: Box<dyn Read> = if archive.to_string_lossy().ends_with(".tar") {
        Box::new(file)
    } else {
        Box::new(flate2::read::GzDecoder::new(file))
    };
    let mut a = tar::Archive::new(reader);
    a.set_preserve_permissions(false);
    a.set_overwrite(true);
    // `unpack` keeps every entry inside `dir` (no `..`, no absolute path,
    // no write through a link it made).
    a.unpack(dir)
        .with_context(|| format!("unpacking `{}`", archive.display()))?;
    make_readable(dir)
}

fn make_readable(dir: &Path) -> anyhow::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let meta = fs::symlink_metadata(e.path())?;
        if meta.is_dir() {
            fs::set_permissions(e.path(), fs::Permissions::from_mode(0o755))?;
            make_readable(&e.path())?;
        } else if meta.is_file() {
            let mode = meta.permissions().mode() | 0o444;
            fs::set_permissions(e.path(), fs::Permissions::from_mode(mode & 0o777))?;
        }
    }
    Ok(())
}

/// The grade from a reward file's text (`path` names it): `reward.json`
/// an object of finite numbers (or one number), anything else one float.
pub(crate) fn parse_reward(path: &str, text: &str) -> Result<Graded, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("the reward file `{path}` is empty"));
    }
    let mut rewards = BTreeMap::new();
    if path.ends_with(".json") {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(m)) => {
                for (k, v) in m {
                    match v.as_f64().filter(|f| f.is_finite()) {
                        Some(f) => {
                            rewards.insert(k, f);
                        }
                        None => return Err(format!("`{path}`: `{k}` is not a finite number")),
                    }
                }
            }
            Ok(serde_json::Value::Number(n)) => {
                rewards.insert("reward".to_string(), n.as_f64().unwrap_or(f64::NAN));
            }
            _ => return Err(format!("`{path}` is not a JSON object of numbers")),
        }
    } else {
        let f: f64 = text
            .parse()
            .map_err(|_| format!("`{path}` does not hold a number"))?;
        rewards.insert("reward".to_string(), f);
    }
    if rewards.values().any(|f| !f.is_finite()) {
        return Err(format!("`{path}` holds a number that is not finite"));
    }
    let reward = match rewards.get("reward") {
        Some(r) => *r,
        None if rewards.len() == 1 => *rewards.values().next().expect("one"),
        None => return Err(format!("`{path}` has no `reward` key among several")),
    };
    Ok(Graded {
        reward,
        rewards,
        source: path.to_string(),
        tests: None,
    })
}

/// The counts in pytest's last summary line (`== 3 passed, 1 failed,
/// 2 skipped in 0.1s ==`), if the output has one.
pub(crate) fn test_counts(output: &str) -> Option<TestCounts> {
    let line = output.lines().rev().find(|l| {
        let t = l.trim();
        t.starts_with('=')
            && t.ends_with('=')
            && (t.contains(" passed") || t.contains(" failed") || t.contains(" error"))
    })?;
    let mut c = TestCounts::default();
    let words: Vec<&str> = line
        .split(|ch: char| ch == ',' || ch.is_whitespace())
        .filter(|w| !w.is_empty())
        .collect();
    for pair in words.windows(2) {
        let Ok(n) = pair[0].parse::<u64>() else {
            continue;
        };
        match pair[1] {
            "passed" | "xfailed" => c.passed += n,
            "failed" | "error" | "errors" | "xpassed" => c.failed += n,
            "skipped" | "deselected" => c.skipped += n,
            _ => {}
        }
    }
    Some(c)
}

/// Stages the hidden tests of this attempt (None: the task has none).
pub(crate) async fn stage_for(
    link: &VerifyLink,
    id: TaskId,
    attempt: u32,
) -> anyhow::Result<Option<std::path::PathBuf>> {
    if link.hidden.is_empty() {
        return Ok(None);
    }
    let dir = staged_dir(&link.state_dir, id, attempt);
    let (files, to) = (link.hidden.clone(), dir.clone());
    tokio::task::spawn_blocking(move || stage(&files, &to)).await??;
    Ok(Some(dir))
}

/// Prints the first of its arguments that can be read and is not a
/// directory: its path on a line, then its first 64 KiB. Exit 3: none.
pub(crate) const READ_FIRST: &str = "for p; do if [ -r \"$p\" ] && [ ! -d \"$p\" ]; then \
    printf '%s\\n' \"$p\"; exec head -c 65536 -- \"$p\"; fi; done; exit 3";

/// The most [`READ_FIRST`] prints: a path and 64 KiB.
pub(crate) const READ_FIRST_CAP: usize = 65536 + 4096;

/// The paths a reward is looked for at, in order: the one `verify.reward`
/// names, else Harbor's.
pub(crate) fn reward_paths(reward: Option<&str>) -> Vec<String> {
    match reward {
        Some(r) => vec![r.to_string()],
        None => HARBOR_REWARDS.iter().map(|p| p.to_string()).collect(),
    }
}

/// Grades the attempt by the reward file its commands left (the one
/// `verify.reward` names, else Harbor's), read in the verify container and
/// capped; without one, 1.0 when every command exited 0, else 0.0. The
/// last check carries the grade and passes when it reaches `pass_reward`.
pub(crate) async fn grade(
    d: &Docker,
    container: &str,
    reward: Option<&str>,
    pass_reward: f64,
    checks: &mut [Check],
) {
    // One exec for every path tried: the first that can be read names
    // itself on the first line, then at most 64 KiB of it (a reward path
    // made a link to /dev/zero, by what the tests ran of the agent's,
    // ends at once, unparsed).
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        READ_FIRST.to_string(),
        "sh".to_string(),
    ];
    argv.extend(reward_paths(reward));
    let read = match docker::exec_quiet(d, container, argv).await {
        Ok(r) if r.exit_code == Some(0) => Some(read_printed(r.output.as_bytes())),
        Ok(_) => None,
        Err(e) => Some(Err(format!("the reward file could not be read: {e:#}"))),
    };
    apply(read, pass_reward, checks);
}

/// Grades the attempt by what [`READ_FIRST`] printed after its last
/// command, in the same exec (`exec_shell_then`): nothing when no reward
/// file was there.
pub(crate) fn grade_printed(printed: &[u8], pass_reward: f64, checks: &mut [Check]) {
    let read = (!printed.is_empty()).then(|| read_printed(printed));
    apply(read, pass_reward, checks);
}

/// The reward [`READ_FIRST`] printed: its path on the first line, then
/// the file.
fn read_printed(printed: &[u8]) -> Result<Graded, String> {
    match String::from_utf8_lossy(printed).split_once('\n') {
        Some((path, body)) => parse_reward(path, body),
        None => Err("the reward file could not be read".to_string()),
    }
}

/// Puts the grade on the last check: `read` is the reward file's (None:
/// there was none, graded by the exit codes).
fn apply(read: Option<Result<Graded, String>>, pass_reward: f64, checks: &mut [Check]) {
    let Some(last) = checks.last_mut() else {
        return;
    };
    let ran_all = last.exit_code.is_some();
    let mut g = match read {
        Some(Ok(g)) => g,
        Some(Err(why)) => {
            last.passed = false;
            last.output.push_str(&format!(
                "
[saheeli] {why}
"
            ));
            return;
        }
        None => Graded {
            reward: if last.passed && ran_all { 1.0 } else { 0.0 },
            source: "exit_code".to_string(),
            ..Default::default()
        },
    };
    g.tests = test_counts(&last.output);
    last.passed = g.reward >= pass_reward;
    last.graded = Some(g);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_are_read_as_harbor_reads_them() {
        let g = parse_reward("/logs/verifier/reward.txt", "0.5\n").unwrap();
        assert_eq!(g.reward, 0.5);
        let g = parse_reward("/l/reward.json", r#"{"reward": 1, "tests_passed": 3}"#).unwrap();
        assert_eq!((g.reward, g.rewards["tests_passed"]), (1.0, 3.0));
        let g = parse_reward("/l/reward.json", r#"{"score": 0.25}"#).unwrap();
        assert_eq!(g.reward, 0.25);
        assert_eq!(parse_reward("/l/reward.json", "2").unwrap().reward, 2.0);
        for (p, t) in [
            ("/l/reward.txt", ""),
            ("/l/reward.txt", "pass"),
            ("/l/reward.txt", "NaN"),
            ("/l/reward.txt", "inf"),
            ("/l/reward.json", r#"{"a": 1, "b": 2}"#),
            ("/l/reward.json", r#"{"reward": "1"}"#),
            ("/l/reward.json", "[1]"),
        ] {
            assert!(parse_reward(p, t).is_err(), "{p}: {t}");
        }
    }

    #[test]
    fn pytest_summaries_give_counts() {
        let out = "x\n===== 3 passed, 1 failed, 2 skipped, 1 error in 0.12s =====\n";
        assert_eq!(
            test_counts(out),
            Some(TestCounts {
                passed: 3,
                failed: 2,
                skipped: 2
            })
        );
        assert_eq!(
            test_counts("== 5 passed in 1s =="),
            Some(TestCounts {
                passed: 5,
                failed: 0,
                skipped: 0
            })
        );
        assert_eq!(test_counts("all good\n"), None);
    }

    #[test]
    fn hidden_tests_are_staged_without_following_links() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("tests");
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("test.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(src.join("test.sh"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(src.join("sub/a.py"), "x").unwrap();
        fs::write(t.path().join("secret"), "host secret").unwrap();
        std::os::unix::fs::symlink(t.path().join("secret"), src.join("link")).unwrap();
        let runner = t.path().join("run-tests.sh");
        fs::write(&runner, "pytest").unwrap();
        let out = t.path().join("staged");
        stage(&[src, runner], &out).unwrap();
        assert_eq!(fs::read_to_string(out.join("sub/a.py")).unwrap(), "x");
        assert_eq!(
            fs::read_to_string(out.join("run-tests.sh")).unwrap(),
            "pytest"
        );
        let mode = fs::metadata(out.join("test.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(
            fs::symlink_metadata(out.join("link"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // Staged again: a fresh directory.
        fs::write(out.join("left.txt"), "old").unwrap();
        stage(&[t.path().join("run-tests.sh")], &out).unwrap();
        assert!(!out.join("left.txt").exists());
    }
}
