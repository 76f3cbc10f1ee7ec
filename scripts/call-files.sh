#!/usr/bin/env bash
# Which source files of the gateway crate one call executes, counted from a run (not read from
# the code): an edge node of a debug build (line tables, no inlining across our functions)
# serves functions/echo on its embedded runtime under callgrind; after warm-up calls, the
# counters are zeroed, one warm call is made with curl and they are dumped; the files of
# gateway/src with any instruction in the dump are the call's. Three such calls, and the files
# all three entered are printed (a background task that ran during one of them is left out),
# with their count. A file counts when a function of the gateway crate defined there ran (a
# dependency's generic code compiled into the crate does not).
#
# Needs: valgrind, curl, openssl, python3.
# Usage: scripts/call-files.sh      (env: BIN=path (default the debug build, built unless
#        NO_BUILD=1), PORT=19543, OFFLOAD=1 for a call the edge offloads to the cloud instead,
#        KEEP_WORK=1 to keep the work folder with the dumps)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PORT=${PORT:-19543}
CLOUD_PORT=$((PORT + 1))
WORK=$(mktemp -d /tmp/geofaas-call-files.XXXXXX)
PID=""
CLOUD=""
cleanup() {
  [[ -n "$PID" ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  [[ -n "$CLOUD" ]] && kill "$CLOUD" 2>/dev/null && wait "$CLOUD" 2>/dev/null
  [[ -n "${KEEP_WORK:-}" ]] || rm -rf "$WORK"
}
trap cleanup EXIT

cd "$ROOT"
if [[ -z "${NO_BUILD:-}" && -z "${BIN:-}" ]]; then cargo build -q -p geofaas; fi
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/geofaas}
"$ROOT/bench/scale/tls.sh" "$WORK/tls"
mkdir -p "$WORK/edge-functions"
# The edge serves echo unless the call is to be offloaded; the cloud always does.
[[ -z "${OFFLOAD:-}" ]] && cp -r "$ROOT/functions/echo" "$WORK/edge-functions/"
export GEOFAAS_OFFLOAD_SECRET=call-files-secret
cat > "$WORK/topology.toml" <<TOML
zone = "files.test."
[tls]
cert = "$WORK/tls/cert.pem"
key = "$WORK/tls/key.pem"
ca = "$WORK/tls/ca.pem"

[[node]]
id = "edge"
role = "edge"
location = { lat = 52.51, lon = 13.32 }
area.circle = { center = { lat = 52.51, lon = 13.32 }, radius_km = 20 }
public_url = "https://127.0.0.1:$PORT"
listen = "127.0.0.1:$PORT"
[[node.backend]]
kind = "local"
functions_dir = "$WORK/edge-functions"

[[node]]
id = "cloud"
role = "cloud"
location = { lat = 51.5, lon = -0.18 }
area = "world"
public_url = "https://127.0.0.1:$CLOUD_PORT"
listen = "127.0.0.1:$CLOUD_PORT"
[[node.backend]]
kind = "local"
functions_dir = "$ROOT/functions"
TOML
"$BIN" node --config "$WORK/topology.toml" --node cloud --state-dir "$WORK/cloud-state" 2> "$WORK/cloud.log" &
CLOUD=$!
valgrind -q --tool=callgrind --callgrind-out-file="$WORK/cg" \
  "$BIN" node --config "$WORK/topology.toml" --node edge --state-dir "$WORK/state" 2> "$WORK/edge.log" &
PID=$!
call() {
  curl -sk -o /dev/null -w '%{http_code}' -H 'x-client-location: 52.51,13.32' \
    --data 'hello' "https://127.0.0.1:$PORT/fn/echo"
}
ready=""
for _ in $(seq 600); do
  curl -fsk -o /dev/null "https://127.0.0.1:$PORT/readyz" 2>/dev/null &&
    curl -fsk -o /dev/null "https://127.0.0.1:$CLOUD_PORT/readyz" 2>/dev/null && { ready=1; break; }
  sleep 0.1
done
[[ -n "$ready" ]] || { echo "the nodes never became ready:" >&2; tail -3 "$WORK"/*.log >&2; exit 1; }
for _ in 1 2 3 4 5; do call > /dev/null; done
for i in 1 2 3; do
  callgrind_control --zero "$PID" > /dev/null 2>&1
  code=$(call)
  callgrind_control --dump="call-$i" "$PID" > /dev/null 2>&1
  [[ "$code" == 200 ]] || { echo "the call answered $code" >&2; exit 1; }
done
python3 - "$ROOT/gateway/src" "$WORK"/cg.* <<'PY'
import os, re, subprocess, sys
src, dumps = os.path.realpath(sys.argv[1]), sys.argv[2:]
def files(dump):
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", "--inclusive=no", dump],
                         capture_output=True, text=True).stdout
    found = set()
    for line in out.splitlines():
        # A function of the gateway crate (not a dependency's generic compiled into it), by file.
        m = re.match(r"\s*[\d,]+ \([ \d.]+%\)\s+(\S*?gateway/src/\S+?):(.*)", line)
        if m and "geofaas_gateway::" in m.group(2):
            found.add(m.group(1).split("gateway/src/", 1)[1])
    return found
sets = [files(d) for d in sorted(dumps)[-3:]]
every = set.intersection(*sets)
print(f"{len(every)} files of gateway/src in each of {len(sets)} calls:")
for f in sorted(every):
    print(f"  {f}")
extra = set.union(*sets) - every
if extra:
    print("in some calls only (background work):", ", ".join(sorted(extra)))
PY
