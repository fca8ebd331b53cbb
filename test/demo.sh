#!/usr/bin/env bash
# demo.sh — the main job on the local stack: migrate, make sure the topic
# exists, run the worker, show it connected and ready. `make demo` runs this
# with the stack up (stack/with-stack.sh) and leaves the stack running;
# `make stack-down` stops it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=bin/effectively
export EFFECTIVELY_LOG_FORMAT=console
export EFFECTIVELY_KAFKA_GROUP=${EFFECTIVELY_KAFKA_GROUP:-effectively-demo}
http=127.0.0.1:9410

echo "== migrate"
$bin migrate
echo "== topic"
$bin produce --topic accounts --partitions 8
echo "== worker"
log=$(mktemp)
$bin run >"$log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  if curl -fsS "http://$http/readyz" >/dev/null 2>&1; then break; fi
  kill -0 $pid 2>/dev/null || { cat "$log"; echo "demo: the worker exited"; exit 1; }
  sleep 0.5
done
echo "readyz: $(curl -sS "http://$http/readyz")"
echo "metrics: $(curl -sS "http://$http/metrics" | grep -c '^effectively_') effectively_* series, e.g.:"
curl -sS "http://$http/metrics" | grep -E '^effectively_(assigned_partitions|rebalances_total)' || true
kill -TERM $pid
wait $pid || { cat "$log"; exit 1; }
trap - EXIT
echo "== worker log (tail)"
tail -n 5 "$log"
rm -f "$log"
echo
echo "demo: stack up, schema migrated, worker connected and ready. Stop the stack with: make stack-down"
