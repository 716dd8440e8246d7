#!/usr/bin/env bash
# A private, real Docker Swarm on this one machine, for Saheeli's swarm
# tests (and for trying `backend: swarm` without a cluster):
#
#   scripts/swarm.sh up      # 3 dockerd (1 manager, 2 workers) + swarm + overlay + registry
#   scripts/swarm.sh status
#   scripts/swarm.sh restart N   # start node N's dockerd again (after a test killed it)
#   scripts/swarm.sh down    # stop everything this script started, remove its netns and dirs
#
# Each node is its own dockerd + containerd in its own network namespace
# (own address), its own persistent mount+UTS namespace, data and exec root.
# The system dockerd is only read from (`docker save` of the base image);
# it is never stopped, restarted or reconfigured.
#
# Topology (private; the node namespaces have no default route, so nothing
# in them reaches past this machine):
#   root ns  ${NS}root $PFX.1/24 --veth-- netns $NS-hub: bridge ${NS}br0
#     --veth-- netns $NS-n1: eth0 $PFX.11 (manager)
#     --veth-- netns $NS-n2: eth0 $PFX.12 (worker)
#     --veth-- netns $NS-n3: eth0 $PFX.13 (worker)
#   The bridge sits in a hub namespace: the root namespace has br_netfilter
#   on and FORWARD policy DROP (the system dockerd's), which would drop
#   bridged frames.
#   Node APIs: unix://$BASE/nN/docker.sock and tcp://$PFX.1N:2375 (no TLS:
#   private addresses, tests only), or with TLS_DIR set tcp://$PFX.1N:2376
#   served with --tlsverify: $TLS_DIR holds ca.pem (the CA clients must be
#   signed by) and nN-cert.pem/nN-key.pem (node N's server certificate,
#   for its address $PFX.1N), which `up` copies into each node's directory. A registry (Debian's docker-registry)
#   listens on $PFX.1:5000; the nodes trust it as an insecure registry.
#   The overlay `$NET` is 10.232.0.0/24, the swarm's pool 10.233.0.0/16,
#   node-local networks 10.234.0.0/16: none collides with the recipe in
#   ../shared (10.213-10.216) or the system daemon.
#
# Env: PFX (first three octets), NS (prefix of namespace, link and cgroup
# names, at most 4 characters), BASE (node dirs), NODES, IMAGE (loaded into
# the manager, so that `saheeli build-servo --push` can build FROM it),
# TLS_DIR (certificates: the engines' TCP APIs over TLS, see above).
# `up` writes $BASE/env.sh (DOCKER_HOST of the manager, the registry, the
# host address the servos reach the gateway on). Needs root, iproute2,
# util-linux, docker.io, curl and docker-registry (scripts/setup.sh swarm).
# `up` tears down what it made when a step fails.
set -euo pipefail

PFX=${PFX:-10.231.0}
NODES=${NODES:-3}
BASE=${BASE:-/tmp/saheeli-swarm}
IMAGE=${IMAGE:-saheeli-base:bookworm}
NET=${NET:-saheeli-jobs}
NS=${NS:-sh}
REG=$PFX.1:5000
HUB=$NS-hub

ns() { echo "$NS-n$1"; }
dn() { docker -H "unix://$BASE/n$1/docker.sock" "${@:2}"; }
log() { printf '[swarm %s] %s\n' "$(date +%T.%N | cut -c1-12)" "$*" >&2; }

port() { [ -n "${TLS_DIR:-}" ] && echo 2376 || echo 2375; }

start_node() { # start (or restart) the dockerd of node $1
  local n=$1 d=$BASE/n$1 tls port
  mkdir -p "$d/data" "$d/exec"
  # Its own config file: /etc/docker/daemon.json would be merged and
  # conflict. "tls": false, or a tcp host makes 20.10 wait 15 s at start.
  if [ -f "$d/tls/ca.pem" ]; then
    tls="\"tls\": true, \"tlsverify\": true, \"tlscacert\": \"$d/tls/ca.pem\",
  \"tlscert\": \"$d/tls/cert.pem\", \"tlskey\": \"$d/tls/key.pem\","
    port=2376
  else
    tls='"tls": false,'
    port=2375
  fi
  cat >"$d/daemon.json" <<J
{
  "data-root": "$d/data",
  "exec-root": "$d/exec",
  "pidfile": "$d/docker.pid",
  "hosts": ["unix://$d/docker.sock", "tcp://$PFX.1$n:$port"],
  $tls
  "storage-driver": "overlay2",
  "bridge": "none",
  "cgroup-parent": "/$NS-swarm$n",
  "default-address-pools": [{"base": "10.234.0.0/16", "size": 24}],
  "insecure-registries": ["$PFX.0/24"],
  "log-driver": "json-file",
  "log-opts": {"max-size": "10m"}
}
J
  if ! mountpoint -q "$d/mntns" 2>/dev/null; then
    # A persistent mount+UTS namespace made from inside the node's netns, so
    # a fresh sysfs shows its interfaces; the cgroup mounts are carried over
    # (`ip netns exec dockerd` would hide them).
    touch "$d/mntns" "$d/utsns"
    mkdir -p "$d/cg"
    nsenter --net=/run/netns/"$(ns "$n")" unshare --mount="$d/mntns" --uts="$d/utsns" \
      --propagation private sh -c "
        hostname $NS-node$n
        mount --rbind /sys/fs/cgroup $d/cg
        mount -t sysfs sysfs /sys
        mount --move $d/cg /sys/fs/cgroup"
  fi
  nsenter --net=/run/netns/"$(ns "$n")" --mount="$d/mntns" --uts="$d/utsns" \
    setsid dockerd --config-file "$d/daemon.json" </dev/null >>"$d/dockerd.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 600); do
    [ -S "$d/docker.sock" ] && dn "$n" version >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || {
      log "dockerd of node $n exited:"
      tail -5 "$d/dockerd.log" >&2
      return 1
    }
    sleep 0.1
  done
  log "dockerd of node $n did not answer within 60 s"
  return 1
}

start_registry() {
  local r=$BASE/registry
  mkdir -p "$r/data"
  cat >"$r/config.yml" <<Y
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $r/data}, delete: {enabled: true}}
http: {addr: $REG}
Y
  setsid docker-registry serve "$r/config.yml" </dev/null >"$r/registry.log" 2>&1 &
  echo $! >"$r/pid"
  for _ in $(seq 1 100); do
    curl -sf "http://$REG/v2/" >/dev/null && return 0
    sleep 0.1
  done
  log "registry did not answer on $REG"
  tail -5 "$r/registry.log" >&2
  return 1
}

up() {
  [ "$(id -u)" = 0 ] || { log "must be root (network namespaces, dockerd)"; exit 1; }
  [ -e /run/netns/$HUB ] && { log "already up (scripts/swarm.sh down first)"; exit 1; }
  for c in dockerd docker-registry nsenter unshare curl ip; do
    command -v $c >/dev/null || { log "missing $c: run scripts/setup.sh swarm"; exit 1; }
  done
  trap 'log "up failed; tearing down"; down' ERR
  mkdir -p "$BASE"
  ip netns add $HUB
  ip netns exec $HUB ip link set lo up
  ip netns exec $HUB ip link add ${NS}br0 type bridge
  ip netns exec $HUB ip link set ${NS}br0 up
  ip link add ${NS}root type veth peer name ${NS}hr netns $HUB
  ip addr add "$PFX.1/24" dev ${NS}root
  ip link set ${NS}root up
  ip netns exec $HUB ip link set ${NS}hr master ${NS}br0 up
  for n in $(seq 1 "$NODES"); do
    ip netns add "$(ns "$n")"
    ip link add "${NS}h$n" netns $HUB type veth peer name eth0 netns "$(ns "$n")"
    ip netns exec $HUB ip link set "${NS}h$n" master ${NS}br0 up
    ip netns exec "$(ns "$n")" ip addr add "$PFX.1$n/24" dev eth0
    ip netns exec "$(ns "$n")" ip link set eth0 up
    ip netns exec "$(ns "$n")" ip link set lo up
  done
  log "network up"
  if [ -n "${TLS_DIR:-}" ]; then
    for n in $(seq 1 "$NODES"); do
      mkdir -p "$BASE/n$n/tls"
      cp "$TLS_DIR/ca.pem" "$BASE/n$n/tls/ca.pem"
      cp "$TLS_DIR/n$n-cert.pem" "$BASE/n$n/tls/cert.pem"
      cp "$TLS_DIR/n$n-key.pem" "$BASE/n$n/tls/key.pem"
      chmod 600 "$BASE/n$n/tls/key.pem"
    done
  fi
  start_registry &
  local pids=($!)
  for n in $(seq 1 "$NODES"); do start_node "$n" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p"; done
  log "$NODES daemons and the registry up"
  dn 1 swarm init --advertise-addr "$PFX.11" --listen-addr "$PFX.11:2377" \
    --data-path-addr "$PFX.11" --default-addr-pool 10.233.0.0/16 >/dev/null
  local tok
  tok=$(dn 1 swarm join-token -q worker)
  for n in $(seq 2 "$NODES"); do
    dn "$n" swarm join --token "$tok" --advertise-addr "$PFX.1$n" \
      --listen-addr "$PFX.1$n:2377" "$PFX.11:2377" >/dev/null
  done
  for _ in $(seq 1 150); do
    [ "$(dn 1 node ls --format '{{.Status}}' | grep -c Ready)" = "$NODES" ] && break
    sleep 0.2
  done
  [ "$(dn 1 node ls --format '{{.Status}}' | grep -c Ready)" = "$NODES" ] \
    || { log "not all $NODES nodes became Ready"; false; }
  # Service discovery would need IPVS, which this kernel lacks: the overlay
  # only carries the servos' own traffic (to the gateway, through NAT).
  dn 1 network create -d overlay --attachable --subnet 10.232.0.0/24 "$NET" >/dev/null
  log "swarm of $NODES nodes, overlay $NET"
  docker save "$IMAGE" | dn 1 load -q >/dev/null
  log "base image $IMAGE on the manager"
  cat >"$BASE/env.sh" <<E
# source me: the private swarm of scripts/swarm.sh
export DOCKER_HOST=unix://$BASE/n1/docker.sock
export SAHEELI_SWARM_MANAGER=tcp://$PFX.11:$(port)
export SAHEELI_SWARM_REGISTRY=$REG
export SAHEELI_SWARM_NETWORK=$NET
export SAHEELI_SWARM_HOST=$PFX.1
export SAHEELI_SWARM_NODES="$(for n in $(seq 1 "$NODES"); do printf 'unix://%s/n%s/docker.sock ' "$BASE" "$n"; done)"
E
  trap - ERR
  log "up; env in $BASE/env.sh"
}

status() {
  for n in $(seq 1 "$NODES"); do
    printf 'node %s: ' "$n"
    dn "$n" info -f '{{.Name}} {{.Swarm.LocalNodeState}} {{.Swarm.NodeAddr}}' 2>&1 | head -1
  done
  dn 1 node ls 2>/dev/null || true
  dn 1 service ls 2>/dev/null || true
}

signal_pids() { local p; for p in "${@:2}"; do kill -"$1" "$p" 2>/dev/null || true; done; }
cgroup_pids() { # processes in node $1's cgroup subtree (its containers)
  find /sys/fs/cgroup/pids/$NS-swarm"$1" /sys/fs/cgroup/$NS-swarm"$1" -name cgroup.procs \
    -exec cat {} + 2>/dev/null | sort -u || true
}

down() {
  set +e
  local n d p
  # Containers first: dockerd would otherwise stop each with a 10 s grace.
  for n in $(seq 1 "$NODES"); do
    [ -S "$BASE/n$n/docker.sock" ] && { dn "$n" ps -aq 2>/dev/null | xargs -r \
      docker -H "unix://$BASE/n$n/docker.sock" rm -f >/dev/null 2>&1 & }
  done
  wait
  log "down: containers removed"
  for n in $(seq 1 "$NODES"); do
    d=$BASE/n$n
    [ -f "$d/docker.pid" ] && kill "$(cat "$d/docker.pid")" 2>/dev/null
  done
  for n in $(seq 1 "$NODES"); do
    d=$BASE/n$n
    if [ -f "$d/docker.pid" ]; then
      p=$(cat "$d/docker.pid")
      for _ in $(seq 1 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    fi
  done
  log "down: daemons stopped"
  # What is left of ours: processes in our node namespaces (containerd,
  # shims) and in our cgroup parents, by pid.
  for sig in TERM KILL; do
    for n in $(seq 1 "$NODES"); do
      [ -e /run/netns/"$(ns "$n")" ] && signal_pids $sig $(ip netns pids "$(ns "$n")" 2>/dev/null)
      signal_pids $sig $(cgroup_pids "$n")
    done
    sleep 0.3
  done
  log "down: processes ended"
  [ -f "$BASE/registry/pid" ] && kill "$(cat "$BASE/registry/pid")" 2>/dev/null
  for n in $(seq 1 "$NODES"); do
    d=$BASE/n$n
    for m in "$d/mntns" "$d/utsns"; do mountpoint -q "$m" 2>/dev/null && umount "$m"; done
    find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d -name "$NS-swarm$n" \
      -exec sh -c 'find "$1" -depth -type d -exec rmdir {} \; 2>/dev/null' _ {} \;
    [ -e /run/netns/"$(ns "$n")" ] && ip netns del "$(ns "$n")"
  done
  [ -e /run/netns/$HUB ] && ip netns del $HUB # takes the ${NS}root veth with it
  ip link del ${NS}root 2>/dev/null
  # The node directories hold every node's images (a GB and more with
  # agent images): removing them took most of `down` (37 s of 44 under
  # load). They are renamed now, so that the next `up` may use $BASE at
  # once, and removed in the background, at the lowest priority (with
  # what an interrupted earlier removal left).
  if [ -d "$BASE" ]; then
    mv "$BASE" "$BASE.gone.$$"
  fi
  setsid sh -c 'for g in "$0".gone.*; do [ -d "$g" ] && nice -n 19 rm -rf "$g"; done' "$BASE" \
    </dev/null >/dev/null 2>&1 &
  log "down (its directories are being removed in the background)"
  return 0
}

case "${1:-}" in
  up) up ;;
  restart) start_node "${2:?node number}" ;;
  status) status ;;
  down) down ;;
  *) echo "usage: scripts/swarm.sh up|status|restart N|down   (env: PFX NS BASE NODES IMAGE NET TLS_DIR)" >&2; exit 2 ;;
esac
