use super::*;

#[test]
fn replay_sessions_are_counted_not_listed() {
    let m = |v: &[&str]| models_line(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!(m(&["gpt-4o-mini"]), "gpt-4o-mini");
    assert_eq!(
        m(&["replay:/a/x.yaml", "gpt-4o", "replay:/a/y.yaml"]),
        "gpt-4o, replay (2 recorded sessions)"
    );
    assert_eq!(m(&["replay:/a/x.yaml"]), "replay (1 recorded session)");
}

#[test]
fn markup_is_escaped() {
    assert_eq!(
        esc("<img src=x onerror='a'>&\"\u{7}"),
        "&lt;img src=x onerror=&#39;a&#39;&gt;&amp;&quot;\u{fffd}"
    );
}
