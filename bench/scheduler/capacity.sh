# Sourced by compare.sh and capture-profiles.sh: each node's capacity (CAPACITY), set up for
# pinned-node.sh, and the `cores` the topology copies give the nodes.
#   CAPACITY=quota (default)  a CPU quota per node process: QUOTA_potsdam=0.5 and
#                             QUOTA_tu_berlin=0.5 CPU (half a core's time each), the cloud none
#                             (the whole machine); override any QUOTA_<id>
#   CAPACITY=pin              taskset: CPUS_potsdam=0, CPUS_tu_berlin=1, CPUS_cloud=0-1
#   CAPACITY=none             the nodes as they are, the topology's own `cores`
# Needs HERE (bench/scheduler) and BIN.
export GEOFAAS_REAL_BIN=$BIN GEOFAAS_BIN=$HERE/pinned-node.sh CGROUP_NAME=${CGROUP_NAME:-geofaas-bench}
case ${CAPACITY:-quota} in
  quota)
    export QUOTA_potsdam=${QUOTA_potsdam-0.5} QUOTA_tu_berlin=${QUOTA_tu_berlin-0.5}
    export QUOTA_cloud=${QUOTA_cloud-} ;;
  pin)
    export CPUS_potsdam=${CPUS_potsdam-0} CPUS_tu_berlin=${CPUS_tu_berlin-1} CPUS_cloud=${CPUS_cloud-0-1} ;;
  none) unset GEOFAAS_BIN ;;
  *) echo "CAPACITY must be quota, pin or none" >&2; exit 2 ;;
esac

# The `cores` a node's model plans with: what its process gets, as Rust's available_parallelism
# reads it (the CPUs of CPUS_<id>, else the machine's, capped by the quota, at least 1).
cores_of() {
  local key=${1//-/_} q c n
  q=QUOTA_$key c=CPUS_$key
  if [[ -n ${!c:-} ]]; then n=$(taskset -c "${!c}" nproc); else n=$(nproc); fi
  if [[ -n ${!q:-} ]]; then
    awk -v q="${!q}" -v n="$n" 'BEGIN { c = int(q); if (c < 1) c = 1; if (c > n) c = n; print c }'
  else
    echo "$n"
  fi
}

# sed arguments that put `cores = <cores_of id>` after each node's id line (none with
# CAPACITY=none).
cores_sed() {
  local id
  [[ ${CAPACITY:-quota} == none ]] && return
  for id in potsdam tu-berlin cloud; do
    printf '%s\n' -e "/^id = \"$id\"/a cores = $(cores_of "$id")"
  done
}

# Removes the cgroups pinned-node.sh made (those no process is in any more).
remove_cgroups() {
  local d
  for d in /sys/fs/cgroup/"$CGROUP_NAME"-* /sys/fs/cgroup/cpu/"$CGROUP_NAME"-*; do
    [[ -d $d ]] && rmdir "$d" 2>/dev/null || true
  done
}
