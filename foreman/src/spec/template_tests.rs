//! Tests of `template`.

use super::*;
use saheeli_protocol::template::Scalar;

fn param(name: &str, kind: ParamType) -> Parameter {
    Parameter {
        name: name.into(),
        kind,
        required: false,
        default: None,
        description: None,
        values: vec![],
    }
}

#[test]
fn values_are_checked_against_their_type() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("repo")).unwrap();
    let dir = d.path();
    let int = param("n", ParamType::Int);
    assert!(check_value(&int, "-3", dir).is_ok());
    assert!(
        check_value(&int, "3.5", dir)
            .unwrap_err()
            .contains("not a whole number")
    );
    let b = param("b", ParamType::Bool);
    assert!(check_value(&b, "false", dir).is_ok());
    assert!(check_value(&b, "yes", dir).is_err());
    let p = param("p", ParamType::Path);
    assert!(check_value(&p, "repo", dir).is_ok());
    assert!(
        check_value(&p, "nope", dir)
            .unwrap_err()
            .contains("does not exist")
    );
    let mut one = param("o", ParamType::OneOf);
    one.values = vec![Scalar("a".into()), Scalar("b".into())];
    assert!(check_value(&one, "b", dir).is_ok());
    assert!(
        check_value(&one, "c", dir)
            .unwrap_err()
            .contains("one of a, b")
    );
}

#[test]
fn declarations_are_found_by_line() {
    let text = "---\nparameters:\n  - name: a\n  - { name: b, type: int }\n---\n";
    assert_eq!(line_of(text, "a"), Some(3));
    assert_eq!(line_of(text, "b"), Some(4));
    assert_eq!(line_of(text, "c"), None);
}

#[test]
fn the_last_given_value_wins_and_optional_ones_are_empty() {
    let dir = Path::new("/");
    let mut req = param("a", ParamType::String);
    req.required = true;
    let opt = param("b", ParamType::String);
    let given = vec![("a".into(), "1".into()), ("a".into(), "2".into())];
    let v = resolve(Path::new("p.md"), dir, &[req.clone(), opt], &given, &[]).unwrap();
    assert_eq!(
        (v[0].value.as_str(), v[0].source),
        ("2", ParamSource::Param)
    );
    assert_eq!((v[1].value.as_str(), v[1].source), ("", ParamSource::Unset));
    let e = resolve(Path::new("p.md"), dir, &[req], &[], &[]).unwrap_err();
    let crate::spec::SpecError::Missing(m) = e else {
        panic!("not a missing parameter: {e}")
    };
    assert_eq!(m.missing[0].name, "a");
    assert!(m.to_string().contains("`--param a=VALUE`"), "{m}");
}
