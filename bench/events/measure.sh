#!/usr/bin/env bash
# Run by bench/events/run.sh inside bench/gateway's stack: wrk against the journaling build
# (GW_URL) and the in-memory one (gwbase, the next port), then a summary.
set -euo pipefail
BASE_URL=${GW_URL/18443/${GWBASE_PORT:-18446}}
OUT=$(mktemp -d /tmp/geofaas-events-out.XXXXXX)
# Both builds answer a 202 before anything else is measured.
for url in "$GW_URL" "$BASE_URL"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$WORK/tls/ca.pem" -H 'Prefer: respond-async' -d x "$url")
  [[ $code == 202 ]] || { echo "$url answered $code to an async call" >&2; exit 1; }
done
for run in $(seq "$RUNS_EVENTS"); do
  order=(journal memory)
  (( run % 2 == 0 )) && order=(memory journal)
  for which in "${order[@]}"; do
    url=$GW_URL; [[ $which == memory ]] && url=$BASE_URL
    echo "run $run $which" >&2
    taskset -c "$LOAD_CPUS" wrk -t1 -c"$CONNS_EVENTS" -d"${DURATION_EVENTS}s" --latency \
      -s "$EVENTS_HERE/async.lua" "$url" > "$OUT/$which-$run.txt"
    # Let the accepted calls finish before the next round.
    sleep 2
  done
done
python3 - "$OUT" "$RUNS_EVENTS" <<'PY'
import re, statistics, sys, pathlib
out, runs = pathlib.Path(sys.argv[1]), int(sys.argv[2])
def ms(text):
    v, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
    return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
rows = {}
for which in ("journal", "memory"):
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
j, m = rows["journal"], rows["memory"]
print(f"journal/memory: {j[0] / m[0]:.2f}x the rate, P50 {j[1] - m[1]:+.2f} ms, P99 {j[2] - m[2]:+.2f} ms (median of {runs} runs)")
PY
rm -rf "$OUT"
