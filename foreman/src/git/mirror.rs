//! The foreman's bare mirror of each repository a task starts from (issue
//! 52), under `state_dir/git/`, keyed by a hash of the URL; one process
//! at a time in each (a lock file). A ref is fetched into it for every
//! task (a branch moves; the objects already there are not fetched
//! again), a commit id only when the mirror lacks it. A commit is
//! checked out into a fresh directory with an index of our own: no
//! `.git` is made there, and the repository's attributes are not read
//! (no filter, no line-ending change: the files are the commit's bytes).

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

use super::run::{git, git_ok};

/// Git's empty tree: attributes are read from it, so none apply.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// One repository's mirror.
#[derive(Clone, Debug)]
pub(crate) struct Mirror {
    /// The bare repository.
    pub dir: PathBuf,
    /// What it mirrors (a path or a URL, as git is given it).
    pub url: String,
}

/// What a fetch found.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Fetched {
    /// The commit the ref names.
    pub commit: String,
    /// The mirror was made for this fetch.
    pub cold: bool,
    /// How long it took (the lock's wait included), ms.
    pub ms: u64,
}

/// The lock on a mirror, released when dropped (the file descriptor closes).
pub(crate) struct Locked(#[allow(dead_code)] File);

impl Mirror {
    /// The mirror of `url` below `state_dir`.
    pub fn of(state_dir: &Path, url: &str) -> Mirror {
        let hash = Sha256::digest(url.as_bytes());
        let key: String = hash[..10].iter().map(|b| format!("{b:02x}")).collect();
        Mirror {
            dir: state_dir.join("git").join(format!("{key}.git")),
            url: url.to_string(),
        }
    }

    /// Takes the mirror's lock (made, with the mirror's directory, when absent).
    pub fn lock(&self) -> anyhow::Result<Locked> {
        let parent = self.dir.parent().expect("a mirror has a parent");
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .with_context(|| format!("creating `{}`", parent.display()))?;
        }
        let path = self.dir.with_extension("lock");
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening `{}`", path.display()))?;
        // SAFETY: flock(2) on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!(
                "locking `{}`: {}",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
        Ok(Locked(f))
    }

    /// Fetches `reference` (a branch, a tag, `HEAD` or a commit id) into
    /// the mirror, made when absent, with `creds` for a remote that asks;
    /// returns the commit it names.
    pub fn fetch(
        &self,
        reference: &str,
        depth: Option<u32>,
        creds: &super::Creds,
    ) -> anyhow::Result<Fetched> {
        let started = Instant::now();
        let _lock = self.lock()?;
        let cold = !self.dir.join("HEAD").is_file();
        if cold {
            std::fs::create_dir_all(&self.dir)
                .with_context(|| format!("creating `{}`", self.dir.display()))?;
            git_ok(&self.dir, &["init", "--bare", "-q"], &[])?;
        }
        let is_id = reference.len() == 40 && reference.bytes().all(|b| b.is_ascii_hexdigit());
        let have = |r: &str| {
            git_ok(
                &self.dir,
                &["rev-parse", "--verify", "-q", &format!("{r}^{{commit}}")],
                &[],
            )
        };
        if is_id && let Ok(r) = have(reference) {
            return Ok(Fetched {
                commit: r.text(),
                cold,
                ms: started.elapsed().as_millis() as u64,
            });
        }
        let depth = depth.map(|d| format!("--depth={d}"));
        let mut args = vec!["fetch", "-q", "--no-tags", "--no-recurse-submodules"];
        if let Some(d) = &depth {
            args.push(d);
        }
        args.extend(["--", &self.url, reference]);
        let owned = super::deliver::askpass_env(self, creds)?;
        let env: Vec<(&str, &OsStr)> = owned.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
        let ran = git(&self.dir, &args, &env, super::run::TIMEOUT)?;
        if !ran.ok {
            bail!(
                "fetching `{reference}` from `{}`: {}",
                self.url,
                ran.stderr.lines().last().unwrap_or("git failed")
            );
        }
        let commit = have("FETCH_HEAD")?.text();
        Ok(Fetched {
            commit,
            cold,
            ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Writes the files of `commit` into `dest` (made; it must not
    /// exist): its tree as git holds it, no `.git`, no submodule content.
    pub fn checkout(&self, commit: &str, dest: &Path) -> anyhow::Result<()> {
        std::fs::create_dir(dest).with_context(|| format!("creating `{}`", dest.display()))?;
        let index = self.scratch_index();
        let env: [(&str, &OsStr); 3] = [
            ("GIT_INDEX_FILE", index.as_os_str()),
            ("GIT_WORK_TREE", dest.as_os_str()),
            ("GIT_ATTR_SOURCE", OsStr::new(EMPTY_TREE)),
        ];
        let done = git_ok(&self.dir, &["read-tree", commit], &env)
            .and_then(|_| git_ok(&self.dir, &["checkout-index", "-a", "-q"], &env));
        let _ = std::fs::remove_file(&index);
        done.map(drop)
    }

    /// A path for an index file of our own, beside the mirror.
    pub fn scratch_index(&self) -> PathBuf {
        self.dir
            .with_extension(format!("index-{}", uuid::Uuid::new_v4().simple()))
    }

    /// `git diff from to` in the mirror (binary changes as git's binary
    /// patches), at most `max` bytes.
    pub fn diff(&self, from: &str, to: &str, max: usize) -> anyhow::Result<Vec<u8>> {
        let env: [(&str, &OsStr); 1] = [("GIT_ATTR_SOURCE", OsStr::new(EMPTY_TREE))];
        let mut out = git_ok(
            &self.dir,
            &[
                "diff",
                "--binary",
                "--no-ext-diff",
                "--no-textconv",
                from,
                to,
            ],
            &env,
        )?
        .stdout;
        out.truncate(max);
        Ok(out)
    }
}

/// The absolute path or URL git is given for a repository `git:` names
/// (a local path made absolute and canonical, so one repository has one
/// mirror).
pub(crate) fn fetch_url(loc: &super::url::Location, text: &str) -> anyhow::Result<String> {
    match loc {
        super::url::Location::Local(p) => {
            let c = p
                .canonicalize()
                .with_context(|| format!("`{}` is not a repository on this host", p.display()))?;
            if !c.is_dir() {
                bail!("`{}` is not a directory", c.display());
            }
            Ok(c.to_string_lossy().into_owned())
        }
        super::url::Location::Remote { .. } => Ok(text.trim().to_string()),
    }
}
