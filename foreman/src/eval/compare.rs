//! `saheeli eval compare RUN_A RUN_B`: which cases went from pass to fail
//! and back, and how the pass rate and the cost moved. A case's standing
//! in a run is its pass fraction over the repeats (1 or 0 without
//! `--repeat`).

use std::collections::BTreeMap;
use std::fmt::Write;

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{ContentArrangement, Table};
use serde::Serialize;

use super::html::esc;
use super::report::EvalReport;

/// What changed from run A to run B.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Comparison {
    pub run_a: String,
    pub run_b: String,
    pub suite_a: String,
    pub suite_b: String,
    pub pass_rate_a: f64,
    pub pass_rate_b: f64,
    pub pass_rate_delta: f64,
    pub cost_usd_a: f64,
    pub cost_usd_b: f64,
    pub cost_usd_delta: f64,
    /// Cases whose pass fraction went down (passed in A, failed in B).
    pub pass_to_fail: Vec<String>,
    /// Cases whose pass fraction went up.
    pub fail_to_pass: Vec<String>,
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    /// Every case in both runs: its pass fraction in each.
    pub cases: Vec<CaseDelta>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct CaseDelta {
    pub id: String,
    pub a: f64,
    pub b: f64,
}

pub(crate) fn compare(a: &EvalReport, b: &EvalReport) -> Comparison {
    let fa = &a.case_pass_fraction;
    let fb = &b.case_pass_fraction;
    let mut cases = Vec::new();
    let (mut down, mut up) = (Vec::new(), Vec::new());
    for (id, x) in fa {
        let Some(y) = fb.get(id) else { continue };
        if y < x {
            down.push(id.clone());
        } else if y > x {
            up.push(id.clone());
        }
        cases.push(CaseDelta {
            id: id.clone(),
            a: *x,
            b: *y,
        });
    }
    let only = |m: &BTreeMap<String, f64>, other: &BTreeMap<String, f64>| {
        m.keys()
            .filter(|k| !other.contains_key(*k))
            .cloned()
            .collect()
    };
    Comparison {
        run_a: a.run_id.clone(),
        run_b: b.run_id.clone(),
        suite_a: a.suite.clone(),
        suite_b: b.suite.clone(),
        pass_rate_a: a.pass_rate,
        pass_rate_b: b.pass_rate,
        pass_rate_delta: b.pass_rate - a.pass_rate,
        cost_usd_a: a.cost_usd,
        cost_usd_b: b.cost_usd,
        cost_usd_delta: b.cost_usd - a.cost_usd,
        pass_to_fail: down,
        fail_to_pass: up,
        only_in_a: only(fa, fb),
        only_in_b: only(fb, fa),
        cases,
    }
}

/// The comparison for a terminal: totals, then every case that moved.
pub(crate) fn table(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "pass rate {:.0}% → {:.0}% ({:+.0} points), cost ${:.4} → ${:.4} ({:+.4})",
        c.pass_rate_a * 100.0,
        c.pass_rate_b * 100.0,
        c.pass_rate_delta * 100.0,
        c.cost_usd_a,
        c.cost_usd_b,
        c.cost_usd_delta
    );
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(["CASE", "A", "B", "CHANGE"]);
    for d in &c.cases {
        let change = if d.b < d.a {
            "pass → fail"
        } else if d.b > d.a {
            "fail → pass"
        } else {
            ""
        };
        t.add_row([
            crate::output::clean(&d.id),
            format!("{:.0}%", d.a * 100.0),
            format!("{:.0}%", d.b * 100.0),
            change.to_string(),
        ]);
    }
    let _ = writeln!(out, "{t}");
    for (what, ids) in [("only in A", &c.only_in_a), ("only in B", &c.only_in_b)] {
        if !ids.is_empty() {
            let _ = writeln!(out, "{what}: {}", ids.join(", "));
        }
    }
    let _ = write!(
        out,
        "{} pass → fail, {} fail → pass",
        c.pass_to_fail.len(),
        c.fail_to_pass.len()
    );
    out
}

/// The comparison as one self-contained page.
pub(crate) fn html(c: &Comparison) -> String {
    let mut s = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <title>eval compare</title><style>",
    );
    s.push_str(include_str!("report.css"));
    let _ = write!(
        s,
        "</style></head><body><header><h1>Comparing two eval runs</h1><div class=\"meta\">\
         <span>A <code>{}</code> ({})</span><span>B <code>{}</code> ({})</span></div></header><main>\
         <div class=\"cards\">",
        esc(&c.run_a),
        esc(&c.suite_a),
        esc(&c.run_b),
        esc(&c.suite_b)
    );
    let card = |s: &mut String, label: &str, value: String, sub: String| {
        let _ = write!(
            s,
            "<div class=\"card\"><div class=\"label\">{label}</div><div class=\"value\">{}</div><div class=\"sub\">{}</div></div>",
            esc(&value),
            esc(&sub)
        );
    };
    card(
        &mut s,
        "Pass rate",
        format!("{:+.0} pts", c.pass_rate_delta * 100.0),
        format!(
            "{:.0}% → {:.0}%",
            c.pass_rate_a * 100.0,
            c.pass_rate_b * 100.0
        ),
    );
    card(
        &mut s,
        "Cost",
        format!("{:+.4}", c.cost_usd_delta),
        format!("${:.4} → ${:.4}", c.cost_usd_a, c.cost_usd_b),
    );
    card(
        &mut s,
        "Pass → fail",
        c.pass_to_fail.len().to_string(),
        c.pass_to_fail.join(", "),
    );
    card(
        &mut s,
        "Fail → pass",
        c.fail_to_pass.len().to_string(),
        c.fail_to_pass.join(", "),
    );
    s.push_str(
        "</div><h2>Cases</h2><table id=\"cases\"><thead><tr><th>Case</th><th class=\"num\">A</th>\
         <th class=\"num\">B</th><th>Change</th></tr></thead><tbody>",
    );
    for d in &c.cases {
        let badge = if d.b < d.a {
            "<span class=\"badge fail\">pass → fail</span>"
        } else if d.b > d.a {
            "<span class=\"badge pass\">fail → pass</span>"
        } else {
            ""
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td class=\"num\">{:.0}%</td><td class=\"num\">{:.0}%</td><td>{badge}</td></tr>",
            esc(&d.id),
            d.a * 100.0,
            d.b * 100.0
        );
    }
    s.push_str("</tbody></table></main></body></html>");
    s
}
