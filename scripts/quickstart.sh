#!/usr/bin/env bash
# One command from a fresh machine to a finished task, offline:
# installs what is missing (Docker engine, base image, Rust build), builds
# the servo image, and runs prompts/hello.md with the replay model (no API
# key, no network). Prints where the results are.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo puts its output (CARGO_TARGET_DIR when set).
TARGET="${CARGO_TARGET_DIR:-target}"

echo "==> setting up (each step says how long set-up has run; the Rust build shows cargo's progress)" >&2
scripts/setup.sh core
echo "==> [${SECONDS}s] building the servo image (saheeli build-servo)" >&2
"$TARGET"/debug/saheeli build-servo
echo "==> [${SECONDS}s] saheeli run prompts/hello.md" >&2
# Each task's /workspace is a size-limited, loop-mounted image, which needs
# root (or `limits.disk_enforcement: off` in config.yaml).
as_root=()
if [ "$(id -u)" -ne 0 ]; then as_root=(sudo); fi
results=$("${as_root[@]}" "$TARGET"/debug/saheeli run prompts/hello.md)
echo "==> results in $results:" >&2
ls -la "$results" >&2
echo "==> complete.json:" >&2
cat "$results/complete.json" >&2
echo >&2
echo "$results"
