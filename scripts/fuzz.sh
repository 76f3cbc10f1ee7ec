#!/usr/bin/env bash
# Runs every libFuzzer target in fuzz/ for a bounded time, on the pinned stable toolchain
# (cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP=1 lets stable take them).
#
#   scripts/fuzz.sh            # each target 60 s
#   scripts/fuzz.sh 10         # each target 10 s (what CI runs)
#   scripts/fuzz.sh 600 topology   # one target, 10 minutes
#
# Corpora grow in fuzz/corpus/<target>; a crash is written to fuzz/artifacts/<target>/ and
# fails the run (add it as a regression test, then fix it).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(location geohash topology function_name dns_message)
command -v cargo-fuzz >/dev/null || { echo "== cargo install cargo-fuzz"; cargo install cargo-fuzz --locked --quiet; }
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-/var/tmp/geofaas-fuzz-target}"
cargo fuzz build -O
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "== fuzz $t for ${seconds}s"
  # FUZZ_SCRATCH=1 (what scripts/test.sh sets) keeps new inputs out of the committed corpus.
  dirs=("corpus/$t")
  if [ "${FUZZ_SCRATCH:-0}" = 1 ]; then
    scratch="$(mktemp -d)"
    dirs=("$scratch" "corpus/$t")
  fi
  cargo fuzz run -O "$t" "${dirs[@]}" -- -max_total_time="$seconds" -print_final_stats=1 2>&1 |
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb|cov:|Done|ERROR|panicked" | tail -4
  test "${PIPESTATUS[0]}" -eq 0
done
