#!/usr/bin/env python3
"""Functions longer than N lines (default 150) in the Rust sources, from
the `fn` keyword's line to its closing brace, using modgraph.py's lexer
(strings and comments cannot unbalance braces). Marks functions in test
files or under #[cfg(test)]. Usage: long_fns.py [N] [DIR...]"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import modgraph as mg

def test_ranges(toks):
    out, i, n = [], 0, len(toks)
    while i < n:
        if toks[i].text == '#' and i + 1 < n and toks[i + 1].text == '[':
            end = mg._match(toks, i + 1)
            if mg._is_test_cfg(toks[i + 2:end - 1]):
                stop = mg._skip_item(toks, end)
                out.append((toks[i].line, toks[max(stop, 1) - 1].line))
                i = stop
                continue
        i += 1
    return out

def main(argv):
    limit = int(argv[0]) if argv and argv[0].isdigit() else 150
    roots = [a for a in argv if not a.isdigit()] or ['foreman/src', 'servo/src', 'protocol/src', 'bench/src', 'foreman/tests']
    rows = []
    for root in roots:
        for dp, _, fns in os.walk(root):
            for f in fns:
                if not f.endswith('.rs'):
                    continue
                p = os.path.join(dp, f)
                toks = mg.lex(open(p, encoding='utf-8', errors='replace').read())
                tr = test_ranges(toks)
                n = len(toks)
                for i, t in enumerate(toks):
                    if not (t.kind == 'id' and t.text == 'fn' and i + 1 < n and toks[i + 1].kind == 'id'):
                        continue
                    depth, j = 0, i + 2
                    while j < n:
                        x = toks[j].text
                        if x in '([':
                            depth += 1
                        elif x in ')]':
                            depth -= 1
                        elif x == ';' and depth == 0:
                            j = n
                            break
                        elif x == '{' and depth == 0:
                            break
                        j += 1
                    if j >= n:
                        continue
                    length = toks[mg._match(toks, j) - 1].line - t.line + 1
                    if length > limit:
                        rel = os.path.relpath(p, root)
                        test = mg.is_test_file(rel) or '/tests' in root or any(a <= t.line <= b for a, b in tr)
                        rows.append((length, p, t.line, toks[i + 1].text, test))
    for length, p, line, name, test in sorted(rows, reverse=True):
        print(f"{length:4d}  {p}:{line}  {name}{'  (test)' if test else ''}")
    return 1 if any(not r[4] for r in rows) else 0

if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
