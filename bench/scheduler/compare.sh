#!/usr/bin/env bash
# Live comparison of the scheduling policies (issue 22): reactive (`none`: offload after an
# error, a timeout or when full), `greedy` and `ppo`, ROUNDS times each on every workload,
# interleaved (round r runs every workload once per policy, the policies' order rotated each
# round), each run on fresh `geofaas node` processes (`loadtest --spawn`, userspace delay model:
# 5 ms between edges, 25 ms to the cloud). compare_table.py then prints, per workload and policy,
# the mean and P99 latency as the mean over runs with a 95 % bootstrap interval over runs, the
# SLO violations (late or failed calls), and PPO's and reactive's mean over greedy's per round.
#
# Capacity (CAPACITY=quota, the default): the paper's edges are small devices and its cloud is
# big; on one 2-core machine that is modelled with a CPU quota per node process
# (pinned-node.sh, a cgroup each): Potsdam and tu-berlin QUOTA_potsdam=0.5 and
# QUOTA_tu_berlin=0.5 CPU each (half a core's time), the cloud no quota (the whole machine, 2
# CPUs, shared with the edges and the load generator when they are busy). Each node's `cores`
# in the topology copy is what its process gets (cores_of: 1 for each edge, 2 for the cloud),
# the figure its profiles file reports too, so the model plans with the real capacity instead
# of the topology's defaults (8, 8, 64). CAPACITY=pin pins with taskset instead (Potsdam CPU 0,
# tu-berlin CPU 1, the cloud both: every node shares the cores, the cloud no bigger than an
# edge: the earlier runs); CAPACITY=none runs the nodes as they are.
#
# Workloads, each sized so that an edge fills while the fleet as a whole has room (at the
# paper's size on this machine nothing has room: 16 clients x sievehard of 10 million need
# about 3.9 CPU-seconds per second, twice the machine):
#   highload  the paper's high load on the small edge (examples/berlin-small-edge.toml: Potsdam
#             with one instance; its `ppo` loads scheduler/weights/berlin-small-edge-quota.safetensors):
#             CLIENTS (4,16) static clients in Potsdam's area call sievehard (primes below
#             HIGHLOAD_BODY, 3 million: about 47 ms of CPU, 94 ms on half a core) CALLS (10)
#             times each, once a second: 16 clients need 0.75 CPU-seconds a second, 1.5 times
#             Potsdam's quota and a third of the machine;
#   mobility  one client walks mobility-path-99.csv across tu-berlin's and Potsdam's areas,
#             one sieve call per point at MOBILITY_RATE (5) per second (20 s), following
#             handovers (examples/berlin.toml), while MOBILITY_BACKGROUND (16) static clients in
#             Potsdam's area (potsdam-clients-16.csv), the area the walker enters, each call
#             sievehard of HIGHLOAD_BODY once a second (their calls in background.csv, in a
#             table of their own): Potsdam is as full as in highload's 16-client round;
#   mixed     `loadtest mixed` on examples/berlin.toml: MIXED_FUNCTIONS (24) generated sieves of
#             four sizes, Zipf(MIXED_ZIPF, 1.0) popularity, MIXED_CLIENTS (4) static clients per
#             edge area, MIXED_CALLS (800) Poisson calls at MIXED_RATE (40) per second (about
#             12 ms of CPU per call on average: half of each edge's quota, in bursts), idle
#             instances evicted after MIXED_KEEP_ALIVE_S (5) s so rare functions start cold, SLO
#             MIXED_SLO_MS (1000); the seed is the round, so every policy of a round gets the
#             same calls; every function is first called once at every node, unrecorded
#             (`--warm`; MIXED_WARM=0: not), so every measured call is placed by the policy
#             instead of the run opening with the same unplaced burst of first calls whatever
#             the policy (docs/lab/scheduler-trials.md, "warmed mixed workloads");
#   coldmix   mixed with cold starts that cost more than a fork: each new instance of a
#             generated function spends COLDMIX_INIT_MS (50) ms of CPU at its first call (a model
#             loaded, a cache filled; `loadtest mixed --init-ms`), 100 ms on an edge's half core,
#             at COLDMIX_RATE (20) calls per second, otherwise as mixed: where an instance is
#             started now decides what later calls of that function pay.
# The load generator is not limited; on a machine that other jobs use as well, read the
# intervals and each run's uptime.txt.
#
# Usage: bench/scheduler/compare.sh     (about 6 minutes per round on 2 cores)
#   env: BIN (default $CARGO_TARGET_DIR or target, release/geofaas)  OUT (out/scheduler-compare)
#        PPO_WEIGHTS (see with_policy; empty: each topology's own)  PPO_MARGIN (`[scheduler]
#        margin` of every copy: PPO chooses among the options predicted within that fraction
#        of the best; default 0.25, empty: none)  PPO_BUSY_MARGIN (`[scheduler]
#        busy_margin`: the narrower margin of options on a node busy with other calls; default
#        0.05, empty: PPO_MARGIN for every option)
#        ROUNDS=5  POLICIES="none greedy ppo"  WORKLOADS="highload mobility mixed coldmix"  CLIENTS=4,16
#        SEED_BASE (0: mixed's and coldmix's seed is the round plus this; e.g. 100 for
#        validation runs apart from a comparison's seeds)
#        CALLS=10  HIGHLOAD_BODY  MOBILITY_*  MIXED_*  CAPACITY  QUOTA_<id>  CPUS_<id>
#        QUOTA_PERIOD_US  LOOPBACK
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/geofaas}
OUT=${OUT:-out/scheduler-compare}
DATA=${DATA:-$ROOT/../shared/data/geofaas-berlin}
ROUNDS=${ROUNDS:-5}
read -r -a policies <<< "${POLICIES:-none greedy ppo}"
[[ -x "$BIN" ]] || { echo "no geofaas binary at $BIN (cargo build --release, or BIN=...)" >&2; exit 1; }
source "$HERE/capacity.sh"
source "$HERE/workloads.sh"

variant=""
cleanup() {
  [[ -n "$variant" ]] && rm -f "$variant"
  remove_cgroups
}
trap cleanup EXIT
# $1 topology, $2 policy: a copy with that policy beside it (relative paths still hold), each
# node's `cores` what its process gets (cores_of), its nodes on LOOPBACK1N:8443 instead of
# 127.0.0.1N:8443 when LOOPBACK is set (e.g. 127.0.0.2, so that a run does not meet another
# fleet on the same machine).
# PPO_WEIGHTS (relative to examples/, as the topology names it) replaces the topology's
# `[scheduler] weights` or adds it: by default, with CAPACITY=quota, the weights trained for the
# quota capacity, on every workload (docs/scheduler.md: in the simulator calibrated to each
# workload's captured profiles they are 0.99x greedy's mean on mobility and 0.97x on mixed,
# where the shipped Berlin weights, trained for 8-core edges, are 1.36x and 1.09x).
if [[ ${CAPACITY:-quota} == quota ]]; then
  PPO_WEIGHTS=${PPO_WEIGHTS-../scheduler/weights/berlin-small-edge-quota.safetensors}
fi
# PPO chooses among the options the model predicts within 25 % of the best (docs/lab/scheduler-trials.md,
# "PPO within the model's margin"); PPO_MARGIN= (empty) lets it choose among all.
PPO_MARGIN=${PPO_MARGIN-0.25}
# Options on a node busy with other calls only within 5 % of the best: on high load the wide
# margin let PPO keep calls at busy edges the model rightly put 25 % behind (docs/lab/scheduler-trials.md,
# "Narrowing the margin where an option buys nothing later").
PPO_BUSY_MARGIN=${PPO_BUSY_MARGIN-0.05}
with_policy() {
  variant="$(dirname "$1")/.compare-$2.toml"
  local cores weights=()
  mapfile -t cores < <(cores_sed)
  if [[ -n "${PPO_WEIGHTS:-}" ]]; then
    weights=(-e '/^weights = /d' -e "/^policy = /a weights = \"$PPO_WEIGHTS\"")
  fi
  if [[ -n "${PPO_MARGIN:-}" ]]; then
    weights+=(-e '/^margin = /d' -e "/^policy = /a margin = $PPO_MARGIN")
  fi
  if [[ -n "${PPO_MARGIN:-}" && -n "${PPO_BUSY_MARGIN:-}" ]]; then
    weights+=(-e '/^busy_margin = /d' -e "/^policy = /a busy_margin = $PPO_BUSY_MARGIN")
  fi
  sed -e "s/^policy = .*/policy = \"$2\"/" "${cores[@]}" "${weights[@]}" \
      -e "s/127\.0\.0\.1\([0-9]\):8443/${LOOPBACK:-127.0.0.1}\1:8443/g" "$1" > "$variant"
}

mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  n=${#policies[@]}
  order=()
  for i in $(seq 0 $((n - 1))); do order+=("${policies[$(((i + r - 1) % n))]}"); done
  for w in ${WORKLOADS:-highload mobility mixed coldmix}; do
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
            --calls "${CALLS:-10}" --interval-ms 1000 --function sievehard --body "${HIGHLOAD_BODY:-3000000}" \
            --out "$dir" > "$dir/log.txt" 2>&1 ;;
        mobility)
          with_policy "$ROOT/examples/berlin.toml" "$policy"
          mobility_load "$variant" "$dir" ;;
        mixed)
          with_policy "$ROOT/examples/berlin.toml" "$policy"
          mixed_load "$variant" "$dir" "$((r + ${SEED_BASE:-0}))" ;;
        coldmix)
          with_policy "$ROOT/examples/berlin.toml" "$policy"
          MIXED_INIT_MS=${COLDMIX_INIT_MS:-50} MIXED_RATE=${COLDMIX_RATE:-20} \
            mixed_load "$variant" "$dir" "$((r + ${SEED_BASE:-0}))" ;;
        *) echo "unknown workload $w" >&2; exit 2 ;;
      esac
      rm -f "$variant"; variant=""
    done
  done
done
python3 "$HERE/compare_table.py" "$OUT" "$ROOT/examples"
python3 "$HERE/compare_plot.py" "$OUT" "$OUT/compare.svg"
