#!/usr/bin/env bash
# Run the folio-bench sweeps behind the plots and keep their --json output.
#
#   bench/plot/collect.sh [FOLIO_BENCH] [DATADIR]
#
# FOLIO_BENCH: the binary (default: first of build-bench/, build/release/,
# build/). DATADIR: where the JSON files go (default doc/plots/data).
# Environment: RUNTIME (s per variant, default 2), SIZE (file, default 64M),
# JOBS (default 4), MODEL (device model for the modelled set, default
# bw=200M,lat=50), DIR (temporary files, default /var/tmp), BEFORE_EACH
# (a command run before each benchmark, e.g. one that waits until the
# machine is idle; default none).
# Takes about 2 * 6 * 2 * RUNTIME s for randwrite-sync plus ~60 s, plus
# about 3 minutes for seqread and randread (1 GiB, cold 4 KiB O_DIRECT),
# about 40 s for sync-scatter and about 80 s for the shared-file syncs.
set -euo pipefail
cd "$(dirname "$0")/../.."

bin=${1:-}
if [ -z "$bin" ]; then
	for b in build-bench build/release build; do
		[ -x "$b/bench/folio-bench" ] && { bin=$b/bench/folio-bench; break; }
	done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "collect.sh: build folio-bench first" >&2; exit 2; }
out=${2:-doc/plots/data}
mkdir -p "$out"
runtime=${RUNTIME:-2}
size=${SIZE:-64M}
jobs=${JOBS:-4}
model=${MODEL:-bw=200M,lat=50}
dir=${DIR:-/var/tmp}

run() { # file, then folio-bench arguments
	local file=$1; shift
	${BEFORE_EACH:-true}
	echo "folio-bench $* > $file" >&2
	"$bin" "$@" --json >"$out/$file.tmp"
	mv "$out/$file.tmp" "$out/$file"
}

# (a) 4 KiB random overwrites + sync against folio size: the real posix
# engine on --dir, and the mem engine behind the device model (no real
# I/O, so only the modelled device decides the throughput).
for fs in 4K 16K 64K 256K 1M 2M; do
	run "randwrite-posix-$fs.json" randwrite-sync --engine posix \
		--folio-size "$fs" --size "$size" --runtime "$runtime" \
		--jobs "$jobs" --no-kernel --dir "$dir"
	run "randwrite-model-$fs.json" randwrite-sync --engine mem \
		--device-model "$model" --folio-size "$fs" --size "$size" \
		--runtime "$runtime" --jobs "$jobs"
done
# The kernel page cache on the same setup, for reference in the plot.
run "randwrite-kernel.json" randwrite-sync --engine posix --tracking block \
	--folio-size 64K --size "$size" --runtime "$runtime" --jobs "$jobs" \
	--dir "$dir"

# (b) 1 KiB writes: library vs kernel page cache vs memcpy.
run fstime.json fstime --runtime "$runtime"

# (c) 128 KiB sequential writes against max folio size.
run seqwrite.json seqwrite --size 256M --runtime "$runtime" \
	--folio-sizes 4K,8K,16K,32K,64K,128K,256K,512K,1M,2M

# (d) Hit ratio against the budget: the pool (S3-FIFO) and the LRU and
# FIFO simulated on the same Zipf(0.99) trace over one 256 MiB working set.
run pool-sweep.json pool --mode sweep --size 256M \
	--budgets 1M,2M,4M,8M,16M,32M,64M --dir "$dir"
# (e) cold sequential reads, 4 KiB and 128 KiB calls, per engine, and
# (f) 4 KiB random reads hot and cold, of a 1 GiB file on --dir.
run seqread.json seqread --size 1G --dir "$dir"
run randread.json randread --size 1G --runtime "$runtime" --dir "$dir"
# (g) one sync of 10^4 scattered 4 KiB blocks of a 1 GiB file, per engine,
# with a plain io_uring loop as the device's reference.
run sync-scatter.json sync-scatter --rounds 5 --dir "$dir"
# (h) N threads each writing 4 KiB and syncing, all on one O_DIRECT file
# (one mapping: a database's commits), per engine, against the kernel's
# pwrite + fdatasync on the same file.
for e in posix uring; do
	for n in 1 2 4 8; do
		run "randwrite-shared-$e-$n.json" randwrite-sync --layout shared \
			--direct --tracking block --size 256M --rounds 5 \
			--runtime 0.4 --jobs "$n" --engine "$e" --dir "$dir"
	done
done
echo "JSON in $out" >&2
