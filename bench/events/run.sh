#!/usr/bin/env bash
# Accepting asynchronous calls: how many `202`s per second one node gives, and how long a `202`
# takes, in one run on the same stack:
#   - default: the journal (the build under test, BIN) against a build that kept accepted calls
#     in memory only (BIN_BASE);
#   - NATS=1: the fleet's queue (BIN with [queue] on a nats-server with JetStream, started here
#     on $NATS_CPUS) against the journal (BIN_BASE, default BIN itself).
#
# The stack is bench/gateway's (an edge node whose backend is nginx speaking tinyFaaS, pinned to
# $PROXY_CPUS; wrk on $LOAD_CPUS); this script runs inside it (its HOLD_CMD). Each build gets
# $RUNS rounds of wrk (HTTP/1.1, keep-alive, $CONNS connections, $DURATION s) posting
# `Prefer: respond-async` calls, alternating which build goes first; before each round the
# calls accepted in the one before have all run. The accepted calls run in the background on
# the same core, as they would in production.
#
# Usage: BIN=target/release/geofaas BIN_BASE=/path/to/older/geofaas bench/events/run.sh
#        BIN=target/release/geofaas NATS=1 bench/events/run.sh
#   env: RUNS=3 DURATION=5 CONNS=8 NATS_CPUS=0 (and bench/gateway/run.sh's PROXY_CPUS, LOAD_CPUS)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${BIN:?BIN=path of the geofaas build to measure}"
export RUNS_EVENTS=${RUNS:-3} DURATION_EVENTS=${DURATION:-5} CONNS_EVENTS=${CONNS:-8}
export LOAD_CPUS=${LOAD_CPUS:-0} EVENTS_HERE=$HERE
if [[ -n "${NATS:-}" ]]; then
  BIN_BASE=${BIN_BASE:-$BIN}
  NATS_PORT=${NATS_PORT:-14222}
  NATS_MONITOR=${NATS_MONITOR:-18222}
  NATS_DIR=$(mktemp -d /tmp/geofaas-events-nats.XXXXXX)
  taskset -c "${NATS_CPUS:-0}" nats-server -js -a 127.0.0.1 -p "$NATS_PORT" -m "$NATS_MONITOR" \
    -sd "$NATS_DIR" 2> "$NATS_DIR/nats.log" &
  NATS_PID=$!
  trap 'kill $NATS_PID 2>/dev/null; rm -rf "$NATS_DIR"' EXIT
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$NATS_MONITOR/healthz" >/dev/null && break; sleep 0.1; done
  export GW_EXTRA_TOML="[queue]\nnats = [\"nats://127.0.0.1:$NATS_PORT\"]"
  export NATS_MONITOR LABEL_GW=nats LABEL_BASE=journal
else
  : "${BIN_BASE:?BIN_BASE=path of the build to compare with}"
  export LABEL_GW=journal LABEL_BASE=memory
fi
NO_BUILD=1 BIN=$BIN BIN_BASE=$BIN_BASE RUNS=1 \
  HOLD_CMD='bash "$EVENTS_HERE/measure.sh"' "$HERE/../gateway/run.sh"
