//! `egress:` and `egress_approval:` (issue 50): the hosts each phase of a
//! task may reach through the gateway's proxy, parsed and checked against
//! config.yaml's `limits.egress` once, at submit (`spec/`). What a rule matches is
//! [`Rule::matches`]; what happens to a connection is `egress::decide`.

use std::net::IpAddr;
use std::path::Path;

use anyhow::bail;
use saheeli_protocol::egress::{Approval, Egress, Phase};
use serde::{Deserialize, Serialize};

/// A name without a port may use these: plain and TLS web traffic.
pub(crate) const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// One entry of an egress list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rule {
    pub host: RuleHost,
    /// None: [`DEFAULT_PORTS`] for a name, any port for `*`.
    pub port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RuleHost {
    /// `*`: any host (only in `limits.egress`).
    Any,
    /// `pypi.org`: that name only.
    Name(String),
    /// `*.pythonhosted.org`: names below it, not the name itself.
    Below(String),
    /// `10.0.0.5`: that address, which may then be private or loopback.
    Address(IpAddr),
}

/// A request's host as the client named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Host {
    Name(String),
    Address(IpAddr),
}

impl Host {
    /// Parses an authority's host part (`[::1]` unbracketed already).
    pub fn parse(host: &str) -> Option<Host> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Some(Host::Address(ip));
        }
        name(host).map(Host::Name)
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Address(IpAddr::V6(a)) => write!(f, "[{a}]"),
            Host::Address(a) => write!(f, "{a}"),
        }
    }
}

/// A DNS name, lowercased without a trailing dot; None when it is not one.
fn name(s: &str) -> Option<String> {
    let s = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    ok.then_some(s)
}

impl Rule {
    /// Parses `host`, `*.domain`, `host:port`, `10.0.0.5:8080`,
    /// `[::1]:8080`, `*` (with `any` true: in `limits.egress`).
    pub fn parse(text: &str, any: bool) -> Result<Rule, String> {
        let t = text.trim();
        if t.contains("://") || t.contains('/') {
            return Err(format!(
                "`{t}` is not a host name: write the host alone (`pypi.org`), no scheme or path"
            ));
        }
        let (host, port) = split_port(t)?;
        let host = if host == "*" {
            if !any {
                return Err(format!(
                    "`{t}`: `*` would let the phase reach any host; name the hosts it needs"
                ));
            }
            RuleHost::Any
        } else if let Some(rest) = host.strip_prefix("*.") {
            match name(rest) {
                Some(n) if n.contains('.') || any => RuleHost::Below(n),
                Some(_) => {
                    return Err(format!(
                        "`{t}`: a wildcard needs a domain with a dot (`*.example.com`)"
                    ));
                }
                None => return Err(format!("`{t}` is not a host name")),
            }
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            RuleHost::Address(ip)
        } else if let Some(n) = name(host) {
            RuleHost::Name(n)
        } else {
            return Err(format!(
                "`{t}` is not a host name, `*.domain` or an address (with an optional `:port`)"
            ));
        };
        Ok(Rule { host, port })
    }

    /// Whether this rule lets a connection to `host`:`port` through.
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => matches!(self.host, RuleHost::Any) || DEFAULT_PORTS.contains(&port),
        };
        port_ok
            && match (&self.host, host) {
                (RuleHost::Any, _) => true,
                (RuleHost::Name(r), Host::Name(h)) => r == h,
                (RuleHost::Below(r), Host::Name(h)) => {
                    h.len() > r.len() + 1
                        && h.ends_with(r.as_str())
                        && h.as_bytes()[h.len() - r.len() - 1] == b'.'
                }
                (RuleHost::Address(r), Host::Address(h)) => same_address(*r, *h),
                _ => false,
            }
    }

    /// Whether everything `self` lets through, `limit` does too.
    fn within(&self, limit: &Rule) -> bool {
        let port_ok = match (limit.port, self.port) {
            (None, _) if limit.host == RuleHost::Any => true,
            (None, None) => true,
            (None, Some(p)) => DEFAULT_PORTS.contains(&p),
            (Some(l), Some(p)) => l == p,
            (Some(_), None) => false,
        };
        port_ok
            && match (&limit.host, &self.host) {
                (RuleHost::Any, _) => true,
                (RuleHost::Below(l), RuleHost::Below(s) | RuleHost::Name(s)) => {
                    s.len() > l.len() + 1
                        && s.ends_with(l.as_str())
                        && s.as_bytes()[s.len() - l.len() - 1] == b'.'
                }
                (RuleHost::Name(l), RuleHost::Name(s)) => l == s,
                (RuleHost::Address(l), RuleHost::Address(s)) => same_address(*l, *s),
                _ => false,
            }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            RuleHost::Any => f.write_str("*")?,
            RuleHost::Name(n) => f.write_str(n)?,
            RuleHost::Below(n) => write!(f, "*.{n}")?,
            RuleHost::Address(IpAddr::V6(a)) => write!(f, "[{a}]")?,
            RuleHost::Address(a) => write!(f, "{a}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// `::ffff:10.0.0.5` is `10.0.0.5`.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

fn same_address(a: IpAddr, b: IpAddr) -> bool {
    canonical(a) == canonical(b)
}

fn split_port(t: &str) -> Result<(&str, Option<u16>), String> {
    let port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("`{t}`: the port `{p}` is not a number from 1 to 65535"))
    };
    if let Some(rest) = t.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err(format!("`{t}`: an IPv6 address needs its closing `]`"));
        };
        return match after.strip_prefix(':') {
            Some(p) => Ok((host, Some(port(p)?))),
            None if after.is_empty() => Ok((host, None)),
            None => Err(format!("`{t}` is not `[address]:port`")),
        };
    }
    if t.matches(':').count() > 1 {
        // A bare IPv6 address: no port.
        return Ok((t, None));
    }
    match t.split_once(':') {
        Some((h, p)) => Ok((h, Some(port(p)?))),
        None => Ok((t, None)),
    }
}

/// A task's egress, resolved and checked: the rules per phase and what an
/// unlisted host meets. Stored with the task's spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct EgressPlan {
    pub setup: Vec<Rule>,
    pub agent: Vec<Rule>,
    pub verify: Vec<Rule>,
    pub approval: Approval,
}

impl EgressPlan {
    pub fn rules(&self, phase: Phase) -> &[Rule] {
        match phase {
            Phase::Setup => &self.setup,
            Phase::Agent => &self.agent,
            Phase::Verify => &self.verify,
        }
    }

    /// Whether `phase` has a proxy at all: it lists a host, or an
    /// unlisted one may be asked for.
    pub fn serves(&self, phase: Phase) -> bool {
        !self.rules(phase).is_empty() || self.approval == Approval::Ask
    }

    /// No phase reaches anything and nothing may be asked for.
    pub fn is_off(&self) -> bool {
        !self.any()
    }

    /// Whether any phase has a proxy.
    pub fn any(&self) -> bool {
        Phase::ALL.into_iter().any(|p| self.serves(p))
    }

    /// The lists as written (`pypi.org`, `*.example.com:8443`).
    pub fn shown(&self) -> serde_json::Value {
        let list = |r: &[Rule]| r.iter().map(|r| r.to_string()).collect::<Vec<_>>();
        serde_json::json!({
            "setup": list(&self.setup),
            "agent": list(&self.agent),
            "verify": list(&self.verify),
            "approval": self.approval.as_str(),
        })
    }
}

/// Parses `written` (front-matter over config.yaml's `task.egress`) and
/// checks every entry lies within `limits` (config.yaml `limits.egress`).
pub(crate) fn plan(
    path: &Path,
    written: &Egress,
    approval: Approval,
    limits: &[String],
) -> anyhow::Result<EgressPlan> {
    let shown = path.display();
    let limits = limits
        .iter()
        .map(|l| Rule::parse(l, true))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("config.yaml `limits.egress`: {e}"))?;
    let phase = |phase: Phase, list: &[String]| -> anyhow::Result<Vec<Rule>> {
        let mut rules = Vec::with_capacity(list.len());
        for text in list {
            let at = format!("{shown}: `egress.{}`", phase.as_str());
            let rule = Rule::parse(text, false).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
            if !limits.iter().any(|l| rule.within(l)) {
                bail!(
                    "{at}: `{text}` is not within config.yaml's `limits.egress` ({}); \
                     add it there or remove it from the task",
                    if limits.is_empty() {
                        "empty: no task may reach anything".to_string()
                    } else {
                        limits
                            .iter()
                            .map(|l| l.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                );
            }
            rules.push(rule);
        }
        Ok(rules)
    };
    Ok(EgressPlan {
        setup: phase(Phase::Setup, &written.setup)?,
        agent: phase(Phase::Agent, &written.agent)?,
        verify: phase(Phase::Verify, &written.verify)?,
        approval,
    })
}

#[cfg(test)]
#[path = "egress_tests.rs"]
mod tests;
