#!/usr/bin/env bash
# Start two nbdkit servers on Unix sockets in a temporary directory, each
# serving a 2 GiB file through the delay filter (1 ms per read and write:
# a remote server), the second with nbdkit's cache filter (cache=writeback)
# in front, and run bench/nbd-compare against them: the library over the
# first vs raw libnbd on the first vs raw libnbd on the second.
#   bench/nbd-compare.sh [BUILD_DIR] [--seconds S] [--rounds N]
set -euo pipefail
build=${1:-build}
shift || true
bin=$build/bench/nbd-compare
[ -x "$bin" ] || { echo "build $bin first (needs libnbd)" >&2; exit 1; }
command -v nbdkit >/dev/null || { echo "nbdkit is not installed" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/nbd-compare.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
truncate -s 2G "$dir/lib.img" "$dir/cache.img"
start() { # name, then nbdkit arguments
	local name=$1; shift
	nbdkit -f --exit-with-parent -U "$dir/$name.sock" -P "$dir/$name.pid" "$@" &
	pids+=($!)
	for _ in $(seq 500); do [ -s "$dir/$name.pid" ] && return; sleep 0.01; done
	echo "nbdkit $name did not start" >&2; exit 1
}
start lib --filter=delay file "file=$dir/lib.img" delay-read=1ms delay-write=1ms
start cache --filter=cache --filter=delay file "file=$dir/cache.img" \
	cache=writeback delay-read=1ms delay-write=1ms
"$bin" --lib "nbd+unix:///?socket=$dir/lib.sock" \
	--cache "nbd+unix:///?socket=$dir/cache.sock" "$@"
