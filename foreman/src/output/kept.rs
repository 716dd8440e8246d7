//! The snapshots a task keeps (issue 51), as `task status` shows them:
//! each step kept and what that snapshot added on disk.

use std::fmt::Write;

/// One kept snapshot (`snapshots` in `task status ID --json`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) struct SnapshotView {
    /// The step it keeps (`task fork ID --at-step N`).
    pub step: u32,
    /// What it added on disk: files copied and its directories (unchanged
    /// files are links to the snapshot before); null when not recorded.
    pub bytes: Option<u64>,
}

/// The most snapshots listed one by one in the text.
const LISTED: usize = 12;

/// `snapshots: 4 kept (24.0 KiB): step 0 (12.0 KiB), 1 (4.0 KiB), …`;
/// nothing when none is kept.
pub(crate) fn snapshots_line(id: &str, kept: &[SnapshotView]) -> String {
    if kept.is_empty() {
        return String::new();
    }
    let total: u64 = kept.iter().filter_map(|k| k.bytes).sum();
    let one = |k: &SnapshotView| match k.bytes {
        Some(b) => format!("{} ({})", k.step, crate::text::bytes(b)),
        None => k.step.to_string(),
    };
    let mut shown: Vec<String> = kept.iter().take(LISTED).map(one).collect();
    if kept.len() > LISTED {
        // The newest are the ones forks usually start from.
        shown.truncate(LISTED / 2);
        shown.push(format!("… {} more …", kept.len() - LISTED));
        shown.extend(kept[kept.len() - LISTED / 2..].iter().map(one));
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "snapshots: {} kept ({}): step {}; fork with `saheeli task fork {id} --at-step N`",
        kept.len(),
        crate::text::bytes(total),
        shown.join(", ")
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(steps: std::ops::Range<u32>) -> Vec<SnapshotView> {
        steps
            .map(|step| SnapshotView {
                step,
                bytes: Some(4096),
            })
            .collect()
    }

    #[test]
    fn the_line_lists_the_steps_with_their_sizes_and_cuts_a_long_list() {
        assert_eq!(snapshots_line("abc", &[]), "");
        let mut two = kept(0..2);
        two[1].bytes = None;
        assert_eq!(
            snapshots_line("abc", &two),
            "snapshots: 2 kept (4.0 KiB): step 0 (4.0 KiB), 1; fork with `saheeli task fork abc \
             --at-step N`\n"
        );
        let many = snapshots_line("abc", &kept(0..40));
        assert!(many.starts_with("snapshots: 40 kept (160.0 KiB): step 0 (4.0 KiB), "));
        assert!(
            many.contains("5 (4.0 KiB), … 28 more …, 34 (4.0 KiB)"),
            "{many}"
        );
        assert!(many.contains("39 (4.0 KiB); fork"), "{many}");
    }
}
