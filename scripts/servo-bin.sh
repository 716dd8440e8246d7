#!/usr/bin/env bash
# Builds the servo binary from this checkout and prints its path (cargo's
# progress goes to stderr; extra arguments go to cargo, e.g. --quiet).
#
# Statically linked (glibc's crt-static): in a container every shared
# library is read through the storage driver (fuse-overlayfs here), by
# every servo again, since each container's root has its own page cache.
# A static servo reads only itself, and the foreman binds that from the
# host's page cache (docs/reference/security.md). It also runs in an image
# whose glibc is older than the build machine's. `--target` keeps the flag
# off what cargo builds for itself (build scripts, proc-macros), which
# cannot be static. The triple is the image's, glibc on this architecture.
#
# -p, not --bin: built alone, the servo gets only its own crates' features.
# Built as part of the workspace it would get reqwest's TLS (the
# foreman's) and read every CA certificate in /etc/ssl/certs at start.
# `saheeli build-servo` builds it the same way (foreman/src/commands/build.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}"
TRIPLE="$(uname -m)-unknown-linux-gnu"
RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C target-feature=+crt-static" \
  cargo build --release -p saheeli-servo --target "$TRIPLE" "$@" >&2
echo "$TARGET/$TRIPLE/release/servo"
