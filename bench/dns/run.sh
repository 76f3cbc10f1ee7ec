#!/usr/bin/env bash
# Queries per second with EDNS Client Subnet under dnsperf: geofaas-dns against gdnsd 3 (geoip plugin,
# city auto mode) serving the same zone from the same demo mmdb with the same answers. Both servers run in
# the same invocation, one after the other per subnet, pinned with taskset to the same CPUs
# ($SERVER_CPUS); dnsperf is pinned to other CPUs ($CLIENT_CPUS).
#
# Needs: dnsperf, gdnsd, dig (Debian: dnsperf gdnsd dnsutils), taskset, a Rust toolchain.
# Usage: bench/dns/run.sh            (env: SERVER_CPUS=1 CLIENT_CPUS=0 DURATION=10 CLIENTS=8 OUTSTANDING=200)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SERVER_CPUS=${SERVER_CPUS:-1}
CLIENT_CPUS=${CLIENT_CPUS:-0}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-8}
OUTSTANDING=${OUTSTANDING:-200}
OURS_PORT=${OURS_PORT:-5391}
GDNSD_PORT=${GDNSD_PORT:-5392}
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

# --- gdnsd with the geoip plugin: nearest datacenter by coordinates, cloud listed first as default ---
mkdir -p "$WORK/gdnsd/zones" "$WORK/gdnsd/run"
cat > "$WORK/gdnsd/config" <<CONF
options => {
  listen => [ 127.0.0.1:$GDNSD_PORT ]
  lock_mem => false
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

# Same answers from both, checked before measuring.
for port in "$OURS_PORT" "$GDNSD_PORT"; do
  wait_answer "$port" 192.0.2.1/24 127.0.0.11
  wait_answer "$port" 198.51.100.1/24 127.0.0.12
  wait_answer "$port" 203.0.113.1/24 127.0.0.13
done

echo "gw.geofaas.test A" > "$WORK/queries"
qps() { # port ecs-hex
  taskset -c "$CLIENT_CPUS" dnsperf -s 127.0.0.1 -p "$1" -d "$WORK/queries" -l "$DURATION" \
    -c "$CLIENTS" -q "$OUTSTANDING" -T 1 -e -E "8:$2" > "$WORK/out" 2>&1
  grep -q "NOERROR [0-9]* (100.00%)" "$WORK/out" || { cat "$WORK/out" >&2; return 1; }
  awk '/Queries per second/ {print $4}' "$WORK/out"
}

echo "server CPUs: $SERVER_CPUS, dnsperf CPUs: $CLIENT_CPUS, ${DURATION}s per run, $CLIENTS clients, $OUTSTANDING outstanding"
echo "| ECS subnet | answer | geofaas-dns qps | gdnsd qps | ratio |"
echo "|---|---|---|---|---|"
for row in "192.0.2.0/24 00011800c00002 tu-berlin" "198.51.100.0/24 00011800c63364 potsdam" "203.0.113.0/24 00011800cb0071 cloud"; do
  set -- $row
  ours=$(qps "$OURS_PORT" "$2")
  theirs=$(qps "$GDNSD_PORT" "$2")
  ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')
  printf '| %s | %s | %.0f | %.0f | %s |\n' "$1" "$3" "$ours" "$theirs" "$ratio"
done
