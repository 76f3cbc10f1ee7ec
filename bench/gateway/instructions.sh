#!/usr/bin/env bash
# User-space instructions per proxied call of a gateway build, counted by callgrind: a figure that,
# unlike requests per second, does not move with other load on the machine. Starts the same stack
# as run.sh (origin, gateway under valgrind, nginx), warms up, then counts the instructions the
# gateway executes for $N calls over HTTP/1.1 (h2load --h1, 32 connections) and for $N over h2
# (4 connections x 8 streams).
#
# Needs: valgrind, h2load, and what run.sh needs.
# Usage: bench/gateway/instructions.sh [BINARY]      (env: N=3000, PRELOAD=lib.so for LD_PRELOAD,
#        KEEP=dir to keep the callgrind outputs, cg.out.1 = h1 and cg.out.2 = h2, for callgrind_annotate)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(realpath "${1:-$HERE/../../target/release/geofaas}")
N=${N:-3000}
OUT=$(mktemp -d /tmp/geofaas-cg.XXXXXX)
trap 'if [[ -n "${KEEP:-}" ]]; then mkdir -p "$KEEP" && cp "$OUT"/cg.out.* "$KEEP"/; fi; rm -rf "$OUT"' EXIT
env_pre=""
[[ -n "${PRELOAD:-}" ]] && env_pre="env LD_PRELOAD=$PRELOAD"
printf '#!/bin/sh\nexec %s valgrind -q --tool=callgrind --callgrind-out-file=%s/cg.out %s "$@"\n' \
  "$env_pre" "$OUT" "$BIN" > "$OUT/wrap.sh"
chmod +x "$OUT/wrap.sh"
cat > "$OUT/load.sh" <<LOAD
set -e
printf 'hello world' > "\$WORK/body.txt"
h1=(h2load --h1 -t1 -c32 -d "\$WORK/body.txt")
h2=(h2load -t1 -c4 -m8 -d "\$WORK/body.txt")
"\${h1[@]}" -n 500 "\$GW_URL" > /dev/null
"\${h2[@]}" -n 500 "\$GW_URL" > /dev/null
callgrind_control --zero "\$GW_PID" > /dev/null 2>&1
"\${h1[@]}" -n $N "\$GW_URL" | grep -q "$N succeeded"
callgrind_control --dump=h1 "\$GW_PID" > /dev/null 2>&1
callgrind_control --zero "\$GW_PID" > /dev/null 2>&1
"\${h2[@]}" -n $N "\$GW_URL" | grep -q "$N succeeded"
callgrind_control --dump=h2 "\$GW_PID" > /dev/null 2>&1
sleep 1
LOAD
NO_BUILD=1 BIN="$OUT/wrap.sh" HOLD_CMD="bash $OUT/load.sh" "$HERE/run.sh" > /dev/null
for part in 1 2; do
  total=$(callgrind_annotate "$OUT/cg.out.$part" 2> /dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')
  proto=$([[ $part == 1 ]] && echo h1 || echo h2)
  echo "$proto: $total instructions for $N calls, $(( total / N )) per call"
done
