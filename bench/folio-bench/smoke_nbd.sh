#!/bin/sh
# SPDX-License-Identifier: MIT
# Smoke test of folio-bench --engine nbd: starts nbdkit's memory plugin on
# a Unix socket in a temporary directory, runs randwrite-sync (and the two
# read workloads) against it for a fraction of a second each, and checks
# that the library wrote to the export, with the kernel variant skipped
# and said so. Exit 77 (skipped) without nbdkit.
#   smoke_nbd.sh FOLIO_BENCH [TMPDIR]
set -eu
bench=$1
command -v nbdkit >/dev/null 2>&1 || { echo "nbdkit not installed: skipped"; exit 77; }
dir=$(mktemp -d "${2:-/tmp}/smoke-nbd.XXXXXX")
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
nbdkit -f --exit-with-parent -U "$dir/sock" -P "$dir/pid" memory size=16M &
pid=$!
# nbdkit writes its pid file once it listens: wait for it, 5 s at most.
i=0
while [ ! -s "$dir/pid" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
[ -s "$dir/pid" ] || { echo "FAIL: nbdkit did not start"; exit 1; }
uri="nbd+unix:///?socket=$dir/sock"

fail() { echo "FAIL: $*"; exit 1; }
out=$("$bench" randwrite-sync --engine nbd --uri "$uri" --size 4M \
	--runtime 0.2 --jobs 2 --json) || fail "randwrite-sync exited $?"
for want in '"engine": "nbd"' '"name": "block tracking"' \
	'"write_amplification": 1' 'kernel page cache variant skipped'; do
	case $out in *"$want"*) ;; *) fail "randwrite-sync: no $want in
$out" ;; esac
done
case $out in *'"name": "kernel page cache"'*) fail "kernel variant ran" ;; esac
"$bench" seqread --engine nbd --uri "$uri" --size 2M --rounds 1 --bs 64K \
	>"$dir/seqread.txt" || fail "seqread exited $?"
grep -q "lib nbd: 64K reads" "$dir/seqread.txt" || fail "seqread: no lib nbd row"
"$bench" randread --engine nbd --uri "$uri" --size 2M --runtime 0.05 \
	>"$dir/randread.txt" 2>&1 || fail "randread exited $?"
grep -q "cold lib nbd reads/s" "$dir/randread.txt" || fail "randread: no cold lib nbd row"
# An export smaller than --size is refused, not written past.
if "$bench" randwrite-sync --engine nbd --uri "$uri" --size 32M \
	--runtime 0.05 --jobs 1 >/dev/null 2>&1; then
	fail "a 32M workload ran on a 16M export"
fi
echo "folio-bench --engine nbd smoke test: all checks passed"
