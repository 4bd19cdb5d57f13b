#!/usr/bin/env bash
# Instructions per dirty folio of one whole folio_mapping_sync() under
# callgrind: the writeback pass of writeback.sh, the wait for it, the
# flush and the settling that turns the written (unstable) blocks clean.
# Same workload: the mapping caches only dirty folios, one 4 KiB block
# dirty in each 64 KiB folio, and the engine completes each request
# inside submit() without moving bytes (its flush does nothing).
#
#   folio-bench callgrind sync [DIRTY] [-- extra wbpass options]
#   bench/callgrind/sync.sh [FOLIO_BENCH] [DIRTY] [-- extra wbpass options]
#
# folio-bench passes itself as FOLIO_BENCH; run directly, the script
# takes the folio-bench beside it in a build tree, else the first found
# in build-bench/, build/release/ or build/; DIRTY (default 10000) is the
# dirty folios per sync. Collection is toggled on only inside
# wbpass_sync(), which holds exactly one folio_mapping_sync() call; the
# folios are re-dirtied outside it before each of the 3 rounds, so
# Ir / (3 * DIRTY) is the cost of syncing one dirty folio.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

script="callgrind sync"
. "$here/common.sh"
cg_setup "${1:-}" "${2:-10000}" "${@:3}"
cg_wbpass wbpass_sync sync "$iters" --sync "${extra[@]}"
