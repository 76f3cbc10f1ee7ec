#!/usr/bin/env bash
# Live comparison of the scheduling policies (issue 22): reactive (`none`: offload after an
# error, a timeout or when full), `greedy` and `ppo`, ROUNDS times each on every workload,
# interleaved (round r runs every workload once per policy, the policies' order rotated each
# round), each run on fresh `geofaas node` processes (`loadtest --spawn`, userspace delay model:
# 5 ms between edges, 25 ms to the cloud). compare_table.py then prints, per workload and policy,
# the mean and P99 latency as the mean over runs with a 95 % bootstrap interval over runs, the
# SLO violations (late or failed calls), and PPO's and reactive's mean over greedy's per round.
#
# Workloads:
#   highload  the paper's high load on the small edge (examples/berlin-small-edge.toml: Potsdam
#             with one instance; its `ppo` loads scheduler/weights/berlin-small-edge.safetensors):
#             CLIENTS (4,16) static clients in Potsdam's area call sievehard
#             (primes below 10 million) CALLS (10) times each, once a second;
#   mobility  one client walks mobility-path-99.csv across tu-berlin's and Potsdam's areas,
#             one sieve call per point, following handovers (examples/berlin.toml);
#   mixed     `loadtest mixed` on examples/berlin.toml: MIXED_FUNCTIONS (24) generated sieves of
#             four sizes, Zipf(MIXED_ZIPF, 1.0) popularity, MIXED_CLIENTS (4) static clients per
#             edge area, MIXED_CALLS (400) Poisson calls at MIXED_RATE (10) per second, idle
#             instances evicted after MIXED_KEEP_ALIVE_S (5) s so rare functions start cold, SLO
#             MIXED_SLO_MS (1000); the seed is the round, so every policy of a round gets the
#             same calls.
#
# Capacity: with PIN=1 (default) each node process runs on its own CPUs through
# pinned-node.sh: CPUS_potsdam=0, CPUS_tu_berlin=1, CPUS_cloud=0-1 (override any). The load
# generator shares them; on a 2-core machine that other jobs use as well, read the intervals.
#
# Usage: bench/scheduler/compare.sh     (about 2 minutes per round on 2 cores)
#   env: BIN (default $CARGO_TARGET_DIR or target, release/geofaas)  OUT (out/scheduler-compare)
#        ROUNDS=5  POLICIES="none greedy ppo"  WORKLOADS="highload mobility mixed"  CLIENTS=4,16
#        CALLS=10  PIN=1  MIXED_*  LOOPBACK
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/geofaas}
OUT=${OUT:-out/scheduler-compare}
DATA=${DATA:-$ROOT/../shared/data/geofaas-berlin}
ROUNDS=${ROUNDS:-5}
read -r -a policies <<< "${POLICIES:-none greedy ppo}"
[[ -x "$BIN" ]] || { echo "no geofaas binary at $BIN (cargo build --release, or BIN=...)" >&2; exit 1; }
if [[ ${PIN:-1} == 1 ]]; then
  export GEOFAAS_REAL_BIN=$BIN GEOFAAS_BIN=$HERE/pinned-node.sh
  export CPUS_potsdam=${CPUS_potsdam:-0} CPUS_tu_berlin=${CPUS_tu_berlin:-1} CPUS_cloud=${CPUS_cloud:-0-1}
fi

variant=""
trap '[[ -n "$variant" ]] && rm -f "$variant"' EXIT
# $1 topology, $2 policy: a copy with that policy beside it (relative paths still hold), its
# nodes on LOOPBACK1N:8443 instead of 127.0.0.1N:8443 when LOOPBACK is set (e.g. 127.0.0.2, so
# that a run does not meet another fleet on the same machine).
with_policy() {
  variant="$(dirname "$1")/.compare-$2.toml"
  sed -e "s/^policy = .*/policy = \"$2\"/" \
      -e "s/127\.0\.0\.1\([0-9]\):8443/${LOOPBACK:-127.0.0.1}\1:8443/g" "$1" > "$variant"
}

mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  n=${#policies[@]}
  order=()
  for i in $(seq 0 $((n - 1))); do order+=("${policies[$(((i + r - 1) % n))]}"); done
  for w in ${WORKLOADS:-highload mobility mixed}; do
    for policy in "${order[@]}"; do
      dir="$OUT/$w/$policy/$r"
      mkdir -p "$dir"
      echo "== round $r $w $policy ($(uptime))" >&2
      uptime > "$dir/uptime.txt"
      case $w in
        highload)
          with_policy "$ROOT/examples/berlin-small-edge.toml" "$policy"
          "$BIN" loadtest highload --spawn --topology "$variant" \
            --clients-file "$DATA/potsdam-clients-16.csv" --clients "${CLIENTS:-4,16}" \
            --calls "${CALLS:-10}" --interval-ms 1000 --function sievehard --body 10000000 \
            --out "$dir" > "$dir/log.txt" 2>&1 ;;
        mobility)
          with_policy "$ROOT/examples/berlin.toml" "$policy"
          "$BIN" loadtest mobility --spawn --topology "$variant" \
            --path "$DATA/mobility-path-99.csv" --function sieve --warm \
            --out "$dir" > "$dir/log.txt" 2>&1 ;;
        mixed)
          with_policy "$ROOT/examples/berlin.toml" "$policy"
          "$BIN" loadtest mixed --spawn --topology "$variant" \
            --functions "${MIXED_FUNCTIONS:-24}" --zipf "${MIXED_ZIPF:-1.0}" --seed "$r" \
            --clients-per-edge "${MIXED_CLIENTS:-4}" --calls "${MIXED_CALLS:-400}" \
            --rate "${MIXED_RATE:-10}" --keep-alive-s "${MIXED_KEEP_ALIVE_S:-5}" \
            --slo-ms "${MIXED_SLO_MS:-1000}" --timeout-ms 30000 \
            --out "$dir" > "$dir/log.txt" 2>&1 ;;
        *) echo "unknown workload $w" >&2; exit 2 ;;
      esac
      rm -f "$variant"; variant=""
    done
  done
done
python3 "$HERE/compare_table.py" "$OUT" "$ROOT/examples"
python3 "$HERE/compare_plot.py" "$OUT" "$OUT/compare.svg"
