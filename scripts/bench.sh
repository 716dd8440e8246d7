#!/usr/bin/env bash
# The benchmark: Saheeli side by side with raw Docker on this machine.
# Builds release binaries and the servo image, then runs saheeli-bench
# (pass --quick for the two-minute check). The table goes to stdout, the
# same figures as JSON to results/bench-<time>.json.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh base
cargo build --quiet --release -p saheeli-foreman -p saheeli-servo -p saheeli-bench
./target/release/saheeli build-servo --servo-bin target/release/servo >/dev/null
exec ./target/release/saheeli-bench --saheeli target/release/saheeli "$@"
