//! What the proxy does with a request, decided before any I/O: refuse it
//! (a provider's host, an unlisted host), ask a person, or connect — to
//! the listed address itself, or to a name the foreman resolves.

use saheeli_protocol::egress::{Approval, Phase};

use crate::task::egress::{Host, Rule};

/// The first decision over a parsed request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum First {
    /// Connect to the address the request names (it was listed).
    Address,
    /// Resolve the name and connect to an address that is not private.
    Resolve,
    /// Wait for a person (`egress_approval: ask`).
    Ask,
    Refuse(String),
}

/// Decides over `host`:`port` for `phase` under its rules.
pub(crate) fn first(
    phase: Phase,
    rules: &[Rule],
    approval: Approval,
    providers: &[String],
    host: &Host,
    port: u16,
) -> First {
    if let Host::Name(n) = host
        && providers.iter().any(|p| p == n)
    {
        return First::Refuse(format!(
            "{host} is an LLM provider's host: the model is reached through the gateway, \
             with its key, never through egress"
        ));
    }
    if rules.iter().any(|r| r.matches(host, port)) {
        return match host {
            Host::Address(_) => First::Address,
            Host::Name(_) => First::Resolve,
        };
    }
    let listed = |what: &str| {
        format!(
            "{host}:{port} is not in this task's egress list for the {p} phase{what}; \
             add it to `egress.{p}` in the task's front-matter",
            p = phase.as_str()
        )
    };
    match (host, approval) {
        // A person who approves an address names it, as a list would.
        (_, Approval::Ask) => First::Ask,
        (Host::Address(_), Approval::Deny) => First::Refuse(format!(
            "{} (an address is reached only when the list names that address)",
            listed("")
        )),
        (Host::Name(_), Approval::Deny) => First::Refuse(format!(
            "{} (or set `egress_approval: ask` to ask a person)",
            listed("")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_first_decision() {
        let rules: Vec<Rule> = ["pypi.org", "127.0.0.2:9000"]
            .iter()
            .map(|r| Rule::parse(r, false).unwrap())
            .collect();
        let providers = vec!["api.openai.com".to_string()];
        let d = |h: &str, port: u16, a: Approval| {
            first(
                Phase::Setup,
                &rules,
                a,
                &providers,
                &Host::parse(h).unwrap(),
                port,
            )
        };
        assert_eq!(d("pypi.org", 443, Approval::Deny), First::Resolve);
        assert_eq!(d("127.0.0.2", 9000, Approval::Deny), First::Address);
        assert_eq!(d("example.com", 443, Approval::Ask), First::Ask);
        let First::Refuse(why) = d("example.com", 443, Approval::Deny) else {
            panic!()
        };
        assert!(
            why.contains("`egress.setup`") && why.contains("egress_approval: ask"),
            "{why}"
        );
        assert_eq!(d("127.0.0.2", 9001, Approval::Ask), First::Ask);
        let First::Refuse(why) = d("127.0.0.2", 9001, Approval::Deny) else {
            panic!()
        };
        assert!(why.contains("names that address"), "{why}");
        let First::Refuse(why) = d("api.openai.com", 443, Approval::Ask) else {
            panic!()
        };
        assert!(why.contains("provider"), "{why}");
    }
}
