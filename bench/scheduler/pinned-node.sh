#!/usr/bin/env bash
# The `geofaas` that `loadtest --spawn` starts for each node (GEOFAAS_BIN): runs
# `geofaas node ... --node ID` with the capacity the environment gives that node (its id with
# dashes as underscores, e.g. QUOTA_tu_berlin), so that each node process, and every worker it
# forks, has its own share of the machine instead of all nodes competing for every core:
#   QUOTA_<id>  CPUs as a CPU quota (e.g. 0.5: half a core's time, on any core), through a cgroup
#               of its own: cgroup v2 `cpu.max` where /sys/fs/cgroup has the cpu controller,
#               else cgroup v1 `cpu.cfs_quota_us` under /sys/fs/cgroup/cpu (needs root). The
#               period is QUOTA_PERIOD_US (2000: a throttled node waits at most 2 ms at a
#               time, so a small edge is slow rather than stalling in 100 ms steps). The group
#               is CGROUP_NAME-<id> (CGROUP_NAME: geofaas-bench); compare.sh removes it.
#   CPUS_<id>   the CPUs it may run on (taskset -c), with or without a quota.
# Rust's std (available_parallelism) reads both the affinity mask and the quota, so the node's
# profiles file says how many cores it got (a quota of 0.5 reads as 1).
set -euo pipefail
real=${GEOFAAS_REAL_BIN:?GEOFAAS_REAL_BIN: the real geofaas binary}
id="" prev=""
for a in "$@"; do
  [[ $prev == --node ]] && id=$a
  prev=$a
done
key=${id//-/_}
quota_var="QUOTA_$key" cpus_var="CPUS_$key"
quota=${!quota_var:-} cpus=${!cpus_var:-}

if [[ -n $quota ]]; then
  period=${QUOTA_PERIOD_US:-2000}
  us=$(awk -v q="$quota" -v p="$period" 'BEGIN { printf "%d", q * p }')
  name="${CGROUP_NAME:-geofaas-bench}-$id"
  if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    dir=/sys/fs/cgroup/$name
    mkdir -p "$dir"
    echo "$us $period" > "$dir/cpu.max"
  else
    dir=/sys/fs/cgroup/cpu/$name
    mkdir -p "$dir"
    echo "$period" > "$dir/cpu.cfs_period_us"
    echo "$us" > "$dir/cpu.cfs_quota_us"
  fi
  echo $$ > "$dir/cgroup.procs"
fi
if [[ -n $cpus ]]; then
  exec taskset -c "$cpus" "$real" "$@"
fi
exec "$real" "$@"
