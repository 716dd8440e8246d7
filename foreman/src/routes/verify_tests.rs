//! Tests of `verify`.

use super::*;

fn check(kind: CheckKind, exit_code: Option<i64>, passed: bool, output: &str) -> Check {
    Check {
        attempt: 1,
        kind,
        command: "sh test.sh".into(),
        exit_code,
        duration_ms: 5,
        passed,
        output: output.into(),
        limited: false,
        findings: Vec::new(),
        graded: None,
    }
}

#[test]
fn a_failed_command_is_quoted_with_what_is_left() {
    let t = Duration::from_secs(60);
    let checks = [check(
        CheckKind::Verify,
        Some(1),
        false,
        "FAIL: add(2, 2) = 5\n",
    )];
    let v = verdict(1, 3, &checks, checks.to_vec(), t);
    assert!(!v.passed && !v.is_final_failure());
    assert!(
        v.feedback.contains("`sh test.sh` exited with code 1"),
        "{}",
        v.feedback
    );
    assert!(v.feedback.contains("FAIL: add(2, 2) = 5"), "{}", v.feedback);
    assert!(
        v.feedback.contains("2 more attempts allowed"),
        "{}",
        v.feedback
    );
    let v = verdict(3, 3, &checks, checks.to_vec(), t);
    assert!(v.is_final_failure());
    assert!(v.feedback.contains("No attempt is left"), "{}", v.feedback);
}

#[test]
fn passing_needs_every_check_and_at_least_one() {
    let t = Duration::from_secs(60);
    let ok = check(CheckKind::Verify, Some(0), true, "");
    assert!(verdict(1, 1, std::slice::from_ref(&ok), vec![], t).passed);
    assert!(!verdict(1, 1, &[], vec![], t).passed);
    let no = check(CheckKind::Assess, None, false, "tests are missing");
    let v = verdict(1, 2, &[ok, no], vec![], t);
    assert!(!v.passed);
    assert!(v.feedback.contains("assessment failed"), "{}", v.feedback);
    assert!(v.feedback.contains("tests are missing"), "{}", v.feedback);
}

#[test]
fn long_output_is_cut_in_the_middle() {
    let text = format!("{}{}", "a".repeat(10_000), "z".repeat(10_000));
    let c = cut(&text, 100);
    assert!(c.starts_with("aaaa") && c.ends_with("zzzz"), "{c}");
    assert!(c.contains("bytes not shown"));
    assert!(c.len() < 200);
}
