#!/usr/bin/env bash
# fio on ext4 directly and through folio-fuse, side by side: every round
# runs each workload on every variant in turn, and the table shows the
# median over the rounds (the machine's disk is noisy; only figures taken
# back to back compare). Variants:
#
#   ext4      the backing directory itself
#   ext4-uncached  (randwrite only) the same without pre_read: the
#             files are not in the kernel's page cache when the writes
#             begin (pre_read fills it with large folios)
#   ff-block  folio-fuse, 64 KiB folios, per-block dirty tracking
#   ff-folio  folio-fuse, 64 KiB folios, whole-folio dirty tracking
#   bare      folio-fuse --passthrough: the same FUSE server with the
#             library left out (pread/pwrite/fdatasync on the backing
#             file), the cost of FUSE alone
#
# Every FUSE variant runs in the default direct_io mode, so the kernel
# keeps no page cache in front. Workloads:
#
#   randwrite  the job of the iomap per-block-dirty patch: psync, 4 KiB
#              random overwrites of laid-out files, pre_read, 8 jobs,
#              fdatasync after every write (every variant; write
#              amplification from folio-fuse's --stats over the timed run:
#              bytes submitted to writeback per byte written)
#   seqwrite   128 KiB sequential writes of one file, fsync at the end
#   seqread    128 KiB sequential reads of it, cold (caches dropped)
#   randread   4 KiB random reads of it, hot (pre-read) and cold
#
# For cold reads the table's RA is the library's read amplification:
# bytes it read from the backing file per byte fio read.
#
# usage: bench/fuse/fuse-fio.sh [--json] [--rounds N] [--runtime S]
#            [--job-size SIZE] [--file-size SIZE] [--dir DIR]
#            [--workloads LIST] [FOLIO_FUSE]
#        folio-bench fuse-fio [the same options]
# Needs root (drop_caches, mounting) and fio. FOLIO_FUSE defaults to the
# build tree's examples/folio-fuse/folio-fuse when the script runs from a
# build tree (build/bench/fuse/, where folio-bench runs it), else to
# build/rel/examples/folio-fuse/folio-fuse of the source tree.
set -euo pipefail

rounds=3 runtime=4 job_size=32M file_size=256M json=0
dir=/var/tmp workloads="randwrite seqwrite seqread randread"
ff=
while [ $# -gt 0 ]; do
	case $1 in
	--json) json=1 ;;
	--rounds) rounds=$2; shift ;;
	--runtime) runtime=$2; shift ;;
	--job-size) job_size=$2; shift ;;
	--file-size) file_size=$2; shift ;;
	--dir) dir=$2; shift ;;
	--workloads) workloads=$2; shift ;;
	-h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) echo "fuse-fio.sh: unknown option $1" >&2; exit 2 ;;
	*) ff=$1 ;;
	esac
	shift
done
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "$ff" ] && [ -x "$here/../../examples/folio-fuse/folio-fuse" ]; then
	ff=$here/../../examples/folio-fuse/folio-fuse
fi
ff=${ff:-$here/../../build/rel/examples/folio-fuse/folio-fuse}
[ -x "$ff" ] || { echo "fuse-fio.sh: no folio-fuse at $ff" >&2; exit 2; }
command -v fio >/dev/null || { echo "fuse-fio.sh: fio not found" >&2; exit 2; }
[ -w /proc/sys/vm/drop_caches ] ||
	{ echo "fuse-fio.sh: needs root (drop_caches)" >&2; exit 2; }

work=$(mktemp -d "$dir/fuse-fio.XXXXXX")
back=$work/data mnt=$work/mnt out=$work/out
mkdir "$back" "$mnt" "$out"
ffpid=
cleanup() {
	if [ -n "$ffpid" ]; then
		fusermount3 -u -z "$mnt" 2>/dev/null || true
		wait "$ffpid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

geom64="--min-folio-size 64K --folio-size 64K"
variant_opts() {
	case $1 in
	ff-block) echo "$geom64 --tracking block" ;;
	ff-folio) echo "$geom64 --tracking folio" ;;
	bare) echo "--passthrough" ;;
	esac
}

mount_ff() { # variant
	# shellcheck disable=SC2046
	"$ff" -f --budget 1G --stats "$work/stats.json" $(variant_opts "$1") \
		"$back" "$mnt" 2>>"$work/ff.log" &
	ffpid=$!
	for _ in $(seq 100); do
		grep -q " $mnt fuse" /proc/mounts && return 0
		sleep 0.1
	done
	echo "fuse-fio.sh: folio-fuse did not mount" >&2
	cat "$work/ff.log" >&2
	exit 1
}

umount_ff() {
	[ -n "$ffpid" ] || return 0
	fusermount3 -u "$mnt"
	wait "$ffpid"
	ffpid=
}

# The statistics now, into $1 (SIGUSR1 rewrites the file).
snapshot() {
	rm -f "$work/stats.json"
	kill -USR1 "$ffpid"
	for _ in $(seq 100); do
		[ -s "$work/stats.json" ] && break
		sleep 0.05
	done
	cp "$work/stats.json" "$1"
}

fuse() { # variant: does it run through folio-fuse?
	case $1 in ext4*) return 1 ;; esac
}

target() { # variant: the directory fio works in
	if fuse "$1"; then echo "$mnt"; else echo "$back"; fi
}

cold() { # variant: neither folio-fuse nor the kernel holds the data
	umount_ff
	sync
	echo 3 >/proc/sys/vm/drop_caches
	! fuse "$1" || mount_ff "$1"
}

common="--ioengine=psync --output-format=json --group_reporting"

# The files of every workload, laid out once on the backing directory.
fio --name=rw --directory="$back" --numjobs=8 --size="$job_size" \
	--rw=write --bs=1M --create_only=1 --overwrite=1 $common \
	>/dev/null
fio --name=seq --directory="$back" --size="$file_size" --rw=write \
	--bs=1M --end_fsync=1 $common >/dev/null

# fio with the statistics of folio-fuse before and after.
fio_run() { # variant result fio-arguments...
	local v=$1 res=$2
	shift 2
	! fuse "$v" || snapshot "$res.before"
	fio "$@" $common >"$res.json"
	! fuse "$v" || snapshot "$res.after"
}

run_one() { # workload variant round
	local w=$1 v=$2 r=$3 t res=$out/$1.$2.$r pre=1
	! fuse "$v" || mount_ff "$v"
	t=$(target "$v")
	case $w in
	randwrite)
		if [ "$v" = ext4-uncached ]; then
			pre=0
			sync
			echo 3 >/proc/sys/vm/drop_caches
		fi
		fio_run "$v" "$res" --name=rw --directory="$t" --numjobs=8 \
			--size="$job_size" --rw=randwrite --bs=4k --overwrite=1 \
			--pre_read=$pre --fdatasync=1 --runtime="$runtime" \
			--time_based --randrepeat=0
		;;
	seqwrite)
		fio_run "$v" "$res" --name=seq --directory="$t" \
			--size="$file_size" --rw=write --bs=128k --overwrite=1 \
			--end_fsync=1
		;;
	seqread)
		cold "$v"
		fio_run "$v" "$res" --name=seq --directory="$t" \
			--size="$file_size" --rw=read --bs=128k
		;;
	randread-hot)
		fio_run "$v" "$res" --name=seq --directory="$t" \
			--size="$file_size" --rw=randread --bs=4k --pre_read=1 \
			--randrepeat=0 --runtime="$runtime" --time_based
		;;
	randread-cold)
		cold "$v"
		fio_run "$v" "$res" --name=seq --directory="$t" \
			--size="$file_size" --rw=randread --bs=4k --randrepeat=0 \
			--runtime="$runtime" --time_based
		;;
	esac
	umount_ff
}

list=()
for w in $workloads; do
	case $w in
	randwrite) for v in ext4 ext4-uncached ff-block ff-folio bare; do
			list+=("$w:$v"); done ;;
	randread) for v in ext4 ff-block bare; do
			list+=("randread-hot:$v" "randread-cold:$v"); done ;;
	seqwrite|seqread) for v in ext4 ff-block bare; do list+=("$w:$v"); done ;;
	*) echo "fuse-fio.sh: unknown workload $w" >&2; exit 2 ;;
	esac
done

for r in $(seq "$rounds"); do
	for item in "${list[@]}"; do
		echo "round $r: ${item%%:*} on ${item#*:}" >&2
		run_one "${item%%:*}" "${item#*:}" "$r"
	done
done

python3 "$here/fuse-fio-table.py" "$out" "$json" "${list[@]}"
