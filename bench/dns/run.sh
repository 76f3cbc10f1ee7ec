#!/usr/bin/env bash
# Queries per second with EDNS Client Subnet under dnsperf: geofaas-dns against gdnsd 3 (geoip plugin,
# city auto mode) serving the same zone from the same demo mmdb with the same answers. Both servers run in
# the same invocation, one after the other per subnet, pinned with taskset to the same CPUs
# ($SERVER_CPUS); dnsperf is pinned to other CPUs ($CLIENT_CPUS).
#
# Needs: dnsperf, gdnsd, dig (Debian: dnsperf gdnsd dnsutils), taskset, a Rust toolchain.
# Servers (SERVERS, default "ours ours2 base gdnsd gdnsd2 hickory"; base only with BIN_BASE):
#   ours     geofaas-dns, batched UDP engine (fast path for gw A/AAAA), one socket, on $SERVER_CPUS
#   ours2    the same binary with two SO_REUSEPORT sockets (--udp-sockets 2), on $SERVER2_CPUS
#   base     another geofaas-dns build ($BIN_BASE, e.g. the build before a change), its defaults, on $SERVER_CPUS
#   gdnsd    gdnsd, one UDP thread, on $SERVER_CPUS
#   gdnsd2   gdnsd, two UDP threads, on $SERVER2_CPUS
#   hickory  the same binary with hickory-server's own UDP loop (--udp-engine hickory), on $SERVER_CPUS
# Each (server, subnet) pair is measured ROUNDS times, interleaved, and the median is reported, because
# the machine may be shared; the 1-minute load average at the end of each run is recorded with it.
# Usage: bench/dns/run.sh   (env: SERVER_CPUS=1 SERVER2_CPUS=0,1 CLIENT_CPUS=0 DURATION=5 ROUNDS=3
#        CLIENTS=8 OUTSTANDING=200 BIN=<geodns binary> BIN_BASE=<geodns binary> SERVERS="...")
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SERVER_CPUS=${SERVER_CPUS:-1}
SERVER2_CPUS=${SERVER2_CPUS:-0,1}
CLIENT_CPUS=${CLIENT_CPUS:-0}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-8}
OUTSTANDING=${OUTSTANDING:-200}
OURS_PORT=${OURS_PORT:-5391}
GDNSD_PORT=${GDNSD_PORT:-5392}
HICKORY_PORT=${HICKORY_PORT:-5393}
OURS2_PORT=${OURS2_PORT:-5394}
BASE_PORT=${BASE_PORT:-5395}
GDNSD2_PORT=${GDNSD2_PORT:-5396}
BIN_BASE=${BIN_BASE:-}
SERVERS=${SERVERS:-ours ours2 base gdnsd gdnsd2 hickory}
[ -n "$BIN_BASE" ] || SERVERS=${SERVERS//base/}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

cd "$ROOT"
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p geofaas-dns --example geodns
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/geodns"
fi

# --- geofaas-dns (writes the demo mmdb both servers use) ---
RUST_LOG=warn taskset -c "$SERVER_CPUS" "$BIN" --config examples/berlin.toml \
  --demo-mmdb "$WORK/demo.mmdb" --listen "127.0.0.1:$OURS_PORT" --no-health-checks --udp-sockets 1 &
PIDS+=($!)
OURS_PID=$!
wait_file() { for _ in $(seq 1 100); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }
wait_file "$WORK/demo.mmdb"
RUST_LOG=warn taskset -c "$SERVER_CPUS" "$BIN" --config examples/berlin.toml \
  --mmdb "$WORK/demo.mmdb" --listen "127.0.0.1:$HICKORY_PORT" --no-health-checks --udp-engine hickory &
PIDS+=($!)
HICKORY_PID=$!
RUST_LOG=warn taskset -c "$SERVER2_CPUS" "$BIN" --config examples/berlin.toml \
  --mmdb "$WORK/demo.mmdb" --listen "127.0.0.1:$OURS2_PORT" --no-health-checks --udp-sockets 2 &
PIDS+=($!)
OURS2_PID=$!
BASE_PID=
if [ -n "$BIN_BASE" ]; then
  RUST_LOG=warn taskset -c "$SERVER_CPUS" "$BIN_BASE" --config examples/berlin.toml \
    --mmdb "$WORK/demo.mmdb" --listen "127.0.0.1:$BASE_PORT" --no-health-checks &
  PIDS+=($!)
  BASE_PID=$!
fi

# --- gdnsd with the geoip plugin: nearest datacenter by coordinates, cloud listed first as default ---
gdnsd_config() { # dir port udp-threads
mkdir -p "$1/zones" "$1/run"
cat > "$1/config" <<CONF
options => {
  listen => [ 127.0.0.1:$2 ]
  lock_mem => false
  # As many UDP threads as geofaas-dns has UDP sockets (one thread each) in the same comparison.
  udp_threads => $3
  tcp_threads => 1
  run_dir => $1/run
  state_dir => $1/run
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
cat > "$1/zones/geofaas.test" <<'ZONE'
$TTL 30
@ SOA ns hostmaster 1 3600 600 86400 30
@ NS ns
ns A 127.0.0.1
gw 30 DYNA geoip!gw
tu-berlin A 127.0.0.11
potsdam A 127.0.0.12
cloud A 127.0.0.13
ZONE
}
gdnsd_config "$WORK/gdnsd" "$GDNSD_PORT" 1
gdnsd_config "$WORK/gdnsd2" "$GDNSD2_PORT" 2

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
taskset -c "$SERVER2_CPUS" gdnsd -c "$WORK/gdnsd2" start 2>"$WORK/gdnsd2.log" &
PIDS+=($!)
GDNSD2_PID=$!

# Same answers from both, checked before measuring.
ALL_PORTS=("$OURS_PORT" "$OURS2_PORT" "$HICKORY_PORT" "$GDNSD_PORT" "$GDNSD2_PORT")
[ -n "$BIN_BASE" ] && ALL_PORTS+=("$BASE_PORT")
for port in "${ALL_PORTS[@]}"; do
  wait_answer "$port" 192.0.2.1/24 127.0.0.11
  wait_answer "$port" 198.51.100.1/24 127.0.0.12
  wait_answer "$port" 203.0.113.1/24 127.0.0.13
done

echo "gw.geofaas.test A" > "$WORK/queries"
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
TCK=$(getconf CLK_TCK)
qps() { # port ecs-hex server-pid -> "qps server-cpu-fraction load-1min"
  local before after
  before=$(cpu_ticks "$3")
  taskset -c "$CLIENT_CPUS" dnsperf -s 127.0.0.1 -p "$1" -d "$WORK/queries" -l "$DURATION" \
    -c "$CLIENTS" -q "$OUTSTANDING" -T 1 -e -E "8:$2" > "$WORK/out" 2>&1
  grep -q "NOERROR [0-9]* (100.00%)" "$WORK/out" || { cat "$WORK/out" >&2; return 1; }
  after=$(cpu_ticks "$3")
  awk -v b="$before" -v a="$after" -v t="$TCK" -v d="$DURATION" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
    '/Queries per second/ { printf "%s %.3f %s\n", $4, (a - b) / t / d, l }' "$WORK/out"
}

echo "server CPUs: $SERVER_CPUS (2-socket/2-thread servers: $SERVER2_CPUS), dnsperf CPUs: $CLIENT_CPUS, ${DURATION}s per run, median of $ROUNDS, $CLIENTS clients, $OUTSTANDING outstanding"
echo "binary: $BIN${BIN_BASE:+, base: $BIN_BASE}; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
SUBNETS=("192.0.2.0/24 00011800c00002 tu-berlin" "198.51.100.0/24 00011800c63364 potsdam" "203.0.113.0/24 00011800cb0071 cloud")
: > "$WORK/results"
for round in $(seq 1 "$ROUNDS"); do
  for row in "${SUBNETS[@]}"; do
    set -- $row
    for name in $SERVERS; do
      case $name in
        ours) port=$OURS_PORT pid=$OURS_PID ;;
        ours2) port=$OURS2_PORT pid=$OURS2_PID ;;
        base) port=$BASE_PORT pid=$BASE_PID ;;
        gdnsd) port=$GDNSD_PORT pid=$GDNSD_PID ;;
        gdnsd2) port=$GDNSD2_PORT pid=$GDNSD2_PID ;;
        hickory) port=$HICKORY_PORT pid=$HICKORY_PID ;;
        *) echo "unknown server $name" >&2; exit 1 ;;
      esac
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
echo "qps/core = qps / cpu (what one fully busy core would answer); load = 1-minute load average after"
echo "the run. Medians of $ROUNDS rounds; ratios against gdnsd with one UDP thread."
echo
echo "| ECS subnet | answer | server | qps | cpu | qps/core | qps ratio to gdnsd | qps/core ratio to gdnsd | load |"
echo "|---|---|---|---|---|---|---|---|---|"
label() {
  case $1 in
    ours) echo "geofaas-dns (batched UDP + fast path, 1 socket)" ;;
    ours2) echo "geofaas-dns (batched UDP + fast path, 2 sockets)" ;;
    base) echo "geofaas-dns base build (\`$(basename "$BIN_BASE")\`)" ;;
    gdnsd) echo "gdnsd (1 UDP thread)" ;;
    gdnsd2) echo "gdnsd (2 UDP threads)" ;;
    hickory) echo "geofaas-dns (hickory UDP)" ;;
  esac
}
for row in "${SUBNETS[@]}"; do
  set -- $row
  gq=$(col "$1" gdnsd 3); gc=$(col "$1" gdnsd 4)
  for name in $SERVERS; do
    q=$(col "$1" "$name" 3); c=$(col "$1" "$name" 4); l=$(col "$1" "$name" 5)
    awk -v n="$1" -v a="$3" -v l="$(label "$name")" -v q="$q" -v c="$c" -v gq="$gq" -v gc="$gc" -v ld="$l" \
      'BEGIN { r = (gq > 0) ? q / gq : 0; rc = (gq > 0 && gc > 0) ? (q / c) / (gq / gc) : 0;
               printf "| %s | %s | %s | %.0f | %.2f | %.0f | %.2f | %.2f | %.2f |\n", n, a, l, q, c, q / c, r, rc, ld }'
  done
done
[ -n "${RESULTS:-}" ] && cp "$WORK/results" "$RESULTS"
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
