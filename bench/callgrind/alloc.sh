#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Instructions per folio allocation + free, counted by callgrind, for the
# old malloc + posix_memalign pair and for the folio allocator
# (alloc_folio_mem/alloc_folio_mem_free). `alloc-rss loop` runs one loop;
# callgrind collects only inside it (loop_pair_* allocates and frees one
# folio at a time: the thread-cache path; loop_batch_* allocates 1024
# and frees them: refills, flushes and the arena's lists).
#
# usage: folio-bench callgrind alloc [OPS]
#        bench/callgrind/alloc.sh [BUILDDIR] [OPS]
#   BUILDDIR  meson build directory holding bench/alloc-rss (folio-bench
#             passes its own; default build/al, relative to the source
#             root); use a gcc build
#   OPS       folios per loop (default 102400)
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
builddir=${1:-build/al}
ops=${2:-102400}
case $builddir in /*) ;; *) builddir=$root/$builddir ;; esac
bench=$builddir/bench/alloc-rss

command -v valgrind >/dev/null 2>&1 || { echo "valgrind not found" >&2; exit 1; }
[ -x "$bench" ] || { echo "$bench not built (ninja -C $builddir)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cg-alloc.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

printf '%-6s %8s %12s %12s %8s\n' loop size old-Ir/op new-Ir/op old/new
for pat in pair batch; do
	for size in 4096 65536 2097152; do
		n=$ops
		[ "$size" -lt 1048576 ] || n=$((ops / 16))
		for impl in old new; do
			out=$tmp/cg.$pat.$size.$impl
			valgrind --tool=callgrind --callgrind-out-file="$out" \
				--collect-atstart=no \
				--toggle-collect="loop_${pat}_$impl" \
				"$bench" loop --impl "$impl" --pattern "$pat" \
				--size "$size" --ops "$n" >"$tmp/stdout" \
				2>"$tmp/stderr" || { cat "$tmp/stderr" >&2; exit 1; }
			# The loop rounds ops up to whole batches of 1024.
			run=$(awk '{ print $4 }' "$tmp/stdout")
			ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$out")
			eval "ir_$impl=\$ir run_$impl=\$run"
		done
		awk -v p="$pat" -v s="$size" -v io="$ir_old" -v no="$run_old" \
			-v in_="$ir_new" -v nn="$run_new" 'BEGIN {
			o = io / no; n = in_ / nn
			printf "%-6s %8d %12.1f %12.1f %8.2f\n", p, s, o, n, o / n }'
	done
done
