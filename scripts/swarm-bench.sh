#!/usr/bin/env bash
# Swarm against the local backend on this machine: dispatch latency
# (`task submit` → the servo's first LLM request, reaching a local fake
# LLM through the gateway) and the throughput of 50 one-step tasks
# (replay). Needs the private swarm of scripts/swarm.sh (`up` first) and
# the servo image; prints the figures. Offline; nothing leaves the host.
#
#   scripts/swarm-bench.sh [N_DISPATCH=5] [N_TASKS=50]
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}"
ROOT=$PWD
SAHEELI="$(realpath "$TARGET"/debug/saheeli)"
SERVO="$(realpath "$(scripts/servo-bin.sh --quiet)")"
N_DISPATCH=${1:-5}
N_TASKS=${2:-50}
PFX=${PFX:-10.231.0}
LOCAL_IMAGE=${LOCAL_IMAGE:-saheeli-servo:latest}
CONCURRENCY=${CONCURRENCY:-12}
WORK=$(mktemp -d /tmp/saheeli-swarm-bench.XXXXXX)
PORT=$((20000 + RANDOM % 20000))
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT

# A fake LLM: every request gets a task_complete; arrival times logged.
cat >"$WORK/llm.py" <<'P'
import http.server, json, os, time
LOG = os.environ["LOG"]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(LOG, "a") as f:
            f.write("%.6f\n" % time.time())
        call = {"id": "c1", "type": "function",
                "function": {"name": "task_complete", "arguments": json.dumps({"message": "ok"})}}
        body = json.dumps({"id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
P
touch "$WORK/llm.log"
LOG="$WORK/llm.log" PORT=$PORT python3 "$WORK/llm.py" &

common="concurrency: $CONCURRENCY
stop_grace: 3s
providers:
  fake: { kind: openai, base_url: 'http://127.0.0.1:$PORT/v1', api_key_env: FAKE_KEY }
limits: { disk_enforcement: off }
"
export FAKE_KEY=not-a-key

project() { # project NAME EXTRA_CONFIG
  local d=$WORK/$1
  mkdir -p "$d"
  printf '%s%s' "$common" "$2" >"$d/config.yaml"
  printf -- '---\nmodel: fake/m\nmax_steps: 3\n---\nCall task_complete.\n' >"$d/llm.md"
  printf '{"turns": [{"tool_calls": [{"name": "task_complete", "arguments": {"message": "ok"}}]}]}\n' >"$d/one.json"
  printf -- '---\nmodel: replay:one.json\n---\nOne step.\n' >"$d/one.md"
  echo "$d"
}

dispatch() { # dispatch DIR: median ms from submit to the first LLM request
  local d=$1 ms=()
  (cd "$d" && exec "$SAHEELI" serve >"$d/serve.log" 2>&1) &
  local serve=$!
  sleep 2
  for _ in $(seq 1 "$N_DISPATCH"); do
    local before t0 t1 id
    before=$(wc -l <"$WORK/llm.log" 2>/dev/null || echo 0)
    t0=$(date +%s.%N)
    id=$(cd "$d" && "$SAHEELI" task submit --prompt llm.md)
    while [ "$(wc -l <"$WORK/llm.log" 2>/dev/null || echo 0)" -le "$before" ]; do sleep 0.01; done
    t1=$(sed -n "$((before + 1))p" "$WORK/llm.log")
    ms+=("$(echo "($t1 - $t0) * 1000" | bc)")
    until [ "$(cd "$d" && "$SAHEELI" task status "$id" --json | grep -c "\"state\": \"complete\"")" -gt 0 ]; do sleep 0.1; done
  done
  kill -INT $serve; kill -INT $serve 2>/dev/null || true; wait $serve 2>/dev/null || true
  printf '%s\n' "${ms[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.0f", a[int((NR+1)/2)]}'
}

throughput() { # throughput DIR: seconds for N_TASKS one-step replay tasks
  local d=$1 t0 t1
  for _ in $(seq 1 "$N_TASKS"); do (cd "$d" && "$SAHEELI" task submit --prompt one.md >/dev/null); done
  t0=$(date +%s.%N)
  (cd "$d" && "$SAHEELI" serve --drain >"$d/drain.log" 2>&1)
  t1=$(date +%s.%N)
  local done
  done=$(cd "$d" && "$SAHEELI" task status --json | grep -c '"state": "complete"')
  echo "$(echo "$t1 - $t0" | bc) $done"
}

local_dir=$(project local "image: $LOCAL_IMAGE
")
# The swarm: the image pushed to its registry, by digest.
swarm_dir=$(project swarm "backend: swarm
swarm: { manager: 'tcp://$PFX.11:2375', registry: '$PFX.1:5000', network: saheeli-jobs, gateway_listen: '$PFX.1:$((PORT + 1))' }
")
pushed=$(cd "$swarm_dir" && "$SAHEELI" build-servo --push --servo-bin "$SERVO" --context "$ROOT" 2>/dev/null)
echo "image: $pushed" >>"$swarm_dir/config.yaml"

echo "dispatch (submit -> first LLM request), median of $N_DISPATCH:"
echo "  local: $(dispatch "$local_dir") ms"
echo "  swarm: $(dispatch "$swarm_dir") ms"
echo "throughput, $N_TASKS one-step tasks, concurrency $CONCURRENCY (seconds, complete):"
echo "  local: $(throughput "$local_dir")"
echo "  swarm: $(throughput "$swarm_dir")"
