#!/usr/bin/env bash
# The benchmark: Saheeli side by side with raw Docker on this machine.
# Builds release binaries and the servo image, then runs saheeli-bench
# (pass --quick for the two-minute check). The table goes to stdout, the
# same figures as JSON to results/bench-<time>.json.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo puts its output (CARGO_TARGET_DIR when set).
TARGET="${CARGO_TARGET_DIR:-target}"

scripts/setup.sh base
# The servo alone: built with the other crates, cargo would unify tokio's
# features into it and the binary would double in size.
cargo build --quiet --release -p saheeli-servo
cargo build --quiet --release -p saheeli-foreman -p saheeli-bench
"$TARGET"/release/saheeli build-servo --servo-bin "$TARGET"/release/servo >/dev/null
exec "$TARGET"/release/saheeli-bench --saheeli "$TARGET"/release/saheeli "$@"
