//! Which importer reads a source: the format given, or sniffed (a folder
//! with `task.toml` is a Harbor task, with `task.yaml` a Terminal-Bench 1
//! task, a `*.jsonl` file SWE-bench instances; a folder of task folders is
//! a dataset), then every task of every source into one [`Imported`].

use std::path::{Path, PathBuf};

use super::model::{Format, Ids, Imported, ImportedTask, Options, Problem};
use super::{harbor, swebench, tb1};

/// What to do with a source that is neither a task, a dataset nor a file of
/// instances.
const KINDS: &str = "give a Harbor task directory (with `task.toml`), a Terminal-Bench 1 task \
                     directory (with `task.yaml`), a folder of either, or SWE-bench instances \
                     (`*.jsonl`)";

/// The format of a task directory, by the file that marks it.
fn task_format(dir: &Path, want: Option<Format>) -> Option<Format> {
    let harbor = dir.join("task.toml").is_file();
    let tb1 = dir.join("task.yaml").is_file();
    match want {
        Some(Format::Harbor) => harbor.then_some(Format::Harbor),
        Some(Format::Tb1) => tb1.then_some(Format::Tb1),
        Some(Format::Swebench) => None,
        None if harbor => Some(Format::Harbor),
        None if tb1 => Some(Format::Tb1),
        None => None,
    }
}

/// One unit of work: a task directory or a file of instances.
#[derive(Debug)]
enum Unit {
    Task(Format, PathBuf),
    Instances(PathBuf),
}

/// The units of one source.
fn units(src: &Path, want: Option<Format>) -> anyhow::Result<Vec<Unit>> {
    let meta =
        std::fs::metadata(src).map_err(|e| anyhow::anyhow!("`{}`: {e}; {KINDS}", src.display()))?;
    if meta.is_file() {
        let name = src.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let parent = || src.parent().unwrap_or(Path::new(".")).to_path_buf();
        let instances = name.ends_with(".jsonl") || name.ends_with(".json");
        return match want {
            Some(Format::Swebench) => Ok(vec![Unit::Instances(src.to_path_buf())]),
            None if instances => Ok(vec![Unit::Instances(src.to_path_buf())]),
            None | Some(Format::Harbor) if name == "task.toml" => {
                Ok(vec![Unit::Task(Format::Harbor, parent())])
            }
            None | Some(Format::Tb1) if name == "task.yaml" => {
                Ok(vec![Unit::Task(Format::Tb1, parent())])
            }
            _ => anyhow::bail!(
                "`{}` is not a task or an instances file; {KINDS}",
                src.display()
            ),
        };
    }
    if want == Some(Format::Swebench) {
        anyhow::bail!(
            "`{}` is a directory; `--format swebench` reads a `*.jsonl` file of instances",
            src.display()
        );
    }
    if let Some(format) = task_format(src, want) {
        return Ok(vec![Unit::Task(format, src.to_path_buf())]);
    }
    let mut children: Vec<PathBuf> = std::fs::read_dir(src)
        .map_err(|e| anyhow::anyhow!("reading `{}`: {e}", src.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter(|p| {
            !p.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or(".")
                .starts_with('.')
        })
        .collect();
    children.sort();
    let tasks: Vec<Unit> = children
        .into_iter()
        .filter_map(|c| task_format(&c, want).map(|f| Unit::Task(f, c)))
        .collect();
    if tasks.is_empty() {
        let wanted = match want {
            Some(f) => format!(" of format `{}`", f.as_str()),
            None => String::new(),
        };
        anyhow::bail!(
            "`{}` is neither a task directory nor a folder of tasks{wanted}; {KINDS}",
            src.display()
        );
    }
    Ok(tasks)
}

/// Reads every task of `srcs`. `Err`: a source that cannot be read or a
/// file that does not parse (named, with its line when known). Tasks that
/// cannot run here are left out and named in `problems`.
pub(crate) fn import(srcs: &[PathBuf], opts: &Options) -> anyhow::Result<Imported> {
    if srcs.is_empty() {
        anyhow::bail!("nothing to import; {KINDS}");
    }
    let mut ids = Ids::default();
    let mut problems = Vec::new();
    let mut tasks: Vec<ImportedTask> = Vec::new();
    for src in srcs {
        let src = std::path::absolute(src).unwrap_or_else(|_| src.clone());
        for unit in units(&src, opts.format)? {
            match unit {
                Unit::Task(Format::Harbor, dir) => {
                    tasks.extend(harbor::import_task(&dir, &mut ids, &mut problems)?)
                }
                Unit::Task(_, dir) => {
                    tasks.extend(tb1::import_task(&dir, &mut ids, &mut problems)?)
                }
                Unit::Instances(file) => {
                    tasks.extend(swebench::import_file(&file, opts, &mut ids, &mut problems)?)
                }
            }
        }
    }
    let name = opts.name.clone().unwrap_or_else(|| suite_name(&srcs[0]));
    Ok(Imported {
        name,
        sources: srcs.iter().map(|s| s.display().to_string()).collect(),
        tasks,
        problems,
    })
}

/// The first source's name: its folder, or its file without the extension.
fn suite_name(src: &Path) -> String {
    let abs = std::path::absolute(src).unwrap_or_else(|_| src.to_path_buf());
    let name = if abs.is_file() {
        abs.file_stem()
    } else {
        abs.file_name()
    };
    let name: String = name
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "imported".into())
        .chars()
        .filter(|c| !c.is_control())
        .take(100)
        .collect();
    if name.trim().is_empty() {
        "imported".into()
    } else {
        name
    }
}

/// The problems as lines for a person (refused ones first).
pub(crate) fn problem_lines(problems: &[Problem]) -> Vec<String> {
    let mut sorted: Vec<&Problem> = problems.iter().collect();
    sorted.sort_by_key(|p| !p.refused);
    sorted.iter().map(|p| p.to_string()).collect()
}

#[cfg(test)]
#[path = "source_tests.rs"]
mod tests;
