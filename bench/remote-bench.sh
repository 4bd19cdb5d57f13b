#!/usr/bin/env bash
# folio-bench over the remote engines, on servers this script starts and
# stops itself:
#   nbd    nbdkit serving a sparse 2 GiB file through the delay filter
#          (DELAY per read and per write: a remote block device) on a Unix
#          socket in a temporary directory, as bench/nbd-compare.sh does;
#   rados  a one-node Ceph cluster (scripts/ceph-cluster.sh, memstore).
# Then randwrite-sync, seqread and randread with --engine nbd --uri URI and
# --engine rados. The kernel variants are skipped for both (there is no
# file to pwrite or pread: each table says so).
#   bench/remote-bench.sh [BUILD_DIR [nbd|rados|both [FOLIO-BENCH OPTIONS]]]
# OPTIONS go to every run after the script's own (--size $SIZE), so they
# override it: e.g. `bench/remote-bench.sh build both --runtime 1 --json`.
# Env: DELAY (default 1ms), SIZE (default 256M, at most 2G).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
which=${2:-both}
shift $(( $# < 2 ? $# : 2 ))
delay=${DELAY:-1ms}
size=${SIZE:-256M}
bench=$build/bench/folio-bench
[ -x "$bench" ] || { echo "build $bench first" >&2; exit 1; }
case $which in nbd|rados|both) ;; *) echo "nbd, rados or both, not '$which'" >&2; exit 2 ;; esac
dir=$(mktemp -d "${TMPDIR:-/tmp}/remote-bench.XXXXXX")
nbd_pid=
ceph=false
cleanup() {
	[ -n "$nbd_pid" ] && kill "$nbd_pid" 2>/dev/null || true
	$ceph && bash scripts/ceph-cluster.sh stop "$dir/ceph" || true
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

run() { # engine, then folio-bench arguments
	local engine=$1; shift
	for w in randwrite-sync seqread randread; do
		echo "== folio-bench $w --engine $engine $*" >&2
		"$bench" "$w" --engine "$engine" "$@" --size "$size" \
			"${opts[@]}"
	done
}
opts=("$@")

if [ "$which" != rados ]; then
	command -v nbdkit >/dev/null || { echo "nbdkit is not installed" >&2; exit 1; }
	truncate -s 2G "$dir/export.img"
	t0=$(date +%s%N)
	nbdkit -f --exit-with-parent -U "$dir/nbd.sock" -P "$dir/nbd.pid" \
		--filter=delay file "file=$dir/export.img" \
		"delay-read=$delay" "delay-write=$delay" &
	nbd_pid=$!
	# The pid file may appear a moment after the socket: wait for it,
	# bounded (5 s).
	for _ in $(seq 500); do [ -s "$dir/nbd.pid" ] && break; sleep 0.01; done
	[ -s "$dir/nbd.pid" ] || { echo "nbdkit did not start" >&2; exit 1; }
	echo "nbdkit up in $(( ($(date +%s%N) - t0) / 1000000 )) ms (delay $delay per read and write; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	run nbd --uri "nbd+unix:///?socket=$dir/nbd.sock"
fi
if [ "$which" != nbd ]; then
	t0=$(date +%s%N)
	mkdir "$dir/ceph"
	ceph=true
	conf=$(bash scripts/ceph-cluster.sh start "$dir/ceph" folio)
	echo "cluster up in $(( ($(date +%s%N) - t0) / 1000000 )) ms ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	FOLIO_BENCH_CEPH_CONF=$conf FOLIO_BENCH_CEPH_POOL=folio run rados
fi
