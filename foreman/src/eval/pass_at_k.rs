//! pass@k, the unbiased estimator of Chen et al. 2021 ("Evaluating Large
//! Language Models Trained on Code", §2.1): with n attempts of a case of
//! which c passed, the chance that at least one of k drawn without
//! replacement passes, 1 − C(n−c, k) / C(n, k); a suite's value is the mean
//! over its cases. Computed as a product (no large binomials).

use std::collections::BTreeMap;

/// pass@k of one case: `n` attempts, `c` passed, `k` ≤ n.
pub(crate) fn pass_at_k(n: u32, c: u32, k: u32) -> f64 {
    if k == 0 || k > n {
        return 0.0;
    }
    if n - c.min(n) < k {
        return 1.0;
    }
    // 1 − ∏_{i = n−c+1}^{n} (1 − k / i)
    let mut fail = 1.0;
    for i in (n - c + 1)..=n {
        fail *= 1.0 - k as f64 / i as f64;
    }
    1.0 - fail
}

/// The suite's pass@k for k = 1 to the smallest n: `cases` holds each
/// case's (n, c), its scored attempts and how many passed (a case with no
/// scored attempt, all of them infra failures, is left out).
pub(crate) fn suite_pass_at_k(cases: &[(u32, u32)]) -> BTreeMap<u32, f64> {
    let cases: Vec<(u32, u32)> = cases.iter().copied().filter(|(n, _)| *n > 0).collect();
    let mut out = BTreeMap::new();
    let Some(min_n) = cases.iter().map(|(n, _)| *n).min() else {
        return out;
    };
    for k in 1..=min_n {
        let sum: f64 = cases.iter().map(|&(n, c)| pass_at_k(n, c, k)).sum();
        out.insert(k, sum / cases.len() as f64);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn the_estimator_matches_its_closed_form() {
        // (n, c, k, 1 − C(n−c,k)/C(n,k))
        let cases = [
            (3, 1, 1, 1.0 / 3.0),
            (3, 1, 2, 1.0 - 1.0 / 3.0),
            (3, 1, 3, 1.0),
            (3, 0, 2, 0.0),
            (3, 3, 1, 1.0),
            (5, 2, 2, 1.0 - 3.0 / 10.0),
            (10, 3, 5, 1.0 - 21.0 / 252.0),
        ];
        for (n, c, k, want) in cases {
            assert!(close(pass_at_k(n, c, k), want), "n={n} c={c} k={k}");
        }
        assert_eq!(pass_at_k(3, 1, 4), 0.0);
    }

    #[test]
    fn a_suites_value_is_the_mean_over_its_cases() {
        let p = suite_pass_at_k(&[(3, 3), (3, 0), (3, 1)]);
        assert!(close(p[&1], (1.0 + 0.0 + 1.0 / 3.0) / 3.0));
        assert!(close(p[&3], (1.0 + 0.0 + 1.0) / 3.0));
        assert!(suite_pass_at_k(&[]).is_empty());
        // Each case its own n (`samples:`): k runs to the smallest.
        let p = suite_pass_at_k(&[(5, 2), (2, 1), (0, 0)]);
        assert_eq!(p.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        assert!(close(p[&1], (2.0 / 5.0 + 1.0 / 2.0) / 2.0));
        assert!(close(p[&2], ((1.0 - 3.0 / 10.0) + 1.0) / 2.0));
    }
}
