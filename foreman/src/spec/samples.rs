//! `samples:`, `select:` and `fork_at:` (best-of-N, issue 51) checked at
//! submit: K within its bounds, a `select` the task can be judged by, a
//! budget that covers K samples, and `fork_at` only where forking at a
//! step can be done.

use std::path::Path;

use anyhow::bail;
use saheeli_protocol::front_matter::{MAX_SAMPLES, Select};

use crate::task::{Samples, TaskSpec};

/// The least budget one sample may get: below it a sample could not make
/// its first call, so K samples are refused rather than run to `budget`.
pub(crate) const MIN_SAMPLE_TOKENS: u64 = 1_000;
pub(crate) const MIN_SAMPLE_COST: f64 = 0.001;

/// What the front-matter asked for: `samples`, `select`, `fork_at`.
pub(super) type Asked = (Option<u32>, Option<Select>, Option<u64>);

/// The task's samples (None: it runs once, as any task), or why not.
pub(super) fn checked(
    path: &Path,
    (samples, select, fork_at): Asked,
    spec: &TaskSpec,
) -> anyhow::Result<Option<Samples>> {
    let p = path.display();
    let Some(count) = samples else {
        if select.is_some() || fork_at.is_some() {
            bail!(
                "{p}: `select` and `fork_at` pick among samples: add `samples: K` (2 to {MAX_SAMPLES}) or remove them"
            );
        }
        return Ok(None);
    };
    if !(1..=MAX_SAMPLES).contains(&count) {
        bail!("{p}: `samples` {count} is out of range; use 1 to {MAX_SAMPLES}");
    }
    let select = select.unwrap_or(if spec.verify.is_empty() {
        Select::FirstComplete
    } else {
        Select::Verify
    });
    if select == Select::Verify && spec.verify.is_empty() {
        bail!(
            "{p}: `select: verify` picks the sample whose `verify:` passes; add `verify:` commands, or use `select: first_complete`"
        );
    }
    if select == Select::Assess && !spec.assess {
        bail!(
            "{p}: `select: assess` picks the sample the assessor scores highest; add `assess: true`"
        );
    }
    if spec.deliver.is_some() {
        bail!(
            "{p}: `deliver:` with `samples:` would push every sample's branch; remove one of them"
        );
    }
    let fork_at = fork_at.unwrap_or(0);
    if fork_at > 0 && !spec.agent.is_builtin() {
        bail!(
            "{p}: `fork_at` forks a conversation, which only the built-in agent's can be; remove it"
        );
    }
    let k = u64::from(count);
    if let Some(max) = spec.max_tokens
        && max / k < MIN_SAMPLE_TOKENS
    {
        bail!(
            "{p}: `max_tokens` {max} cannot cover {count} samples: each gets {} tokens, less than \
             the {MIN_SAMPLE_TOKENS} a sample needs at least; raise `max_tokens` to {} or ask for fewer samples",
            max / k,
            MIN_SAMPLE_TOKENS * k
        );
    }
    if let Some(max) = spec.max_cost
        && max / (k as f64) < MIN_SAMPLE_COST
    {
        bail!(
            "{p}: `max_cost` ${max} cannot cover {count} samples: each gets ${:.4}, less than the \
             ${MIN_SAMPLE_COST} a sample needs at least; raise `max_cost` or ask for fewer samples",
            max / k as f64
        );
    }
    Ok(Some(Samples {
        count,
        select,
        fork_at,
    }))
}

/// One sample's share of the task's budget: the task's divided by K
/// (tokens rounded down).
pub(crate) fn share(
    s: &Samples,
    max_tokens: Option<u64>,
    max_cost: Option<f64>,
) -> (Option<u64>, Option<f64>) {
    let k = u64::from(s.count.max(1));
    (max_tokens.map(|t| t / k), max_cost.map(|c| c / k as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K3: Asked = (Some(3), None, None);

    fn check(asked: Asked, f: impl Fn(&mut TaskSpec)) -> anyhow::Result<Option<Samples>> {
        let mut spec = crate::store::tests::spec("t");
        f(&mut spec);
        checked(Path::new("p.md"), asked, &spec)
    }

    fn err(asked: Asked, f: impl Fn(&mut TaskSpec)) -> String {
        format!("{:#}", check(asked, f).unwrap_err())
    }

    fn verify(s: &mut TaskSpec) {
        s.verify = vec!["true".into()];
    }

    #[test]
    fn samples_are_bounded_and_select_must_have_its_check() {
        let ok = check(K3, |_| {}).unwrap().unwrap();
        let got = (ok.count, ok.select, ok.fork_at);
        assert_eq!(got, (3, Select::FirstComplete, 0));
        assert_eq!(check(K3, verify).unwrap().unwrap().select, Select::Verify);
        assert!(err((Some(17), None, None), |_| {}).contains("use 1 to 16"));
        assert!(err((Some(0), None, None), |_| {}).contains("out of range"));
        let v = (Some(3), Some(Select::Verify), None);
        assert!(err(v, |_| {}).contains("add `verify:`"));
        let a = (Some(3), Some(Select::Assess), None);
        assert!(err(a, |_| {}).contains("`assess: true`"));
        assert!(check(a, |s| s.assess = true).unwrap().is_some());
        let alone = (None, Some(Select::Verify), None);
        assert!(err(alone, |_| {}).contains("add `samples: K`"));
        assert!(check((None, None, None), |_| {}).unwrap().is_none());
    }

    #[test]
    fn fork_at_needs_the_builtin_agent_and_the_budget_must_cover_k() {
        let two = check((Some(3), None, Some(2)), |_| {}).unwrap().unwrap();
        assert_eq!(two.fork_at, 2);
        let e = err((Some(3), None, Some(2)), |s| {
            s.agent = saheeli_protocol::Agent::Named(saheeli_protocol::agent::AgentName::Codex)
        });
        assert!(e.contains("`fork_at` forks a conversation"), "{e}");
        let zero = check((Some(3), None, Some(0)), |_| {}).unwrap().unwrap();
        assert_eq!(zero.fork_at, 0);
        let e = err(K3, |s| s.max_tokens = Some(2_999));
        assert!(
            e.contains("cannot cover 3 samples: each gets 999 tokens"),
            "{e}"
        );
        assert!(e.contains("raise `max_tokens` to 3000"), "{e}");
        assert!(check(K3, |s| s.max_tokens = Some(3_000)).is_ok());
        assert!(err(K3, |s| s.max_cost = Some(0.002)).contains("`max_cost`"));
        let s = Samples {
            count: 3,
            select: Select::Verify,
            fork_at: 0,
        };
        let share = share(&s, Some(10_000), Some(0.3));
        assert_eq!(share, (Some(3_333), Some(0.3 / 3.0)));
    }
}
