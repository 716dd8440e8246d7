#!/usr/bin/env python3
"""The import graph of a Rust crate's top-level modules, from every path.

Usage:
    modgraph.py [SRC]                    top-level graph of SRC (default foreman/src)
    modgraph.py [SRC] --file-level DIR   file-level graph inside SRC/DIR (e.g. gateway)
    modgraph.py [SRC] --layers FILE      also list edges that point up a layer
    modgraph.py --self-test              run the built-in tests

A top-level module is the first path segment under SRC: a file `x.rs` or a
folder `x/`. `lib.rs` and `main.rs` are the crate root, which is not a node:
a path through one of the root's `use` aliases (`use backend::docker;` in
lib.rs, then `crate::docker::…`) is followed to the module it names, and a
path to an item defined in the root itself is listed apart, under (root).

Every path counts, not only `use` lines: `crate::a::…` anywhere in product
code, `use crate::{a, b::c}` groups (one count per top-level module a path
or group names: `use crate::store::{A, B}` counts 1, `use crate::{a, b::c}`
one for a and one for b), and `super::…` paths, resolved against the file's module path (so `super::super::x` from
`a/b.rs` is `crate::x`). Product code excludes comments, string and char
literals, items under `#[cfg(test)]` (a `mod tests { … }`, a `use`, a fn,
a field), files declared by a `#[cfg(test)] mod x;`, and test files:
`tests.rs`, `*_tests.rs`, anything under a `tests/` directory.

Prints the edges (count, an example file:line), the strongly connected
components of more than one node, and exits 1 when there is a cycle
(0 when there is none, 2 on bad usage). With --layers FILE, each line of
FILE is `LAYER: mod mod …` (lower numbers lower); an edge from a module to
one on a higher layer is listed as pointing up (and makes the exit 1 too).

`--file-level DIR` draws the same graph one level down, inside SRC/DIR:
the nodes are DIR's direct children (files and folders), `mod.rs` a node
of its own; `super::Name` is followed through mod.rs's `use` re-exports to
the file that defines `Name`; `use super::*` is listed as an edge to
the file that defines each name the file then uses (and the glob is
listed in a note).

Python 3.11, standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field

ROOT = "(root)"

# ---------------------------------------------------------------- lexing


@dataclass
class Tok:
    kind: str  # "id", "p" (punct), "lit"
    text: str
    line: int


_ID_START = re.compile(r"[A-Za-z_]")
_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUM = re.compile(r"[0-9][0-9A-Za-z_.]*")


def lex(src: str) -> list[Tok]:
    """Rust tokens that matter to paths: identifiers, `::` and single
    punctuation; comments, strings and char literals dropped, lifetimes
    dropped. Never raises on odd input: an unterminated literal or comment
    runs to the end of the file."""
    toks: list[Tok] = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth += 1
                    j += 2
                elif src.startswith("*/", j):
                    depth -= 1
                    j += 2
                else:
                    j += 1
            line += src.count("\n", i, j)
            i = j
            continue
        # raw strings: r"..", r#".."#, br"..", cr".."
        m = re.compile(r"(?:b|c)?r(#*)\"").match(src, i)
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = m.group(1)
            end = src.find('"' + hashes, m.end())
            j = n if end < 0 else end + 1 + len(hashes)
            line += src.count("\n", i, j)
            toks.append(Tok("lit", '""', line))
            i = j
            continue
        # ordinary strings, b"..", c".."
        if c == '"' or (c in "bc" and i + 1 < n and src[i + 1] == '"'
                        and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))):
            j = i + (1 if c == '"' else 2)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            line += src.count("\n", i, j)
            toks.append(Tok("lit", '""', line))
            i = j
            continue
        # char literal, b'x', or a lifetime / label
        if c == "'" or (c == "b" and i + 1 < n and src[i + 1] == "'"
                        and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))):
            k = i + (1 if c == "'" else 2)
            if k < n and src[k] == "\\":
                j = k + 1
                while j < n and src[j] != "'" and src[j] != "\n":
                    j += 1
                i = min(j + 1, n)
                toks.append(Tok("lit", "''", line))
                continue
            if k + 1 < n and src[k + 1] == "'":
                i = k + 2
                toks.append(Tok("lit", "''", line))
                continue
            # lifetime: skip the quote and the identifier
            m = _ID.match(src, k)
            i = m.end() if m else k
            continue
        if c == "r" and src.startswith("r#", i) and i + 2 < n and _ID_START.match(src[i + 2]):
            m = _ID.match(src, i + 2)
            toks.append(Tok("id", m.group(0), line))
            i = m.end()
            continue
        if _ID_START.match(c):
            m = _ID.match(src, i)
            toks.append(Tok("id", m.group(0), line))
            i = m.end()
            continue
        if c.isdigit():
            m = _NUM.match(src, i)
            toks.append(Tok("lit", "0", line))
            i = m.end()
            continue
        if src.startswith("::", i):
            toks.append(Tok("p", "::", line))
            i += 2
            continue
        if c == "$" and i + 1 < n and _ID_START.match(src[i + 1]):
            m = _ID.match(src, i + 1)
            toks.append(Tok("id", "$" + m.group(0), line))
            i = m.end()
            continue
        toks.append(Tok("p", c, line))
        i += 1
    return toks


# ------------------------------------------------ cfg(test) and items

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = set(_OPEN.values())


def _match(toks: list[Tok], i: int) -> int:
    """Index just past the bracket closing the one at toks[i]."""
    depth = 0
    n = len(toks)
    while i < n:
        t = toks[i]
        if t.kind == "p" and t.text in _OPEN:
            depth += 1
        elif t.kind == "p" and t.text in _CLOSE:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def _is_test_cfg(attr: list[Tok]) -> bool:
    """`cfg(test)`, `cfg(all(test, …))`: code that only exists in tests."""
    words = [t.text for t in attr]
    if not words or words[0] != "cfg":
        return False
    if "not" in words or "any" in words:
        return False
    return "test" in words


_SEMI_ITEMS = {"use", "const", "static", "type", "let", "extern"}


def _skip_item(toks: list[Tok], i: int) -> int:
    """Index just past the item (or field, statement, arm) starting at i."""
    n = len(toks)
    # further attributes
    while i + 1 < n and toks[i].text == "#" and toks[i + 1].text in ("[", "!"):
        j = i + 1 if toks[i + 1].text == "[" else i + 2
        i = _match(toks, j)
    # the keyword after a visibility
    k = i
    if k < n and toks[k].text == "pub":
        k += 1
        if k < n and toks[k].text == "(":
            k = _match(toks, k)
    first = toks[k].text if k < n else ""
    semi_only = first in _SEMI_ITEMS
    depth = 0
    while i < n:
        t = toks[i]
        if t.kind == "p":
            if t.text in _OPEN:
                if t.text == "{" and depth == 0 and not semi_only:
                    return _match(toks, i)
                depth += 1
            elif t.text in _CLOSE:
                if depth == 0:
                    return i  # the end of the enclosing block: a field/arm
                depth -= 1
            elif t.text in ";" and depth == 0:
                return i + 1
            elif t.text == "," and depth == 0 and not semi_only:
                return i + 1
        i += 1
    return n


@dataclass
class Scan:
    toks: list[Tok]  # product tokens only
    test_mods: set[str]  # `#[cfg(test)] mod x;` / `#[path=..] mod x;` children
    path_attr: dict[str, str]  # mod name -> #[path] value (product mods)
    whole_file_test: bool
    inline_mods: list[tuple[int, int, str]]  # (start tok, end tok, name)


def scan(src: str) -> Scan:
    raw = lex(src)
    # #[path = "…"] values are string literals, which lex() drops: find them first.
    path_vals = [m.group(1) for m in re.finditer(r'#\[\s*path\s*=\s*"([^"]*)"\s*\]', src)]
    out: list[Tok] = []
    test_mods: set[str] = set()
    path_attr: dict[str, str] = {}
    whole = False
    i, n = 0, len(raw)
    path_i = 0
    while i < n:
        t = raw[i]
        if t.text == "#" and i + 1 < n and raw[i + 1].text in ("[", "!"):
            inner = raw[i + 1].text == "!"
            j = i + 2 if inner else i + 1
            if j >= n or raw[j].text != "[":
                out.append(t)
                i += 1
                continue
            end = _match(raw, j)
            attr = raw[j + 1:end - 1]
            if attr and attr[0].text == "path":
                pv = path_vals[path_i] if path_i < len(path_vals) else None
                path_i += 1
            else:
                pv = None
            if _is_test_cfg(attr):
                if inner:
                    whole = True
                    i = end
                    continue
                stop = _skip_item(raw, end)
                # a `mod x;` under cfg(test): the file x is test-only
                seg = [x.text for x in raw[end:stop]]
                if "mod" in seg:
                    k = seg.index("mod")
                    if k + 1 < len(seg):
                        test_mods.add(seg[k + 1])
                i = stop
                continue
            if pv is not None:
                # the mod this attribute is on
                k = end
                while k < n and raw[k].text != "mod" and raw[k].text not in (";", "{"):
                    k += 1
                if k + 1 < n and raw[k].text == "mod":
                    path_attr[raw[k + 1].text] = pv
            # keep the attribute's tokens: `#[arg(default_value_t = crate::x::Y)]`
            # is a path like any other
            out.extend(raw[i:end])
            i = end
            continue
        out.append(t)
        i += 1
    # inline (product) modules: `mod name {`
    inline: list[tuple[int, int, str]] = []
    for k in range(len(out) - 2):
        if out[k].text == "mod" and out[k + 1].kind == "id" and out[k + 2].text == "{":
            inline.append((k + 2, _match(out, k + 2), out[k + 1].text))
    return Scan(out, test_mods, path_attr, whole, inline)


# ------------------------------------------------------------------ paths


@dataclass
class PathRef:
    segs: list[str]  # the segments as written, e.g. ["crate", "store", "Store"]
    line: int
    alias: str | None = None  # `as name` in a use tree
    in_use: bool = False
    glob: bool = False


def _parse_tree(toks: list[Tok], i: int, prefix: list[str], line: int,
                in_use: bool, out: list[PathRef]) -> int:
    """Parse a path or use tree starting at toks[i] with `prefix` already read.
    Appends the leaves to out; returns the index after the tree."""
    n = len(toks)
    segs = list(prefix)
    while i < n:
        t = toks[i]
        if t.kind == "id" and t.text != "as":
            segs.append(t.text)
            i += 1
            if i < n and toks[i].text == "::":
                i += 1
                continue
            break
        if t.text == "{":
            i += 1
            while i < n and toks[i].text != "}":
                if toks[i].text == ",":
                    i += 1
                    continue
                before = i
                i = _parse_tree(toks, i, segs, toks[i].line, in_use, out)
                if i == before:  # not a path: skip a token so we move on
                    i += 1
            return min(i + 1, n)
        if t.text == "*":
            out.append(PathRef(segs, line, None, in_use, glob=True))
            return i + 1
        if t.text == "<" :
            # turbofish `Foo::<T>`: the path ends here
            break
        break
    if segs and segs != prefix:
        alias = None
        if i + 1 < n and toks[i].text == "as" and toks[i + 1].kind == "id":
            alias = toks[i + 1].text
            i += 2
        if segs[-1] == "self":  # `a::{self}` names `a`
            segs = segs[:-1]
        if segs:
            out.append(PathRef(segs, line, alias, in_use))
    return i


_ANCHORS = {"crate", "super", "self", "$crate"}


def paths_of(toks: list[Tok], local_heads: set[str]) -> list[tuple[int, PathRef]]:
    """Every path that starts at crate/super/self/$crate, or (in a file that
    declares child modules) at one of `local_heads` followed by `::`; also
    every `use` tree. Returns (token index, PathRef)."""
    out: list[tuple[int, PathRef]] = []
    n = len(toks)
    i = 0
    while i < n:
        t = toks[i]
        prev = toks[i - 1].text if i else ""
        if t.kind == "id" and t.text == "use" and prev != "::":
            refs: list[PathRef] = []
            j = i + 1
            if j < n and toks[j].text == "::":  # `use ::std::…`
                j += 1
            j = _parse_tree(toks, j, [], t.line, True, refs)
            for r in refs:
                out.append((i, r))
            i = j
            continue
        if t.kind == "id" and prev != "::" and i + 1 < n and toks[i + 1].text == "::" and (
                t.text in _ANCHORS or t.text in local_heads):
            refs = []
            j = _parse_tree(toks, i, [], t.line, False, refs)
            for r in refs:
                out.append((i, r))
            i = max(j, i + 1)
            continue
        i += 1
    return out


# ------------------------------------------------------------ the crate


@dataclass
class File:
    rel: str  # path relative to SRC
    modpath: list[str]  # module path of the file, [] for the root
    scan: Scan
    children: set[str] = field(default_factory=set)  # child modules declared


def is_test_file(rel: str) -> bool:
    parts = rel.split("/")
    base = parts[-1]
    return base == "tests.rs" or base.endswith("_tests.rs") or "tests" in parts[:-1]


def module_path(rel: str) -> list[str]:
    parts = rel[:-3].split("/")
    if len(parts) == 1 and parts[0] in ("lib", "main"):
        return []
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


class Crate:
    def __init__(self, src: str):
        self.src = src
        self.files: dict[str, File] = {}
        self.skipped: list[str] = []
        self.modules: set[tuple[str, ...]] = {()}
        self.usemap: dict[tuple[str, ...], dict[str, list[str]]] = defaultdict(dict)
        rels = []
        for dirpath, dirnames, filenames in os.walk(src):
            dirnames.sort()
            for fn in sorted(filenames):
                if fn.endswith(".rs"):
                    rels.append(os.path.relpath(os.path.join(dirpath, fn), src).replace(os.sep, "/"))
        scans = {}
        for rel in rels:
            with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
                scans[rel] = scan(f.read())
        # files declared by a test-only `mod x;` (or named by #[path] there)
        test_only: set[str] = set()
        for rel, sc in scans.items():
            base_dir = self._child_dir(rel)
            for m in sc.test_mods:
                test_only.add(os.path.normpath(os.path.join(base_dir, m + ".rs")).replace(os.sep, "/"))
                test_only.add(os.path.normpath(os.path.join(base_dir, m, "mod.rs")).replace(os.sep, "/"))
        for rel in rels:
            sc = scans[rel]
            if is_test_file(rel) or rel in test_only or sc.whole_file_test:
                self.skipped.append(rel)
                continue
            if rel == "main.rs" and "lib.rs" in scans:
                # a binary beside the library: its own crate, using the library by name
                self.skipped.append(rel)
                continue
            f = File(rel, module_path(rel), sc)
            self.files[rel] = f
            self.modules.add(tuple(f.modpath))
        # parent dirs as modules too (a folder `x/` with x.rs outside it)
        for mp in list(self.modules):
            for k in range(1, len(mp)):
                self.modules.add(mp[:k])
        for f in self.files.values():
            mp = tuple(f.modpath)
            f.children = {m[-1] for m in self.modules if len(m) == len(mp) + 1 and m[:-1] == mp}
        # use maps: what each module's own `use` lines bring into scope
        for f in self.files.values():
            for _, r in paths_of(f.scan.toks, f.children):
                if not r.in_use or r.glob:
                    continue
                absp = self.absolute(f, r.segs, f.modpath)
                if absp is None:
                    continue
                name = r.alias or (r.segs[-1] if r.segs else None)
                if name and name != "_":
                    self.usemap[tuple(f.modpath)].setdefault(name, absp)

    @staticmethod
    def _child_dir(rel: str) -> str:
        """Directory holding the children of the module in file `rel`."""
        d, base = os.path.split(rel)
        if base in ("mod.rs",) or (d == "" and base in ("lib.rs", "main.rs")):
            return d
        return os.path.join(d, base[:-3])

    def absolute(self, f: File, segs: list[str], cur: list[str]) -> list[str] | None:
        """The absolute path (from the crate root) `segs` names in module
        `cur` of file f, or None for a path into another crate."""
        if not segs:
            return None
        head = segs[0]
        if head in ("crate", "$crate"):
            return list(segs[1:])
        if head == "self":
            return list(cur) + list(segs[1:])
        if head == "super":
            base = list(cur)
            k = 0
            while k < len(segs) and segs[k] == "super":
                if not base:
                    return None  # climbs above the root: malformed
                base.pop()
                k += 1
            return base + list(segs[k:])
        # a relative path: a child module of the current module (2018 edition)
        if tuple(cur) + (head,) in self.modules:
            return list(cur) + list(segs)
        return None

    def resolve(self, absp: list[str], through: set[tuple[str, ...]] | None = None,
                limit: int = 16) -> list[str]:
        """The module an absolute path lands in: walks real modules, and
        follows the `use` aliases of the modules in `through` (all when
        None) when a segment is not a module."""
        cur: list[str] = []
        segs = list(absp)
        k = 0
        while k < len(segs) and limit > 0:
            s = segs[k]
            if tuple(cur + [s]) in self.modules:
                cur.append(s)
                k += 1
                continue
            um = self.usemap.get(tuple(cur), {})
            if s in um and (through is None or tuple(cur) in through):
                target = um[s]
                if target[:len(cur) + 1] == cur + [s]:
                    break  # names itself
                segs = list(target) + segs[k + 1:]
                cur, k = [], 0
                limit -= 1
                continue
            break
        return cur


# ------------------------------------------------------------- the graph


@dataclass
class Edge:
    count: int = 0
    examples: list[str] = field(default_factory=list)


_DEFINERS = {"fn", "struct", "enum", "type", "const", "static", "trait", "mod", "union"}


def _bound_names(toks: list[Tok]) -> set[str]:
    """Names a file defines or binds itself (items, `let` patterns, closure
    and fn parameters), which shadow what a glob import brings."""
    out: set[str] = set()
    n = len(toks)
    for k, t in enumerate(toks):
        if t.kind != "id":
            continue
        if t.text in _DEFINERS and k + 1 < n and toks[k + 1].kind == "id":
            out.add(toks[k + 1].text)
        elif t.text == "let":
            j = k + 1
            while j < n and toks[j].text not in ("=", ";", ":"):
                if toks[j].kind == "id" and toks[j].text not in ("mut", "ref") and (
                        j + 1 >= n or toks[j + 1].text not in ("::", "(", "{")):
                    out.add(toks[j].text)
                j += 1
        elif k + 1 < n and toks[k + 1].text == ":" and (k + 2 >= n or toks[k + 2].text != ":"):
            out.add(t.text)  # a parameter or a field: `name: Type`
    # closure parameters: `|a, b|`
    for k, t in enumerate(toks):
        if t.text == "|" and k + 1 < n:
            j = k + 1
            while j < n and j - k < 12 and toks[j].text != "|":
                if toks[j].kind == "id":
                    out.add(toks[j].text)
                j += 1
    return out


def _tail(toks: list[Tok], k: int) -> list[str]:
    """The identifiers of a path continuing at toks[k] (`a::b::c`)."""
    out = []
    while k < len(toks) and toks[k].kind == "id":
        out.append(toks[k].text)
        if k + 1 < len(toks) and toks[k + 1].text == "::":
            k += 2
        else:
            break
    return out


def _cur_module(f: File, tok_index: int) -> list[str]:
    """f's module path at a token, inside any inline `mod x { … }`."""
    mp = list(f.modpath)
    for start, end, name in f.scan.inline_mods:
        if start <= tok_index < end:
            mp.append(name)
    return mp


def top_level_graph(crate: Crate) -> tuple[dict[tuple[str, str], Edge], set[str], list[str]]:
    edges: dict[tuple[str, str], Edge] = defaultdict(Edge)
    nodes: set[str] = set()
    notes: list[str] = []
    for f in crate.files.values():
        if f.modpath:
            nodes.add(f.modpath[0])
    for f in sorted(crate.files.values(), key=lambda x: x.rel):
        src_node = f.modpath[0] if f.modpath else ROOT
        if src_node == ROOT:
            continue  # the root uses everything; it is not a node
        seen: set[tuple[int, str]] = set()
        for ti, r in paths_of(f.scan.toks, set()):
            head = r.segs[0] if r.segs else ""
            if head not in _ANCHORS:
                continue
            cur = _cur_module(f, ti)
            absp = crate.absolute(f, r.segs, cur)
            if absp is None:
                notes.append(f"{f.rel}:{r.line}: `{'::'.join(r.segs)}` climbs above the crate root")
                continue
            if head in ("super", "self") and absp[:1] == f.modpath[:1]:
                continue  # stays inside its own top-level module
            if not absp:
                target = ROOT if not r.glob else ROOT
            else:
                # follow only the root's aliases: a node's own re-exports are its API
                landed = crate.resolve(absp[:1] + absp[1:2], through={()})
                target = landed[0] if landed else ROOT
            if target == src_node:
                continue
            # one path a count: `use crate::store::{A, B}` is one path to store,
            # `use crate::{a, b::c}` one to a and one to b
            if (ti, target) in seen:
                continue
            seen.add((ti, target))
            e = edges[(src_node, target)]
            e.count += 1
            if len(e.examples) < 3:
                e.examples.append(f"{f.rel}:{r.line}")
    return edges, nodes, notes


def file_level_graph(crate: Crate, d: str) -> tuple[dict[tuple[str, str], Edge], set[str], list[str]]:
    d = d.strip("/")
    base = tuple(d.split("/")) if d else ()
    if base not in crate.modules:
        print(f"error: no module {d!r} under {crate.src}", file=sys.stderr)
        raise SystemExit(2)
    edges: dict[tuple[str, str], Edge] = defaultdict(Edge)
    nodes: set[str] = set()
    notes: list[str] = []
    mod_node = "mod.rs"

    def node_of(mp: list[str]) -> str | None:
        if tuple(mp[:len(base)]) != base:
            return None
        if len(mp) == len(base):
            return mod_node
        return mp[len(base)]

    through = {m for m in crate.modules if m[:len(base)] == base}
    globs: dict[str, list] = {}
    for f in sorted(crate.files.values(), key=lambda x: x.rel):
        src_node = node_of(f.modpath)
        if src_node is None:
            continue
        nodes.add(src_node)
        local = f.children if src_node == mod_node else set()
        for ti, r in paths_of(f.scan.toks, local):
            cur = _cur_module(f, ti)
            absp = crate.absolute(f, r.segs, cur)
            if absp is None:
                continue
            if r.glob:
                # `use super::*`: what it brings is the module's own `use`
                # names and its child modules; each name the file then uses
                # is an edge to the file that defines it.
                gmod = tuple(crate.resolve(absp, through=through))
                if tuple(gmod) != tuple(absp):
                    continue  # a glob of an enum's variants or a foreign crate
                gl = globs.setdefault(f.rel, [r.line, gmod])
                names = dict(crate.usemap.get(gmod, {}))
                kids = {m[-1] for m in crate.modules if len(m) == len(gmod) + 1 and m[:-1] == gmod}
                toks = f.scan.toks
                shadow = _bound_names(toks)
                done: set[tuple[int, str]] = set()
                for k, t in enumerate(toks):
                    if t.kind != "id" or (k and toks[k - 1].text in ("::", ".")):
                        continue
                    nxt = toks[k + 1].text if k + 1 < len(toks) else ""
                    nxt2 = toks[k + 2].text if k + 2 < len(toks) else ""
                    if nxt == ":" or (nxt == "=" and nxt2 != "="):
                        continue  # a field, a parameter, `name = value` in a macro
                    if t.text in kids and nxt == "::":
                        landed = crate.resolve(list(gmod) + [t.text] + _tail(toks, k + 2), through=through)
                    elif t.text in names and t.text not in shadow:
                        landed = crate.resolve(names[t.text], through=through)
                    else:
                        continue
                    tgt = node_of(landed)
                    if tgt is None or tgt == src_node or (t.line, tgt) in done:
                        continue
                    done.add((t.line, tgt))
                    gl.append(t.text)
                    e = edges[(src_node, tgt)]
                    e.count += 1
                    if len(e.examples) < 3:
                        e.examples.append(f"{f.rel}:{t.line} ({t.text}, via *)")
                continue
            landed = crate.resolve(absp, through=through)
            tgt = node_of(landed)
            if tgt is None or tgt == src_node:
                continue
            if r.in_use and src_node == mod_node and r.segs and r.segs[0] in f.children:
                pass  # mod.rs naming what it takes from a child: an edge like any other
            e = edges[(src_node, tgt)]
            e.count += 1
            if len(e.examples) < 3:
                e.examples.append(f"{f.rel}:{r.line}")
    for rel, (line, gmod, *used) in sorted(globs.items()):
        notes.append(f"{rel}:{line}: `use super::*` (of {'::'.join(gmod) or 'crate'}) brings "
                     f"{', '.join(sorted(set(used))) or 'nothing it uses from a sibling'}")
    return edges, nodes, notes


def sccs(nodes: set[str], edges) -> list[list[str]]:
    """Tarjan, iterative. Components of more than one node, or a node with
    an edge to itself, largest first."""
    adj: dict[str, list[str]] = defaultdict(list)
    for (a, b) in edges:
        adj[a].append(b)
    allnodes = sorted(set(nodes) | {a for a, _ in edges} | {b for _, b in edges})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for s in allnodes:
        if s in index:
            continue
        work = [(s, iter(sorted(adj[s])))]
        index[s] = low[s] = counter
        counter += 1
        stack.append(s)
        on.add(s)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(adj[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or (v, v) in edges:
                    out.append(sorted(comp))
    out.sort(key=lambda c: (-len(c), c))
    return out


def two_cycles(edges) -> list[tuple[str, str]]:
    return sorted({tuple(sorted((a, b))) for (a, b) in edges if (b, a) in edges and a != b})


def parse_layers(path: str) -> dict[str, float]:
    layers: dict[str, float] = {}
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            lvl, _, mods = line.partition(":")
            for m in mods.split():
                layers[m.strip(",")] = float(lvl)
    return layers


def report(edges, nodes, notes, title: str, layers: dict[str, float] | None, out=sys.stdout) -> int:
    p = lambda *a: print(*a, file=out)
    real = {k: v for k, v in edges.items() if k[0] != ROOT and k[1] != ROOT}
    rooted = {k: v for k, v in edges.items() if k not in real}
    p(f"# {title}: {len(nodes)} nodes, {len(real)} edges, "
      f"{sum(e.count for e in real.values())} paths")
    p("## edges (from -> to: paths, examples)")
    for (a, b), e in sorted(real.items()):
        p(f"  {a} -> {b}: {e.count}  ({', '.join(e.examples)})")
    if rooted:
        p(f"## to items defined in the crate root (not a node)")
        for (a, b), e in sorted(rooted.items()):
            p(f"  {a} -> {b}: {e.count}  ({', '.join(e.examples)})")
    comps = sccs(nodes - {ROOT}, real)
    p(f"## strongly connected components: {len(comps)}")
    for c in comps:
        p(f"  [{len(c)}] {' '.join(c)}")
    mutual = two_cycles(real)
    if mutual:
        p(f"## two-node cycles (a <-> b): {len(mutual)}")
        for a, b in mutual:
            p(f"  {a} <-> {b}: {real[(a, b)].count} / {real[(b, a)].count}")
    up = []
    if layers is not None:
        missing = sorted(n for n in nodes if n not in layers and n != ROOT)
        for (a, b), e in sorted(real.items()):
            if a in layers and b in layers and layers[b] > layers[a]:
                up.append((a, b, e))
        p(f"## edges pointing up a layer: {len(up)}")
        for a, b, e in up:
            p(f"  {a} ({layers[a]:g}) -> {b} ({layers[b]:g}): {e.count}  ({', '.join(e.examples)})")
        same = [(a, b, e) for (a, b), e in sorted(real.items())
                if a in layers and b in layers and layers[a] == layers[b]]
        if same:
            p(f"## edges within one layer (allowed, but no cycle): {len(same)}")
            for a, b, e in same:
                p(f"  {a} -> {b}: {e.count}")
        if missing:
            p(f"## modules in no layer: {' '.join(missing)}")
    for n in notes:
        p(f"note: {n}")
    return 1 if comps or up else 0


# ------------------------------------------------------------ self-test

def _self_test() -> int:
    import tempfile
    import unittest

    def tree(files: dict[str, str]) -> str:
        d = tempfile.mkdtemp(prefix="modgraph-")
        for rel, text in files.items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)
        return d

    class T(unittest.TestCase):
        def graph(self, files):
            c = Crate(tree(files))
            e, n, _ = top_level_graph(c)
            return {k: v.count for k, v in e.items()}, n

        def test_paths_groups_and_aliases(self):
            e, n = self.graph({
                "lib.rs": "mod a; mod b; mod c; mod d; use d::inner;\nfn x() { a::f(); }",
                "a.rs": "use crate::{b, c::X, c::Y};\nuse crate::b::{P, Q};\nfn f() { crate::b::g(); let s = \"crate::d::no\"; }\n"
                        "// crate::d::no\n/* crate::d::no */ fn h() { crate::inner::k(); }",
                "b.rs": "pub fn g() {}",
                "c.rs": "pub struct X;",
                "d/mod.rs": "pub mod inner;",
                "d/inner.rs": "pub fn k() {}",
            })
            self.assertEqual(e, {("a", "b"): 3, ("a", "c"): 1, ("a", "d"): 1})
            self.assertEqual(n, {"a", "b", "c", "d"})

        def test_cfg_test_and_test_files_skipped(self):
            e, _ = self.graph({
                "lib.rs": "mod a; mod b;",
                "a/mod.rs": "mod x;\n#[cfg(test)]\nmod helper;\n#[cfg(test)]\nmod tests { use crate::b; }\n"
                            "#[cfg(test)] use crate::b::Y;\nstruct S { #[cfg(test)] f: crate::b::Z, g: u8 }\n"
                            "fn k() { crate::b::real(); }",
                "a/x.rs": "#[cfg(test)]\n#[path = \"x_tests.rs\"]\nmod tests;\n",
                "a/x_tests.rs": "use crate::b::T;",
                "a/helper.rs": "use crate::b::H;",
                "a/tests/t.rs": "use crate::b::Q;",
                "b.rs": "fn f<'a>(c: char) -> &'a str { let _ = '{'; let _ = b'}'; \"\" } fn h() { crate::a::k(); }",
            })
            self.assertEqual(e, {("a", "b"): 1, ("b", "a"): 1})

        def test_paths_in_attributes_count(self):
            e, _ = self.graph({
                "lib.rs": "mod a; mod b;",
                "a.rs": "#[derive(Debug)]\nstruct S { #[arg(default_value_t = crate::b::N)] n: u8 }",
                "b.rs": "pub const N: u8 = 1;",
            })
            self.assertEqual(e, {("a", "b"): 1})

        def test_super_climbing_to_root(self):
            e, _ = self.graph({
                "lib.rs": "mod a; mod b;",
                "a/mod.rs": "mod x;",
                "a/x.rs": "fn f() { super::super::b::g(); super::y(); }",
                "b.rs": "pub fn g() {}",
            })
            self.assertEqual(e, {("a", "b"): 1})

        def test_cycle_exit(self):
            d = tree({"lib.rs": "mod a; mod b;", "a.rs": "use crate::b::X;", "b.rs": "use crate::a::Y;"})
            c = Crate(d)
            e, n, notes = top_level_graph(c)
            import io
            self.assertEqual(report(e, n, notes, "t", None, out=io.StringIO()), 1)
            d = tree({"lib.rs": "mod a; mod b;", "a.rs": "use crate::b::X;", "b.rs": "pub struct X;"})
            c = Crate(d)
            e, n, notes = top_level_graph(c)
            self.assertEqual(report(e, n, notes, "t", None, out=io.StringIO()), 0)

        def test_raw_strings_and_nested_comments(self):
            e, _ = self.graph({
                "lib.rs": "mod a; mod b;",
                "a.rs": "const S: &str = r#\"crate::b::x \"quoted\" \"#; /* /* crate::b */ crate::b */\n"
                        "fn f() { crate::b::ok(); }",
                "b.rs": "",
            })
            self.assertEqual(e, {("a", "b"): 1})

        def test_file_level_through_reexports(self):
            c = Crate(tree({
                "lib.rs": "mod g;",
                "g/mod.rs": "mod h; mod d; mod w;\nuse h::{State, f};\npub(crate) use d::Link;",
                "g/h.rs": "pub struct State; pub fn f() {}",
                "g/d.rs": "use super::State;\npub struct Link;\nfn x() { super::f(); super::w::z(); }",
                "g/w.rs": "use super::*;\npub fn z(s: State) { f(); let _ = Link; x.f(); }",
            }))
            e, n, _ = file_level_graph(c, "g")
            got = {k: v.count for k, v in e.items()}
            self.assertEqual(got, {("mod.rs", "h"): 2, ("mod.rs", "d"): 1, ("d", "h"): 2,
                                   ("d", "w"): 1, ("w", "h"): 1, ("w", "d"): 1})

    suite = unittest.defaultTestLoader.loadTestsFromTestCase(T)
    res = unittest.TextTestRunner(verbosity=1).run(suite)
    return 0 if res.wasSuccessful() else 1


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", nargs="?", default="foreman/src", help="the crate's src dir")
    ap.add_argument("--file-level", metavar="DIR",
                    help="the file-level graph inside SRC/DIR (a module folder)")
    ap.add_argument("--layers", metavar="FILE",
                    help="`N: mod mod …` lines; list (and fail on) edges pointing up")
    ap.add_argument("--quiet", action="store_true", help="only the cycles and up-edges")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv)
    if a.self_test:
        return _self_test()
    if not os.path.isdir(a.src) or not any(
            os.path.exists(os.path.join(a.src, r)) for r in ("lib.rs", "main.rs")):
        print(f"error: {a.src} is not a crate's src dir (no lib.rs or main.rs)", file=sys.stderr)
        return 2
    crate = Crate(a.src)
    layers = parse_layers(a.layers) if a.layers else None
    if a.file_level:
        edges, nodes, notes = file_level_graph(crate, a.file_level)
        title = f"files of {a.src}/{a.file_level.strip('/')}"
    else:
        edges, nodes, notes = top_level_graph(crate)
        title = f"top-level modules of {a.src}"
    if a.quiet:
        import io
        buf = io.StringIO()
        rc = report(edges, nodes, notes, title, layers, out=buf)
        keep = False
        for line in buf.getvalue().splitlines():
            if line.startswith("## "):
                keep = not line.startswith("## edges (") and not line.startswith("## to items")
            if keep or line.startswith("# "):
                print(line)
        return rc
    return report(edges, nodes, notes, title, layers)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
