#!/usr/bin/env python3
"""Prepares the example evaluation suites under evals/ (standard library only).

For every suite directory that holds a `bugs.json` (e.g. evals/pyfixes/):

1. fetches the source distributions pinned in its `packages.lock` (version
   and sha256) from the package index with pip, into evals/.cache/sdists/,
   unless a file with the pinned hash is already there;
2. checks the sha256 of every cached file against the lock, whatever pip
   said;
3. unpacks each case's sdist (regular files and directories only, no path
   leaving the workspace) into `<suite>/work/<case>/`, without the sdist's
   top-level directory;
4. plants the case's bug: one exact text edit (`find` must occur exactly once
   in `file`; it becomes `replace`).

Idempotent: a case whose workspace was made from the same sdist and edit,
and has not been changed since, is left alone (both fingerprints are in
`<suite>/work/.prepared/<case>`); `--force` makes every workspace again. `--check` then proves each bug: the tests named
in `breaks` pass on the untouched sdist and fail on the planted workspace.

Exit codes: 0 ready, 1 a check failed, 2 bad input or a missing download.
"""

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

EVALS = Path(__file__).resolve().parent
CACHE = EVALS / ".cache" / "sdists"
CASE_ID = re.compile(r"^[a-z0-9-]+$")
# One sdist of these packages is well under this; a bigger member is refused.
MAX_MEMBER = 16 * 1024 * 1024


class Bad(Exception):
    """Bad input: the message names the file, the case and what to do."""


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def normalize(name):
    """A package name as the index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path):
    """`name==version --hash=sha256:HEX` lines -> {name: (version, hex)}."""
    pins = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise Bad(f"{path}: cannot read the lock file ({e.strerror})")
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s+--hash=sha256:([0-9a-f]{64})", line)
        if not m:
            raise Bad(f"{path}:{n}: expected `name==version --hash=sha256:<64 hex digits>`")
        pins[normalize(m[1])] = (m[2], m[3])
    return pins


def read_bugs(path, pins):
    """bugs.json -> {case: plant}, each field checked."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise Bad(f"{path}: cannot read ({e.strerror})")
    except json.JSONDecodeError as e:
        raise Bad(f"{path}:{e.lineno}: not valid JSON ({e.msg})")
    cases = doc.get("cases") if isinstance(doc, dict) else None
    if not isinstance(cases, dict) or not cases:
        raise Bad(f"{path}: expected an object with a non-empty `cases` object")
    fields = {"package", "file", "find", "replace", "bug", "breaks", "pythonpath"}
    for case, plant in cases.items():
        where = f"{path}: case `{case}`"
        if not CASE_ID.match(case):
            raise Bad(f"{where}: a case id is lowercase letters, digits and `-`")
        if not isinstance(plant, dict):
            raise Bad(f"{where}: expected an object")
        unknown = set(plant) - fields
        if unknown:
            raise Bad(f"{where}: unknown field `{sorted(unknown)[0]}`, expected one of {sorted(fields)}")
        for key in ("package", "file", "find", "replace", "bug"):
            if not isinstance(plant.get(key), str) or not plant[key]:
                raise Bad(f"{where}: `{key}` must be a non-empty string")
        breaks = plant.get("breaks")
        if not isinstance(breaks, list) or not breaks or not all(isinstance(t, str) for t in breaks):
            raise Bad(f"{where}: `breaks` must list the test ids the bug makes fail")
        if normalize(plant["package"]) not in pins:
            raise Bad(f"{where}: package `{plant['package']}` is not pinned in packages.lock")
        rel = PurePosixPath(plant["file"])
        if rel.is_absolute() or ".." in rel.parts:
            raise Bad(f"{where}: `file` must be a path inside the package")
    return cases


def fetch(suite, pins, pip, offline):
    """Every pinned sdist in the cache with its hash -> {name: path}."""
    CACHE.mkdir(parents=True, exist_ok=True)
    by_hash = {}
    for f in CACHE.iterdir():
        if f.is_file() and not f.is_symlink():
            by_hash.setdefault(sha256(f), f)
    missing = [n for n, (_, h) in pins.items() if h not in by_hash]
    if missing:
        if offline:
            raise Bad(
                f"{suite / 'packages.lock'}: no file in {CACHE} has the pinned sha256 of "
                f"{', '.join(missing)}; "
                "run `scripts/setup.sh evals` (or this script without --offline) where PyPI is reachable"
            )
        cmd = shlex.split(pip) + [
            "download", "--no-deps", "--no-binary", ":all:", "--require-hashes",
            "--disable-pip-version-check", "--quiet",
            "-r", str(suite / "packages.lock"), "-d", str(CACHE),
        ]
        print(f"==> fetching {', '.join(missing)} with pip", file=sys.stderr)
        if subprocess.run(cmd).returncode != 0:
            raise Bad(f"`{' '.join(cmd)}` failed; see pip's message above")
        for f in CACHE.iterdir():
            if f.is_file() and not f.is_symlink():
                by_hash.setdefault(sha256(f), f)
    found = {}
    for name, (version, h) in pins.items():
        if h not in by_hash:
            raise Bad(f"{suite / 'packages.lock'}: no file in {CACHE} has the pinned sha256 of {name}=={version}")
        found[name] = by_hash[h]
    return found


def unpack(sdist, dest):
    """Regular files and directories of `sdist`, top directory stripped."""
    with tarfile.open(sdist, "r:*") as tar:
        for m in tar:
            parts = PurePosixPath(m.name).parts
            if len(parts) < 2 or m.name.startswith("/") or ".." in parts:
                continue
            target = dest.joinpath(*parts[1:])
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif m.isfile():
                if m.size > MAX_MEMBER:
                    raise Bad(f"{sdist}: member `{m.name}` is larger than {MAX_MEMBER} bytes")
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(m) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                target.chmod(0o755 if m.mode & 0o111 else 0o644)
            # Links, devices and FIFOs are skipped: none of these packages has one.


def plant(case, bug, root, where):
    path = root / bug["file"]
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise Bad(f"{where}: case `{case}`: cannot read `{bug['file']}` in the sdist ({e.strerror})")
    count = text.count(bug["find"])
    if count != 1:
        raise Bad(
            f"{where}: case `{case}`: `find` occurs {count} times in `{bug['file']}`, "
            "it must occur exactly once (make it longer)"
        )
    path.write_text(text.replace(bug["find"], bug["replace"]), encoding="utf-8")


def fingerprint(sdist_hash, bug):
    return hashlib.sha256(json.dumps([sdist_hash, bug], sort_keys=True).encode()).hexdigest()


def tree_digest(root):
    """Names, modes and contents of every file below `root` (links never
    followed): a workspace edited by hand no longer matches its stamp."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            digest.update(f"{path.relative_to(root)}\0{st.st_mode:o}\0".encode())
            if path.is_file() and not path.is_symlink():
                digest.update(sha256(path).encode())
    return digest.hexdigest()


def prepare_suite(suite, pip, offline, force):
    pins = read_lock(suite / "packages.lock")
    bugs = read_bugs(suite / "bugs.json", pins)
    sdists = fetch(suite, pins, pip, offline)
    work = suite / "work"
    stamps = work / ".prepared"
    stamps.mkdir(parents=True, exist_ok=True)
    made = 0
    for case, bug in bugs.items():
        name = normalize(bug["package"])
        want = fingerprint(pins[name][1], bug)
        dest = work / case
        stamp = stamps / case
        if not force and dest.is_dir() and stamp.is_file():
            if stamp.read_text().split() == [want, tree_digest(dest)]:
                continue
        tmp = Path(tempfile.mkdtemp(prefix=f".{case}.", dir=work))
        try:
            unpack(sdists[name], tmp)
            plant(case, bug, tmp, suite / "bugs.json")
            if dest.exists():
                shutil.rmtree(dest)
            tmp.rename(dest)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
        stamp.write_text(f"{want} {tree_digest(dest)}\n")
        made += 1
    for old in stamps.iterdir():
        if old.name not in bugs:
            old.unlink()
            shutil.rmtree(work / old.name, ignore_errors=True)
    print(f"{suite.name}: {len(bugs)} case workspaces ready in {work} ({made} made, {len(bugs) - made} unchanged)")
    return bugs, sdists


def run_tests(root, bug):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if bug.get("pythonpath"):
        env["PYTHONPATH"] = str(root / bug["pythonpath"])
    cmd = [sys.executable, "-m", "unittest", *bug["breaks"]]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)


def check_suite(suite, bugs, sdists):
    """Each planted bug breaks the tests it names, which pass without it."""
    ok = True
    for case, bug in bugs.items():
        with tempfile.TemporaryDirectory() as clean:
            clean = Path(clean)
            unpack(sdists[normalize(bug["package"])], clean)
            before = run_tests(clean, bug)
        after = run_tests(suite / "work" / case, bug)
        good = before.returncode == 0 and after.returncode != 0
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {case}: clean sdist exit {before.returncode}, planted exit {after.returncode}")
        if not good:
            print((before.stderr if before.returncode else after.stderr)[-2000:], file=sys.stderr)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suites", nargs="*", type=Path, help="suite directories (default: every evals/*/bugs.json)")
    ap.add_argument("--pip", default=f"{shlex.quote(sys.executable)} -m pip", help="the pip command (default: this python's)")
    ap.add_argument("--offline", action="store_true", help="never download; fail when an sdist is not cached")
    ap.add_argument("--force", action="store_true", help="make every workspace again")
    ap.add_argument("--check", action="store_true", help="prove each bug with the tests in `breaks` (host python3)")
    args = ap.parse_args()
    suites = args.suites or sorted(p.parent for p in EVALS.glob("*/bugs.json"))
    try:
        ok = True
        for suite in suites:
            suite = suite.resolve()
            if not (suite / "bugs.json").is_file():
                raise Bad(f"{suite}: no bugs.json here; give a suite directory such as evals/pyfixes")
            bugs, sdists = prepare_suite(suite, args.pip, args.offline, args.force)
            if args.check:
                ok &= check_suite(suite, bugs, sdists)
    except Bad as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
