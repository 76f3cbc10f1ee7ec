#!/usr/bin/env bash
# Captures the measured-profile files (`GET /node/profiles`) of every node of a live high-load
# run, for the simulator's calibrated topology (`simulate|train --profiles`, docs/scheduler.md):
# the paper's high load on the small edge (examples/berlin-small-edge.toml: Potsdam with one
# instance), CLIENTS static clients in Potsdam's area calling sievehard CALLS times each, once a
# second, on fresh `geofaas node` processes (`loadtest --spawn`, userspace delay model), each
# node with the capacity compare.sh gives it (capacity.sh: CAPACITY=quota by default, half a
# core's time for each edge, the whole machine for the cloud, and `cores` to match; CAPACITY=pin
# as the files of highload-small-edge/ were made). While the run goes, every node's
# profiles are fetched once a second; the last answer of each node is kept, so the files say
# what the nodes measured at the end of the run: warm and cold times, instance memory (PSS),
# the rate at which calls arrived, the CPUs each node could use, and the links.
#
# WORKLOAD=mobility captures compare.sh's mobility workload instead (workloads.sh, with its
# MOBILITY_* and HIGHLOAD_BODY settings: the walk beside 16 background clients in Potsdam's
# area) on examples/berlin.toml: the files for the simulator calibrated to that workload
# (scheduler/testdata/profiles/mobility-quota/). WORKLOAD=mixed captures compare.sh's mixed
# workload (its MIXED_* settings, seed 1); the loadtest's output is then in $OUT/run/log.txt.
#
# Usage: bench/scheduler/capture-profiles.sh       (about 30 s)
#   env: BIN (default $CARGO_TARGET_DIR or target, release/geofaas)  OUT (out/profiles-capture)
#        POLICY=none  CLIENTS=16  CALLS=20  BODY=10000000 (sievehard's limit)  CAPACITY=quota
#        WORKLOAD=highload|mobility|mixed  MOBILITY_*  HIGHLOAD_BODY  MIXED_*
#   Writes $OUT/<node>.json, the loadtest's own output in $OUT/run, and uptime before/after.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/geofaas}
OUT=${OUT:-out/profiles-capture}
DATA=${DATA:-$ROOT/../shared/data/geofaas-berlin}
POLICY=${POLICY:-none}
[[ -x "$BIN" ]] || { echo "no geofaas binary at $BIN (cargo build --release, or BIN=...)" >&2; exit 1; }
source "$HERE/capacity.sh"
source "$HERE/workloads.sh"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STATE=$(mktemp -d /tmp/geofaas-capture.XXXXXX)
WORKLOAD=${WORKLOAD:-highload}
case "$WORKLOAD" in
  highload) topology="$ROOT/examples/berlin-small-edge.toml" ;;
  mobility|mixed) topology="$ROOT/examples/berlin.toml" ;;
  *) echo "WORKLOAD=$WORKLOAD: expected highload, mobility or mixed" >&2; exit 2 ;;
esac
variant="$ROOT/examples/.capture-$POLICY.toml"
poller=""
trap '[[ -n "$poller" ]] && kill "$poller" 2> /dev/null; rm -rf "$STATE" "$variant"; remove_cgroups' EXIT
mapfile -t cores < <(cores_sed)
sed -e "s/^policy = .*/policy = \"$POLICY\"/" "${cores[@]}" "$topology" > "$variant"

# node id and listen address of each node of the topology file
mapfile -t nodes < <(awk -F'"' '/^id = /{id=$2} /^listen = /{if (id != "") print id, $2; id=""}' "$variant")
poll() {
  while sleep 1; do
    [[ -f "$STATE/ca.pem" ]] || continue
    for n in "${nodes[@]}"; do
      read -r id addr <<< "$n"
      if curl -sf --max-time 2 --cacert "$STATE/ca.pem" "https://$addr/node/profiles" -o "$STATE/$id.part"; then
        python3 -m json.tool "$STATE/$id.part" > "$OUT/$id.json"
      fi
    done
  done
}
poll &
poller=$!
uptime | tee "$OUT/uptime-before.txt"
if [[ $WORKLOAD == highload ]]; then
  "$BIN" loadtest highload --spawn --state-dir "$STATE" --topology "$variant" \
    --clients-file "$DATA/potsdam-clients-16.csv" --clients "${CLIENTS:-16}" \
    --calls "${CALLS:-20}" --interval-ms 1000 --function sievehard --body "${BODY:-10000000}" \
    --out "$OUT/run" > "$OUT/run.log" 2>&1
elif [[ $WORKLOAD == mixed ]]; then
  mkdir -p "$OUT/run"
  mixed_load "$variant" "$OUT/run" 1 --state-dir "$STATE"
else
  mkdir -p "$OUT/run"
  mobility_load "$variant" "$OUT/run" --state-dir "$STATE"
fi
kill "$poller"; wait "$poller" 2> /dev/null || true; poller=""
uptime | tee "$OUT/uptime-after.txt"
ls -l "$OUT"/*.json
