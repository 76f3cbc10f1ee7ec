#!/usr/bin/env bash
# Run by bench/events/run.sh inside bench/gateway's stack: wrk against the measured gateway
# (GW_URL, $LABEL_GW) and the one it is compared with (gwbase, the next port, $LABEL_BASE), then
# a summary.
set -euo pipefail
BASE_URL=${GW_URL/18443/${GWBASE_PORT:-18446}}
OUT=$(mktemp -d /tmp/geofaas-events-out.XXXXXX)
# Both builds answer a 202 before anything else is measured.
for url in "$GW_URL" "$BASE_URL"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$WORK/tls/ca.pem" -H 'Prefer: respond-async' -d x "$url")
  [[ $code == 202 ]] || { echo "$url answered $code to an async call" >&2; exit 1; }
done
# Waits (at most 120 s) until neither gateway has an accepted call left to run, nor the queue.
wait_drained() {
  for _ in $(seq 600); do
    local left=0 n
    for url in "$GW_URL" "$BASE_URL"; do
      n=$(curl -s --cacert "$WORK/tls/ca.pem" "${url%/fn/*}/metrics" \
        | awk '/^geofaas_activations_pending/ {s += $NF} END {print s + 0}')
      left=$((left + ${n%.*}))
    done
    if [[ -n "${NATS_MONITOR:-}" ]]; then
      n=$(curl -s "http://127.0.0.1:$NATS_MONITOR/jsz?streams=true" \
        | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(s["state"]["messages"] for a in d.get("account_details",[]) for s in a.get("stream_detail",[]) if s["name"]=="GEOFAAS_CALLS"))')
      left=$((left + n))
    fi
    (( left == 0 )) && return 0
    sleep 0.2
  done
  echo "accepted calls still waiting after 120 s" >&2
}
for run in $(seq "$RUNS_EVENTS"); do
  order=("$LABEL_GW" "$LABEL_BASE")
  (( run % 2 == 0 )) && order=("$LABEL_BASE" "$LABEL_GW")
  for which in "${order[@]}"; do
    url=$GW_URL; [[ $which == "$LABEL_BASE" ]] && url=$BASE_URL
    wait_drained
    echo "run $run $which" >&2
    taskset -c "$LOAD_CPUS" wrk -t1 -c"$CONNS_EVENTS" -d"${DURATION_EVENTS}s" --latency \
      -s "$EVENTS_HERE/async.lua" "$url" > "$OUT/$which-$run.txt"
  done
done
python3 - "$OUT" "$RUNS_EVENTS" "$LABEL_GW" "$LABEL_BASE" <<'PY'
import re, statistics, sys, pathlib
out, runs, gw, base = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
def ms(text):
    v, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
    return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
rows = {}
for which in (gw, base):
    rps, p50, p99, bad = [], [], [], 0
    for r in range(1, runs + 1):
        t = (out / f"{which}-{r}.txt").read_text()
        rps.append(float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1)))
        p50.append(ms(re.search(r"50%\s+(\S+)", t).group(1)))
        p99.append(ms(re.search(r"99%\s+(\S+)", t).group(1)))
        m = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
        bad += int(m.group(1)) if m else 0
    rows[which] = (statistics.median(rps), statistics.median(p50), statistics.median(p99), bad)
    print(f"{which:8} accepted/s {rows[which][0]:8.0f}   202 P50 {rows[which][1]:6.2f} ms   P99 {rows[which][2]:6.2f} ms   non-2xx {bad}")
j, m = rows[gw], rows[base]
print(f"{gw}/{base}: {j[0] / m[0]:.2f}x the rate, P50 {j[1] - m[1]:+.2f} ms, P99 {j[2] - m[2]:+.2f} ms (median of {runs} runs)")
PY
rm -rf "$OUT"
