//! Samples, their median and p95, and the report row each figure becomes:
//! a line of the table on stdout and an object in the JSON report.

use std::collections::BTreeMap;

use serde::Serialize;

/// The median of the samples (NaN when there are none).
pub fn median(xs: &[f64]) -> f64 {
    percentile(xs, 0.5)
}

pub fn p95(xs: &[f64]) -> f64 {
    percentile(xs, 0.95)
}

pub fn percentile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let idx = ((v.len() - 1) as f64 * q).round() as usize;
    v[idx]
}

/// One line of the report.
#[derive(Debug, Serialize)]
pub struct Figure {
    pub name: String,
    pub unit: String,
    pub n: usize,
    pub median: f64,
    pub p95: f64,
    /// What it is compared with, measured in the same run.
    pub floor_name: Option<String>,
    pub floor: Option<f64>,
    pub ratio: Option<f64>,
    pub target: String,
    pub met: Option<bool>,
    pub note: String,
    /// The samples themselves.
    pub samples: Vec<f64>,
    /// Where the time goes: named parts, in the figure's unit unless the
    /// name says otherwise.
    pub details: BTreeMap<String, f64>,
}

impl Figure {
    pub fn new(name: &str, unit: &str, samples: &[f64]) -> Figure {
        Figure {
            name: name.into(),
            unit: unit.into(),
            n: samples.len(),
            median: median(samples),
            p95: p95(samples),
            floor_name: None,
            floor: None,
            ratio: None,
            target: String::new(),
            met: None,
            note: String::new(),
            samples: samples.to_vec(),
            details: BTreeMap::new(),
        }
    }

    /// Compares the median with a floor; the target is a maximum ratio.
    pub fn against(mut self, floor_name: &str, floor: f64, max_ratio: f64) -> Figure {
        let ratio = self.median / floor;
        self.floor_name = Some(floor_name.into());
        self.floor = Some(floor);
        self.ratio = Some(ratio);
        self.target = format!("≤ {max_ratio} × {floor_name}");
        self.met = Some(ratio <= max_ratio);
        self
    }

    /// The target is an absolute maximum of the median.
    pub fn at_most(mut self, max: f64) -> Figure {
        self.target = format!("≤ {max} {}", self.unit);
        self.met = Some(self.median <= max);
        self
    }

    /// A line under the figure in the table (and `note` in the JSON).
    pub fn note(mut self, note: impl Into<String>) -> Figure {
        let note = note.into();
        if self.note.is_empty() {
            self.note = note;
        } else {
            self.note = format!("{}\n{note}", self.note);
        }
        self
    }

    /// A named part of the figure, for the JSON report.
    pub fn detail(mut self, name: &str, value: f64) -> Figure {
        self.details.insert(name.into(), value);
        self
    }
}

/// The report as a fixed-width table.
pub fn table(figures: &[Figure]) -> String {
    let mut out = format!(
        "{:<44} {:>4} {:>11} {:>11} {:>11} {:>7}  {:<26} {}\n",
        "metric", "n", "median", "p95", "floor", "ratio", "target", "met"
    );
    for f in figures {
        let num = |x: f64| {
            if x.is_nan() {
                "-".to_string()
            } else if x >= 100.0 {
                format!("{x:.0} {}", f.unit)
            } else {
                format!("{x:.2} {}", f.unit)
            }
        };
        out.push_str(&format!(
            "{:<44} {:>4} {:>11} {:>11} {:>11} {:>7}  {:<26} {}\n",
            f.name,
            f.n,
            num(f.median),
            num(f.p95),
            f.floor.map(num).unwrap_or_else(|| "-".into()),
            f.ratio
                .map(|r| format!("{r:.2}"))
                .unwrap_or_else(|| "-".into()),
            f.target,
            match f.met {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            }
        ));
        for line in f.note.lines() {
            out.push_str(&format!("    {line}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let xs = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(median(&xs), 3.0);
        assert_eq!(p95(&xs), 5.0);
        assert!(median(&[]).is_nan());
        let f = Figure::new("x", "ms", &xs).against("floor", 2.0, 1.2);
        assert_eq!(f.ratio, Some(1.5));
        assert_eq!(f.met, Some(false));
    }
}
