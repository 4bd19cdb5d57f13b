#!/usr/bin/env bash
# Build and run the whole test suite the way CI does:
#   1. gcc, plain                      (meson test; the fuse suite mounts
#      folio-fuse and needs /dev/fuse, else it is skipped)
#   2. the same build under valgrind   (meson test --setup valgrind)
#   3. gcc, ASan + UBSan               (meson test)
#   4. clang, TSan                     (meson test --suite threads)
#   5. clang, libFuzzer + ASan + UBSan  (scripts/fuzz.sh, 2500 runs from
#      seed 1 so that CI is reproducible, then the
#      seed corpus as regression inputs: meson test --suite fuzz)
# Each build compiles with -Werror. FOLIO_TEST_SEED=N replays a randomized
# test's seed (every randomized test prints the one it used).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# deps.sh installed nbdkit: the NBD engine's tests must run, not skip.
export FOLIO_TEST_REQUIRE_NBDKIT=1

step() { printf '\n==== %s ====\n' "$*"; }

# One throwaway Ceph cluster (one monitor, one memstore OSD) for the
# RADOS engine's tests of every run below; stopped on exit, whatever
# happens. Without ceph-mon/ceph-osd those tests skip themselves.
if command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null; then
	step "one-node Ceph cluster (scripts/ceph-cluster.sh)"
	FOLIO_CEPH_DIR=$(mktemp -d /tmp/folio-ceph.XXXXXX)
	trap 'bash scripts/ceph-cluster.sh stop "$FOLIO_CEPH_DIR"; rm -rf "$FOLIO_CEPH_DIR"' EXIT
	t0=$(date +%s%N)
	FOLIO_TEST_CEPH_CONF=$(bash scripts/ceph-cluster.sh start "$FOLIO_CEPH_DIR")
	export FOLIO_TEST_CEPH_CONF
	echo "cluster up in $(( ($(date +%s%N) - t0) / 1000000 )) ms: $FOLIO_TEST_CEPH_CONF"
else
	echo "ceph-mon/ceph-osd missing: the RADOS engine tests will skip"
fi

setup() { # dir, then meson options
	local dir=$1; shift
	[ -f "$dir/build.ninja" ] || meson setup "$dir" "$@" >/dev/null
	ninja -C "$dir"
}

step "gcc build + tests"
setup build/gcc
meson test -C build/gcc --print-errorlogs

# The fuse and script suites are left out: their tests are shell
# scripts, and valgrind would check the shell (it does not follow into
# the programs they start). The ASan run below covers those programs
# (leaks make them exit non-zero).
step "valgrind (memcheck, leaks fail)"
meson test -C build/gcc --setup valgrind --print-errorlogs --no-suite install \
	--no-suite fuse --no-suite script

step "gcc ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	setup build/asan -Db_sanitize=address,undefined -Db_lundef=false
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	meson test -C build/asan --print-errorlogs --no-suite install

step "clang TSan (thread tests)"
CC=clang CXX=clang++ setup build/tsan -Db_sanitize=thread -Db_lundef=false
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	meson test -C build/tsan --suite threads --print-errorlogs

# Known library bugs stay masked in the harness while their fixes land:
# fuzz_known_bugs in tests/fuzz/meson.build (FUZZ_SKIP_KNOWN overrides it).
step "libFuzzer: 2500 runs from seed 1 + corpus regression (clang, ASan + UBSan)"
bash scripts/fuzz.sh 60 -seed=1 -runs=2500
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	meson test -C build/fuzz --suite fuzz --print-errorlogs

step "all test runs passed"
# One closing line over the five runs: every test program counts once per
# run it took part in (meson writes one JSON record per test).
python3 - build/gcc/meson-logs/testlog.json \
	build/gcc/meson-logs/testlog-valgrind.json \
	build/asan/meson-logs/testlog.json build/tsan/meson-logs/testlog.json \
	build/fuzz/meson-logs/testlog.json <<'PY'
import json, sys
ok = bad = skipped = 0
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)["result"]
        if r in ("OK", "EXPECTEDFAIL"):
            ok += 1
        elif r == "SKIP":
            skipped += 1
        else:
            bad += 1
print(f"tests: {ok} passed, {bad} failed, {skipped} skipped")
PY
