#!/usr/bin/env bash
# Accepting asynchronous calls: how many `202`s per second one node gives, and how long a `202`
# takes, with the journal (the build under test, BIN) against the build before it that kept
# accepted calls in memory only (BIN_BASE), in one run on the same stack.
#
# The stack is bench/gateway's (an edge node whose backend is nginx speaking tinyFaaS, pinned to
# $PROXY_CPUS; wrk on $LOAD_CPUS); this script runs inside it (its HOLD_CMD). Each build gets
# $RUNS rounds of wrk (HTTP/1.1, keep-alive, $CONNS connections, $DURATION s) posting
# `Prefer: respond-async` calls, alternating which build goes first. The accepted calls run in
# the background on the same core, as they would in production.
#
# Usage: BIN=target/release/geofaas BIN_BASE=/path/to/older/geofaas bench/events/run.sh
#   env: RUNS=3 DURATION=5 CONNS=8 (and bench/gateway/run.sh's PROXY_CPUS, LOAD_CPUS)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${BIN:?BIN=path of the geofaas build to measure}"
: "${BIN_BASE:?BIN_BASE=path of the build to compare with}"
export RUNS_EVENTS=${RUNS:-3} DURATION_EVENTS=${DURATION:-5} CONNS_EVENTS=${CONNS:-8}
export LOAD_CPUS=${LOAD_CPUS:-0} EVENTS_HERE=$HERE
NO_BUILD=1 BIN=$BIN BIN_BASE=$BIN_BASE RUNS=1 \
  HOLD_CMD='bash "$EVENTS_HERE/measure.sh"' "$HERE/../gateway/run.sh"
