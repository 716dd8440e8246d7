//! What an importer makes of one benchmark task: the case's keys (the
//! front-matter keys of issue 49's contract), the files the writer must
//! generate, and what could not be honoured.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// A benchmark format `saheeli import` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    // (Plain comments: doc comments here would turn `--help` into the long form.)
    // A Harbor task directory (`task.toml`) or a folder of them.
    Harbor,
    // A Terminal-Bench 1 task directory (`task.yaml`) or a folder of them.
    Tb1,
    // SWE-bench instances, one JSON object a line (`*.jsonl`).
    Swebench,
}

impl Format {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Format::Harbor => "harbor",
            Format::Tb1 => "tb1",
            Format::Swebench => "swebench",
        }
    }
}

/// How to import.
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    /// The format of every source; sniffed per source when `None`.
    pub format: Option<Format>,
    /// SWE-bench: the folder of local clones (`DIR/<owner>__<name>` or `DIR/<name>`).
    pub repos: Option<PathBuf>,
    /// SWE-bench: the test command for instances without `test_cmd`.
    pub test_cmd: Option<String>,
    /// SWE-bench: the image for instances without `image`.
    pub image: Option<String>,
    /// The suite's name (default: the first source's file or folder name).
    pub name: Option<String>,
    /// Write into a non-empty output directory.
    pub force: bool,
}

/// SWE-bench's test command when neither the instance nor `--test-cmd` gives one.
pub(crate) const DEFAULT_TEST_CMD: &str = "python3 -m pytest -rA";

/// Everything read from the sources: the tasks that can run, and per task
/// what cannot be honoured (refused tasks are not in `tasks`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Imported {
    pub name: String,
    /// The sources as given, for the suite's header.
    pub sources: Vec<String>,
    pub tasks: Vec<ImportedTask>,
    pub problems: Vec<Problem>,
}

/// Something a task asks for that Saheeli cannot do (yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The task's case id (or its source's name when it has none yet).
    pub task: String,
    /// The task is left out of the suite; else it runs without it.
    pub refused: bool,
    pub what: String,
}

impl Problem {
    pub(crate) fn refused(task: &str, what: impl Into<String>) -> Problem {
        Problem {
            task: task.to_string(),
            refused: true,
            what: what.into(),
        }
    }

    pub(crate) fn warning(task: &str, what: impl Into<String>) -> Problem {
        Problem {
            task: task.to_string(),
            refused: false,
            what: what.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let kind = if self.refused { "refused" } else { "warning" };
        write!(f, "{kind}: `{}`: {}", self.task, self.what)
    }
}

/// A path the suite names: a file or folder of the source, or one the
/// writer generates (relative to the output directory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Absolute, on the host already.
    Source(PathBuf),
    /// Relative to the output directory; written from [`Generated`].
    Out(PathBuf),
}

/// Where the task's image comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TaskImage {
    /// `image:` a tag or id Docker has.
    Image(String),
    /// `environment: { dockerfile: DIR }`: a build context with a `Dockerfile`.
    Build(Place),
    /// Neither: the runtime's default image.
    Default,
}

/// The hidden tests: `verify:` in its mapping form.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Verify {
    /// Copied into the verify container's `/tests` only.
    pub files: Vec<Place>,
    pub run: Vec<String>,
    pub timeout_secs: Option<u64>,
    pub env: BTreeMap<String, String>,
}

/// Container limits (`resources:`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Limits {
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    pub disk_mb: Option<u64>,
}

/// A file or folder the writer makes below the output directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Generated {
    /// These bytes at `path`.
    File {
        path: PathBuf,
        bytes: Vec<u8>,
        executable: bool,
    },
    /// A copy of the host file `from` at `path`.
    Copy {
        from: PathBuf,
        path: PathBuf,
        executable: bool,
    },
    /// `commit` of the git repository `repo`, checked out at `path` as a
    /// fresh one-commit repository (no history the task could peek into).
    Checkout {
        repo: PathBuf,
        commit: String,
        path: PathBuf,
    },
}

/// One task as a suite case.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ImportedTask {
    /// The case id: `[a-z0-9-]`, 1 to 64, unique in the suite.
    pub id: String,
    pub category: String,
    /// The instruction: the case's `text`.
    pub text: String,
    /// Where it came from (a task directory, or `FILE:LINE`), for messages.
    pub source: String,
    pub image: TaskImage,
    pub workdir: Option<String>,
    /// `agent_user: root`.
    pub root: bool,
    /// The agent phase's limit (`timeout`).
    pub timeout_secs: Option<u64>,
    pub limits: Limits,
    /// `network: none` said outright (the runtime's default is none too).
    pub network_none: bool,
    pub env: BTreeMap<String, String>,
    pub workspace: Option<Place>,
    /// Copy files `.gitignore` names into the workspace too.
    pub workspace_include_ignored: bool,
    pub verify: Verify,
    /// A folder with `solve.sh`: what `agent: oracle` runs.
    pub solution: Option<Place>,
    pub generated: Vec<Generated>,
}

impl ImportedTask {
    /// A task with only its identity set; the importers fill in the rest.
    pub(crate) fn new(id: String, category: String, text: String, source: String) -> Self {
        ImportedTask {
            id,
            category,
            text,
            source,
            image: TaskImage::Default,
            workdir: None,
            root: false,
            timeout_secs: None,
            limits: Limits::default(),
            network_none: false,
            env: BTreeMap::new(),
            workspace: None,
            workspace_include_ignored: false,
            verify: Verify::default(),
            solution: None,
            generated: Vec::new(),
        }
    }
}

/// A case id from a task's name: lowercase `[a-z0-9-]`, other runs of
/// characters as one `-`, at most 64 (`django__django-13741` →
/// `django-django-13741`). `None` when nothing is left.
pub(crate) fn case_id(name: &str) -> Option<String> {
    let mut id = String::new();
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            id.push(c);
        } else if !id.is_empty() && !id.ends_with('-') {
            id.push('-');
        }
    }
    id.truncate(64);
    let id = id.trim_end_matches('-').to_string();
    (!id.is_empty()).then_some(id)
}

/// The case ids handed out so far: each task claims its id once, so
/// duplicates (two datasets with a `hello` task) get `-2`, `-3`, …
#[derive(Debug, Default)]
pub(crate) struct Ids(std::collections::BTreeSet<String>);

impl Ids {
    /// The id for a task named `name` (see [`case_id`]); `None` when the
    /// name has no letter or digit.
    pub(crate) fn claim(&mut self, name: &str) -> Option<String> {
        let base = case_id(name)?;
        let mut id = base.clone();
        let mut n = 2;
        while self.0.contains(&id) {
            let suffix = format!("-{n}");
            let mut stem = base.clone();
            stem.truncate(64 - suffix.len());
            id = format!("{}{suffix}", stem.trim_end_matches('-'));
            n += 1;
        }
        self.0.insert(id.clone());
        Some(id)
    }
}

/// Seconds for a limit given as a float (rounded up; at least 1).
pub(crate) fn whole_secs(secs: f64) -> Option<u64> {
    (secs.is_finite() && secs > 0.0).then(|| secs.ceil().max(1.0) as u64)
}

/// What a test script fetches from the network, by the commands it runs
/// (`apt-get`, `curl`, `pip`, …): the words, for a warning that it will
/// fail offline. Empty when it names none (or the file cannot be read).
pub(crate) fn fetches(script: &std::path::Path) -> Vec<&'static str> {
    const FETCHERS: &[(&str, &str)] = &[
        ("apt-get ", "apt-get"),
        ("apt install", "apt"),
        ("apk add", "apk"),
        ("curl ", "curl"),
        ("wget ", "wget"),
        ("pip install", "pip"),
        ("uv add", "uv"),
        ("uv pip install", "uv"),
        ("uv sync", "uv"),
        ("npm install", "npm"),
        ("cargo install", "cargo"),
        ("go get", "go"),
        ("go install", "go"),
    ];
    let Ok(text) = std::fs::read_to_string(script) else {
        return Vec::new();
    };
    let mut found: Vec<&'static str> = Vec::new();
    for (needle, word) in FETCHERS {
        if text.contains(needle) && !found.contains(word) {
            found.push(word);
        }
    }
    found
}

/// `" (`tests/test.sh` fetches with curl, uv)"`, or `""`.
pub(crate) fn fetch_note(script: &std::path::Path, name: &str) -> String {
    let words = fetches(script);
    if words.is_empty() {
        return String::new();
    }
    format!("; `{name}` fetches with {}", words.join(", "))
}
