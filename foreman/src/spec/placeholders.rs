//! `{{ name }}` placeholders in a template's text: finding and replacing.
//!
//! The rule, as README states it:
//!
//! - `{{ name }}` is a placeholder when `name` is a word (a letter or `_`,
//!   then letters, digits, `_` or `-`); spaces and tabs inside the braces
//!   are optional: `{{name}}`, `{{ name }}`.
//! - Any other text with braces (`${{ secrets.X }}`, `{{}}`, `{{ a b }}`)
//!   is left as it is.
//! - `\{{` writes a literal `{{`: the backslash is dropped and what follows
//!   is not a placeholder, so `\{{ name }}` becomes `{{ name }}`.

/// A piece of a text: as it is, or a placeholder to replace.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Text(&'a str),
    /// A placeholder and the byte offset where it starts.
    Placeholder(&'a str, usize),
}

/// Splits `text` into literal pieces and placeholders.
fn pieces(text: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut done = 0; // text[..done] is in `out`
    let mut from = 0; // where to look for the next `{{`
    while let Some(rel) = text[from..].find("{{") {
        let at = from + rel;
        if at > 0 && text.as_bytes()[at - 1] == b'\\' {
            // `\{{`: drop the backslash, keep the braces as text.
            out.push(Piece::Text(&text[done..at - 1]));
            out.push(Piece::Text("{{"));
            done = at + 2;
            from = at + 2;
            continue;
        }
        match placeholder_at(&text[at..]) {
            Some((name, len)) => {
                out.push(Piece::Text(&text[done..at]));
                out.push(Piece::Placeholder(name, at));
                done = at + len;
                from = at + len;
            }
            // `{{{ a }}}`: the next brace may start one.
            None => from = at + 1,
        }
    }
    out.push(Piece::Text(&text[done..]));
    out.retain(|p| *p != Piece::Text(""));
    out
}

/// The name and length of the placeholder `s` starts with, if it is one.
fn placeholder_at(s: &str) -> Option<(&str, usize)> {
    let inner = s.strip_prefix("{{")?;
    let name_at = inner.len() - inner.trim_start_matches([' ', '\t']).len();
    let rest = &inner[name_at..];
    let name_len = rest
        .char_indices()
        .find(|&(i, c)| !is_name_char(c, i == 0))
        .map(|(i, _)| i)
        .unwrap_or(rest.len());
    if name_len == 0 {
        return None;
    }
    let after = &rest[name_len..];
    let close_at = after.len() - after.trim_start_matches([' ', '\t']).len();
    if !after[close_at..].starts_with("}}") {
        return None;
    }
    let len = 2 + name_at + name_len + close_at + 2;
    Some((&rest[..name_len], len))
}

fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || (!first && (c.is_ascii_digit() || c == '-'))
}

/// Whether `name` may name a parameter (what a placeholder can hold).
pub(super) fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| is_name_char(c, true)) && chars.all(|c| is_name_char(c, false))
}

/// `text` with each placeholder replaced by `value(name)` and `\{{`
/// unescaped; Err names the first placeholder `value` does not know.
pub(super) fn render<'v>(
    text: &str,
    value: impl Fn(&str) -> Option<&'v str>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    for piece in pieces(text) {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Placeholder(name, _) => match value(name) {
                Some(v) => out.push_str(v),
                None => return Err(name.to_string()),
            },
        }
    }
    Ok(out)
}

/// The first placeholder in `text` whose name `known` refuses, with its
/// 1-based line.
pub(super) fn first_unknown(text: &str, known: impl Fn(&str) -> bool) -> Option<(usize, String)> {
    pieces(text).into_iter().find_map(|p| match p {
        Piece::Placeholder(name, at) if !known(name) => {
            let line = text[..at].matches('\n').count() + 1;
            Some((line, name.to_string()))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(name: &str) -> Option<&'static str> {
        match name {
            "test" => Some("T1"),
            "repo" => Some("calc"),
            "a-b_2" => Some("X"),
            _ => None,
        }
    }

    #[test]
    fn placeholders_with_or_without_spaces_are_replaced() {
        assert_eq!(
            render("fix {{ test }} in {{repo}}, {{\ta-b_2  }}.", values).unwrap(),
            "fix T1 in calc, X."
        );
        assert_eq!(render("{{{ test }}}", values).unwrap(), "{T1}");
        assert_eq!(render("no braces", values).unwrap(), "no braces");
        assert_eq!(render("", values).unwrap(), "");
    }

    /// Hostile case 30: a parameter's value is inserted once, never read
    /// again for placeholders; what it says in a `verify:` command is shell
    /// that runs inside the task's container only (docs/security.md).
    #[test]
    fn a_value_is_inserted_verbatim_and_never_expanded_again() {
        let hostile = "{{ repo }}; touch /workspace/x $(id)";
        let value = |name: &str| match name {
            "a" => Some(hostile),
            "repo" => Some("calc"),
            _ => None,
        };
        assert_eq!(
            render("python3 -m unittest {{ a }} && echo {{ repo }}", value).unwrap(),
            "python3 -m unittest {{ repo }}; touch /workspace/x $(id) && echo calc"
        );
    }

    #[test]
    fn other_braces_are_left_alone() {
        for text in [
            "${{ secrets.KEY }}",
            "{{}}",
            "{{ a b }}",
            "{{ 9lives }}",
            "{{ test",
            "fmt!(\"{{}}\")",
            "}} {{",
        ] {
            assert_eq!(render(text, values).unwrap(), text, "{text}");
        }
    }

    #[test]
    fn a_backslash_escapes_the_braces() {
        assert_eq!(
            render(r"\{{ test }} is {{ test }}", values).unwrap(),
            "{{ test }} is T1"
        );
        assert_eq!(render(r"\{{ nope }}", values).unwrap(), "{{ nope }}");
        assert_eq!(render(r"a\\{{x", values).unwrap(), r"a\{{x");
    }

    #[test]
    fn an_unknown_name_is_named_with_its_line() {
        assert_eq!(render("{{ test }} {{ tst }}", values), Err("tst".into()));
        let text = "---\ntitle: x\n---\nfirst {{ test }}\n\nthen {{ repo }} {{ tets }}\n";
        assert_eq!(
            first_unknown(text, |n| values(n).is_some()),
            Some((6, "tets".into()))
        );
        assert_eq!(first_unknown(r"\{{ tets }}", |_| false), None);
    }

    #[test]
    fn names_are_words() {
        for ok in ["test", "_x", "a-b", "A9"] {
            assert!(is_name(ok), "{ok}");
        }
        for bad in ["", "9a", "a b", "-a", "a.b", "é"] {
            assert!(!is_name(bad), "{bad}");
        }
    }
}
