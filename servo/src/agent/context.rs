//! Keeping the conversation inside the model's window (issue 26).
//!
//! The agent keeps the whole conversation (the session file has it all, so
//! replay and resume are exact) and sends the model a view of it: tool
//! outputs older than the last `keep_recent` turns become one-line stubs
//! (`mask`), and when that is not enough the older turns are replaced by
//! a structured note one metered call wrote (`summarize`). The decision is
//! a pure function of the conversation's bytes and the task's `context:`,
//! so a replay of the session compacts at the same steps. A provider's
//! context-length error forces a compaction, keeping fewer turns each
//! time it repeats.

use saheeli_protocol::chat::{ChatMessage, Role};
use saheeli_protocol::context::{ContextPlan, ContextState, Summary};

use crate::tools::Tool;

/// Bytes per token assumed when estimating a request's size: fewer than
/// any tokenizer averages on code and JSON, so the estimate runs high and
/// the servo compacts a little early rather than late.
pub(crate) const BYTES_PER_TOKEN: usize = 3;

/// How a stub starts; a message that starts so is masked already.
const STUB: &str = "[saheeli] The output of this earlier";

/// How a summary note starts.
pub(crate) const SUMMARY_HEAD: &str = "[saheeli] Summary of the earlier part of this task";

/// A request's size in tokens, estimated: its messages and tool specs.
pub(crate) fn estimate(messages: &[ChatMessage], specs_bytes: usize) -> u64 {
    let bytes: usize = messages
        .iter()
        .map(|m| serde_json::to_vec(m).map_or(0, |b| b.len()))
        .sum();
    ((bytes + specs_bytes) / BYTES_PER_TOKEN) as u64
}

/// The name of the tool whose call `id` is, from the assistant turns.
fn tool_name<'a>(messages: &'a [ChatMessage], id: &str) -> &'a str {
    messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .find(|c| c.id == id)
        .map_or("tool", |c| c.function.name.as_str())
}

fn stub(tool: &str, bytes: usize) -> String {
    format!(
        "{STUB} `{tool}` call ({bytes} bytes) was removed to keep the conversation inside the \
         model's window. Run the tool again if you need it: the files are still in /workspace."
    )
}

/// What the model is sent of `messages` under `state`.
pub(crate) fn view(messages: &[ChatMessage], state: &ContextState) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        if let Some(s) = &state.summary
            && (2..s.upto).contains(&i)
        {
            if i == 2 {
                out.push(ChatMessage::user(s.text.clone()));
            }
            continue;
        }
        let text = m.content.as_deref().unwrap_or("");
        if m.role == Role::Tool && i < state.masked_before && !text.starts_with(STUB) {
            let name = tool_name(messages, m.tool_call_id.as_deref().unwrap_or(""));
            let mut masked = m.clone();
            masked.content = Some(stub(name, text.len()));
            out.push(masked);
        } else {
            out.push(m.clone());
        }
    }
    out
}

/// What to do about the conversation's size.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    /// Send this view: older tool outputs masked.
    Mask(ContextState),
    /// Summarise messages `2..upto` into a note (one call), masking
    /// before `masked_before`.
    Summarize { upto: usize, masked_before: usize },
}

/// Why the servo compacts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Cause {
    /// The estimate passed `threshold` of the window.
    Threshold,
    /// The provider answered that the context is too long (`attempt`: how
    /// many times in a row; each keeps half as many recent turns).
    ContextError(u32),
}

impl Cause {
    pub fn as_str(&self) -> &'static str {
        match self {
            Cause::Threshold => "threshold",
            Cause::ContextError(_) => "context_error",
        }
    }
}

/// Where the last `keep` turns start: the index of the `keep`-th assistant
/// message from the end, if there are more turns than that.
fn recent_start(messages: &[ChatMessage], keep: u32) -> Option<usize> {
    let turns: Vec<usize> = (2..messages.len())
        .filter(|&i| messages[i].role == Role::Assistant)
        .collect();
    let keep = keep.max(1) as usize;
    (turns.len() > keep).then(|| turns[turns.len() - keep])
}

/// Whether `state`'s view is above the threshold of the window.
fn over(messages: &[ChatMessage], specs: usize, state: &ContextState, plan: &ContextPlan) -> bool {
    plan.window
        .is_some_and(|w| estimate(&view(messages, state), specs) as f64 > plan.threshold * w as f64)
}

/// What to do before the next call (None: nothing, or nothing can help).
pub(crate) fn decide(
    messages: &[ChatMessage],
    specs: usize,
    current: &ContextState,
    plan: &ContextPlan,
    cause: Cause,
) -> Option<Step> {
    let forced = matches!(cause, Cause::ContextError(_));
    if !forced && !over(messages, specs, current, plan) {
        return None;
    }
    let keep = match cause {
        Cause::Threshold => plan.keep_recent,
        Cause::ContextError(n) => (plan.keep_recent >> n.saturating_sub(1).min(31)).max(1),
    };
    let boundary = recent_start(messages, keep)?;
    let summarized = current.summary.as_ref().map_or(2, |s| s.upto);
    let can_mask = plan.strategy.masks()
        && (current.masked_before.max(summarized)..boundary)
            .any(|i| messages[i].role == Role::Tool);
    let can_summarize = plan.strategy.summarizes() && boundary > summarized;
    let masked_before = if plan.strategy.masks() {
        boundary.max(current.masked_before)
    } else {
        current.masked_before
    };
    if can_mask {
        let masked = ContextState {
            masked_before,
            summary: current.summary.clone(),
        };
        // Masking costs no call: after a provider's error too, it is tried
        // first (should it not be enough, the next error summarises).
        let enough = !over(messages, specs, &masked, plan);
        if enough || !can_summarize {
            return Some(Step::Mask(masked));
        }
    }
    can_summarize.then_some(Step::Summarize {
        upto: boundary,
        masked_before,
    })
}

/// Files named by the `path` of the tool calls in `messages`.
fn files_touched(messages: &[ChatMessage]) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for c in messages.iter().flat_map(|m| &m.tool_calls) {
        if let Some(p) = Tool::from_call(c).and_then(|t| t.path())
            && !files.contains(&p)
            && files.len() < 50
        {
            files.push(p);
        }
    }
    files
}

/// The note's first line, for messages `2..upto`.
fn head(turns: usize) -> String {
    format!(
        "{SUMMARY_HEAD} ({turns} turns compacted to fit the model's window; the files are in \
         /workspace and the full history in the session file):"
    )
}

fn turns_in(messages: &[ChatMessage]) -> usize {
    messages.iter().filter(|m| m.is_assistant()).count()
}

/// A note made without a model (a replay, or when the summary call
/// fails): the goal, the tool calls made, the model's last words, the
/// files touched.
pub(crate) fn mechanical_note(messages: &[ChatMessage], upto: usize) -> String {
    let part = &messages[2.min(upto)..upto];
    let goal: String = messages
        .get(1)
        .and_then(|m| m.content.as_deref())
        .unwrap_or("")
        .chars()
        .take(400)
        .collect();
    let mut calls: Vec<(String, usize)> = Vec::new();
    for c in part.iter().flat_map(|m| &m.tool_calls) {
        match calls.iter_mut().find(|(n, _)| *n == c.function.name) {
            Some((_, k)) => *k += 1,
            None => calls.push((c.function.name.clone(), 1)),
        }
    }
    let done = calls
        .iter()
        .map(|(n, k)| format!("{n} ×{k}"))
        .collect::<Vec<_>>()
        .join(", ");
    let earlier = part
        .iter()
        .find(|m| {
            m.role == Role::User
                && m.content
                    .as_deref()
                    .is_some_and(|t| t.starts_with(SUMMARY_HEAD))
        })
        .and_then(|m| m.content.clone());
    let said: String = part
        .iter()
        .rev()
        .filter(|m| m.is_assistant())
        .find_map(|m| m.content.clone().filter(|t| !t.trim().is_empty()))
        .unwrap_or_default()
        .chars()
        .take(600)
        .collect();
    let mut note = head(turns_in(part));
    note.push_str(&format!("\nGoal: {goal}\nWhat was done: {done}"));
    if !said.is_empty() {
        note.push_str(&format!("\nWhat is known (the model's last words): {said}"));
    }
    note.push_str("\nWhat remains: go on with the task from here.");
    note.push_str(&format!(
        "\nFiles touched: {}",
        files_touched(part).join(", ")
    ));
    if let Some(e) = earlier {
        let e: String = e.chars().take(2000).collect();
        note.push_str(&format!("\nEarlier summary: {e}"));
    }
    note
}

/// The request that asks the model for the note: the part to summarise as
/// a transcript, at most `max_bytes` of it (its head and tail).
pub(crate) fn summary_request(
    view: &[ChatMessage],
    upto: usize,
    max_bytes: usize,
) -> Vec<ChatMessage> {
    let mut transcript = String::new();
    for m in &view[2.min(upto)..upto.min(view.len())] {
        let role = match m.role {
            Role::Assistant => "assistant",
            Role::Tool => "tool output",
            Role::User => "user",
            Role::System => "system",
        };
        let text: String = m
            .content
            .as_deref()
            .unwrap_or("")
            .chars()
            .take(2000)
            .collect();
        transcript.push_str(&format!("{role}: {text}\n"));
        for c in &m.tool_calls {
            let args: String = c.function.arguments.chars().take(300).collect();
            transcript.push_str(&format!("assistant calls {} {args}\n", c.function.name));
        }
    }
    if transcript.len() > max_bytes {
        let half = max_bytes / 2;
        let mut a = half;
        while !transcript.is_char_boundary(a) {
            a -= 1;
        }
        let mut b = transcript.len() - half;
        while !transcript.is_char_boundary(b) {
            b += 1;
        }
        transcript = format!("{}\n[… cut …]\n{}", &transcript[..a], &transcript[b..]);
    }
    vec![
        ChatMessage::system(
            "You compress the work log of a coding agent so it can go on with less context. \
             Answer with exactly these sections, each a few short lines: Goal, What was done, \
             What is known, What remains. Keep file names, commands, errors and numbers \
             exactly; drop everything else.",
        ),
        ChatMessage::user(format!(
            "The task:\n{}\n\nThe work log:\n{transcript}",
            view.get(1).and_then(|m| m.content.as_deref()).unwrap_or("")
        )),
    ]
}

/// The note from the model's answer, with the files touched added.
pub(crate) fn note_from(answer: &str, messages: &[ChatMessage], upto: usize) -> String {
    let part = &messages[2.min(upto)..upto];
    let answer: String = answer.chars().take(6000).collect();
    format!(
        "{}\n{}\nFiles touched: {}",
        head(turns_in(part)),
        answer.trim(),
        files_touched(part).join(", ")
    )
}

/// The state after a summary of `2..upto`.
pub(crate) fn summarized(upto: usize, masked_before: usize, text: String) -> ContextState {
    ContextState {
        masked_before,
        summary: Some(Summary { upto, text }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use saheeli_protocol::chat::{FunctionCall, ToolCall};
    use saheeli_protocol::context::Strategy;

    /// A conversation of `turns` read_file turns with `bytes` outputs.
    fn conversation(turns: usize, bytes: usize) -> Vec<ChatMessage> {
        let mut m = vec![
            ChatMessage::system("rules"),
            ChatMessage::user("read a.txt"),
        ];
        for i in 0..turns {
            m.push(ChatMessage {
                role: Role::Assistant,
                content: None,
                tool_calls: vec![ToolCall {
                    id: format!("c{i}"),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: "read_file".into(),
                        arguments: r#"{"path":"a.txt"}"#.into(),
                    },
                }],
                tool_call_id: None,
            });
            m.push(ChatMessage::tool_result(format!("c{i}"), "x".repeat(bytes)));
        }
        m
    }

    fn plan(window: u64, strategy: Strategy) -> ContextPlan {
        ContextPlan {
            window: Some(window),
            strategy,
            keep_recent: 2,
            threshold: 0.85,
        }
    }

    #[test]
    fn below_the_threshold_nothing_happens() {
        let m = conversation(3, 100);
        let p = plan(16_000, Strategy::MaskSummarize);
        assert_eq!(
            decide(&m, 0, &ContextState::default(), &p, Cause::Threshold),
            None
        );
        // Unknown window: only a provider's error compacts.
        let unknown = ContextPlan { window: None, ..p };
        assert_eq!(
            decide(&m, 0, &ContextState::default(), &unknown, Cause::Threshold),
            None
        );
        assert!(
            decide(
                &m,
                0,
                &ContextState::default(),
                &unknown,
                Cause::ContextError(1)
            )
            .is_some()
        );
    }

    #[test]
    fn masking_first_then_a_summary_when_it_is_not_enough() {
        // 10 turns of 2 KB: about 7,000 tokens, over 85% of 4,096.
        let m = conversation(10, 2048);
        let p = plan(4096, Strategy::MaskSummarize);
        let Some(Step::Mask(st)) = decide(&m, 0, &ContextState::default(), &p, Cause::Threshold)
        else {
            panic!("masking is enough here");
        };
        // The last two turns start at message 2 + 8×2.
        assert_eq!(st.masked_before, 18);
        let v = view(&m, &st);
        assert_eq!(v.len(), m.len());
        assert!(v[3].content.as_deref().unwrap().starts_with(STUB));
        assert!(v[3].content.as_deref().unwrap().contains("`read_file`"));
        assert_eq!(v[19], m[19], "recent turns stay verbatim");
        assert!(estimate(&v, 0) < 4096 * 85 / 100);
        // Masking again changes nothing: a smaller window needs a summary.
        let small = plan(1500, Strategy::MaskSummarize);
        assert_eq!(
            decide(&m, 0, &st, &small, Cause::Threshold),
            Some(Step::Summarize {
                upto: 18,
                masked_before: 18
            })
        );
        let s = summarized(18, 18, mechanical_note(&m, 18));
        let v = view(&m, &s);
        assert_eq!(v.len(), 2 + 1 + 4);
        assert!(v[2].content.as_deref().unwrap().starts_with(SUMMARY_HEAD));
        assert!(v[2].content.as_deref().unwrap().contains("read_file ×8"));
        assert!(
            v[2].content
                .as_deref()
                .unwrap()
                .contains("Files touched: a.txt")
        );
        assert_eq!(v[3].role, Role::Assistant, "no tool result is orphaned");
    }

    #[test]
    fn each_strategy_does_only_its_part() {
        let m = conversation(10, 2048);
        let mask = plan(1500, Strategy::Mask);
        assert!(matches!(
            decide(&m, 0, &ContextState::default(), &mask, Cause::Threshold),
            Some(Step::Mask(_))
        ));
        let summarize = plan(4096, Strategy::Summarize);
        assert_eq!(
            decide(
                &m,
                0,
                &ContextState::default(),
                &summarize,
                Cause::Threshold
            ),
            Some(Step::Summarize {
                upto: 18,
                masked_before: 0
            })
        );
    }

    #[test]
    fn repeated_context_errors_keep_fewer_turns() {
        let m = conversation(10, 100);
        let p = ContextPlan {
            keep_recent: 6,
            ..plan(100_000, Strategy::Mask)
        };
        let at = |n| match decide(&m, 0, &ContextState::default(), &p, Cause::ContextError(n)) {
            Some(Step::Mask(s)) => s.masked_before,
            other => panic!("{other:?}"),
        };
        assert_eq!(at(1), 2 + 4 * 2);
        assert_eq!(at(2), 2 + 7 * 2);
        assert_eq!(at(3), 2 + 9 * 2);
        // Nothing left to mask: nothing can help.
        let st = ContextState {
            masked_before: 20,
            summary: None,
        };
        assert_eq!(decide(&m, 0, &st, &p, Cause::ContextError(5)), None);
    }

    #[test]
    fn the_summary_request_is_capped() {
        let m = conversation(50, 2048);
        let req = summary_request(&m, 90, 10_000);
        assert_eq!(req.len(), 2);
        let text = req[1].content.as_deref().unwrap();
        assert!(text.len() < 11_000, "{}", text.len());
        assert!(text.contains("[… cut …]"));
    }
}
