#!/usr/bin/env bash
# Cold starts of the embedded runtime (functions-adapter/benches/coldstart.rs), on this tree and,
# in the same run, on an older revision (default: where this branch left main) for a ratio.
#
#   bench/deploy/coldstart.sh                 # this tree, then the old revision
#   OLD_REV=none bench/deploy/coldstart.sh    # this tree only
#
# Settings: OLD_REV, COLDSTART_N (samples per case, default 100), COLDSTART_PACE_MS (default
# 300), CARGO_TARGET_DIR, GEOFAAS_PYTHON / GEOFAAS_NODE (default: the real python3 behind a
# pyenv shim). The old revision is exported (git archive) to a temporary folder with this tree's
# benchmark file copied in (LocalRuntime's public API is the same), and removed afterwards.
# Prints both tables and the ratio old / new of each P50 and P99.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
old_rev=${OLD_REV:-$(git merge-base HEAD main)}
if [ -z "${GEOFAAS_PYTHON:-}" ] && command -v pyenv >/dev/null 2>&1; then
  GEOFAAS_PYTHON=$(pyenv which python3)
  export GEOFAAS_PYTHON
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "machine: $(nproc) cores, $(uname -sr), $(python3 --version 2>&1 | head -1), node $(node --version)"
echo "python: ${GEOFAAS_PYTHON:-python3 from PATH}; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "new: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- functions-adapter || echo '+changes')"
COLDSTART_LABEL=new cargo bench -q -p geofaas-functions --bench coldstart | tee "$out/new.md"

if [ "$old_rev" != none ]; then
  old_tree=$out/old
  mkdir -p "$old_tree"
  git archive "$old_rev" | tar -x -C "$old_tree"
  mkdir -p "$old_tree/functions-adapter/benches"
  cp functions-adapter/benches/coldstart.rs "$old_tree/functions-adapter/benches/"
  if ! grep -q 'name = "coldstart"' "$old_tree/functions-adapter/Cargo.toml"; then
    printf '\n[[bench]]\nname = "coldstart"\nharness = false\n' >>"$old_tree/functions-adapter/Cargo.toml"
  fi
  echo "old: $(git rev-parse --short "$old_rev")"
  (cd "$old_tree" && COLDSTART_LABEL=old cargo bench -q -p geofaas-functions --bench coldstart) | tee "$out/old.md"
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| runtime | case | P50 old / new | P99 old / new |"
  echo "|---|---|---|---|"
  # Rows: | label | runtime | case | n | P50 | P99 | max |
  awk -F'|' '
    function num(s) { gsub(/ ms| /, "", s); return s + 0 }
    FNR == 1 || $2 ~ /---/ { next }
    FILENAME ~ /old\.md$/ { key = $3 "|" $4; o50[key] = num($6); o99[key] = num($7); next }
    { key = $3 "|" $4; n50[key] = num($6); n99[key] = num($7); order[++k] = key }
    END {
      for (i = 1; i <= k; i++) {
        key = order[i]; split(key, p, "|")
        if (key in o50)
          printf "|%s|%s| %.1fx | %.1fx |\n", p[1], p[2], o50[key] / n50[key], o99[key] / n99[key]
      }
    }' "$out/old.md" "$out/new.md"
fi
