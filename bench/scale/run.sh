#!/usr/bin/env bash
# One node's cost as its fleet grows: for each size, one `geofaas node` (edge-0) of a topology of
# that many edges (bench/scale/topology.py: 5 km circles on a grid over Europe; the other nodes
# are not running, their ports refuse) and, in the same run for every size:
#   start-up   spawn until /readyz answers 200;
#   idle       CPU (utime+stime from /proc) over IDLE_S seconds and resident memory after them,
#              with the offload secret set and the greedy scheduler on, so probes and load
#              reports run as in a fleet;
#   routed     h2load's requests per second for a client in the last edge's area (every answer
#              a 307 to that edge), the node pinned to $NODE_CPUS and h2load to $LOAD_CPUS;
#   dns        `geofaas dns` of the same topology (each node on its own loopback address,
#              no health checks), on $NODE_CPUS: its resident memory once it answers, and
#              dnsperf's answered queries per second (on $LOAD_CPUS) for gw.<zone> A with an
#              ECS subnet located in the last edge's area (every answer that edge, checked
#              with dig first); the mmdb comes from dns/examples/mmdb.rs.
# With ROUNDS=R every size is measured R times, the sizes interleaved (3, 100, ..., 3, 100, ...),
# and the table gives each column's median per size: one run's rates spread by 10-20 % on a
# shared 2-core machine. Prints a table and writes every round to $RESULTS/scale.csv.
#
# Needs: h2load (nghttp2-client), dnsperf, dig, openssl, curl, python3, taskset.
# Usage: bench/scale/run.sh
#   env: BIN=path (default target/release/geofaas, built unless NO_BUILD=1)
#        SIZES="3 100 1000 10000" ROUNDS=1 IDLE_S=10 LOAD_S=10 CONNS=4 STREAMS=8
#        NODE_CPUS=1 LOAD_CPUS=0 PORT=19443 DNS_PORT=19353 MMDB=path (of the example) RESULTS=dir
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SIZES=${SIZES:-3 100 1000 10000}
ROUNDS=${ROUNDS:-1}
IDLE_S=${IDLE_S:-10}
LOAD_S=${LOAD_S:-10}
CONNS=${CONNS:-4}
STREAMS=${STREAMS:-8}
NODE_CPUS=${NODE_CPUS:-1}
LOAD_CPUS=${LOAD_CPUS:-0}
PORT=${PORT:-19443}
DNS_PORT=${DNS_PORT:-19353}
WORK=$(mktemp -d /tmp/geofaas-scale.XXXXXX)
RESULTS=${RESULTS:-$WORK/results}
mkdir -p "$RESULTS"
PID=""
cleanup() {
  [[ -n "$PID" ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cd "$ROOT"
if [[ -z "${NO_BUILD:-}" && -z "${BIN:-}" ]]; then cargo build --release -q -p geofaas; fi
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/geofaas}
if [[ -z "${MMDB:-}" ]]; then
  cargo build --release -q -p geofaas-dns --example mmdb
  MMDB=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/mmdb
fi

mkdir -p "$WORK/functions"
"$HERE/tls.sh" "$WORK/tls"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
hz=$(getconf CLK_TCK)
export GEOFAAS_OFFLOAD_SECRET=scale-bench-secret

# The geo DNS of the topology in $1 ($3 edges), its mmdb locating 10.1.0.0/24 at the point $2
# in the last edge's area: "rss_MiB qps".
dns() {
  local dir=$1 point=$2 n=$3 got="" pid
  local want="127.10.$((n / 256)).$((n % 256))"  # topology.py --hosts: edge-(n-1)
  echo "10.1.0.0/24 ${point/,/ }" | "$MMDB" "$dir/scale.mmdb" 2>/dev/null
  RUST_LOG=warn taskset -c "$NODE_CPUS" "$BIN" dns --config "$dir/dns.toml" --mmdb "$dir/scale.mmdb" \
    --listen "127.0.0.1:$DNS_PORT" --no-health-checks 2> "$dir/dns.log" &
  pid=$!
  for _ in $(seq 300); do
    got=$(dig @127.0.0.1 -p "$DNS_PORT" gw.scale.test A +subnet=10.1.0.1/24 +short +time=1 +tries=1 2>/dev/null || true)
    [[ "$got" == "$want" ]] && break
    sleep 0.1
  done
  [[ "$got" == "$want" ]] || { echo "the geo DNS answered '$got', not the last edge's $want" >&2; kill "$pid"; exit 1; }
  local rss
  rss=$(python3 -c "print(f'{$(rss_kib "$pid") / 1024:.1f}')")
  echo "gw.scale.test A" > "$dir/queries"
  taskset -c "$LOAD_CPUS" dnsperf -s 127.0.0.1 -p "$DNS_PORT" -d "$dir/queries" -l "$LOAD_S" \
    -c 8 -q 200 -T 1 -e -E "8:000118000a0100" > "$dir/dnsperf.out" 2>&1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  grep -q "NOERROR [0-9]* (100.00%)" "$dir/dnsperf.out" || { cat "$dir/dnsperf.out" >&2; exit 1; }
  echo "$rss $(awk '/Queries per second/ {printf "%.0f", $4}' "$dir/dnsperf.out")"
}

echo "round,edges,startup_ms,idle_cpu_percent,rss_mib,routed_per_s,dns_rss_mib,dns_qps" > "$RESULTS/scale.csv"
header() { printf '%5s %8s %11s %10s %9s %12s %13s %9s\n' round edges startup_ms idle_cpu% rss_MiB routed/s dns_rss_MiB dns_q/s; }
header
for round in $(seq "$ROUNDS"); do
for n in $SIZES; do
  dir="$WORK/n$n"
  mkdir -p "$dir"
  rm -rf "$dir/state"
  python3 "$HERE/topology.py" "$n" "$PORT" "$WORK/tls" > "$dir/topology.toml" 2> "$dir/point"
  point=$(cat "$dir/point")
  start=$(date +%s%N)
  taskset -c "$NODE_CPUS" "$BIN" node --config "$dir/topology.toml" --node edge-0 \
    --state-dir "$dir/state" 2> "$dir/node.log" &
  PID=$!
  ready=""
  for _ in $(seq 600); do
    curl -fsk -o /dev/null "https://127.0.0.1:$PORT/readyz" 2>/dev/null && { ready=1; break; }
    kill -0 "$PID" 2>/dev/null || { echo "node of $n edges exited:" >&2; tail -5 "$dir/node.log" >&2; exit 1; }
    sleep 0.05
  done
  [[ -n "$ready" ]] || { echo "node of $n edges never ready:" >&2; tail -5 "$dir/node.log" >&2; exit 1; }
  startup_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  sleep 2
  t0=$(ticks "$PID")
  sleep "$IDLE_S"
  t1=$(ticks "$PID")
  idle=$(python3 -c "print(f'{100 * ($t1 - $t0) / $hz / $IDLE_S:.2f}')")
  rss=$(python3 -c "print(f'{$(rss_kib "$PID") / 1024:.1f}')")
  code=$(curl -sk -o /dev/null -w '%{http_code}' -H "x-client-location: $point" \
    "https://127.0.0.1:$PORT/fn/echo")
  [[ "$code" == 307 ]] || { echo "a client at $point got $code, not a 307" >&2; exit 1; }
  routed=$(taskset -c "$LOAD_CPUS" h2load -D "$LOAD_S" -c "$CONNS" -m "$STREAMS" \
    -H "x-client-location: $point" "https://127.0.0.1:$PORT/fn/echo" 2>&1 |
    awk '/^finished in/ {gsub(",", "", $4); print $4}')
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
  python3 "$HERE/topology.py" "$n" "$PORT" "$WORK/tls" --hosts > "$dir/dns.toml" 2>/dev/null
  measured=$(dns "$dir" "$point" "$n")
  read -r dns_rss dns_qps <<< "$measured"
  printf '%5s %8s %11s %10s %9s %12s %13s %9s\n' "$round" "$n" "$startup_ms" "$idle" "$rss" "$routed" "$dns_rss" "$dns_qps"
  echo "$round,$n,$startup_ms,$idle,$rss,$routed,$dns_rss,$dns_qps" >> "$RESULTS/scale.csv"
done
done
if (( ROUNDS > 1 )); then
  echo
  echo "medians of $ROUNDS rounds; ratios against the first size:"
  python3 - "$RESULTS/scale.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cols = ["startup_ms", "idle_cpu_percent", "rss_mib", "routed_per_s", "dns_rss_mib", "dns_qps"]
sizes = list(dict.fromkeys(r["edges"] for r in rows))
med = {n: {c: statistics.median(float(r[c]) for r in rows if r["edges"] == n) for c in cols} for n in sizes}
print(f"{'edges':>8} " + " ".join(f"{c:>16}" for c in cols))
for n in sizes:
    print(f"{n:>8} " + " ".join(f"{med[n][c]:>16.1f}" for c in cols))
base = med[sizes[0]]
for n in sizes[1:]:
    print(f"{n} against {sizes[0]}: routed {med[n]['routed_per_s'] / base['routed_per_s']:.2f}x, "
          f"memory {med[n]['rss_mib'] / base['rss_mib']:.2f}x, dns {med[n]['dns_qps'] / base['dns_qps']:.2f}x, "
          f"dns memory {med[n]['dns_rss_mib'] / base['dns_rss_mib']:.2f}x")
PY
fi
