#!/usr/bin/env bash
# The `geofaas` that `loadtest --spawn` starts for each node (GEOFAAS_BIN): runs
# `geofaas node ... --node ID` on the CPUs that CPUS_<id> names (dashes as underscores, e.g.
# CPUS_tu_berlin=1), so that each node process, and every worker it forks, has its own share of
# the machine instead of all nodes competing for every core.
set -euo pipefail
real=${GEOFAAS_REAL_BIN:?GEOFAAS_REAL_BIN: the real geofaas binary}
id="" prev=""
for a in "$@"; do
  [[ $prev == --node ]] && id=$a
  prev=$a
done
var="CPUS_${id//-/_}"
cpus=${!var:-}
if [[ -n $cpus ]]; then
  exec taskset -c "$cpus" "$real" "$@"
fi
exec "$real" "$@"
