//! The [`Report`]: facts about an ended task, rendered as Markdown one
//! section at a time. What a later issue adds is a field here and a
//! section in [`Report::sections`]: a template's steps are in
//! `template_steps`, verification's in `verification`.
//!
//! Titles, prompts, tool names, paths and the agent's message are text
//! from people and agents: control characters are escaped, names go in
//! code spans, the prompt in a quote and the agent's message in a fence
//! longer than any it holds, so none of it can pass for the report's own
//! structure.

use std::fmt::Write;
use std::time::{Duration, UNIX_EPOCH};

use saheeli_protocol::TaskId;

use super::diffstat::{FileStat, Status, counts};
use super::write::PATCH;
use crate::output::{printable, short_duration};

/// How many files and tools the report lists (the rest are summed up).
const MAX_ROWS: usize = 500;

/// Calls of one tool, from the audit log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ToolCount {
    pub tool: String,
    pub calls: u64,
    /// Calls that returned an error to the model.
    pub failed: u64,
}

/// What the report says about one ended task.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    pub id: TaskId,
    pub title: String,
    /// The prompt body.
    pub objective: String,
    pub state: String,
    pub reason: Option<String>,
    pub detail: Option<String>,
    pub attempt: i64,
    pub model: String,
    /// A third-party agent that ran the task (issue 25); None: the built-in loop.
    pub agent: Option<String>,
    pub steps: i64,
    pub max_steps: u32,
    /// By tool, most called first; Err says why they were not counted.
    pub tools: Result<Vec<ToolCount>, String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    /// Cached input (read, written) and compactions (issue 26).
    pub cached: (i64, i64),
    pub compactions: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The diffstat of `changes.patch`; Err says why there is none.
    pub changes: Result<Vec<FileStat>, String>,
    /// The message of `task_complete` (None: it was never called).
    pub agent_message: Option<String>,
    /// The workspace held a `report.md` of its own, which this one replaced.
    pub replaced_own: bool,
    /// A template's steps and where each stands (empty: no `steps:`).
    pub template_steps: Vec<crate::store::StepStatus>,
    /// Every verify and assess check (None: the task has neither), and
    /// how many attempts it was allowed.
    pub verification: Option<(Vec<saheeli_protocol::verify::Check>, u32)>,
    /// `report: synthesized` (issue 29): the section's text or why there
    /// is none; None: the report is facts only.
    pub synthesis: Option<Result<String, String>>,
    /// Lines under the outcome: how its set-up went (issue 50), the
    /// commit it started from and its delivered branch (issue 52).
    pub notes: Vec<String>,
}

/// The synthesized section: the model's words, marked as such, or why
/// there are none.
fn synthesis_section(s: &Result<String, String>) -> String {
    match s {
        Ok(text) => {
            let mut out = String::from(
                "_Written by one LLM call from the audit log and the verification \
                 (`report: synthesized`): the model's reading, not checked facts._\n\n",
            );
            // Its headings stay below the report's own (`##`); no HTML,
            // images or links but plain web addresses (hostile case N27).
            out.push_str(&super::sanitize::synthesized(text));
            out
        }
        Err(why) => format!("No synthesis: {}.\n", printable(why.trim_end_matches('.'))),
    }
}

impl Report {
    /// The sections in order: (heading, Markdown body).
    fn sections(&self) -> Vec<(&'static str, String)> {
        let mut sections = vec![
            ("Objective", self.objective_section()),
            ("Outcome", self.outcome_section()),
            ("Verification", self.verification_section()),
        ];
        if let Some(s) = &self.synthesis {
            sections.insert(3, ("Synthesis", synthesis_section(s)));
        }
        if !self.template_steps.is_empty() {
            let steps = super::steps::steps_section(&self.template_steps);
            sections.push(("Template steps", steps));
        }
        sections.extend([
            ("Steps and tool calls", self.tools_section()),
            ("Tokens, cost and time", self.usage_section()),
            ("Files changed", self.files_section()),
            ("What the agent reported", self.message_section()),
        ]);
        sections
    }

    /// The whole report.
    pub fn to_markdown(&self) -> String {
        let agent = match &self.agent {
            Some(a) => format!(", agent {}", code(a)),
            None => String::new(),
        };
        let mut s = format!(
            "# Report: {}\n\nTask `{}`, attempt {}, model {}{agent}.\n",
            printable(&self.title),
            self.id,
            self.attempt,
            code(&self.model)
        );
        for (heading, body) in self.sections() {
            let _ = write!(s, "\n## {heading}\n\n{}", body.trim_end());
            s.push('\n');
        }
        s
    }

    fn objective_section(&self) -> String {
        let mut s = format!("> **{}**\n>\n", printable(&self.title));
        for line in self.objective.trim_end().lines() {
            let _ = writeln!(s, "> {}", printable(line));
        }
        s
    }

    fn outcome_section(&self) -> String {
        let mut s = format!("**{}**", self.state);
        if let Some(r) = self.reason.as_deref().filter(|r| *r != self.state) {
            let _ = write!(s, " (reason: {})", code(r));
        }
        s.push('\n');
        for note in &self.notes {
            let _ = write!(s, "\n{}\n", printable(note));
        }
        if let Some(d) = &self.detail {
            let _ = write!(s, "\n{}\n", printable(d));
        }
        s
    }

    fn tools_section(&self) -> String {
        let tools = match &self.tools {
            Ok(t) => t,
            Err(why) => {
                return format!(
                    "{} steps of {}; tool calls not counted: {}\n",
                    self.steps,
                    self.max_steps,
                    printable(why)
                );
            }
        };
        let total: u64 = tools.iter().map(|t| t.calls).sum();
        let mut s = format!(
            "{} steps of {}, {total} tool calls.\n",
            self.steps, self.max_steps
        );
        if tools.is_empty() {
            return s;
        }
        s.push_str("\n| tool | calls | failed |\n|---|---:|---:|\n");
        for t in tools.iter().take(MAX_ROWS) {
            let _ = writeln!(s, "| {} | {} | {} |", cell(&t.tool), t.calls, t.failed);
        }
        if tools.len() > MAX_ROWS {
            let rest: u64 = tools[MAX_ROWS..].iter().map(|t| t.calls).sum();
            let _ = writeln!(s, "| {} other tools | {rest} | |", tools.len() - MAX_ROWS);
        }
        s
    }

    fn usage_section(&self) -> String {
        let duration = match (self.started_at, self.finished_at) {
            (Some(a), Some(b)) => short_duration(b - a),
            _ => "-".into(),
        };
        let cost = if self.cost_usd > 0.0 {
            format!("${:.4}", self.cost_usd)
        } else {
            "-".into()
        };
        let (read, write) = self.cached;
        let mut long = String::new();
        if read + write > 0 {
            let rate = crate::output::hit_rate(read, self.input_tokens) * 100.0;
            long.push_str(&format!(
                "| prompt cache | {read} read ({rate:.0}% of input), {write} written |\n"
            ));
        }
        if self.compactions > 0 {
            long.push_str(&format!(
                "| compactions | {} (the conversation was compacted to fit the model's window) |\n",
                self.compactions
            ));
        }
        format!(
            "| | |\n|---|---|\n| tokens | {} ({} in, {} out) |\n{long}| cost | {cost} |\n\
             | started | {} |\n| finished | {} |\n| duration | {duration} |\n",
            self.input_tokens + self.output_tokens,
            self.input_tokens,
            self.output_tokens,
            when(self.started_at),
            when(self.finished_at),
        )
    }

    fn files_section(&self) -> String {
        let mut s = String::new();
        if self.replaced_own {
            let _ = writeln!(
                s,
                "The workspace held a `report.md` of its own; this report took its place \
                 (its changes are in the patch).\n"
            );
        }
        let files = match &self.changes {
            Ok(f) => f,
            Err(why) => {
                let _ = writeln!(s, "Not known: {}", printable(why));
                return s;
            }
        };
        if files.is_empty() {
            s.push_str("None: the workspace is as it was submitted.\n");
            return s;
        }
        let added: u64 = files.iter().map(|f| f.added).sum();
        let removed: u64 = files.iter().map(|f| f.removed).sum();
        let _ = writeln!(
            s,
            "{} file{} changed, +{added} -{removed}; the patch is `{PATCH}` \
             (`saheeli task diff {}`).\n",
            files.len(),
            if files.len() == 1 { "" } else { "s" },
            self.id.short()
        );
        let left_out = files
            .iter()
            .filter(|f| matches!(f.status, Status::LeftOut(_)))
            .count();
        if left_out > 0 {
            let _ = writeln!(
                s,
                "{left_out} of them {} not in the patch (named by `.gitignore` or Saheeli's \
                 default ignore list, or over 1 MiB): copy them from the results if you need \
                 them.\n",
                if left_out == 1 { "is" } else { "are" }
            );
        }
        s.push_str("| file | change | lines |\n|---|---|---|\n");
        for f in files.iter().take(MAX_ROWS) {
            let status = match f.status {
                Status::Added => "added".to_string(),
                Status::Deleted => "deleted".to_string(),
                Status::Modified => "modified".to_string(),
                Status::LeftOut(why) => format!("not in the patch ({})", why.as_str()),
            };
            let _ = writeln!(s, "| {} | {status} | {} |", cell(&f.path), counts(f));
        }
        if files.len() > MAX_ROWS {
            let _ = writeln!(s, "| {} more files | | |", files.len() - MAX_ROWS);
        }
        s
    }

    fn message_section(&self) -> String {
        match &self.agent_message {
            Some(m) => fenced(m),
            None => "Nothing: the agent did not call `task_complete`.\n".into(),
        }
    }
}

/// A time as RFC 3339, or `-`.
pub(super) fn when(ms: Option<i64>) -> String {
    ms.map(|ms| saheeli_protocol::rfc3339(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)))
        .unwrap_or_else(|| "-".into())
}

/// `text` in a code span that nothing in it can close.
pub(super) fn code(text: &str) -> String {
    let text = printable(text);
    let ticks = "`".repeat(longest_run(&text, '`') + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

/// A table cell holding `text` as code (`|` escaped, as tables need).
pub(super) fn cell(text: &str) -> String {
    code(text).replace('|', "\\|")
}

/// `text` in a fenced block that nothing in it can close.
pub(super) fn fenced(text: &str) -> String {
    let fence = "`".repeat(longest_run(text, '`').max(2) + 1);
    let mut s = format!("{fence}text\n");
    for line in text.trim_end().lines() {
        let _ = writeln!(s, "{}", printable(line));
    }
    let _ = writeln!(s, "{fence}");
    s
}

/// The longest run of `c` in `text`.
fn longest_run(text: &str, c: char) -> usize {
    let (mut best, mut run) = (0, 0);
    for ch in text.chars() {
        run = if ch == c { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report {
            id: TaskId::new(),
            title: "Fix the parser".into(),
            objective: "The test fails.\n## Not a heading of the report\n".into(),
            state: "complete".into(),
            reason: Some("complete".into()),
            detail: Some("exit 0; collected 3 files".into()),
            attempt: 1,
            model: "replay:s.json".into(),
            agent: None,
            steps: 3,
            max_steps: 60,
            tools: Ok(vec![
                ToolCount {
                    tool: "execute_shell".into(),
                    calls: 2,
                    failed: 1,
                },
                ToolCount {
                    tool: "a|b`c".into(),
                    calls: 1,
                    failed: 0,
                },
            ]),
            input_tokens: 100,
            output_tokens: 20,
            cost_usd: 0.0,
            cached: (80, 10),
            compactions: 2,
            started_at: Some(1_000),
            finished_at: Some(66_000),
            changes: Ok(vec![FileStat {
                path: "src/x.rs".into(),
                status: Status::Modified,
                added: 3,
                removed: 1,
                binary: false,
            }]),
            agent_message: Some("Done.\n```\n## Outcome\nall good".into()),
            replaced_own: false,
            template_steps: vec![],
            verification: None,
            synthesis: None,
            notes: vec![],
        }
    }

    #[test]
    fn a_synthesis_is_its_own_section_marked_as_the_models() {
        let mut r = report();
        assert!(
            !r.to_markdown().contains("## Synthesis"),
            "facts only by default"
        );
        r.synthesis = Some(Ok(
            "### Findings\n- the parser is fixed\n## Outcome\n".into()
        ));
        let md = r.to_markdown();
        let at = md.find("## Synthesis").unwrap();
        assert!(at > md.find("## Verification").unwrap(), "{md}");
        assert!(md.contains("not checked facts"), "{md}");
        assert!(
            md.contains("### Findings\n- the parser is fixed\n####"),
            "{md}"
        );
        r.synthesis = Some(Err("the task's budget is spent".into()));
        assert!(
            r.to_markdown()
                .contains("## Synthesis\n\nNo synthesis: the task's budget is spent.\n")
        );
    }

    #[test]
    fn every_section_is_there_in_order() {
        let md = report().to_markdown();
        // Headings outside fences (the agent's `## Outcome` is inside one).
        let mut fence: Option<&str> = None;
        let mut headings = vec![];
        for line in md.lines() {
            let ticks = &line[..line.len() - line.trim_start_matches('`').len()];
            match fence {
                Some(f) if line == f => fence = None,
                None if ticks.len() >= 3 => fence = Some(ticks),
                None if line.starts_with("## ") => headings.push(line),
                _ => {}
            }
        }
        assert_eq!(
            headings,
            [
                "## Objective",
                "## Outcome",
                "## Verification",
                "## Steps and tool calls",
                "## Tokens, cost and time",
                "## Files changed",
                "## What the agent reported"
            ],
            "{md}"
        );
        for part in [
            "**complete**\n\nexit 0; collected 3 files",
            "3 steps of 60, 3 tool calls.",
            "| `execute_shell` | 2 | 1 |",
            "| ``a\\|b`c`` | 1 | 0 |",
            "| tokens | 120 (100 in, 20 out) |",
            "| prompt cache | 80 read (80% of input), 10 written |",
            "| compactions | 2 (",
            "| duration | 1m05s |",
            "1 file changed, +3 -1",
            "| `src/x.rs` | modified | +3 -1 |",
            "> ## Not a heading of the report",
            "````text\nDone.\n```\n## Outcome\nall good\n````\n",
        ] {
            assert!(md.contains(part), "missing {part:?} in\n{md}");
        }
    }

    #[test]
    fn what_is_not_known_is_said() {
        let mut r = report();
        r.tools = Err("no audit log".into());
        r.changes = Err("the results were truncated".into());
        r.agent_message = None;
        r.reason = Some("max_steps".into());
        r.state = "incomplete".into();
        let md = r.to_markdown();
        for part in [
            "**incomplete** (reason: `max_steps`)",
            "tool calls not counted: no audit log",
            "Not known: the results were truncated",
            "the agent did not call `task_complete`",
        ] {
            assert!(md.contains(part), "missing {part:?} in\n{md}");
        }
        r.changes = Ok(vec![]);
        assert!(
            r.to_markdown()
                .contains("None: the workspace is as it was submitted.")
        );
    }

    #[test]
    fn code_spans_cannot_be_closed_from_inside() {
        assert_eq!(code("plain"), "`plain`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x"), "`` `x ``");
        assert_eq!(code("new\nline"), "`new\\nline`");
    }
}
