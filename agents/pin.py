#!/usr/bin/env python3
"""Pins an agent's wheels: agents/pin.py NAME 'PACKAGE==VERSION'.

Downloads the package, everything it needs and pip itself as wheels for this
host's CPython (the servo image's Debian bookworm CPython 3.11, x86_64), then
writes agents/NAME/requirements.txt with one `name==version --hash=sha256:...`
line per wheel: what `saheeli build-servo --agent NAME` installs offline.
"""
import hashlib
import pathlib
import subprocess
import sys
import tempfile

name, package = sys.argv[1], sys.argv[2]
out = pathlib.Path(__file__).resolve().parent / name / "requirements.txt"
with tempfile.TemporaryDirectory() as d:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
                    "-d", d, package, "pip"], check=True)
    lines = [f"# {package} and everything it needs, pinned with hashes (agents/pin.py).",
             "# CPython 3.11 on x86_64 glibc (Debian bookworm, the servo image's).",
             "# Installed offline by `saheeli build-servo --agent " + name + "`."]
    for whl in sorted(pathlib.Path(d).glob("*.whl")):
        dist, version = whl.name.split("-")[:2]
        digest = hashlib.sha256(whl.read_bytes()).hexdigest()
        lines.append(f"{dist.replace('_', '-').lower()}=={version} --hash=sha256:{digest}")
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text("\n".join(lines) + "\n")
print(f"wrote {out} ({len(lines) - 3} wheels)")
