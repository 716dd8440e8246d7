//! One commit's definitions, judged as a whole: its files (as read from
//! Git's objects) into templates, eval suites, agent types and pools,
//! each checked by the parser the same thing has when it is a file
//! (`TaskSpec::check_template`, `eval::suite::parse`, config.yaml's
//! `agent_types:`/`pools:` check). The first problem found is the
//! reason the whole commit is refused.
//!
//! The layout:
//!
//! ```text
//! templates/NAME.md    a prompt file (a template when it declares `parameters:`),
//!                      submitted by NAME; nothing else may be under templates/
//! evals/NAME.yaml      an eval suite; other files under evals/ are the suites'
//!                      prompts and checks
//! saheeli.yaml         `agent_types:` and `pools:`, as config.yaml writes them
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{AgentType, Config, PoolCap};
use crate::spec::TaskSpec;

/// Where the parts live in the repository.
pub(crate) const TEMPLATES: &str = "templates";
pub(crate) const EVALS: &str = "evals";
pub(crate) const CONFIG: &str = "saheeli.yaml";

/// What a definitions repository's commit may hold.
pub(crate) const CAPS: crate::git::Caps = crate::git::Caps {
    files: 500,
    file_bytes: 1 << 20,
    total_bytes: 16 << 20,
};

/// `saheeli.yaml`: only what config.yaml says of the same things.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetConfig {
    #[serde(default)]
    agent_types: BTreeMap<String, AgentType>,
    #[serde(default)]
    pools: Vec<PoolCap>,
}

/// One commit's definitions, checked.
#[derive(Clone, Debug, Default)]
pub(crate) struct Set {
    /// Every file read (path to text): what the store keeps.
    pub files: BTreeMap<String, String>,
    /// Template name to its prompt text.
    pub templates: BTreeMap<String, String>,
    /// Eval suite name to its path in the repository.
    pub evals: BTreeMap<String, String>,
    pub agent_types: BTreeMap<String, AgentType>,
    pub pools: Vec<PoolCap>,
}

/// Added, removed and changed names (`templates/fix.md`,
/// `agent_types.reviewer`, `pools[model=m]`) from one set to the next.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Changes {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

/// A name a template or suite may have: what `--template` takes.
pub(crate) fn plain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The file a template is taken to be: in the project directory (the
/// one config.yaml is in), as a prompt the HTTP API takes is, so its
/// relative `workspace:` and replay scripts resolve there.
pub(crate) fn template_path(cfg: &Config, name: &str) -> PathBuf {
    cfg.base_dir.join(format!("{name}.md"))
}

/// `cfg` as a set's definitions make it: its agent types and pools in
/// place of config.yaml's.
pub(crate) fn overlay(cfg: &Config, set: &Set) -> Config {
    let mut c = cfg.clone();
    c.file.agent_types = set.agent_types.clone();
    c.file.pools = set.pools.clone();
    c
}

impl Set {
    /// The files of a commit as the store keeps them (JSON), back into a
    /// set, unchecked: it was checked when it applied.
    pub fn stored(json: &str) -> anyhow::Result<Set> {
        let files: BTreeMap<String, String> = serde_json::from_str(json)?;
        Self::sort(files).map_err(|e| anyhow::anyhow!("the stored definitions: {e}"))
    }

    /// The files, JSON, for the store.
    pub fn files_json(&self) -> String {
        serde_json::to_string(&self.files).expect("strings serialize")
    }

    /// The files into their parts, each name and `saheeli.yaml` checked
    /// (not the templates' and suites' contents: [`Set::judge`] does).
    fn sort(files: BTreeMap<String, String>) -> Result<Set, String> {
        let mut set = Set::default();
        for path in files.keys() {
            // Git's own trees never hold these; a crafted one could.
            if path
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == ".." || c == ".git")
            {
                return Err(format!("`{path}` is not a plain path in the repository"));
            }
            if let Some(rest) = path.strip_prefix("templates/") {
                let name = rest.strip_suffix(".md").filter(|n| plain(n)).ok_or_else(|| {
                    format!(
                        "`{path}`: only `templates/NAME.md` files are templates (NAME: letters, \
                         digits, `-`, `_`, `.`); move or rename it"
                    )
                })?;
                set.templates.insert(name.to_string(), files[path].clone());
            } else if let Some(rest) = path.strip_prefix("evals/") {
                let name = rest
                    .strip_suffix(".yaml")
                    .or_else(|| rest.strip_suffix(".yml"));
                if let Some(name) = name.filter(|n| !n.contains('/')) {
                    if !plain(name) {
                        return Err(format!(
                            "`{path}`: a suite's name is letters, digits, `-`, `_` and `.`; rename it"
                        ));
                    }
                    set.evals.insert(name.to_string(), path.clone());
                }
            }
        }
        if let Some(text) = files.get(CONFIG)
            && !text.trim().is_empty()
        {
            let c: SetConfig = serde_yaml::from_str(text).map_err(|e| {
                let at = e
                    .location()
                    .map(|l| format!(":{}", l.line()))
                    .unwrap_or_default();
                format!("`{CONFIG}`{at}: {e}")
            })?;
            set.agent_types = c.agent_types;
            set.pools = c.pools;
        }
        set.files = files;
        Ok(set)
    }

    /// Checks a commit's files as a whole against `cfg` (the serving
    /// foreman's config.yaml): Ok with the set, or the first problem,
    /// naming the file (and line when known) and what to do.
    pub fn judge(cfg: &Config, raw: BTreeMap<String, Vec<u8>>) -> Result<Set, String> {
        let mut files = BTreeMap::new();
        for (path, bytes) in raw {
            let text = String::from_utf8(bytes)
                .map_err(|_| format!("`{path}` is not UTF-8 text; definitions are text files"))?;
            files.insert(path, text);
        }
        let set = Self::sort(files)?;
        crate::config::check_caps(&set.agent_types, &set.pools)
            .map_err(|e| format!("`{CONFIG}`: {e}"))?;
        let with = overlay(cfg, &set);
        for (name, text) in &set.templates {
            let path = template_path(cfg, name);
            TaskSpec::check_template(&with, &path, text).map_err(|e| {
                let shown = format!("{e:#}").replace(
                    &path.display().to_string(),
                    &format!("{TEMPLATES}/{name}.md"),
                );
                if shown.starts_with(TEMPLATES) {
                    shown
                } else {
                    format!("`{TEMPLATES}/{name}.md`: {shown}")
                }
            })?;
        }
        if !set.evals.is_empty() {
            check_suites(cfg, &set)?;
        }
        Ok(set)
    }

    /// What changed from `before` (None: nothing was applied yet).
    pub fn changes(&self, before: Option<&Set>) -> Changes {
        let empty = Set::default();
        let old = before.unwrap_or(&empty);
        let mut c = Changes::default();
        let mut each = |names: Vec<(String, Option<String>, Option<String>)>| {
            for (name, a, b) in names {
                match (a, b) {
                    (None, Some(_)) => c.added.push(name),
                    (Some(_), None) => c.removed.push(name),
                    (Some(a), Some(b)) if a != b => c.changed.push(name),
                    _ => {}
                }
            }
        };
        let side = |f: &dyn Fn(&Set) -> BTreeMap<String, String>| {
            let (a, b) = (f(old), f(self));
            let mut keys: Vec<String> = a.keys().chain(b.keys()).cloned().collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .map(|k| (k.clone(), a.get(&k).cloned(), b.get(&k).cloned()))
                .collect::<Vec<_>>()
        };
        each(side(&|s| {
            s.templates
                .iter()
                .map(|(n, t)| (format!("{TEMPLATES}/{n}.md"), t.clone()))
                .collect()
        }));
        each(side(&|s| {
            s.evals
                .values()
                .map(|p| (p.clone(), s.files[p].clone()))
                .collect()
        }));
        each(side(&|s| {
            s.agent_types
                .iter()
                .map(|(n, t)| (format!("agent_types.{n}"), format!("{t:?}")))
                .collect()
        }));
        each(side(&|s| {
            s.pools
                .iter()
                .map(|p| (format!("pools[{}]", p.name()), format!("{p:?}")))
                .collect()
        }));
        c
    }
}

/// Each suite checked by the suite parser: the set's files written (as
/// the regular files read from Git, nothing else) to a scratch directory
/// of our own under `state_dir`, removed after.
fn check_suites(cfg: &Config, set: &Set) -> Result<(), String> {
    let scratch = Scratch::new(&cfg.state_dir())
        .map_err(|e| format!("making a scratch directory to check the suites: {e}"))?;
    for (path, text) in &set.files {
        let to = scratch.0.join(path);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("writing `{path}`: {e}"))?;
        }
        std::fs::write(&to, text).map_err(|e| format!("writing `{path}`: {e}"))?;
    }
    for path in set.evals.values() {
        let at = scratch.0.join(path);
        crate::eval::parse(&at, &set.files[path]).map_err(|e| {
            e.to_string()
                .replace(&format!("{}/", scratch.0.display()), "")
        })?;
    }
    Ok(())
}

/// A directory made fresh (0700) and removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(state_dir: &Path) -> std::io::Result<Scratch> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::create_dir_all(state_dir)?;
        let dir = state_dir.join(format!(
            "definitions-check-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &Path) -> Config {
        std::fs::write(dir.join("config.yaml"), "state_dir: state\n").unwrap();
        let turn = r#"{"turns": [{"tool_calls": [{"name": "task_complete", "arguments": {"message": "ok"}}]}]}"#;
        std::fs::write(dir.join("agent.json"), turn).unwrap();
        Config::load(Some(&dir.join("config.yaml"))).unwrap()
    }

    fn raw(files: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        files
            .iter()
            .map(|(p, t)| (p.to_string(), t.as_bytes().to_vec()))
            .collect()
    }

    const OK: &str = "---\nmodel: replay:agent.json\ntitle: Fix it\n---\nFix the bug.\n";

    #[test]
    fn a_whole_commit_is_judged_and_the_first_problem_named() {
        let d = tempfile::tempdir().unwrap();
        let cfg = cfg(d.path());
        let set = Set::judge(
            &cfg,
            raw(&[
                ("templates/fix.md", OK),
                ("saheeli.yaml", "agent_types:\n  rev: { max_steps: 3 }\npools:\n  - { agent_type: rev, max: 1 }\n"),
                ("README.md", "ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(set.templates.keys().collect::<Vec<_>>(), ["fix"]);
        assert_eq!(set.pools.len(), 1);
        for (files, want) in [
            (
                vec![("templates/fix.md", "---\nmodle: x\n---\nhi\n")],
                "templates/fix.md:2",
            ),
            (
                vec![("templates/sub/x.md", OK)],
                "`templates/sub/x.md`: only",
            ),
            (vec![("templates/x.txt", OK)], "`templates/x.txt`: only"),
            (
                vec![("saheeli.yaml", "agent_type: {}\n")],
                "`saheeli.yaml`:1",
            ),
            (
                vec![("saheeli.yaml", "pools: [{ agent_type: nope, max: 1 }]\n")],
                "agent type `nope`",
            ),
            (
                vec![(
                    "templates/t.md",
                    "---\nmodel: replay:agent.json\nagent_type: nope\n---\nhi\n",
                )],
                "`agent_type` `nope` is not defined",
            ),
            (
                vec![("evals/smoke.yaml", "name: s\ncases: []\n")],
                "evals/smoke.yaml",
            ),
            (vec![("templates/b.md", "")], "not UTF-8"),
        ] {
            let mut r = raw(&files);
            if files[0].0 == "templates/b.md" {
                r.insert("templates/b.md".into(), vec![0xff, 0xfe]);
            }
            let e = Set::judge(&cfg, r).unwrap_err();
            assert!(e.contains(want), "{files:?}: {e}");
        }
    }

    #[test]
    fn changes_name_what_was_added_removed_and_changed() {
        let d = tempfile::tempdir().unwrap();
        let cfg = cfg(d.path());
        let a = Set::judge(&cfg, raw(&[("templates/a.md", OK), ("templates/b.md", OK)])).unwrap();
        let b = Set::judge(
            &cfg,
            raw(&[
                (
                    "templates/a.md",
                    "---\nmodel: replay:agent.json\ntitle: New\n---\nx\n",
                ),
                ("templates/c.md", OK),
            ]),
        )
        .unwrap();
        let c = b.changes(Some(&a));
        assert_eq!(c.added, ["templates/c.md"]);
        assert_eq!(c.removed, ["templates/b.md"]);
        assert_eq!(c.changed, ["templates/a.md"]);
        assert_eq!(a.changes(None).added.len(), 2);
        let back = Set::stored(&b.files_json()).unwrap();
        assert_eq!(back.templates, b.templates);
    }
}
