//! Writes an [`Imported`] as a suite directory: `DIR/suite.yaml` (one case
//! a task, with the keys of issue 49: `image`/`environment`, `workdir`,
//! `agent_user`, hidden `verify` files, `solution`, …; paths relative to
//! DIR) and, below `DIR/<case id>/`, what a task needs generated (a
//! SWE-bench checkout, patches, scripts, a TB1 `solve.sh`). The task's own
//! files are named where they are, never copied.

use std::path::{Component, Path, PathBuf};

use anyhow::Context;
use serde_yaml::{Mapping, Value};

use super::git;
use super::model::{Generated, Imported, ImportedTask, Place, Problem, TaskImage};
use super::source::problem_lines;

/// Writes the suite below `out` and returns the path of its `suite.yaml`.
/// A non-empty `out` is refused unless `force`; with `force` only
/// `suite.yaml` and the case folders being written are replaced.
pub(crate) fn write(imported: &Imported, out: &Path, force: bool) -> anyhow::Result<PathBuf> {
    if imported.tasks.is_empty() {
        let mut msg = String::from("no task could be imported");
        for line in problem_lines(&imported.problems) {
            msg.push_str("\n  ");
            msg.push_str(&line);
        }
        anyhow::bail!(msg);
    }
    let non_empty = std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some());
    if non_empty && !force {
        anyhow::bail!(
            "`{}` is not empty; give `--force` to write the suite over it, or another `--out`",
            out.display()
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("making `{}`", out.display()))?;
    let out = out
        .canonicalize()
        .with_context(|| format!("reading `{}`", out.display()))?;
    for task in &imported.tasks {
        generate(task, &out, imported)?;
    }
    let mut doc = Mapping::new();
    doc.insert("name".into(), imported.name.clone().into());
    let cases: Vec<Value> = imported.tasks.iter().map(|t| case(t, &out)).collect();
    doc.insert("cases".into(), Value::Sequence(cases));
    let body = serde_yaml::to_string(&Value::Mapping(doc)).context("writing the suite as YAML")?;
    let path = out.join("suite.yaml");
    let tmp = out.join(".suite.yaml.tmp");
    std::fs::write(&tmp, header(imported) + &body)
        .with_context(|| format!("writing `{}`", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing `{}`", path.display()))?;
    Ok(path)
}

/// Comment lines: where the suite came from and what could not be honoured.
fn header(imported: &Imported) -> String {
    let mut h = format!(
        "# Written by `saheeli import` from {}: {} task(s). Edit freely.\n",
        imported.sources.join(", "),
        imported.tasks.len()
    );
    let lines = problem_lines(&imported.problems);
    if !lines.is_empty() {
        h.push_str("# Not honoured:\n");
        for l in lines {
            h.push_str(&format!("#   {}\n", l.replace('\n', " ")));
        }
    }
    h
}

/// Makes what `task` needs below `out/<id>/` (replacing an older copy),
/// after checking that no source the suite names lies there.
fn generate(task: &ImportedTask, out: &Path, imported: &Imported) -> anyhow::Result<()> {
    if task.generated.is_empty() {
        return Ok(());
    }
    let dir = out.join(&task.id);
    let sources = imported.tasks.iter().flat_map(source_paths);
    if let Some(inside) = sources
        .filter_map(|p| p.canonicalize().ok())
        .find(|p| p.starts_with(&dir) || dir.starts_with(p))
    {
        anyhow::bail!(
            "`{}` would replace `{}`, which the suite reads from; give another `--out`",
            dir.display(),
            inside.display()
        );
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("replacing `{}`", dir.display()))?;
    }
    for g in &task.generated {
        generate_one(g, out)
            .with_context(|| format!("task `{}` (from {})", task.id, task.source))?;
    }
    Ok(())
}

fn source_paths(task: &ImportedTask) -> Vec<PathBuf> {
    let mut places: Vec<&Place> = task.verify.files.iter().collect();
    places.extend(task.solution.iter());
    places.extend(task.workspace.iter());
    if let TaskImage::Build(p) = &task.image {
        places.push(p);
    }
    let mut paths: Vec<PathBuf> = places
        .into_iter()
        .filter_map(|p| match p {
            Place::Source(p) => Some(p.clone()),
            Place::Out(_) => None,
        })
        .collect();
    paths.extend(task.generated.iter().filter_map(|g| match g {
        Generated::Copy { from, .. } => Some(from.clone()),
        Generated::Checkout { repo, .. } => Some(repo.clone()),
        Generated::File { .. } => None,
    }));
    paths
}

fn generate_one(g: &Generated, out: &Path) -> anyhow::Result<()> {
    let target = |rel: &Path| -> anyhow::Result<PathBuf> {
        anyhow::ensure!(
            rel.components().all(|c| matches!(c, Component::Normal(_))),
            "refusing to write `{}` outside the output directory",
            rel.display()
        );
        let path = out.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("making `{}`", parent.display()))?;
        }
        Ok(path)
    };
    match g {
        Generated::File {
            path,
            bytes,
            executable,
        } => {
            let path = target(path)?;
            std::fs::write(&path, bytes)
                .with_context(|| format!("writing `{}`", path.display()))?;
            mode(&path, *executable)
        }
        Generated::Copy {
            from,
            path,
            executable,
        } => {
            let path = target(path)?;
            std::fs::copy(from, &path)
                .with_context(|| format!("copying `{}` to `{}`", from.display(), path.display()))?;
            mode(&path, *executable)
        }
        Generated::Checkout { repo, commit, path } => {
            let path = target(path)?;
            let message = format!("base commit {commit}, checked out by saheeli import");
            git::checkout(repo, commit, &path, &message).map_err(|e| {
                anyhow::anyhow!("checking out `{commit}` of `{}`: {e}", repo.display())
            })
        }
    }
}

fn mode(path: &Path, executable: bool) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let bits = if executable { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(bits))
        .with_context(|| format!("setting the mode of `{}`", path.display()))
}

/// `to` relative to the directory `from` (both absolute), with a trailing
/// `/` for a directory.
fn relative(from: &Path, to: &Path) -> String {
    let to_abs = to.canonicalize().unwrap_or_else(|_| to.to_path_buf());
    let a: Vec<Component> = from.components().collect();
    let b: Vec<Component> = to_abs.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut rel = PathBuf::new();
    for _ in common..a.len() {
        rel.push("..");
    }
    for c in &b[common..] {
        rel.push(c);
    }
    let mut s = if rel.as_os_str().is_empty() {
        ".".to_string()
    } else {
        rel.display().to_string()
    };
    if to_abs.is_dir() {
        s.push('/');
    }
    s
}

fn place(p: &Place, out: &Path) -> Value {
    let path = match p {
        Place::Source(p) => p.clone(),
        Place::Out(rel) => out.join(rel),
    };
    Value::String(relative(out, &path))
}

fn string_map(m: &std::collections::BTreeMap<String, String>) -> Value {
    Value::Mapping(
        m.iter()
            .map(|(k, v)| (Value::String(k.clone()), Value::String(v.clone())))
            .collect(),
    )
}

/// One case: its id, category, text and the contract's keys.
fn case(t: &ImportedTask, out: &Path) -> Value {
    let mut c = Mapping::new();
    let mut put = |k: &str, v: Value| {
        c.insert(Value::String(k.into()), v);
    };
    put("id", t.id.clone().into());
    put("category", t.category.clone().into());
    put("text", t.text.clone().into());
    match &t.image {
        TaskImage::Image(i) => put("image", i.clone().into()),
        TaskImage::Build(p) => {
            let mut env = Mapping::new();
            env.insert("dockerfile".into(), place(p, out));
            put("environment", Value::Mapping(env));
        }
        TaskImage::Default => {}
    }
    if let Some(w) = &t.workdir {
        put("workdir", w.clone().into());
    }
    // A task written to run as root (Harbor's and Terminal-Bench's
    // default) runs as the agent's user, which owns the workspace and the
    // workdir: `agent_user: root` weakens the sandbox (docs: evals), so a
    // case that needs it says so by hand.
    if let Some(s) = t.timeout_secs {
        put("timeout", format!("{s}s").into());
    }
    let mut res = Mapping::new();
    if let Some(m) = t.limits.memory_mb {
        res.insert("memory".into(), format!("{m}m").into());
    }
    if let Some(cpus) = t.limits.cpus {
        res.insert("cpus".into(), cpus.into());
    }
    if let Some(d) = t.limits.disk_mb {
        res.insert("disk".into(), format!("{d}m").into());
    }
    if !res.is_empty() {
        put("resources", Value::Mapping(res));
    }
    if t.network_none {
        put("network", "none".into());
    }
    if !t.env.is_empty() {
        put("env", string_map(&t.env));
    }
    if let Some(w) = &t.workspace {
        put("workspace", place(w, out));
        if t.workspace_include_ignored {
            put("workspace_include_ignored", true.into());
        }
    }
    put("verify", verify(t, out));
    // A benchmark is scored on one try: no verify output goes back to the agent.
    put("verify_retries", 0.into());
    if let Some(s) = &t.solution {
        put("solution", place(s, out));
    }
    Value::Mapping(c)
}

fn verify(t: &ImportedTask, out: &Path) -> Value {
    let v = &t.verify;
    let mut m = Mapping::new();
    let files: Vec<Value> = v.files.iter().map(|p| place(p, out)).collect();
    m.insert(
        "files".into(),
        match files.len() {
            1 => files[0].clone(),
            _ => Value::Sequence(files),
        },
    );
    m.insert(
        "run".into(),
        match v.run.len() {
            1 => v.run[0].clone().into(),
            _ => Value::Sequence(v.run.iter().map(|r| r.clone().into()).collect()),
        },
    );
    if let Some(s) = v.timeout_secs {
        m.insert("timeout".into(), format!("{s}s").into());
    }
    if !v.env.is_empty() {
        m.insert("env".into(), string_map(&v.env));
    }
    Value::Mapping(m)
}

/// Imports `srcs` and writes the suite into `out_dir`: what `saheeli eval
/// SRC` does with a task directory, a dataset or a JSONL of instances.
/// Returns the suite file and what could not be honoured.
pub(crate) fn import_to(
    srcs: &[PathBuf],
    opts: &super::model::Options,
    out_dir: &Path,
) -> anyhow::Result<(PathBuf, Vec<Problem>)> {
    let imported = super::source::import(srcs, opts)?;
    let path = write(&imported, out_dir, opts.force)?;
    Ok((path, imported.problems))
}

#[cfg(test)]
#[path = "write_tests.rs"]
mod tests;
