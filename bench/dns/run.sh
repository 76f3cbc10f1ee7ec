#!/usr/bin/env bash
# Queries per second with EDNS Client Subnet under dnsperf: geofaas-dns against gdnsd 3 (geoip plugin,
# city auto mode) serving the same zone from the same demo mmdb with the same answers. Both servers run in
# the same invocation, one after the other per subnet, pinned with taskset to the same CPUs
# ($SERVER_CPUS); dnsperf is pinned to other CPUs ($CLIENT_CPUS).
#
# Needs: dnsperf, gdnsd, dig (Debian: dnsperf gdnsd dnsutils), taskset, a Rust toolchain.
# geofaas-dns runs twice: with its batched UDP engine (recvmmsg/sendmmsg, the default) and with
# hickory-server's own UDP loop (--udp-engine hickory). Each (server, subnet) pair is measured ROUNDS
# times, interleaved, and the median is reported, because the machine may be shared.
# Usage: bench/dns/run.sh   (env: SERVER_CPUS=1 CLIENT_CPUS=0 DURATION=5 ROUNDS=3 CLIENTS=8 OUTSTANDING=200)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SERVER_CPUS=${SERVER_CPUS:-1}
CLIENT_CPUS=${CLIENT_CPUS:-0}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-8}
OUTSTANDING=${OUTSTANDING:-200}
OURS_PORT=${OURS_PORT:-5391}
GDNSD_PORT=${GDNSD_PORT:-5392}
HICKORY_PORT=${HICKORY_PORT:-5393}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

cd "$ROOT"
cargo build --release -q -p geofaas-dns --example geodns
BIN="$ROOT/target/release/examples/geodns"

# --- geofaas-dns (writes the demo mmdb both servers use) ---
RUST_LOG=warn taskset -c "$SERVER_CPUS" "$BIN" --config examples/berlin.toml \
  --demo-mmdb "$WORK/demo.mmdb" --listen "127.0.0.1:$OURS_PORT" --no-health-checks &
PIDS+=($!)
OURS_PID=$!
wait_file() { for _ in $(seq 1 100); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }
wait_file "$WORK/demo.mmdb"
RUST_LOG=warn taskset -c "$SERVER_CPUS" "$BIN" --config examples/berlin.toml \
  --mmdb "$WORK/demo.mmdb" --listen "127.0.0.1:$HICKORY_PORT" --no-health-checks --udp-engine hickory &
PIDS+=($!)
HICKORY_PID=$!

# --- gdnsd with the geoip plugin: nearest datacenter by coordinates, cloud listed first as default ---
mkdir -p "$WORK/gdnsd/zones" "$WORK/gdnsd/run"
cat > "$WORK/gdnsd/config" <<CONF
options => {
  listen => [ 127.0.0.1:$GDNSD_PORT ]
  lock_mem => false
  # One UDP and one TCP thread, as geofaas-dns has one runtime worker on one CPU: on a shared machine
  # the scheduler shares a CPU per thread, so equal thread counts keep the comparison fair.
  udp_threads => 1
  tcp_threads => 1
  run_dir => $WORK/gdnsd/run
  state_dir => $WORK/gdnsd/run
}
plugins => { geoip => {
  maps => { geo => {
    geoip2_db => $WORK/demo.mmdb
    datacenters => [ cloud, tu-berlin, potsdam ]
    auto_dc_coords => {
      cloud => [ 51.498593, -0.176959 ]
      tu-berlin => [ 52.510057, 13.325043 ]
      potsdam => [ 52.354199, 13.055874 ]
    }
    auto_dc_limit => 3
  } }
  resources => { gw => {
    map => geo
    dcmap => { cloud => 127.0.0.13, tu-berlin => 127.0.0.11, potsdam => 127.0.0.12 }
  } }
} }
CONF
cat > "$WORK/gdnsd/zones/geofaas.test" <<'ZONE'
$TTL 30
@ SOA ns hostmaster 1 3600 600 86400 30
@ NS ns
ns A 127.0.0.1
gw 30 DYNA geoip!gw
tu-berlin A 127.0.0.11
potsdam A 127.0.0.12
cloud A 127.0.0.13
ZONE

wait_answer() { # port subnet expected
  for _ in $(seq 1 100); do
    got=$(dig @127.0.0.1 -p "$1" gw.geofaas.test A +subnet="$2" +short +time=1 +tries=1 2>/dev/null || true)
    [ "$got" = "$3" ] && return 0
    sleep 0.1
  done
  echo "port $1: $2 answered '$got', expected $3" >&2
  return 1
}
wait_answer "$OURS_PORT" 192.0.2.1/24 127.0.0.11
taskset -c "$SERVER_CPUS" gdnsd -c "$WORK/gdnsd" start 2>"$WORK/gdnsd.log" &
PIDS+=($!)
GDNSD_PID=$!

# Same answers from both, checked before measuring.
for port in "$OURS_PORT" "$HICKORY_PORT" "$GDNSD_PORT"; do
  wait_answer "$port" 192.0.2.1/24 127.0.0.11
  wait_answer "$port" 198.51.100.1/24 127.0.0.12
  wait_answer "$port" 203.0.113.1/24 127.0.0.13
done

echo "gw.geofaas.test A" > "$WORK/queries"
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
TCK=$(getconf CLK_TCK)
qps() { # port ecs-hex server-pid -> "qps server-cpu-fraction"
  local before after
  before=$(cpu_ticks "$3")
  taskset -c "$CLIENT_CPUS" dnsperf -s 127.0.0.1 -p "$1" -d "$WORK/queries" -l "$DURATION" \
    -c "$CLIENTS" -q "$OUTSTANDING" -T 1 -e -E "8:$2" > "$WORK/out" 2>&1
  grep -q "NOERROR [0-9]* (100.00%)" "$WORK/out" || { cat "$WORK/out" >&2; return 1; }
  after=$(cpu_ticks "$3")
  awk -v b="$before" -v a="$after" -v t="$TCK" -v d="$DURATION" \
    '/Queries per second/ { printf "%s %.3f\n", $4, (a - b) / t / d }' "$WORK/out"
}

echo "server CPUs: $SERVER_CPUS, dnsperf CPUs: $CLIENT_CPUS, ${DURATION}s per run, median of $ROUNDS, $CLIENTS clients, $OUTSTANDING outstanding"
SUBNETS=("192.0.2.0/24 00011800c00002 tu-berlin" "198.51.100.0/24 00011800c63364 potsdam" "203.0.113.0/24 00011800cb0071 cloud")
: > "$WORK/results"
for round in $(seq 1 "$ROUNDS"); do
  for row in "${SUBNETS[@]}"; do
    set -- $row
    for server in "ours:$OURS_PORT:$OURS_PID" "hickory:$HICKORY_PORT:$HICKORY_PID" "gdnsd:$GDNSD_PORT:$GDNSD_PID"; do
      IFS=: read -r name port pid <<< "$server"
      echo "$1 $name $(qps "$port" "$2" "$pid")" >> "$WORK/results"
    done
  done
done
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { # subnet server column
  awk -v s="$1" -v n="$2" -v c="$3" '$1 == s && $2 == n { print $c }' "$WORK/results" | median
}
echo
echo "qps = dnsperf's answered queries per second; cpu = server CPU time per wall second;"
echo "qps/core = qps / cpu (what one fully busy core would answer). Medians of $ROUNDS rounds."
echo
echo "| ECS subnet | answer | server | qps | cpu | qps/core | qps ratio to gdnsd | qps/core ratio to gdnsd |"
echo "|---|---|---|---|---|---|---|---|"
for row in "${SUBNETS[@]}"; do
  set -- $row
  gq=$(col "$1" gdnsd 3); gc=$(col "$1" gdnsd 4)
  for name in ours hickory gdnsd; do
    q=$(col "$1" "$name" 3); c=$(col "$1" "$name" 4)
    label=$name; [ "$name" = ours ] && label="geofaas-dns (batched UDP)"; [ "$name" = hickory ] && label="geofaas-dns (hickory UDP)"
    awk -v n="$1" -v a="$3" -v l="$label" -v q="$q" -v c="$c" -v gq="$gq" -v gc="$gc" \
      'BEGIN { printf "| %s | %s | %s | %.0f | %.2f | %.0f | %.2f | %.2f |\n", n, a, l, q, c, q / c, q / gq, (q / c) / (gq / gc) }'
  done
done
