#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Instructions per call of the per-block state operations, counted by
# callgrind: `folio-bench state` runs each case once per folio size with a
# fixed op count, and callgrind collects only inside the function holding
# that case's measured loop (state_loop_a .. state_loop_d), so setup,
# resets and timing are not counted. Unlike ns, instruction counts do not
# move with machine load, so they are what to compare across changes.
#
# usage: folio-bench callgrind state [OPS]
#        bench/callgrind/state.sh [BUILDDIR] [OPS]
#   BUILDDIR  meson build directory holding bench/folio-bench (folio-bench
#             passes its own; default: build-folio, relative to the
#             source root)
#   OPS       ops per case (default 20000); the warm-up batch comes on top
#             and is counted on both sides of the division
# Use a gcc build: valgrind 3.19 cannot read the DWARF 5 that clang 14
# emits by default (or build with -gdwarf-4).
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
builddir=${1:-build-folio}
ops=${2:-20000}
case $builddir in /*) ;; *) builddir=$root/$builddir ;; esac
bench=$builddir/bench/folio-bench

command -v valgrind >/dev/null 2>&1 || { echo "valgrind not found" >&2; exit 1; }
[ -x "$bench" ] || { echo "$bench not built (ninja -C $builddir)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cg-state.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

printf '%-4s %-5s %10s %12s %9s %8s %9s\n' case folio ops-run Ir Ir/op calls/op Ir/call
for size in 64k 2m; do
	for c in a b c d; do
		out=$tmp/cg.$c.$size
		valgrind --tool=callgrind --callgrind-out-file="$out" \
			--collect-atstart=no --toggle-collect="state_loop_$c" \
			"$bench" state --case "$c" --size "$size" --iters "$ops" \
			--reps 1 >"$tmp/stdout" 2>"$tmp/stderr" || {
			cat "$tmp/stderr" >&2
			exit 1
		}
		# The bench's row: case folio ns/op calls/op ns/call ops-run op...
		row=$(awk -v c="$c" '$1 == c { print $4, $6 }' "$tmp/stdout")
		[ -n "$row" ] || { cat "$tmp/stdout" >&2; exit 1; }
		set -- $row
		calls=$1 run=$2
		ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$out")
		[ -n "$ir" ] || { echo "no totals in $out" >&2; exit 1; }
		awk -v c="$c" -v s="$size" -v n="$run" -v ir="$ir" -v k="$calls" 'BEGIN {
			printf "%-4s %-5s %10d %12d %9.1f %8d %9.1f\n",
				c, toupper(s), n, ir, ir / n, k, ir / n / k }'
	done
done
