#!/usr/bin/env bash
# Foreman CPU and RSS with 200 queued/running replay tasks, with and
# without one open dashboard (headless chromium on the task list).
# Usage: bench/dashboard-overhead.sh (SAHEELI=path IMAGE=tag WIN=seconds).
# Prints CPU (share of one core) and RSS of `saheeli serve` per window.
set -euo pipefail
SAHEELI=${SAHEELI:-target/debug/saheeli}
IMAGE=${IMAGE:-saheeli-servo:latest}
WIN=${WIN:-30}
dir=$(mktemp -d /tmp/saheeli-measure.XXXXXX)
cd "$dir"
cat > config.yaml <<CFG
image: $IMAGE
concurrency: 8
run_dir: /tmp/sm-run
stop_grace: 1s
CFG
cat > sleep.json <<'S'
{"turns": [
 {"tool_calls": [{"name": "execute_shell", "arguments": {"command": "sleep 45"}}]},
 {"tool_calls": [{"name": "task_complete", "arguments": {"message": "slept"}}]}
]}
S
printf -- '---\ntitle: sleeper\nmodel: replay:sleep.json\n---\nSleep.\n' > p.md
for i in $(seq 1 200); do "$SAHEELI" task submit --prompt p.md >/dev/null; done
PORT=$((20000 + RANDOM % 20000))
"$SAHEELI" serve --http 127.0.0.1:$PORT 2>serve.log &
PID=$!
sleep 20
cpu() { awk '{print $14+$15}' /proc/$PID/stat; }
rss() { awk '/VmRSS/ {print $2}' /proc/$PID/status; }
hz=$(getconf CLK_TCK)
window() {
  local a b
  a=$(cpu); sleep "$WIN"; b=$(cpu)
  python3 -c "print(f'{($b-$a)/$hz/$WIN*100:.2f}% CPU')"
  echo "RSS $(( $(rss) / 1024 )) MiB; states: $("$SAHEELI" task status --json --limit 1000 | python3 -c 'import json,sys,collections; print(dict(collections.Counter(t["state"] for t in json.load(sys.stdin))))')"
}
echo "== A: no dashboard"; window
chromium --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
  --user-data-dir="$dir/chrome" "http://127.0.0.1:$PORT/" >/dev/null 2>&1 &
CH=$!
sleep 5
echo "== B: one open dashboard (task list)"; window
kill $CH; wait $CH 2>/dev/null || true
sleep 3
echo "== A again: no dashboard"; window
kill -INT $PID; sleep 1; kill -INT $PID || true
wait $PID || true
echo "dir: $dir"
