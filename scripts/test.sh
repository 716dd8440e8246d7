#!/usr/bin/env bash
# Runs every test against the real Docker daemon: sets the machine up when
# needed (scripts/setup.sh), rebuilds the servo image from this checkout,
# then runs the whole suite (after `cargo fmt --check` and clippy). Fails
# (never skips) when Docker cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo puts its output (CARGO_TARGET_DIR when set).
TARGET="${CARGO_TARGET_DIR:-target}"

# Formatting and lints first: they fail in seconds.
cargo fmt --all --check
cargo clippy --quiet --all-targets -- -D warnings
# The supervisor and the loop never name an engine (docs: supervisor/mod.rs).
if grep -rn "handles_swarm\|Backend::Swarm\|bollard\|crate::docker\|backend::local\|backend::swarm\|backend::docker" \
  foreman/src/supervisor foreman/src/reconciler || grep -n "^use backend::" foreman/src/lib.rs; then
  echo "error: supervisor/ and reconciler/ must not name an engine, crate::docker, backend::local, backend::swarm or bollard; ask backend::Engine" >&2
  exit 1
fi
# mod.rs declares its modules and names what it takes from them: no
# `use sibling::*` that hides the module graph (DESIGN.md).
if grep -rn --include=mod.rs '^\(pub(crate) \|pub \|pub(super) \)\?use [a-z_]*::\*;' \
    foreman/src servo/src protocol/src bench/src; then
  echo "error: a mod.rs takes a sibling module with a glob; name what it uses" >&2
  exit 1
fi
# No source file over 500 lines outside tests. A test file is one named
# `tests.rs` or `*_tests.rs`, or one under a `tests/` directory.
long=$(find foreman/src servo/src protocol/src bench/src -name '*.rs' \
  ! -name tests.rs ! -name '*_tests.rs' ! -path '*/tests/*' -print0 |
  xargs -0 wc -l | awk '$2 != "total" && $1 > 500 { print "  " $2 ": " $1 " lines" }')
if [ -n "$long" ]; then
  printf 'error: source files over 500 lines; split each along a seam (one concern a module):\n%s\n' "$long" >&2
  exit 1
fi
# The Kubernetes load model (docs/design/kubernetes.md): its unit tests and its
# internal-consistency check, in about a second (Python 3.11 stdlib only).
python3 -m unittest discover -s scripts -p 'test_*.py'
python3 scripts/k8s-sim.py --check
# The rooms (issue 48, DESIGN.md): the module-graph scanner's own tests,
# then no cycle between the foreman's top-level modules and no import up a
# layer (scripts/layers.txt), counting every crate:: path in product code;
# and the rules scripts/rooms_check.py names (routes/, llm/ and door/ name
# no commands, reconciler or supervisor, backend/ no llm or routes; no SQL
# outside store/; no `use super::*` outside tests; no function over 150).
python3 scripts/modgraph.py --self-test
python3 scripts/modgraph.py foreman/src --layers scripts/layers.txt --quiet
python3 scripts/rooms_check.py

scripts/setup.sh
# The servo speaks plain HTTP to its gateway. Built with the workspace's
# features it would carry the foreman's TLS and read every CA certificate
# in /etc/ssl/certs at each start; dynamically linked it would read its
# libraries through every container's storage driver (scripts/servo-bin.sh).
SERVO=$(scripts/servo-bin.sh --quiet)
if grep -qa rustls "$SERVO"; then
  echo "error: $SERVO links rustls; build it alone with scripts/servo-bin.sh" >&2
  exit 1
fi
if readelf --program-headers "$SERVO" | grep INTERP >/dev/null; then
  echo "error: $SERVO is dynamically linked; build it with scripts/servo-bin.sh" >&2
  exit 1
fi
# The book (docs/): it builds, and its links resolve (the unit test
# `book_links_resolve` in the suite below checks every local link and anchor).
mdbook build docs
"$TARGET"/debug/saheeli build-servo
export SAHEELI_TEST_IMAGE=saheeli-servo:latest
# The agent images the third-party agent tests run (foreman/tests/it/agents.rs,
# agents_cli.rs, agents_offline.rs): the servo image plus mini-swe-agent,
# Codex, Claude Code or aider
# from their pinned wheels. A minute or two the first time; later builds
# reuse the install layer.
export SAHEELI_TEST_MINI_IMAGE=saheeli-servo-mini-swe-agent-test:latest
export SAHEELI_TEST_CODEX_IMAGE=saheeli-servo-codex-test:latest
export SAHEELI_TEST_CLAUDE_IMAGE=saheeli-servo-claude-code-test:latest
export SAHEELI_TEST_AIDER_IMAGE=saheeli-servo-aider-test:latest
"$TARGET"/debug/saheeli build-servo --agent mini-swe-agent --tag "$SAHEELI_TEST_MINI_IMAGE"
"$TARGET"/debug/saheeli build-servo --agent codex --tag "$SAHEELI_TEST_CODEX_IMAGE"
"$TARGET"/debug/saheeli build-servo --agent claude-code --tag "$SAHEELI_TEST_CLAUDE_IMAGE"
"$TARGET"/debug/saheeli build-servo --agent aider --tag "$SAHEELI_TEST_AIDER_IMAGE"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  cargo test --workspace --no-fail-fast "$@"
fi
# The benchmark's quick mode: proves every measurement still works (it
# never fails on a timing).
cargo build --quiet -p saheeli-bench
"$TARGET"/debug/saheeli-bench --quick --saheeli "$TARGET"/debug/saheeli --servo "$SERVO"
