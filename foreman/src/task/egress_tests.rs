use super::*;

fn rule(t: &str) -> Rule {
    Rule::parse(t, false).unwrap()
}

fn host(h: &str) -> Host {
    Host::parse(h).unwrap()
}

#[test]
fn what_each_rule_lets_through() {
    // (rule, host, port, allowed)
    let cases = [
        ("pypi.org", "pypi.org", 443, true),
        ("pypi.org", "PyPI.org.", 443, true),
        ("pypi.org", "pypi.org", 80, true),
        ("pypi.org", "pypi.org", 22, false),
        ("pypi.org", "evil-pypi.org", 443, false),
        ("pypi.org", "files.pypi.org", 443, false),
        ("*.pythonhosted.org", "files.pythonhosted.org", 443, true),
        ("*.pythonhosted.org", "pythonhosted.org", 443, false),
        ("*.pythonhosted.org", "xpythonhosted.org", 443, false),
        ("*.pythonhosted.org", "a.b.pythonhosted.org", 443, true),
        ("index.local:8080", "index.local", 8080, true),
        ("index.local:8080", "index.local", 443, false),
        ("127.0.0.2:9000", "127.0.0.2", 9000, true),
        ("127.0.0.2:9000", "127.0.0.2", 9001, false),
        ("127.0.0.2", "127.0.0.3", 443, false),
        ("[::1]:9000", "::1", 9000, true),
        ("10.0.0.5", "::ffff:10.0.0.5", 443, true),
        // A name rule never matches an address, nor the reverse.
        ("pypi.org", "151.101.0.223", 443, false),
        ("151.101.0.223", "pypi.org", 443, false),
    ];
    for (r, h, port, want) in cases {
        assert_eq!(rule(r).matches(&host(h), port), want, "{r} vs {h}:{port}");
    }
}

#[test]
fn bad_entries_are_refused_with_the_reason() {
    for (t, says) in [
        ("*", "any host"),
        ("*.org", "a domain with a dot"),
        ("pypi.org:0", "1 to 65535"),
        ("pypi.org:https", "1 to 65535"),
        ("http://pypi.org", "not a host name"),
        ("pypi.org/simple", "not a host name"),
        ("[::1", "closing"),
        ("", "not a host name"),
    ] {
        let e = Rule::parse(t, false).unwrap_err();
        assert!(e.contains(says), "{t}: {e}");
    }
    assert_eq!(Rule::parse("*", true).unwrap().host, RuleHost::Any);
}

#[test]
fn a_task_list_must_lie_within_the_limits() {
    let p = Path::new("task.md");
    let egress = |agent: &[&str]| Egress {
        agent: agent.iter().map(|s| s.to_string()).collect(),
        ..Egress::default()
    };
    let limits = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let ok = |a: &[&str], l: &[&str]| plan(p, &egress(a), Approval::Deny, &limits(l)).is_ok();
    assert!(ok(&["pypi.org", "10.0.0.5:80"], &["*"]));
    assert!(ok(&["files.pythonhosted.org"], &["*.pythonhosted.org"]));
    assert!(ok(&["*.a.pythonhosted.org"], &["*.pythonhosted.org"]));
    assert!(!ok(&["pythonhosted.org"], &["*.pythonhosted.org"]));
    assert!(ok(&["pypi.org:443"], &["pypi.org"]));
    assert!(!ok(&["pypi.org:22"], &["pypi.org"]));
    assert!(!ok(&["pypi.org"], &["pypi.org:443"]));
    let e = plan(p, &egress(&["pypi.org"]), Approval::Deny, &[]).unwrap_err();
    let e = format!("{e:#}");
    assert!(e.contains("task.md: `egress.agent`: `pypi.org`"), "{e}");
    assert!(e.contains("limits.egress"), "{e}");
}

#[test]
fn a_phase_is_served_when_it_lists_a_host_or_may_ask() {
    let mut plan = EgressPlan {
        setup: vec![rule("pypi.org")],
        ..EgressPlan::default()
    };
    assert!(plan.serves(Phase::Setup));
    assert!(!plan.serves(Phase::Agent));
    plan.approval = Approval::Ask;
    assert!(plan.serves(Phase::Agent));
    assert_eq!(plan.shown()["setup"][0], "pypi.org");
}
