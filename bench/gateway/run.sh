#!/usr/bin/env bash
# Proxying speed of the geofaas gateway against nginx proxying the same backend, in one run.
#
# Origin: nginx on $LOAD_CPUS answering every tinyFaaS call `POST /{name}` with a fixed 13-byte body
# and `GET /list` with "echo" (origin.conf). Proxies, both pinned to $PROXY_CPUS and serving TLS
# with the same certificate: `geofaas node` (topology.toml: one edge node whose only backend is
# `kind = "tinyfaas"` pointing at the origin) and nginx (proxy.conf: one worker, keep-alive
# upstream). Load: wrk (HTTPS, HTTP/1.1 keep-alive, POST with an 11-byte body) and h2load (h2),
# pinned to $LOAD_CPUS, same settings for both proxies; runs alternate gateway/nginx, every other
# run in the reverse order.
# Each measurement is preceded by a warm-up; the report gives the median of $RUNS runs, and the
# proxy's CPU time per request (from /proc; much less sensitive to other load than req/s).
#
# Needs: nginx, wrk, h2load, openssl, curl, python3, taskset (Debian: nginx wrk nghttp2-client).
# Usage: bench/gateway/run.sh
#   env: PROXY_CPUS=1 LOAD_CPUS=0 RUNS=3 DURATION=10 WARMUP=2 CONNS=32 H2_CONNS=4 H2_STREAMS=8
#        NO_BUILD=1 (use the binary as is)  BIN=path (default target/lto/geofaas)
#        CLOUD_BIN=path (the cloud node's binary, default BIN)
#        PROFILE=1 (also perf-record the gateway under h1 load)
#        RESULTS=dir (keep raw outputs there; default a temp dir that is removed)
#        BIN_BASE=path (also measure a second gateway build, reported as "gwbase", e.g. the build
#        before a change: same run, same nginx reference)
#        GW_LOG=filter (the gateways' RUST_LOG, default warn)
#        HOLD_CMD='...' (instead of measuring, run this with $GW_PID $NGINX_PID $GW_URL $NGINX_URL set)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PROXY_CPUS=${PROXY_CPUS:-1}
LOAD_CPUS=${LOAD_CPUS:-0}
RUNS=${RUNS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONNS=${CONNS:-32}
H2_CONNS=${H2_CONNS:-4}
H2_STREAMS=${H2_STREAMS:-8}
ORIGIN_PORT=${ORIGIN_PORT:-18000}
MANAGER_PORT=${MANAGER_PORT:-18080}
GW_PORT=${GW_PORT:-18443}
NGINX_PORT=${NGINX_PORT:-18444}
CLOUD_PORT=${CLOUD_PORT:-18445}
GWBASE_PORT=${GWBASE_PORT:-18446}
WORK=$(mktemp -d /tmp/geofaas-bench.XXXXXX)
chmod 755 "$WORK"
RESULTS=${RESULTS:-$WORK/results}
mkdir -p "$RESULTS"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cd "$ROOT"
if [[ -z "${NO_BUILD:-}" ]]; then cargo build --profile lto -q -p geofaas; fi
BIN=${BIN:-$ROOT/target/lto/geofaas}

fill() { # template -> stdout, placeholders replaced
  local user=""
  [[ $EUID -eq 0 ]] && user="user root;"
  sed -e "s|@WORK@|$WORK|g" -e "s|@USER@|$user|g" -e "s|@ORIGIN_PORT@|$ORIGIN_PORT|g" \
      -e "s|@MANAGER_PORT@|$MANAGER_PORT|g" -e "s|@GW_PORT@|$GW_PORT|g" \
      -e "s|@NGINX_PORT@|$NGINX_PORT|g" -e "s|@CLOUD_PORT@|$CLOUD_PORT|g" "$1"
}
wait_for() { # url: poll until it answers 200, at most 20 s
  for _ in $(seq 200); do
    curl -fsk -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "no answer from $1" >&2; return 1
}

# --- TLS: a CA and a P-256 certificate for 127.0.0.1, used by both proxies ---
mkdir -p "$WORK/tls"
(
  cd "$WORK/tls"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=geofaas bench CA" -keyout ca-key.pem -out ca.pem 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
    -keyout key.pem -out req.pem 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > ext.cnf
  openssl x509 -req -in req.pem -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
    -extfile ext.cnf -out cert.pem 2>/dev/null
)

# --- origin ---
mkdir -p "$WORK/origin" "$WORK/proxy"
fill "$HERE/origin.conf" > "$WORK/origin/nginx.conf"
taskset -c "$LOAD_CPUS" nginx -p "$WORK/origin" -c "$WORK/origin/nginx.conf" -e "$WORK/origin/error.log" -g 'daemon off;' &
PIDS+=($!); ORIGIN_PID=$!
wait_for "http://127.0.0.1:$MANAGER_PORT/list"

# --- the cloud node the edge offloads to (none of the bench's calls does): running, so that
# the edge's background work is what it is in a healthy fleet (a probe a second, the cloud's
# function list every 30 s), not the retries of a node whose cloud is down ---
fill "$HERE/topology.toml" > "$WORK/topology.toml"
# GW_EXTRA_TOML: sections added to the measured gateway's topology only (bench/events: [queue]).
GW_TOPOLOGY=$WORK/topology.toml
if [[ -n "${GW_EXTRA_TOML:-}" ]]; then
  GW_TOPOLOGY=$WORK/topology-gw.toml
  { cat "$WORK/topology.toml"; printf '\n%b\n' "$GW_EXTRA_TOML"; } > "$GW_TOPOLOGY"
fi
GEOFAAS_OFFLOAD_SECRET=bench-secret RUST_LOG=warn taskset -c "$LOAD_CPUS" \
  "${CLOUD_BIN:-$BIN}" node --config "$WORK/topology.toml" --node cloud --state-dir "$WORK/state" 2> "$WORK/cloud.log" &
PIDS+=($!)
wait_for "https://127.0.0.1:$CLOUD_PORT/healthz"

# --- the gateway ---
GEOFAAS_OFFLOAD_SECRET=bench-secret RUST_LOG="${GW_LOG:-warn}" taskset -c "$PROXY_CPUS" \
  "$BIN" node --config "$GW_TOPOLOGY" --node edge --state-dir "$WORK/state" 2> "$WORK/gateway.log" &
PIDS+=($!); GW_PID=$!
wait_for "https://127.0.0.1:$GW_PORT/healthz"

# --- optionally a second gateway build (BIN_BASE), e.g. before a change, on the next port ---
PROXIES=(gateway nginx)
if [[ -n "${BIN_BASE:-}" ]]; then
  sed -e "s|127.0.0.1:$GW_PORT|127.0.0.1:$GWBASE_PORT|g" "$WORK/topology.toml" > "$WORK/topology-base.toml"
  GEOFAAS_OFFLOAD_SECRET=bench-secret RUST_LOG="${GW_LOG:-warn}" taskset -c "$PROXY_CPUS" \
    "$BIN_BASE" node --config "$WORK/topology-base.toml" --node edge --state-dir "$WORK/state-base" 2> "$WORK/gateway-base.log" &
  PIDS+=($!); GWBASE_PID=$!
  wait_for "https://127.0.0.1:$GWBASE_PORT/healthz"
  PROXIES=(gateway gwbase nginx)
fi

# --- nginx proxy ---
fill "$HERE/proxy.conf" > "$WORK/proxy/nginx.conf"
taskset -c "$PROXY_CPUS" nginx -p "$WORK/proxy" -c "$WORK/proxy/nginx.conf" -e "$WORK/proxy/error.log" -g 'daemon off;' &
PIDS+=($!); NGINX_PID=$!
wait_for "https://127.0.0.1:$NGINX_PORT/fn/echo"

declare -A URL=([gateway]="https://127.0.0.1:$GW_PORT/fn/echo" [nginx]="https://127.0.0.1:$NGINX_PORT/fn/echo"
  [gwbase]="https://127.0.0.1:$GWBASE_PORT/fn/echo")
declare -A PID=([gateway]=$GW_PID [nginx]=$NGINX_PID [gwbase]=${GWBASE_PID:-})
for p in "${PROXIES[@]}"; do
  got=$(curl -fsS --cacert "$WORK/tls/ca.pem" -d 'hello world' "${URL[$p]}")
  if [[ "$got" != "Hello, World" ]]; then echo "$p answered '$got'" >&2; exit 1; fi
done

printf 'hello world' > "$WORK/body.txt"
if [[ -n "${HOLD_CMD:-}" ]]; then # run a command against the running stack, then tear it down
  GW_PID=$GW_PID NGINX_PID=$NGINX_PID GW_URL=${URL[gateway]} NGINX_URL=${URL[nginx]} WORK=$WORK \
    HERE=$HERE bash -c "$HOLD_CMD"
  exit
fi
TCK=$(getconf CLK_TCK)
snapshot() { # "<proxy ticks> <proxy core busy ticks> <proxy user ticks>": utime+stime of the
  # process and its children (nginx master + worker), all busy time of the proxy core (others'
  # processes included), and the proxy's utime alone
  local total=0 user=0 p
  for p in "$1" $(pgrep -P "$1" || true); do
    [[ -r /proc/$p/stat ]] || continue
    total=$(( total + $(awk '{print $14 + $15}' "/proc/$p/stat") ))
    user=$(( user + $(awk '{print $14}' "/proc/$p/stat") ))
  done
  local core=0
  if [[ $PROXY_CPUS =~ ^[0-9]+$ ]]; then
    core=$(awk -v c="cpu$PROXY_CPUS" '$1 == c {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat)
  fi
  echo "$total $core $user"
}
measure() { # proxy proto run
  local p=$1 proto=$2 run=$3 out="$RESULTS/$1-$2-$3.txt" before after
  if [[ $proto == h1 ]]; then
    taskset -c "$LOAD_CPUS" wrk -t1 -c"$CONNS" -d"${WARMUP}s" -s "$HERE/post.lua" "${URL[$p]}" > /dev/null
    before=$(snapshot "${PID[$p]}")
    taskset -c "$LOAD_CPUS" wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency -s "$HERE/post.lua" "${URL[$p]}" > "$out"
  else
    local h2=(h2load -t1 -c"$H2_CONNS" -m"$H2_STREAMS" -d "$WORK/body.txt" -H 'content-type: text/plain')
    taskset -c "$LOAD_CPUS" "${h2[@]}" -D"$WARMUP" "${URL[$p]}" > /dev/null
    before=$(snapshot "${PID[$p]}")
    taskset -c "$LOAD_CPUS" "${h2[@]}" -D"$DURATION" --log-file="$RESULTS/$p-$proto-$run.log" "${URL[$p]}" > "$out"
  fi
  after=$(snapshot "${PID[$p]}")
  read -r b_total b_core b_user <<< "$before"
  read -r a_total a_core a_user <<< "$after"
  echo "cpu_ticks $b_total $b_core $a_total $a_core $TCK" >> "$out"
  echo "user_ticks $b_user $a_user" >> "$out"
}

echo "proxy cores: $PROXY_CPUS, load+origin cores: $LOAD_CPUS, $RUNS runs x ${DURATION}s" >&2
# Every other run measures the proxies in the reverse order, so that a drift of the machine's speed
# during a run (other load, frequency) does not favour the proxy that always comes first.
for run in $(seq "$RUNS"); do
  order=("${PROXIES[@]}")
  if (( run % 2 == 0 )); then
    order=(); for (( i = ${#PROXIES[@]} - 1; i >= 0; i-- )); do order+=("${PROXIES[$i]}"); done
  fi
  for proto in h1 h2; do
    for p in "${order[@]}"; do
      echo "run $run $proto $p" >&2
      measure "$p" "$proto" "$run"
    done
  done
done

if [[ -n "${PROFILE:-}" ]]; then
  echo "profiling the gateway under h1 load" >&2
  perf record -e cpu-clock -F 2999 -g -p "$GW_PID" -o "$RESULTS/gateway.perf.data" -- sleep "$DURATION" 2> /dev/null &
  perf_pid=$!
  taskset -c "$LOAD_CPUS" wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$HERE/post.lua" "${URL[gateway]}" > /dev/null
  wait "$perf_pid" || true
  perf report -i "$RESULTS/gateway.perf.data" --no-children --percent-limit 0.7 --stdio -g none \
    > "$RESULTS/gateway.perf.txt" 2> /dev/null || true
fi

for log in "$WORK"/gateway*.log; do
  if grep -qi "error\|panic" "$log"; then
    echo "$log has errors:" >&2; grep -i "error\|panic" "$log" | head >&2
  fi
done
python3 "$HERE/summarize.py" "$RESULTS" "$DURATION"
