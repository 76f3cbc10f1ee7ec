#!/usr/bin/env bash
# A private target dir for a second git worktree, sharing the warm one's third-party artefacts by
# hard links. Cargo names our crates' artefacts the same in every worktree of this workspace, so
# two worktrees building into one target dir take each other's builds of our crates as fresh.
# Usage: scripts/worktree-target.sh DEST   (source: $SRC, default /var/tmp/geofaas-target);
# then build in the worktree with CARGO_TARGET_DIR=DEST.
set -euo pipefail
SRC=${SRC:-/var/tmp/geofaas-target}; DEST=${1:?usage: scripts/worktree-target.sh DEST}
ours='^(lib)?(geofaas|integration|coldstart|location|topology|function_name|dns_message|geohash|routing|decide)[-_]'
for prof in debug release; do
  [[ -d $SRC/$prof ]] || continue
  mkdir -p "$DEST/$prof/deps" "$DEST/$prof/build" "$DEST/$prof/.fingerprint"
  (cd "$SRC/$prof/deps" && ls | grep -v -E "$ours" | xargs -r -I{} cp -al {} "$DEST/$prof/deps/")
  (cd "$SRC/$prof/build" && ls | grep -v -E "$ours" | xargs -r -I{} cp -al {} "$DEST/$prof/build/")
  (cd "$SRC/$prof/.fingerprint" && ls | grep -v -E "$ours" | xargs -r -I{} cp -a {} "$DEST/$prof/.fingerprint/")
done
echo seeded "$DEST"
