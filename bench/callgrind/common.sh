# SPDX-License-Identifier: MIT
# Shared by the bench/callgrind/*.sh scripts that count instructions of a
# folio-bench loop: sourced, not run. The caller has set `here` to its own
# directory and `script` to its own name for messages.

# cg_bench_bin [FOLIO_BENCH]: print the binary to use: the argument; else
# the folio-bench beside this directory when the script runs from a build
# tree (build/bench/callgrind/); else the first folio-bench found in
# build-bench/, build/release/ or build/ of the source tree. Exit 2 when
# there is none, or when valgrind is missing.
cg_bench_bin() {
	local bin=${1:-} b
	if [ -z "$bin" ] && [ -f "$here/../folio-bench" ] &&
	   [ -x "$here/../folio-bench" ]; then
		bin=$here/../folio-bench
	fi
	if [ -z "$bin" ]; then
		for b in build-bench build/release build; do
			if [ -x "$here/../../$b/bench/folio-bench" ]; then
				bin=$here/../../$b/bench/folio-bench
				break
			fi
		done
	fi
	[ -n "$bin" ] && [ -x "$bin" ] || {
		echo "$script: no folio-bench binary (build first)" >&2
		exit 2
	}
	command -v valgrind >/dev/null || {
		echo "$script: valgrind not installed" >&2
		exit 2
	}
	printf '%s\n' "$bin"
}

# cg_setup ARGS...: parse "[FOLIO_BENCH] [ITERS] [-- extra options]"
# into bin, iters (default 100000) and the array extra, and make the
# scratch directory tmp, removed on exit.
cg_setup() {
	bin=$(cg_bench_bin "${1:-}")
	iters=${2:-100000}
	shift $(( $# > 2 ? 2 : $# ))
	[ "${1:-}" = "--" ] && shift
	extra=("$@")
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
}

# cg_ir OUTFILE: the total instruction count of a callgrind output file.
cg_ir() {
	awk '$1 == "summary:" || $1 == "totals:" { print $2; exit }' "$1"
}

# cg_top OUTFILE N: the 15 functions with the most instructions, each as
# instructions per one of the N iterations.
cg_top() {
	callgrind_annotate "$1" 2>/dev/null |
		awk -v n="$2" '/^ *[0-9,]+ +\([ 0-9.]+%\) +/ && !/PROGRAM TOTALS/ {
			ir = $1; gsub(",", "", ir); name = $NF
			for (i = 3; i <= NF; i++) if ($i ~ /:/) { name = $i; break }
			sub(/^.*:/, "", name); sub(/ .*$/, "", name)
			if (++k <= 15) printf "  %8.1f  %s\n", ir / n, name }'
}

# cg_wbpass TOGGLE WHAT DIRTY [wbpass options]: run folio-bench wbpass
# under callgrind on the mapping that caches only dirty folios, one 4 KiB
# block dirty in each 64 KiB folio (so every folio is a request of its
# own), with the inline engine (each request completes inside submit()
# and moves no bytes), 3 rounds re-dirtying the same folios, collecting
# only inside the function TOGGLE; then print Ir per dirty folio and the
# top functions. WHAT names the measured call in the output.
cg_wbpass() {
	local toggle=$1 what=$2 dirty=$3 rounds=3
	shift 3
	local out=$tmp/callgrind.wb
	valgrind --tool=callgrind --callgrind-out-file="$out" \
		--toggle-collect="$toggle*" \
		"$bin" wbpass --inline-engine --only all-dirty --dirty "$dirty" \
		--rounds "$rounds" --size "$((dirty * 64))K" --folio-size 64K \
		--bs 4K --block-size 4K "$@" \
		>"$tmp/stdout" 2>"$tmp/stderr" || {
		echo "$script: run failed:" >&2
		cat "$tmp/stderr" >&2
		exit 1
	}
	local ir n=$((rounds * dirty))
	ir=$(cg_ir "$out")
	printf '%-14s %14s %16s\n' folios Ir instr/folio
	awk -v ir="$ir" -v n="$n" 'BEGIN {
		printf "%-14d %14d %16.1f\n", n, ir, ir / n
		printf "target <= 1000 instructions per dirty folio: %s\n",
			ir / n <= 1000 ? "met" : "NOT met" }'
	echo
	echo "Top functions of one folio's $what (Ir / $n folios):"
	cg_top "$out" "$n"
}
