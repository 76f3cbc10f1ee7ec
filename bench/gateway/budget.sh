#!/usr/bin/env bash
# The hot path's budget, held by CI: the instructions a steady proxied call executes in the build
# users run (`cargo build --release`), over HTTP/1.1 and h2, counted by callgrind
# (instructions.sh: a figure that does not move with the machine's load), against the budget
# committed in budget.txt. Fails when either grows more than TOLERANCE_PCT (3 %) over it.
#
# Needs: valgrind, h2load (nghttp2-client), nginx, taskset.
# Usage: bench/gateway/budget.sh [BINARY]   (default: builds target/release/geofaas)
#        env: N=3000 calls per count, UPDATE=1 writes the measured figures into budget.txt
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUDGET="$HERE/budget.txt"
N=${N:-3000}
TOLERANCE_PCT=${TOLERANCE_PCT:-3}
BIN=${1:-}
if [[ -z "$BIN" ]]; then
  (cd "$ROOT" && cargo build --release -q -p geofaas)
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/geofaas"
fi
out=$(N=$N "$HERE/instructions.sh" "$BIN")
echo "$out"
# "h1: ... steady state (without handshakes): 45500 per call"
steady() { awk -v p="$1:" '$1 == p { for (i = 1; i <= NF; i++) if ($i == "handshakes):") print $(i + 1) }' <<< "$out"; }
h1=$(steady h1)
h2=$(steady h2)
[[ -n "$h1" && -n "$h2" ]] || { echo "budget: no steady-state count in the output above" >&2; exit 1; }
if [[ -n "${UPDATE:-}" ]]; then
  {
    echo "# Instructions per steady proxied call of the release build (bench/gateway/budget.sh, N=$N),"
    echo "# measured $(date -u +%F) at $(git -C "$ROOT" rev-parse --short HEAD). CI fails beyond +${TOLERANCE_PCT} %."
    echo "h1 = $h1"
    echo "h2 = $h2"
  } > "$BUDGET"
  echo "budget: written to $BUDGET"
  exit 0
fi
python3 - "$BUDGET" "$h1" "$h2" "$TOLERANCE_PCT" <<'PY'
import sys
path, h1, h2, tol = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
budget = {}
for line in open(path):
    line = line.split("#", 1)[0].strip()
    if line:
        key, value = (part.strip() for part in line.split("=", 1))
        budget[key] = int(value)
failed = False
for proto, got in (("h1", h1), ("h2", h2)):
    want = budget[proto]
    change = (got - want) / want * 100
    verdict = "over budget" if change > tol else "ok"
    failed |= change > tol
    print(f"budget {proto}: {got} instructions per steady call, budget {want} ({change:+.1f} %, limit +{tol:g} %): {verdict}")
sys.exit(1 if failed else 0)
PY
