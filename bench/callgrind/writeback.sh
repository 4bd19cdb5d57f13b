#!/usr/bin/env bash
# Instructions per dirty folio of one writeback pass under callgrind:
# folio-bench wbpass on the mapping that caches only dirty folios, one
# 4 KiB block dirty in each 64 KiB folio (so every folio is a request of
# its own), written back to an engine that completes each request inside
# submit() without moving bytes: the count is the library's work alone,
# request building and completion included.
#
#   folio-bench callgrind writeback [DIRTY] [-- extra wbpass options]
#   bench/callgrind/writeback.sh [FOLIO_BENCH] [DIRTY] [-- extra wbpass options]
#
# folio-bench passes itself as FOLIO_BENCH; run directly, the script
# takes the folio-bench beside it in a build tree, else the first found
# in build-bench/, build/release/ or build/; DIRTY (default 100000) is the dirty folios
# per pass. Collection is toggled on only inside wbpass_pass(), which
# holds exactly one folio_mapping_writeback() call; the folios are
# re-dirtied outside it before each of the ROUNDS (3) passes, so
# Ir / (ROUNDS * DIRTY) is the cost of writing back one dirty folio.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

script="callgrind writeback"
. "$here/common.sh"
cg_setup "$@"
cg_wbpass wbpass_pass writeback "$iters" "${extra[@]}"
