#!/usr/bin/env bash
# The paper's high-load experiment (IV-B2) once per live scheduling policy, in one run: `none`
# (reactive, as GeoFaaS: offload after an error or timeout), `greedy` and `ppo`, on the small-edge
# Berlin topology (Potsdam with one instance, so that the edge overflows; docs/experiments.md).
# Each policy gets fresh `geofaas node` processes (--spawn, with the userspace delay model) and the
# same 1, 2, 4, 8 and 16 clients of `sievehard`; then highload_table.py prints mean and P99 latency,
# SLO violations and where the calls ran, per policy and round.
#
# Usage: bench/scheduler/highload.sh            (about 5 minutes on 2 cores)
#   env: BIN=path (default $CARGO_TARGET_DIR or target, release/geofaas)  OUT=dir (default
#        out/scheduler-highload)  POLICIES="none greedy ppo"  CLIENTS=1,2,4,8,16  CALLS=10
#        TOPOLOGY=file (default examples/berlin-small-edge.toml)  BODY=10000000
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/geofaas}
OUT=${OUT:-out/scheduler-highload}
TOPOLOGY=${TOPOLOGY:-$ROOT/examples/berlin-small-edge.toml}
CLIENTS_FILE=${CLIENTS_FILE:-$ROOT/../shared/data/geofaas-berlin/potsdam-clients-16.csv}
[[ -x "$BIN" ]] || { echo "no geofaas binary at $BIN (cargo build --release, or BIN=...)" >&2; exit 1; }
grep -q '^policy = ' "$TOPOLOGY" || { echo "$TOPOLOGY has no [scheduler] policy line" >&2; exit 1; }

# The topology with another policy, next to the original so its relative paths still hold.
variant=""
trap '[[ -n "$variant" ]] && rm -f "$variant"' EXIT
mkdir -p "$OUT"
for policy in ${POLICIES:-none greedy ppo}; do
  variant="$(dirname "$TOPOLOGY")/.highload-$policy.toml"
  sed "s/^policy = .*/policy = \"$policy\"/" "$TOPOLOGY" > "$variant"
  echo "== policy $policy ($(uptime))" >&2
  "$BIN" loadtest highload --spawn --topology "$variant" --clients-file "$CLIENTS_FILE" \
    --clients "${CLIENTS:-1,2,4,8,16}" --calls "${CALLS:-10}" --interval-ms 1000 \
    --function sievehard --body "${BODY:-10000000}" --out "$OUT/$policy"
  rm -f "$variant"; variant=""
  uptime > "$OUT/$policy/uptime.txt"
done
python3 "$HERE/highload_table.py" "$OUT" "$TOPOLOGY"
