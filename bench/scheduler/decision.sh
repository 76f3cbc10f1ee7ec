#!/usr/bin/env bash
# What the live scheduling decision adds to a warm call: the median latency of warm `sieve` calls
# at tu-berlin (one client, one call at a time, h2) under `geofaas up` with policy none, greedy and
# ppo, interleaved over $ROUNDS rounds in one run, and each policy's ratio to `none`.
#
# Usage: bench/scheduler/decision.sh    (env: BIN, ROUNDS=3, N=3000 calls per measurement,
#        POLICIES="none greedy ppo"; needs h2load from nghttp2-client)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/geofaas}
ROUNDS=${ROUNDS:-3}
N=${N:-3000}
WORK=$(mktemp -d /tmp/geofaas-decision.XXXXXX)
UP_PID=""
trap '[[ -n "$UP_PID" ]] && kill -INT "$UP_PID" 2> /dev/null; wait 2> /dev/null; rm -rf "$WORK" "$ROOT"/examples/.decision-*.toml' EXIT
printf '100' > "$WORK/body"
for round in $(seq "$ROUNDS"); do
  for policy in ${POLICIES:-none greedy ppo}; do
    variant="$ROOT/examples/.decision-$policy.toml"
    sed "s/^policy = .*/policy = \"$policy\"/" "$ROOT/examples/berlin.toml" > "$variant"
    (cd "$WORK" && exec "$BIN" up --config "$variant" > "$WORK/up-$policy.log" 2>&1) &
    UP_PID=$!
    for _ in $(seq 100); do
      curl -s -o /dev/null --cacert "$WORK/.geofaas/ca.pem" https://127.0.0.11:8443/readyz && break
      sleep 0.2
    done
    h2=(h2load -c1 -m1 -d "$WORK/body" -H 'x-client-location: 52.51,13.32' https://127.0.0.11:8443/fn/sieve)
    "${h2[@]}" -n 300 > /dev/null
    "${h2[@]}" -n "$N" --log-file="$WORK/$policy-$round.log" | grep -q "$N succeeded"
    median=$(awk '{print $3}' "$WORK/$policy-$round.log" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    # The node's own decision-time histogram: mean seconds per decision (0 without a policy).
    decision=$(curl -s --cacert "$WORK/.geofaas/ca.pem" https://127.0.0.11:8443/metrics |
      awk '/^geofaas_scheduler_decision_seconds_sum/ {s += $NF} /^geofaas_scheduler_decision_seconds_count/ {c += $NF}
           END {printf "%.2f", c ? s / c * 1e6 : 0}')
    echo "$round $policy $median $decision" | tee -a "$WORK/medians.txt"
    kill -INT "$UP_PID"; wait "$UP_PID" || true; UP_PID=""
    rm -f "$variant"
  done
done
echo
echo "median of the per-round medians (µs) and the ratio to policy none; $(uptime)"
python3 - "$WORK/medians.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by, decisions = {}, {}
for _, policy, us, decision in rows:
    by.setdefault(policy, []).append(float(us))
    decisions.setdefault(policy, []).append(float(decision))
base = statistics.median(by["none"]) if "none" in by else None
print("| policy | median call µs (median of rounds) | ratio to none | mean decision µs (node histogram) | decision / median call of none | rounds (µs) |")
print("|---|---:|---:|---:|---:|---|")
for policy, values in by.items():
    m = statistics.median(values)
    d = statistics.median(decisions[policy])
    ratio = f"{m / base:.4f}" if base else "-"
    share = f"{d / base:.2%}" if base else "-"
    print(f"| {policy} | {m:.0f} | {ratio} | {d:.2f} | {share} | {', '.join(f'{v:.0f}' for v in values)} |")
PY
