#!/usr/bin/env bash
# The benchmark: Saheeli side by side with raw Docker on this machine,
# offline. Builds the release binaries and the servo image from this
# checkout, then runs saheeli-bench with any arguments given (`--quick`
# for the two-minute check that every measurement works; `--only NAME`
# for some of them). Progress goes to stderr, the table to stdout, the same
# figures as JSON to results/bench-<time>.json. Needs a running Docker
# daemon and the base image (scripts/setup.sh makes both).
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo puts its output (CARGO_TARGET_DIR when set).
TARGET="${CARGO_TARGET_DIR:-target}"

scripts/setup.sh base >&2   # the base image, only when missing
# The servo alone and static (scripts/servo-bin.sh says why).
SERVO=$(scripts/servo-bin.sh --quiet)
cargo build --quiet --release -p saheeli-foreman -p saheeli-bench
"$TARGET"/release/saheeli build-servo --servo-bin "$SERVO" >&2
exec "$TARGET"/release/saheeli-bench --saheeli "$TARGET"/release/saheeli --servo "$SERVO" "$@"
