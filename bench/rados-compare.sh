#!/usr/bin/env bash
# The RADOS engine against librbd (ObjectCacher write-back, and no cache)
# and raw librados, side by side in one run on a fresh one-node cluster
# this script starts (scripts/ceph-cluster.sh) and stops.
#   bench/rados-compare.sh [BUILD_DIR [ROUNDS [SECONDS]]]
# Defaults: build, 5 rounds of 2 s per workload and contender.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
secs=${3:-2}
prog=$build/bench/rados-compare
[ -x "$prog" ] || { echo "no $prog (needs librados-dev and librbd-dev)" >&2; exit 1; }
dir=$(mktemp -d /tmp/rados-compare.XXXXXX)
trap 'bash scripts/ceph-cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
t0=$(date +%s%N)
conf=$(bash scripts/ceph-cluster.sh start "$dir" folio)
echo "cluster up in $(( ($(date +%s%N) - t0) / 1000000 )) ms ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
"$prog" "$conf" folio "$rounds" "$secs"
