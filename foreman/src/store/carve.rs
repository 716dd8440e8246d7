//! Carving a child's budget out of its parent's (issue 30): a pure
//! decision over the parent's limits, its own use and what its children
//! hold, beside its table test.

/// A parent's limits and its own use.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ParentBudget {
    pub max_tokens: Option<u64>,
    pub max_cost: Option<f64>,
    pub used_tokens: u64,
    pub used_cost: f64,
}

/// What the parent's children hold of its budget: a child not ended its
/// whole budget, an ended one what it used.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Carved {
    pub tokens: u64,
    pub cost: f64,
    pub children: u32,
}

/// The child's budget out of what the parent has left, or why not.
/// Without a request it gets an even share of what is left among the
/// parent itself and the children it may still spawn (`share_among`).
pub(crate) fn carve(
    b: &ParentBudget,
    carved: &Carved,
    want_tokens: Option<u64>,
    want_cost: Option<f64>,
    share_among: u32,
) -> std::result::Result<(Option<u64>, Option<f64>), String> {
    let share = u64::from(share_among.max(1));
    let tokens = match b.max_tokens {
        None => want_tokens,
        Some(max) => {
            let left = max.saturating_sub(b.used_tokens + carved.tokens);
            let want = want_tokens.unwrap_or(left / share);
            if want > left || want == 0 {
                return Err(format!(
                    "the child's max_tokens ({want}) exceeds what this task has left: {left} of \
                     {max} (used {}, held by children {}); ask for less or wait for children to end",
                    b.used_tokens, carved.tokens
                ));
            }
            Some(want)
        }
    };
    let cost = match b.max_cost {
        None => want_cost,
        Some(max) => {
            let left = (max - b.used_cost - carved.cost).max(0.0);
            let want = want_cost.unwrap_or(left / share as f64);
            if want > left + 1e-9 || want <= 0.0 {
                return Err(format!(
                    "the child's max_cost (${want:.4}) exceeds what this task has left: \
                     ${left:.4} of ${max:.4}; ask for less or wait for children to end"
                ));
            }
            Some(want)
        }
    };
    Ok((tokens, cost))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(max: u64, used: u64) -> ParentBudget {
        ParentBudget {
            max_tokens: Some(max),
            used_tokens: used,
            ..ParentBudget::default()
        }
    }

    #[test]
    fn carving_refuses_more_than_is_left_and_shares_evenly() {
        let held = Carved {
            tokens: 3000,
            ..Carved::default()
        };
        let cases = [
            // (max, used, held, want, share) -> tokens or refused
            (10_000, 0, Carved::default(), Some(4000), 1, Some(4000)),
            (10_000, 1000, held, Some(6000), 1, Some(6000)),
            (10_000, 1000, held, Some(6001), 1, None),
            (10_000, 1000, held, None, 3, Some(2000)),
            (10_000, 10_000, Carved::default(), None, 1, None),
        ];
        for (max, used, held, want, share, expect) in cases {
            let got = carve(&budget(max, used), &held, want, None, share);
            assert_eq!(
                got.clone().ok().and_then(|g| g.0),
                expect,
                "{max} {used} {want:?}: {got:?}"
            );
        }
        // No budget: nothing to carve; the child gets what it asked for.
        let free = carve(&ParentBudget::default(), &held, Some(7), None, 1).unwrap();
        assert_eq!(free, (Some(7), None));
        let e = carve(&budget(1000, 0), &Carved::default(), Some(5000), None, 1).unwrap_err();
        assert!(
            e.contains("exceeds what this task has left: 1000 of 1000"),
            "{e}"
        );
        let cost = ParentBudget {
            max_cost: Some(1.0),
            used_cost: 0.5,
            ..ParentBudget::default()
        };
        assert!(carve(&cost, &Carved::default(), None, Some(0.6), 1).is_err());
        assert_eq!(
            carve(&cost, &Carved::default(), None, None, 2).unwrap().1,
            Some(0.25)
        );
    }
}
