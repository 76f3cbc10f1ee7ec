#!/usr/bin/env bash
# User-space instructions per proxied call of a gateway build, counted by callgrind: a figure that,
# unlike requests per second, does not move with other load on the machine. Starts the same stack
# as run.sh (origin, gateway under valgrind, nginx), warms up, then counts the instructions the
# gateway executes for $N calls over HTTP/1.1 (h2load --h1, 32 connections) and for $N over h2
# (4 connections x 8 streams), each with its connections' TLS handshakes, and in steady state
# (2N calls less N calls: the handshakes cancel out).
#
# Needs: valgrind, h2load, and what run.sh needs.
# Usage: bench/gateway/instructions.sh [BINARY]      (env: N=3000, PRELOAD=lib.so for LD_PRELOAD,
#        KEEP=dir to keep the callgrind outputs for callgrind_annotate: cg.out.1 and .2 = h1 N and 2N
#        calls, cg.out.3 and .4 = h2; SIM=1 to simulate the caches and branch predictor as well
#        and print each event's steady-state count per call: data and instruction cache misses
#        (D1mr, LLd_mr, ...), conditional and indirect branches and their mispredictions (Bc, Bcm,
#        Bi, Bim); a simulation, not this machine's counters, but the same for both builds)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(realpath "${1:-$HERE/../../target/lto/geofaas}")
N=${N:-3000}
OUT=$(mktemp -d /tmp/geofaas-cg.XXXXXX)
trap 'if [[ -n "${KEEP:-}" ]]; then mkdir -p "$KEEP" && cp "$OUT"/cg.out.* "$KEEP"/; fi; rm -rf "$OUT"' EXIT
env_pre=""
[[ -n "${PRELOAD:-}" ]] && env_pre="env LD_PRELOAD=$PRELOAD"
printf '#!/bin/sh\nexec %s valgrind -q --tool=callgrind --callgrind-out-file=%s/cg.out %s "$@"\n' \
  "$env_pre" "$OUT" "${SIM:+--cache-sim=yes --branch-sim=yes} $BIN" > "$OUT/wrap.sh"
chmod +x "$OUT/wrap.sh"
cat > "$OUT/load.sh" <<LOAD
set -e
printf 'hello world' > "\$WORK/body.txt"
h1=(h2load --h1 -t1 -c32 -d "\$WORK/body.txt")
h2=(h2load -t1 -c4 -m8 -d "\$WORK/body.txt")
"\${h1[@]}" -n 500 "\$GW_URL" > /dev/null
"\${h2[@]}" -n 500 "\$GW_URL" > /dev/null
# Each protocol twice, N then 2N calls on fresh connections: the difference is N calls without
# the connections' TLS handshakes (steady state); the first is the figure of earlier tables.
for proto in h1 h2; do
  for n in $N $((2 * N)); do
    callgrind_control --zero "\$GW_PID" > /dev/null 2>&1
    if [[ \$proto == h1 ]]; then "\${h1[@]}" -n \$n "\$GW_URL"; else "\${h2[@]}" -n \$n "\$GW_URL"; fi | grep -q "\$n succeeded"
    callgrind_control --dump=\$proto-\$n "\$GW_PID" > /dev/null 2>&1
  done
done
sleep 1
LOAD
NO_BUILD=1 BIN="$OUT/wrap.sh" CLOUD_BIN="$BIN" HOLD_CMD="bash $OUT/load.sh" "$HERE/run.sh" > /dev/null
count() { callgrind_annotate "$OUT/cg.out.$1" 2> /dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}'; }
for proto in h1 h2; do
  first=$([[ $proto == h1 ]] && echo 1 || echo 3)
  once=$(count "$first")
  twice=$(count "$((first + 1))")
  echo "$proto: $once instructions for $N calls, $(( once / N )) per call; steady state (without handshakes): $(( (twice - once) / N )) per call"
done
if [[ -n "${SIM:-}" ]]; then
  events() { callgrind_annotate "$OUT/cg.out.$1" 2> /dev/null | awk '/^Events shown:/ {$1 = $2 = ""; print; exit}'; }
  totals() { # the counts of the PROGRAM TOTALS line, without its percentages
    callgrind_annotate "$OUT/cg.out.$1" 2> /dev/null |
      awk '/PROGRAM TOTALS/ {gsub(",", ""); for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) printf "%s ", $i; print ""; exit}'
  }
  for proto in h1 h2; do
    first=$([[ $proto == h1 ]] && echo 1 || echo 3)
    python3 - "$proto" "$N" "$(events "$first")" "$(totals "$first")" "$(totals "$((first + 1))")" <<'PY'
import sys
proto, n, names, once, twice = sys.argv[1], int(sys.argv[2]), *[a.split() for a in sys.argv[3:]]
print(f"{proto} steady state per call: " + ", ".join(
    f"{name} {(int(b) - int(a)) / n:.1f}" for name, a, b in zip(names, once, twice)))
PY
  done
fi
