#!/usr/bin/env bash
# Time to first byte of a streamed answer against the whole time of a buffered one, same
# 13-byte body, same node, measured by curl on one kept-alive connection per protocol.
#
# A `geofaas up` with one edge and a cloud (loopback), both on the embedded runtime with two
# Python functions: `buffered` returns "hello, world\n", `streamed` yields it from a generator
# (a streamed answer: chunked over HTTP/1.1, DATA frames over h2). Each is called $N times by
# one curl per protocol (connection reused); reported per protocol: P50 and P90 of the
# buffered call's total and of the streamed call's first byte and total, in ms.
#
# Usage: bench/gateway/ttfb.sh      env: BIN=path (default target/release/geofaas) N=500
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${BIN:-$ROOT/target/release/geofaas}
N=${N:-500}
WORK=$(mktemp -d /tmp/geofaas-ttfb.XXXXXX)
UP_PID=
cleanup() {
  [[ -n "$UP_PID" ]] && kill -INT "$UP_PID" 2>/dev/null && wait "$UP_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
EDGE=$(port) CLOUD=$(port) DNS=$(port)
mkdir -p "$WORK/functions/buffered" "$WORK/functions/streamed"
printf 'def fn(input, headers):\n    return "hello, world\\n"\n' > "$WORK/functions/buffered/fn.py"
printf 'def fn(input, headers):\n    yield "hello, world\\n"\n' > "$WORK/functions/streamed/fn.py"
cat > "$WORK/bench.toml" <<EOF
zone = "bench.test."
[dns]
listen = "127.0.0.1:$DNS"

[[node]]
id = "edge"
role = "edge"
location = { lat = 40.4168, lon = -3.7038 }
area.circle = { center = { lat = 40.4168, lon = -3.7038 }, radius_km = 5 }
public_url = "https://127.0.0.1:$EDGE"
listen = "127.0.0.1:$EDGE"
[[node.backend]]
kind = "local"
functions_dir = "functions"

[[node]]
id = "cloud"
role = "cloud"
location = { lat = 50.11, lon = 8.68 }
area = "world"
public_url = "https://127.0.0.1:$CLOUD"
listen = "127.0.0.1:$CLOUD"
[[node.backend]]
kind = "local"
functions_dir = "functions"
EOF
cd "$WORK"
RUST_LOG=warn "$BIN" up --config bench.toml --no-dns > up.log 2>&1 &
UP_PID=$!
for _ in $(seq 300); do
  [[ -f .geofaas/ca.pem ]] && curl -s -o /dev/null --cacert .geofaas/ca.pem "https://127.0.0.1:$EDGE/readyz" && break
  sleep 0.1
done

measure() { # protocol function -> "ttfb total" per call, ms
  local urls=()
  for _ in $(seq "$N"); do urls+=(-o /dev/null "https://127.0.0.1:$EDGE/fn/$2"); done
  curl -s "$1" --cacert .geofaas/ca.pem -H 'X-Client-Location: 40.4168,-3.7038' \
    -w '%{time_starttransfer} %{time_total}\n' "${urls[@]}"
}
for proto in --http1.1 --http2; do
  measure "$proto" buffered > /dev/null   # warm both instances and the connection path
  measure "$proto" streamed > /dev/null
  measure "$proto" buffered > "buffered$proto"
  measure "$proto" streamed > "streamed$proto"
  python3 - "$proto" "buffered$proto" "streamed$proto" <<'PY'
import sys
def load(path):
    rows = [tuple(float(x) * 1000 for x in line.split()) for line in open(path) if line.strip()]
    return [r[0] for r in rows], [r[1] for r in rows]
def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]
proto, buffered, streamed = sys.argv[1:]
_, b_total = load(buffered)
s_first, s_total = load(streamed)
print(f"{proto[2:]}: n={len(b_total)}  buffered total P50 {q(b_total, .5):.3f} ms P90 {q(b_total, .9):.3f}"
      f" | streamed first byte P50 {q(s_first, .5):.3f} ms P90 {q(s_first, .9):.3f},"
      f" total P50 {q(s_total, .5):.3f} | first byte - buffered total at P50: {q(s_first, .5) - q(b_total, .5):+.3f} ms")
PY
done
