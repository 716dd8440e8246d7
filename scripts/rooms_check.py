#!/usr/bin/env python3
"""The rooms' rules (issue 48, DESIGN.md), checked on the tree; exit 1 with
each breach named by file and line:

- nothing under routes/, llm/ or door/ names commands, reconciler or
  supervisor; nothing under backend/ names llm or routes;
- no SQL statement (SELECT, UPDATE, INSERT, DELETE) outside store/ in
  product code (pragmas are no statements);
- no `use super::*;` outside test modules (a file named tests.rs or
  *_tests.rs, a file under tests/, or a `mod` item under `#[cfg(test)]`);
- no product function over 150 lines (scripts/long_fns.py's count).

The cycles between top-level modules are `modgraph.py --layers`'s.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "foreman" / "src"

# (folders, modules they must not name)
FORBIDDEN = [
    (("routes", "llm", "door"), ("commands", "reconciler", "supervisor")),
    (("backend",), ("llm", "routes")),
]
SQL = re.compile(r'"[^"\n]*\b(SELECT|UPDATE|INSERT INTO|DELETE FROM)\b')


def is_test_file(p: Path) -> bool:
    return p.name == "tests.rs" or p.name.endswith("_tests.rs") or "tests" in p.parts


def product_lines(p: Path):
    """The file's lines outside `#[cfg(test)]` items, numbered from 1."""
    lines = p.read_text().split("\n")
    out, depth, skip_from = [], 0, None
    pending = False
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if skip_from is None and stripped.startswith("#[cfg(test)]"):
            pending = True
            continue
        if pending and skip_from is None:
            if stripped.startswith("#[") or not stripped:
                continue
            if stripped.endswith(";"):
                pending = False  # `mod tests;` in another file
                continue
            skip_from, depth = i, 0
            pending = False
        if skip_from is not None:
            depth += line.count("{") - line.count("}")
            if depth <= 0 and "{" in "".join(lines[skip_from - 1 : i]):
                skip_from = None
            continue
        out.append((i, line))
    return out


def check() -> list[str]:
    errors = []
    for p in sorted(SRC.rglob("*.rs")):
        if is_test_file(p):
            continue
        rel = p.relative_to(SRC)
        top = rel.parts[0].removesuffix(".rs")
        lines = product_lines(p)
        for folders, banned in FORBIDDEN:
            if top in folders:
                for i, line in lines:
                    for b in banned:
                        if re.search(rf"\bcrate::{b}\b|\bcrate::\{{[^}}]*\b{b}\b", line):
                            errors.append(f"{rel}:{i}: {top}/ must not name {b} ({line.strip()})")
        if top != "store":
            for i, line in lines:
                if SQL.search(line) and not line.strip().startswith("//"):
                    errors.append(f"{rel}:{i}: SQL outside store/ ({line.strip()[:80]})")
        for i, line in lines:
            if line.strip() == "use super::*;":
                errors.append(f"{rel}:{i}: `use super::*;` outside a test module: import what you use")
    import subprocess

    dirs = ["foreman/src", "servo/src", "protocol/src", "bench/src"]
    listed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "long_fns.py"), "150", *dirs],
        cwd=ROOT, capture_output=True, text=True,
    ).stdout
    for row in listed.splitlines():
        if row and not row.endswith("(test)"):
            errors.append(f"{row.split()[1]}: function `{row.split()[2]}` is {row.split()[0]} lines (at most 150): split it")
    return errors


if __name__ == "__main__":
    errs = check()
    for e in errs:
        print(e, file=sys.stderr)
    sys.exit(1 if errs else 0)
