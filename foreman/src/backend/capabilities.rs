//! The engines' capability flags (issue 53), read from each engine's own
//! declaration (`local::CAPABILITIES`, `swarm::CAPABILITIES`): the one
//! table `saheeli doctor` and docs/operating/engines.md print, and the
//! refusal of a task that needs what its engine lacks — at submit and
//! again when a foreman is about to launch it.

use crate::config::BackendKind;
use crate::task::{Capability, Need, TaskSpec};

/// Whether an engine has a capability; when not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Support {
    Yes,
    No(&'static str),
}

/// The engines that exist, in the table's order, with the `backend:`
/// value that picks each.
pub(crate) const ENGINES: [(BackendKind, &str); 2] = [
    (BackendKind::Docker, "docker"),
    (BackendKind::Swarm, "swarm"),
];

/// Engine `kind`'s declaration: every capability, in [`Capability::ALL`]'s order.
pub(crate) fn declared(kind: BackendKind) -> &'static [(Capability, Support); 15] {
    match kind {
        BackendKind::Docker => &super::local::CAPABILITIES,
        BackendKind::Swarm => &super::swarm::CAPABILITIES,
    }
}

/// Whether engine `kind` has `c`.
pub(crate) fn support(kind: BackendKind, c: Capability) -> Support {
    declared(kind)
        .iter()
        .find(|(d, _)| *d == c)
        .map_or(Support::No("not declared"), |(_, s)| *s)
}

fn engine_name(kind: BackendKind) -> &'static str {
    ENGINES
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("?", |(_, n)| *n)
}

/// What a task needs that engine `kind` lacks, as the message that
/// refuses it (the capability, why the engine lacks it, what to change);
/// None when the engine has all it needs.
pub(crate) fn refusal(kind: BackendKind, spec: &TaskSpec) -> Option<String> {
    let lacking: Vec<(Need, &str)> = spec
        .needs()
        .into_iter()
        .filter_map(|n| match support(kind, n.capability) {
            Support::Yes => None,
            Support::No(why) => Some((n, why)),
        })
        .collect();
    if lacking.is_empty() {
        return None;
    }
    let engine = engine_name(kind);
    let others: Vec<&str> = ENGINES
        .iter()
        .filter(|(k, _)| {
            *k != kind
                && lacking
                    .iter()
                    .all(|(n, _)| support(*k, n.capability) == Support::Yes)
        })
        .map(|(_, n)| *n)
        .collect();
    let each: Vec<String> = lacking
        .iter()
        .map(|(n, why)| {
            format!(
                "`{}` needs the engine capability `{}`, which `backend: {engine}` lacks ({why})",
                n.setting,
                n.capability.name()
            )
        })
        .collect();
    let settings: Vec<String> = lacking
        .iter()
        .map(|(n, _)| format!("`{}`", n.setting))
        .collect();
    let change = match others.first() {
        Some(other) => format!(
            "run it with `backend: {other}` in config.yaml, or drop {}",
            settings.join(", ")
        ),
        None => format!("drop {}", settings.join(", ")),
    };
    Some(format!("{}; {change}", each.join("; ")))
}

/// What config.yaml asks of its engine that the engine lacks (the warm
/// pool on a swarm), as the message that stops `serve`.
pub(crate) fn config_refusal(cfg: &crate::config::Config) -> Option<String> {
    let kind = cfg.file.backend;
    if cfg.file.pool.is_empty() {
        return None;
    }
    match support(kind, Capability::WarmPool) {
        Support::Yes => None,
        Support::No(why) => Some(format!(
            "`pool` needs the engine capability `{}`, which `backend: {}` lacks ({why}); \
             remove `pool:` or run with `backend: docker`",
            Capability::WarmPool.name(),
            engine_name(kind)
        )),
    }
}

/// The capability table for a terminal (`saheeli doctor`): a row per
/// capability, a column per engine, then why the configured engine lacks
/// what it lacks.
pub(crate) fn table_text(configured: BackendKind) -> String {
    let width = Capability::ALL
        .iter()
        .map(|c| c.name().len())
        .max()
        .unwrap_or(0)
        + 2;
    let mut out = format!(
        "engines (this config's: `backend: {}`)\n",
        engine_name(configured)
    );
    out.push_str(&format!("  {:<width$}", "capability"));
    for (_, name) in ENGINES {
        out.push_str(&format!("{name:<8}"));
    }
    out.push_str("what it is\n");
    for c in Capability::ALL {
        out.push_str(&format!("  {:<width$}", c.name()));
        for (kind, _) in ENGINES {
            let mark = match support(kind, c) {
                Support::Yes => "yes",
                Support::No(_) => "no",
            };
            out.push_str(&format!("{mark:<8}"));
        }
        out.push_str(c.what());
        out.push('\n');
    }
    for c in Capability::ALL {
        if let Support::No(why) = support(configured, c) {
            out.push_str(&format!("  no {}: {why}\n", c.name()));
        }
    }
    out
}

/// docs/reference/engines.md: the capability table, one row per
/// capability and a column per engine, with why an engine lacks one.
#[cfg(test)]
pub(crate) fn page_markdown() -> String {
    let mut out = String::from(
        "# Engines and their capabilities\n\n\
         Generated from each engine's declaration (`backend/local/capabilities.rs`, \
         `backend/swarm/capabilities.rs`) by the docs test; `saheeli doctor \
         --capabilities` prints the same table. A task whose settings need a \
         capability its engine lacks is refused at submit, naming the capability \
         and the setting, and a queued one is failed with reason `unsupported` \
         before it is launched; `pool:` on an engine without `warm_pool` stops \
         `serve`. Each \"yes\" names, beside it in its declaration, the case of \
         the conformance suite (`backend/conformance.rs`, run on every engine) \
         or the test that covers it; the suite checks each \"no\" is refused.\n\n",
    );
    out.push_str(&table_markdown());
    out
}

#[cfg(test)]
fn table_markdown() -> String {
    let mut out = String::from("| capability | what it is |");
    for (_, name) in ENGINES {
        out.push_str(&format!(" `{name}` |"));
    }
    out.push_str("\n|---|---|");
    for _ in ENGINES {
        out.push_str("---|");
    }
    out.push('\n');
    for c in Capability::ALL {
        out.push_str(&format!(
            "| `{}` | {} |",
            c.name(),
            c.what().replace('|', "\\|")
        ));
        for (kind, _) in ENGINES {
            match support(kind, c) {
                Support::Yes => out.push_str(" yes |"),
                Support::No(why) => out.push_str(&format!(" no: {why} |")),
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[path = "capabilities_tests.rs"]
mod more_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_declares_every_capability_in_order() {
        for (kind, name) in ENGINES {
            let got: Vec<Capability> = declared(kind).iter().map(|(c, _)| *c).collect();
            assert_eq!(got, Capability::ALL, "{name}'s declaration");
        }
    }

    #[test]
    fn the_table_has_a_row_per_capability_and_a_column_per_engine() {
        let t = table_markdown();
        assert_eq!(t.lines().count(), 2 + Capability::ALL.len());
        assert!(t.contains("| `egress` |"));
        let cells = |l: &str| l.matches('|').count() - l.matches("\\|").count();
        assert!(t.lines().all(|l| cells(l) == 3 + ENGINES.len()), "{t}");
        assert!(page_markdown().contains(&t));
    }
}
