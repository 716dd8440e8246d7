#!/usr/bin/env python3
"""Grades one SWE-bench instance in its verify container (written by
`saheeli import`; the cwd is the repository).

1. The files the test patch touches are put in their state after it (what
   SWE-bench's eval script gets by resetting them to the base commit and
   applying test.patch; here no git or patch is needed in the image).
2. The test command runs on the test patch's files (SWE-bench's directives).
3. Its output is read as SWE-bench reads pytest's -rA summary: a line that
   starts with PASSED, FAILED, SKIPPED, ERROR or XFAIL names a test (the
   second word; in FAILED lines " - " is a space first). A test passed when
   its status is PASSED or XFAIL; one missing failed.
4. /logs/verifier/reward.json gets {"reward": 1 or 0, "fail_to_pass": rate,
   "pass_to_pass": rate}: 1 iff every FAIL_TO_PASS and PASS_TO_PASS test
   passed (an empty list counts as all passed).

Plain Python 3 (no f-strings), no network, nothing outside the standard
library: the images of old SWE-bench tasks carry old Pythons.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STATUSES = ("PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL")
PASSING = ("PASSED", "XFAIL")
REWARD = os.environ.get("SAHEELI_REWARD_JSON", "/logs/verifier/reward.json")


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def put_test_files(files):
    for entry in files:
        path = entry["path"]
        remove(path)
        if entry["stored"]:
            parent = os.path.dirname(path)
            if parent and not os.path.isdir(parent):
                os.makedirs(parent)
            shutil.copyfile(os.path.join(HERE, "files", path), path)


def parse(log):
    status = {}
    for line in log.splitlines():
        if line.startswith(STATUSES):
            if line.startswith("FAILED"):
                line = line.replace(" - ", " ")
            words = line.split()
            if len(words) > 1:
                status[words[1]] = words[0]
    return status


def rate(ids, status):
    if not ids:
        return 1.0
    return sum(1 for t in ids if status.get(t) in PASSING) / float(len(ids))


def main():
    with open(os.path.join(HERE, "config.json")) as f:
        cfg = json.load(f)
    put_test_files(cfg["files"])
    cmd = cfg["test_cmd"] + "".join(" " + shlex.quote(d) for d in cfg["directives"])
    print("+ " + cmd)
    sys.stdout.flush()
    proc = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = []
    for raw in iter(proc.stdout.readline, b""):
        line = raw.decode("utf-8", "replace")
        out.append(line)
        sys.stdout.write(line)
    code = proc.wait()
    status = parse("".join(out))
    f2p = rate(cfg["fail_to_pass"], status)
    p2p = rate(cfg["pass_to_pass"], status)
    resolved = f2p == 1.0 and p2p == 1.0
    parent = os.path.dirname(REWARD)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent)
    with open(REWARD, "w") as f:
        json.dump({"reward": 1 if resolved else 0, "fail_to_pass": f2p, "pass_to_pass": p2p}, f)
    print("")
    print("test command exit status %d" % code)
    for name, ids in (("FAIL_TO_PASS", cfg["fail_to_pass"]), ("PASS_TO_PASS", cfg["pass_to_pass"])):
        for t in ids:
            if status.get(t) not in PASSING:
                print("%s not passed: %s (%s)" % (name, t, status.get(t, "missing")))
    print("resolved" if resolved else "not resolved")
    return 0 if resolved else 1


if __name__ == "__main__":
    sys.exit(main())
