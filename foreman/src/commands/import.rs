//! `saheeli import SRC... --out DIR`: Harbor and Terminal-Bench 1 task
//! directories (or folders of them) and SWE-bench instances written as a
//! suite directory `saheeli eval` runs. Prints the suite's path, how many
//! tasks it holds, and each thing a task asks for that is not honoured.

use std::collections::BTreeSet;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::ImportArgs;
use crate::eval::import::{Options, import_to, problem_lines};

pub(crate) fn import(args: ImportArgs) -> anyhow::Result<ExitCode> {
    let opts = Options {
        format: args.format,
        repos: args.repos,
        test_cmd: args.test_cmd,
        image: args.image,
        name: args.name,
        force: args.force,
    };
    let (path, problems) = import_to(&args.srcs, &opts, &args.out)?;
    // Counted from what was written, so the line is what `eval` will run.
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading `{}`", path.display()))?;
    let suite: serde_yaml::Value =
        serde_yaml::from_str(&text).with_context(|| format!("reading `{}`", path.display()))?;
    let cases = suite["cases"].as_sequence().map_or(0, Vec::len);
    let refused: BTreeSet<&str> = problems
        .iter()
        .filter(|p| p.refused)
        .map(|p| p.task.as_str())
        .collect();
    outln!("{}", path.display());
    if refused.is_empty() {
        outln!("{cases} task(s) imported");
    } else {
        outln!("{cases} task(s) imported, {} refused", refused.len());
    }
    for line in problem_lines(&problems) {
        outln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
