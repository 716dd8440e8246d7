//! What a tool hands back, and the cap on its size: past the limit the
//! head and tail are kept and the cut is stated, on UTF-8 boundaries.

/// What a tool hands back.
#[derive(Debug, Default)]
pub(crate) struct ToolOutput {
    pub text: String,
    pub ok: bool,
    pub exit_code: Option<i32>,
    pub truncated: bool,
    /// Set by `task_complete`: the agent's final message.
    pub complete: Option<String>,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            ok: true,
            ..Default::default()
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput {
            text: format!("error: {}", text.into()),
            ok: false,
            ..Default::default()
        }
    }
}

/// Keeps the head and tail of `text` within `max` bytes, stating the cut.
/// Returns whether anything was cut.
pub(crate) fn cap(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_string(), false);
    }
    (join_cut(text, text, text.len(), max), true)
}

/// The start of `head` and the end of `tail`, which come from a text of
/// `total` bytes, joined by a note of how much is left out; at most `max`
/// bytes in all (when `max` leaves room for the note).
pub(crate) fn join_cut(head: &str, tail: &str, total: usize, max: usize) -> String {
    // The note is longest when it states the largest number.
    let keep = max.saturating_sub(note(total, max).len());
    let h = floor_boundary(head, (keep / 2).min(head.len()));
    let t = ceil_boundary(tail, tail.len() - (keep - h).min(tail.len()));
    let kept = h + tail.len() - t;
    format!(
        "{}{}{}",
        &head[..h],
        note(total.saturating_sub(kept), max),
        &tail[t..]
    )
}

fn note(cut: usize, max: usize) -> String {
    format!("\n[… {cut} bytes cut: output is limited to {max} bytes; head and tail kept …]\n")
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(cap("short", 100), ("short".into(), false));
        assert_eq!(cap("", 100), (String::new(), false));
    }

    #[test]
    fn keeps_head_and_tail_on_char_boundaries() {
        let text = "é".repeat(1000); // 2000 bytes
        let (out, cut) = cap(&text, 301);
        assert!(cut);
        assert!(out.len() <= 301, "{}", out.len());
        assert!(out.starts_with('é') && out.ends_with('é'));
        assert!(out.contains("bytes cut: output is limited to 301 bytes"));
    }

    proptest! {
        /// Whatever the text and limit: within the limit, a prefix and a
        /// suffix of the original, and the cut stated exactly.
        #[test]
        fn capped_text_is_bounded_and_honest(text in "[a-zé€😀\n]{0,400}", max in 120usize..400) {
            let (out, cut) = cap(&text, max);
            prop_assert!(out.len() <= max.max(text.len().min(max)));
            if cut {
                let (head, rest) = out.split_once("\n[… ").unwrap();
                let (num, _) = rest.split_once(' ').unwrap();
                let (_, tail) = rest.split_once("kept …]\n").unwrap();
                prop_assert!(text.starts_with(head));
                prop_assert!(text.ends_with(tail));
                let stated: usize = num.parse().unwrap();
                prop_assert_eq!(stated + head.len() + tail.len(), text.len());
            } else {
                prop_assert_eq!(out, text);
            }
        }
    }
}
