#!/usr/bin/env bash
# Build libfolio-state and run its benchmark demo (folio-bench with no
# arguments: every default workload, briefly). Extra arguments go to
# folio-bench, e.g. `scripts/demo.sh randwrite-sync --jobs 4`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
[ -f build/release/build.ninja ] ||
	meson setup build/release --buildtype=release -Dwerror=true >/dev/null
ninja -C build/release >/dev/null
exec build/release/bench/folio-bench "$@"
