//! Delivering a task's changes (issue 52): its `changes.patch` applied
//! to an index of the foreman's own at the commit the task started from
//! (`git apply --cached`: no work tree is written, nothing of the
//! agent's is read but the patch Saheeli wrote), committed with the
//! task's facts as trailers, and pushed to the task's branch without
//! force, so a branch that moved on is refused, never overwritten.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use anyhow::{Context, bail};

use super::mirror::Mirror;
use super::run::{TIMEOUT, git, git_ok};

/// The commit a delivery makes.
pub(crate) struct Commit<'a> {
    /// The commit the task started from: the new one's parent.
    pub start: &'a str,
    pub patch: &'a Path,
    pub message: String,
    /// `Name <email>` (config `deliver_author`).
    pub author: (&'a str, &'a str),
    /// A ref in the mirror that keeps the commit (`refs/saheeli/…`).
    pub keep_as: String,
}

/// Commits `c` in `m`; None when the patch changes nothing.
pub(crate) fn commit_patch(m: &Mirror, c: &Commit<'_>) -> anyhow::Result<Option<String>> {
    let _lock = m.lock()?;
    let index = m.scratch_index();
    let made = commit_in(m, c, &index);
    let _ = std::fs::remove_file(&index);
    made
}

fn commit_in(m: &Mirror, c: &Commit<'_>, index: &Path) -> anyhow::Result<Option<String>> {
    let (name, email) = c.author;
    let env: [(&str, &OsStr); 6] = [
        ("GIT_INDEX_FILE", index.as_os_str()),
        (
            "GIT_ATTR_SOURCE",
            OsStr::new("4b825dc642cb6eb9a060e54bf8d69288fbee4904"),
        ),
        ("GIT_AUTHOR_NAME", OsStr::new(name)),
        ("GIT_AUTHOR_EMAIL", OsStr::new(email)),
        ("GIT_COMMITTER_NAME", OsStr::new(name)),
        ("GIT_COMMITTER_EMAIL", OsStr::new(email)),
    ];
    git_ok(&m.dir, &["read-tree", c.start], &env)?;
    let patch = c.patch.to_str().context("the patch's path is not UTF-8")?;
    let has_change = std::fs::read(c.patch)
        .with_context(|| format!("reading `{patch}`"))?
        .split(|b| *b == b'\n')
        .any(|l| l.starts_with(b"diff --git "));
    if !has_change {
        return Ok(None);
    }
    let applied = git(
        &m.dir,
        &["apply", "--cached", "--binary", patch],
        &env,
        TIMEOUT,
    )?;
    if !applied.ok {
        bail!(
            "the patch does not apply to {}: {}",
            c.start,
            applied.stderr
        );
    }
    let tree = git_ok(&m.dir, &["write-tree"], &env)?.text();
    let msg = c.message.as_str();
    let commit = git_ok(
        &m.dir,
        &["commit-tree", &tree, "-p", c.start, "-m", msg],
        &env,
    )?
    .text();
    git_ok(&m.dir, &["update-ref", &c.keep_as, &commit], &env)?;
    Ok(Some(commit))
}

/// Credentials for a push or fetch (from the `.env` beside config.yaml):
/// given to git through an askpass helper that prints them from its own
/// environment; never on a command line, in a URL or a file.
#[derive(Clone, Default)]
pub(crate) struct Creds {
    pub username: Option<String>,
    pub password: Option<String>,
}

impl Creds {
    /// `SAHEELI_GIT_USERNAME` and `SAHEELI_GIT_PASSWORD` of the `.env`
    /// beside config.yaml (none when it has neither, or cannot be read).
    pub fn of(cfg: &crate::config::Config) -> Creds {
        let env = cfg.dotenv_all().unwrap_or_default();
        Creds {
            username: env.get("SAHEELI_GIT_USERNAME").cloned(),
            password: env.get("SAHEELI_GIT_PASSWORD").cloned(),
        }
    }
}

impl std::fmt::Debug for Creds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Creds(…)")
    }
}

/// The askpass helper: prints the username or the password git asks for.
const ASKPASS: &str = "#!/bin/sh\ncase \"$1\" in\n  Username*) printf '%s\\n' \"$SAHEELI_GIT_USERNAME\" ;;\n  *) printf '%s\\n' \"$SAHEELI_GIT_PASSWORD\" ;;\nesac\n";

/// The helper written beside the mirrors (the same text every time) and
/// the environment that hands `creds` to it; empty without credentials.
pub(crate) fn askpass_env(
    m: &Mirror,
    creds: &Creds,
) -> anyhow::Result<Vec<(&'static str, OsString)>> {
    if creds.username.is_none() && creds.password.is_none() {
        return Ok(vec![]);
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = m.dir.parent().expect("a parent");
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let path = dir.join("askpass.sh");
    if std::fs::read(&path).ok().as_deref() != Some(ASKPASS.as_bytes()) {
        let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&tmp, ASKPASS)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700))?;
        std::fs::rename(&tmp, &path)?;
    }
    let mut env = vec![("GIT_ASKPASS", path.into_os_string())];
    env.push((
        "SAHEELI_GIT_USERNAME",
        creds.username.clone().unwrap_or_default().into(),
    ));
    env.push((
        "SAHEELI_GIT_PASSWORD",
        creds.password.clone().unwrap_or_default().into(),
    ));
    Ok(env)
}

/// Pushes `commit` to `branch` of the mirrored repository, without force;
/// Err carries git's reason (`non-fast-forward`, a hook's refusal).
pub(crate) fn push(m: &Mirror, commit: &str, branch: &str, creds: &Creds) -> Result<(), String> {
    let run = || -> anyhow::Result<Result<(), String>> {
        let owned = askpass_env(m, creds)?;
        let env: Vec<(&str, &OsStr)> = owned.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
        let spec = format!("{commit}:refs/heads/{branch}");
        let ran = git(
            &m.dir,
            &["push", "--porcelain", "--no-verify", "--", &m.url, &spec],
            &env,
            TIMEOUT,
        )?;
        if ran.ok {
            return Ok(Ok(()));
        }
        Ok(Err(refusal(
            &String::from_utf8_lossy(&ran.stdout),
            &ran.stderr,
        )))
    };
    run().unwrap_or_else(|e| Err(format!("{e:#}")))
}

/// Why a push was refused: the third tab-separated field of
/// `--porcelain`'s `!` line (`[rejected] (non-fast-forward)`), else git's
/// last error line.
fn refusal(stdout: &str, stderr: &str) -> String {
    let line = stdout.lines().find(|l| l.starts_with('!'));
    match line.and_then(|l| l.split('\t').nth(2)) {
        Some(why) => why.trim().to_string(),
        None => stderr
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or("git push failed")
            .trim()
            .to_string(),
    }
}

/// Whether `branch` is a name git takes for a branch.
pub(crate) fn valid_branch(branch: &str) -> bool {
    let bad_part = |p: &str| p.is_empty() || p.starts_with('.') || p.ends_with(".lock");
    !branch.is_empty()
        && !branch.starts_with('-')
        && !branch.ends_with('/')
        && !branch.ends_with('.')
        && !branch.contains("..")
        && !branch.contains("@{")
        && branch != "@"
        && !branch
            .bytes()
            .any(|b| b < 0x20 || b == 0x7f || b" ~^:?*[\\".contains(&b))
        && branch.split('/').all(|p| !bad_part(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names_are_checked_as_git_does() {
        for ok in ["saheeli/0a1b2c3d-fix-the-test", "main", "a/b/c"] {
            assert!(valid_branch(ok), "{ok}");
        }
        for bad in [
            "", "-x", "a..b", "a b", "a/", "a.lock", "a/.b", "x:y", "a@{1}", "a\nb",
        ] {
            assert!(!valid_branch(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_askpass_helper_answers_from_its_environment_only() {
        let d = tempfile::tempdir().unwrap();
        let m = Mirror::of(d.path(), "https://example.com/r.git");
        assert!(askpass_env(&m, &Creds::default()).unwrap().is_empty());
        let creds = Creds {
            username: Some("bot".into()),
            password: Some("s3cret".into()),
        };
        let env = askpass_env(&m, &creds).unwrap();
        let helper = &env[0].1;
        let script = std::fs::read_to_string(helper).unwrap();
        assert!(
            !script.contains("s3cret") && !script.contains("bot"),
            "{script}"
        );
        let ask = |prompt: &str| {
            let out = std::process::Command::new(helper)
                .arg(prompt)
                .env_clear()
                .envs(env[1..].iter().map(|(k, v)| (k, v)))
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(ask("Username for 'https://example.com': "), "bot\n");
        assert_eq!(ask("Password for 'https://bot@example.com': "), "s3cret\n");
        assert_eq!(format!("{creds:?}"), "Creds(…)");
    }

    #[test]
    fn the_reason_of_a_refused_push() {
        let out = "To /srv/r.git\n!\tabc:refs/heads/b\t[rejected] (non-fast-forward)\nDone\n";
        assert_eq!(
            refusal(out, "error: failed to push"),
            "[rejected] (non-fast-forward)"
        );
        assert_eq!(
            refusal("", "fatal: x\nfatal: no such repo\n"),
            "fatal: no such repo"
        );
    }
}
