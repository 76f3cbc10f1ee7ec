#!/usr/bin/env bash
# A real fleet on etcd: $EDGES `geofaas node` processes (bench/scale/topology.py's grid, every
# edge running on its own loopback port) and a cloud, registered in one local etcd. Measures,
# once every node is ready and the fleet has settled for $SETTLE_S seconds, over $IDLE_S seconds:
#   each node's CPU (utime+stime from /proc): the median, the highest and the sum;
#   etcd's writes (puts and lease renewals, from its /metrics) per second, and per node;
# then SIGKILLs one edge and times until its neighbour edge-1 hands its area's clients to the
# cloud. Writes $RESULTS/fleet.csv (node, cpu_percent, rss_mib) and prints a summary.
#
# Needs: etcd (Debian etcd-server), curl, python3.
# Usage: bench/scale/fleet.sh
#   env: BIN=path (default target/release/geofaas)  EDGES=100  SETTLE_S=30  IDLE_S=20
#        BASE_PORT=21000 ETCD_PORT=2579 RESULTS=dir KEEP_LOGS=dir (the nodes' and etcd's logs kept there)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
EDGES=${EDGES:-100}
SETTLE_S=${SETTLE_S:-30}
IDLE_S=${IDLE_S:-20}
BASE_PORT=${BASE_PORT:-21000}
ETCD_PORT=${ETCD_PORT:-2579}
WORK=$(mktemp -d /tmp/geofaas-fleet.XXXXXX)
RESULTS=${RESULTS:-$WORK/results}
mkdir -p "$RESULTS"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  [[ -n "${KEEP_LOGS:-}" ]] && mkdir -p "$KEEP_LOGS" && cp "$WORK"/*.log "$KEEP_LOGS"/
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/geofaas}

mkdir -p "$WORK/functions"
"$HERE/tls.sh" "$WORK/tls"

etcd --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" > "$WORK/etcd.log" 2>&1 &
PIDS+=($!)
ETCD_PID=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$ETCD_PORT/health" >/dev/null && break; sleep 0.1; done

python3 "$HERE/topology.py" "$EDGES" "$BASE_PORT" "$WORK/tls" \
  --registry "http://127.0.0.1:$ETCD_PORT" > "$WORK/topology.toml" 2> "$WORK/point"
export GEOFAAS_OFFLOAD_SECRET=scale-bench-secret
declare -A NODE_PID
ids=(cloud)
for i in $(seq 0 $((EDGES - 1))); do ids+=("edge-$i"); done
for id in "${ids[@]}"; do
  "$BIN" node --config "$WORK/topology.toml" --node "$id" --state-dir "$WORK/state" \
    2> "$WORK/$id.log" &
  PIDS+=($!)
  NODE_PID[$id]=$!
done
port_of() { awk -v id="id = \"$1\"" '$0 == id {f=1} f && /^listen/ {gsub(/.*:|"/, ""); print; exit}' "$WORK/topology.toml"; }
for id in "${ids[@]}"; do
  p=$(port_of "$id")
  for _ in $(seq 600); do
    curl -fsk -o /dev/null "https://127.0.0.1:$p/readyz" 2>/dev/null && break
    sleep 0.1
  done
done
echo "fleet of $EDGES edges and a cloud ready; settling ${SETTLE_S}s"
sleep "$SETTLE_S"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
etcd_writes() { # puts + lease renewals so far
  curl -fs "http://127.0.0.1:$ETCD_PORT/metrics" |
    awk '/^etcd_mvcc_put_total / {p=$2} /^etcd_debugging_server_lease_renewed_total|^etcd_server_lease_renewed_total/ {r=$2} END {print p + r}'
}
snapshot() { # "id ticks rss_kib" of every node, read in one pass
  for id in "${ids[@]}"; do
    pid=${NODE_PID[$id]}
    echo "$id $(awk '{print $14 + $15}' "/proc/$pid/stat") $(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")"
  done
}
snapshot | sort > "$WORK/t0"
w0=$(etcd_writes); e0=$(ticks "$ETCD_PID")
sleep "$IDLE_S"
snapshot | sort > "$WORK/t1"
w1=$(etcd_writes); e1=$(ticks "$ETCD_PID")
hz=$(getconf CLK_TCK)
{
  echo "node,cpu_percent,rss_mib"
  join "$WORK/t0" "$WORK/t1" | awk -v hz="$hz" -v s="$IDLE_S" '{printf "%s,%.3f,%.1f\n", $1, 100 * ($4 - $2) / hz / s, $5 / 1024}'
} > "$RESULTS/fleet.csv"
python3 - "$RESULTS/fleet.csv" "$w0" "$w1" "$IDLE_S" "$EDGES" "$e0" "$e1" "$hz" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cpu = [float(r["cpu_percent"]) for r in rows]
rss = [float(r["rss_mib"]) for r in rows]
w0, w1, s, n = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]) + 1
e0, e1, hz = float(sys.argv[6]), float(sys.argv[7]), float(sys.argv[8])
print(f"nodes {n}: idle CPU per node median {statistics.median(cpu):.2f} %, highest {max(cpu):.2f} % "
      f"({rows[cpu.index(max(cpu))]['node']}), all together {sum(cpu):.1f} % of a core; "
      f"memory median {statistics.median(rss):.1f} MiB")
print(f"etcd: {(w1 - w0) / s:.1f} writes/s ({(w1 - w0) / s / n:.2f} per node), "
      f"{100 * (e1 - e0) / hz / s:.1f} % of a core")
PY

# A death: edge-0 killed; how long until edge-1 (its neighbour) hands edge-0's area to the cloud.
p1=$(port_of edge-1)
lat=$(awk -F'[=,}]' '/^location/ {print $3; exit}' "$WORK/topology.toml" | tr -d ' ')
lon=$(awk -F'[=,}]' '/^location/ {print $5; exit}' "$WORK/topology.toml" | tr -d ' ')
where() { curl -sk --max-time 2 -o /dev/null -w '%{redirect_url}' -H "x-client-location: $lat,$lon" "https://127.0.0.1:$p1/fn/echo"; }
before=$(where)
kill -9 "${NODE_PID[edge-0]}"
start=$(date +%s%N)
for _ in $(seq 600); do
  [[ "$(where)" != "$before" ]] && break
  sleep 0.05
done
echo "edge-0 killed: edge-1 hands its clients elsewhere after $(( ($(date +%s%N) - start) / 1000000 )) ms (before: $before, now: $(where))"
