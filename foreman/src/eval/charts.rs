//! The report's charts as inline SVG (nothing fetched): the latency
//! distribution (a histogram, passed and failed stacked) and tool usage
//! (horizontal bars). Every label goes through [`esc`].

use std::collections::BTreeMap;
use std::fmt::Write;

use super::html::{esc, human_ms};
use super::report::CaseResult;

const PASS: &str = "#12805c";
const FAIL: &str = "#c0362c";
const GRID: &str = "#e4e7ec";
const INK: &str = "#667085";

/// Durations in up to 12 equal bins from the shortest to the longest.
pub(crate) fn latency(cases: &[CaseResult]) -> String {
    let timed: Vec<(i64, bool)> = cases
        .iter()
        .filter_map(|c| c.duration_ms.map(|d| (d, c.passed)))
        .collect();
    if timed.is_empty() {
        return "<p class=\"muted\">No case has ended yet.</p>".into();
    }
    let max = timed.iter().map(|t| t.0).max().unwrap_or(0).max(1);
    let lo = timed.iter().map(|t| t.0).min().unwrap_or(0).min(max - 1);
    let bins = timed.len().clamp(4, 12);
    let width = ((max - lo) as f64 / bins as f64).ceil().max(1.0);
    let mut counts = vec![(0u32, 0u32); bins];
    for (d, passed) in &timed {
        let i = (((*d - lo) as f64 / width) as usize).min(bins - 1);
        if *passed {
            counts[i].0 += 1;
        } else {
            counts[i].1 += 1;
        }
    }
    // Whole-number ticks: at most 4 steps up to a multiple of the step.
    let most = counts.iter().map(|c| c.0 + c.1).max().unwrap_or(1).max(1);
    let ticks = most.min(4);
    let step = most.div_ceil(ticks);
    let top = step * ticks;
    let (w, h, left, bottom) = (560.0, 220.0, 36.0, 34.0);
    let plot_h = h - bottom - 10.0;
    let bar_w = (w - left - 10.0) / bins as f64;
    let mut s =
        format!("<svg viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"latency distribution\">");
    for k in 0..=ticks {
        let y = 10.0 + plot_h * (1.0 - k as f64 / ticks as f64);
        let v = step * k;
        let _ = write!(
            s,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{GRID}\"/>\
             <text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\" fill=\"{INK}\">{v}</text>",
            w - 10.0,
            left - 6.0,
            y + 3.0
        );
    }
    for (i, (p, f)) in counts.iter().enumerate() {
        let x = left + i as f64 * bar_w + 2.0;
        let hp = plot_h * *p as f64 / top as f64;
        let hf = plot_h * *f as f64 / top as f64;
        let base = 10.0 + plot_h;
        let from = human_ms(lo + (i as f64 * width) as i64);
        let to = human_ms(lo + ((i + 1) as f64 * width) as i64);
        let _ = write!(
            s,
            "<g><title>{} to {}: {p} passed, {f} failed</title>\
             <rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{hp:.1}\" fill=\"{PASS}\" rx=\"2\"/>\
             <rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{hf:.1}\" fill=\"{FAIL}\" rx=\"2\"/></g>",
            esc(&from),
            esc(&to),
            base - hp,
            bar_w - 4.0,
            base - hp - hf,
            bar_w - 4.0,
        );
        if i % bins.div_ceil(6) == 0 {
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"{INK}\">{}</text>",
                x,
                base + 14.0,
                esc(&from)
            );
        }
    }
    let _ = write!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\" fill=\"{INK}\">{}</text>\
         <rect x=\"{left}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{PASS}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"{INK}\">passed</text>\
         <rect x=\"{:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{FAIL}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"{INK}\">failed</text></svg>",
        w - 10.0,
        h - 20.0 + 14.0,
        esc(&human_ms(lo + (bins as f64 * width) as i64)),
        h - 12.0,
        left + 14.0,
        h - 3.0,
        left + 70.0,
        h - 12.0,
        left + 84.0,
        h - 3.0,
    );
    s
}

/// Calls by tool over all cases, the 15 most called.
pub(crate) fn tools(calls: &BTreeMap<String, u64>) -> String {
    let mut by: Vec<(&String, &u64)> = calls.iter().collect();
    by.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    by.truncate(15);
    if by.is_empty() {
        return "<p class=\"muted\">No tool calls were recorded.</p>".into();
    }
    let top = *by[0].1 as f64;
    let row = 24.0;
    let (w, label) = (560.0, 150.0);
    let h = row * by.len() as f64 + 8.0;
    let mut s = format!("<svg viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"tool usage\">");
    for (i, (tool, n)) in by.iter().enumerate() {
        let y = 4.0 + i as f64 * row;
        let bw = ((w - label - 60.0) * **n as f64 / top).max(2.0);
        let name: String = tool.chars().take(22).collect();
        let _ = write!(
            s,
            "<g><title>{}: {n} calls</title>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"end\" fill=\"#1d2433\">{}</text>\
             <rect x=\"{label}\" y=\"{:.1}\" width=\"{bw:.1}\" height=\"{:.1}\" rx=\"3\" fill=\"#3b5bdb\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"{INK}\">{n}</text></g>",
            esc(tool),
            label - 8.0,
            y + 15.0,
            esc(&name),
            y + 3.0,
            row - 8.0,
            label + bw + 6.0,
            y + 15.0,
        );
    }
    s.push_str("</svg>");
    s
}
