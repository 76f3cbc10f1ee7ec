#!/usr/bin/env bash
# User-space instructions per routed call (a `307`) of one `geofaas node` (edge-0) as its fleet
# grows, counted by callgrind: a figure that, unlike requests per second, does not move with
# other load on the machine. For each size the node of bench/scale/topology.py runs under
# valgrind; after a warm-up, h2load makes N and then 2N calls for a client in the last edge's
# area (4 connections x 8 streams), and the difference is N calls in steady state (the TLS
# handshakes cancel out). With KEEP=dir the callgrind outputs stay there (cg.<size>.1 and .2)
# for `callgrind_annotate`, to see which functions grow with the fleet. With SIM=1 callgrind
# simulates the caches as well and each size also gets its simulated cache misses per call
# (first-level data reads and writes, last-level data): the same model for every size, not this
# machine's counters.
#
# Needs: valgrind, h2load, curl, openssl, python3.
# Usage: bench/scale/instructions.sh       (env: BIN=path (default target/release/geofaas, built
#        unless NO_BUILD=1), SIZES="3 10000", N=3000, PORT=19443, KEEP=dir, SIM=1)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SIZES=${SIZES:-3 10000}
N=${N:-3000}
PORT=${PORT:-19443}
WORK=$(mktemp -d /tmp/geofaas-scale-cg.XXXXXX)
PID=""
cleanup() {
  [[ -n "$PID" ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  if [[ -n "${KEEP:-}" ]]; then mkdir -p "$KEEP" && cp "$WORK"/cg.* "$KEEP"/ 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cd "$ROOT"
if [[ -z "${NO_BUILD:-}" && -z "${BIN:-}" ]]; then cargo build --release -q -p geofaas; fi
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/geofaas}
mkdir -p "$WORK/functions"
"$HERE/tls.sh" "$WORK/tls"
export GEOFAAS_OFFLOAD_SECRET=scale-bench-secret

count() { callgrind_annotate "$1" 2> /dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}'; }
# The PROGRAM TOTALS line's counts (Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw with SIM=1).
totals() {
  callgrind_annotate "$1" 2> /dev/null |
    awk '/PROGRAM TOTALS/ {gsub(",", ""); for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) printf "%s ", $i; print ""; exit}'
}
base=""
for n in $SIZES; do
  dir="$WORK/n$n"
  mkdir -p "$dir"
  python3 "$HERE/topology.py" "$n" "$PORT" "$WORK/tls" > "$dir/topology.toml" 2> "$dir/point"
  point=$(cat "$dir/point")
  valgrind -q --tool=callgrind ${SIM:+--cache-sim=yes} --callgrind-out-file="$WORK/cg.$n" \
    "$BIN" node --config "$dir/topology.toml" --node edge-0 --state-dir "$dir/state" 2> "$dir/node.log" &
  PID=$!
  for _ in $(seq 1200); do
    curl -fsk -o /dev/null "https://127.0.0.1:$PORT/readyz" 2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || { echo "node of $n edges exited:" >&2; tail -5 "$dir/node.log" >&2; exit 1; }
    sleep 0.1
  done
  load=(h2load -c 4 -m 8 -H "x-client-location: $point" "https://127.0.0.1:$PORT/fn/echo")
  "${load[@]}" -n 500 > /dev/null
  code=$(curl -sk -o /dev/null -w '%{http_code}' -H "x-client-location: $point" "https://127.0.0.1:$PORT/fn/echo")
  [[ "$code" == 307 ]] || { echo "a client at $point got $code, not a 307" >&2; exit 1; }
  for calls in "$N" "$((2 * N))"; do
    callgrind_control --zero "$PID" > /dev/null 2>&1
    "${load[@]}" -n "$calls" | grep -q "$calls succeeded" || { echo "h2load: not all $calls calls succeeded" >&2; exit 1; }
    callgrind_control --dump="calls-$calls" "$PID" > /dev/null 2>&1
  done
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
  files=("$WORK"/cg.$n.*)
  once=$(count "${files[0]}")
  twice=$(count "${files[1]}")
  per=$(( (twice - once) / N ))
  ratio=""
  if [[ -z "$base" ]]; then base=$per; else ratio=$(python3 -c "print(f' ({$per / $base:.2f}x the first size)')"); fi
  echo "$n edges: $per instructions per routed call in steady state$ratio"
  if [[ -n "${SIM:-}" ]]; then
    python3 - "$N" "$(totals "${files[0]}")" "$(totals "${files[1]}")" <<'PY'
import sys
n, once, twice = int(sys.argv[1]), sys.argv[2].split(), sys.argv[3].split()
names = ["Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"]
per = {k: (int(b) - int(a)) / n for k, a, b in zip(names, once, twice)}
print(f"  per call: D1 misses {per['D1mr'] + per['D1mw']:.0f}, last-level data misses "
      f"{per['DLmr'] + per['DLmw']:.1f}, I1 misses {per['I1mr']:.0f}")
PY
  fi
done
