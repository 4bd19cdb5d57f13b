#!/usr/bin/env bash
# Instructions per 1 KiB write of folio-bench's fstime loops under
# callgrind: the library's buffered write, pwrite() to tmpfs, memcpy().
#
#   folio-bench callgrind fstime [ITERS] [-- extra fstime options]
#   bench/callgrind/fstime.sh [FOLIO_BENCH] [ITERS] [-- extra fstime options]
#
# folio-bench passes itself as FOLIO_BENCH; run directly, the script
# takes the folio-bench beside it in a build tree, else the first found
# in build-bench/, build/release/ or build/. Collection is toggled on only inside the
# function holding each timed loop (fstime_loop_<variant>), which runs
# exactly ITERS writes (default 100000) after an untimed warm pass, so
# Ir / ITERS is the cost of one write including everything it calls.
# callgrind sees user space only: for pwrite that is the syscall stub,
# not the kernel's work, so its count is a floor, not a cost.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

script="callgrind fstime"
. "$here/common.sh"
cg_setup "$@"

printf '%-8s %14s %12s\n' variant Ir instr/write
for v in lib pwrite memcpy; do
	out=$tmp/callgrind.$v
	valgrind --tool=callgrind --callgrind-out-file="$out" \
		--toggle-collect="fstime_loop_$v*" \
		"$bin" fstime --only "$v" --iters "$iters" "${extra[@]}" \
		>"$tmp/stdout.$v" 2>"$tmp/stderr.$v" || {
		echo "$script: $v run failed:" >&2
		cat "$tmp/stderr.$v" >&2
		exit 1
	}
	ir=$(cg_ir "$out")
	awk -v v="$v" -v ir="$ir" -v n="$iters" \
		'BEGIN { printf "%-8s %14d %12.1f\n", v, ir, ir / n }'
	[ "$v" = lib ] && cp "$out" "$tmp/keep.lib"
done
echo "(pwrite: user-space instructions only; the kernel's work is not counted)"
echo
echo "Top functions of one library write (Ir / $iters writes):"
cg_top "$tmp/keep.lib" "$iters"
