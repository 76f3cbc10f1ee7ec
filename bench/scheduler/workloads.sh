# Sourced by compare.sh and capture-profiles.sh: the mobility and mixed workloads as compare.sh
# defines them (its header says what each is), so that a capture runs the very load a comparison
# measures. Needs BIN and DATA.
#   mobility_load TOPOLOGY OUT [loadtest args...]    env: MOBILITY_RATE MOBILITY_BACKGROUND HIGHLOAD_BODY
#   mixed_load TOPOLOGY OUT SEED [loadtest args...]  env: MIXED_* (MIXED_WARM=0: no warm-up)
# Each writes the loadtest's files to OUT and its output to OUT/log.txt.

mobility_load() {
  local topology=$1 out=$2 bg=()
  shift 2
  if [[ ${MOBILITY_BACKGROUND:-16} -gt 0 ]]; then
    bg=(--background-clients "$DATA/potsdam-clients-16.csv"
        --background-count "${MOBILITY_BACKGROUND:-16}" --background-function sievehard
        --background-body "${HIGHLOAD_BODY:-3000000}" --background-interval-ms 1000)
  fi
  "$BIN" loadtest mobility --spawn --topology "$topology" \
    --path "$DATA/mobility-path-99.csv" --function sieve --warm \
    --rate "${MOBILITY_RATE:-5}" "${bg[@]}" "$@" \
    --out "$out" > "$out/log.txt" 2>&1
}

mixed_load() {
  local topology=$1 out=$2 seed=$3 warm=()
  shift 3
  [[ ${MIXED_WARM:-1} == 1 ]] && warm=(--warm)
  "$BIN" loadtest mixed --spawn --topology "$topology" \
    --functions "${MIXED_FUNCTIONS:-24}" --zipf "${MIXED_ZIPF:-1.0}" --seed "$seed" \
    --clients-per-edge "${MIXED_CLIENTS:-4}" --calls "${MIXED_CALLS:-800}" \
    --rate "${MIXED_RATE:-40}" --keep-alive-s "${MIXED_KEEP_ALIVE_S:-5}" \
    --init-ms "${MIXED_INIT_MS:-0}" \
    --slo-ms "${MIXED_SLO_MS:-1000}" --timeout-ms 30000 "${warm[@]}" "$@" \
    --out "$out" > "$out/log.txt" 2>&1
}
