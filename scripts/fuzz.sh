#!/usr/bin/env bash
# Fuzz the mapping layer with libFuzzer for a while.
#
#   scripts/fuzz.sh [SECONDS] [libFuzzer options...]
#
# Builds build/fuzz (clang, -Dfuzz=true, ASan + UBSan; FUZZ_BUILD_DIR
# overrides the directory), runs tests/fuzz/fuzz_mapping with one job for
# SECONDS (default 60) from the seed corpus tests/fuzz/corpus (read only:
# new inputs go to $FUZZ_BUILD_DIR/fuzz-corpus, kept across runs), prints
# a summary (executions, coverage, corpus) and fails when it found a
# crash; the crashing input is left in $FUZZ_BUILD_DIR/fuzz-artifacts/.
#
# Known library bugs are masked as tests/fuzz/meson.build says
# (fuzz_known_bugs); FUZZ_SKIP_KNOWN=... in the environment overrides
# that, e.g. FUZZ_SKIP_KNOWN= scripts/fuzz.sh 600 to hunt them all.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
[ $# -gt 0 ] && shift
dir=${FUZZ_BUILD_DIR:-build/fuzz}

if [ ! -f "$dir/build.ninja" ]; then
	CC=clang CXX=clang++ meson setup "$dir" -Dfuzz=true \
		-Db_sanitize=address,undefined -Db_lundef=false \
		-Dtests=disabled >/dev/null
fi
ninja -C "$dir" -j"${FUZZ_JOBS:-2}" tests/fuzz/fuzz_mapping

corpus=$dir/fuzz-corpus
artifacts=$dir/fuzz-artifacts
log=$dir/fuzz.log
mkdir -p "$corpus" "$artifacts"

echo "fuzzing for ${secs}s (log: $log)"
status=0
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
	"$dir/tests/fuzz/fuzz_mapping" -max_total_time="$secs" \
	-max_len=4096 -timeout=60 -print_final_stats=1 \
	-artifact_prefix="$artifacts/" "$@" \
	"$corpus" tests/fuzz/corpus >"$log" 2>&1 || status=$?

# Summary: the last status line and libFuzzer's final counters.
last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$last")
echo "executions: ${execs:-?} (${rate:-?}/s)  cov: ${cov:-?}  ft: ${ft:-?}  corpus: ${corp:-?}"
if [ "$status" -ne 0 ]; then
	echo "fuzz_mapping FAILED (exit $status):"
	grep -E -A4 'CHECK FAILED|ERROR: (Address|Leak|libFuzzer)|runtime error' \
		"$log" | head -n 20 || true
	ls -t "$artifacts" | head -n 3 | sed "s|^|  artifact: $artifacts/|"
	echo "replay one: FUZZ_TRACE=1 $dir/tests/fuzz/fuzz_mapping_replay FILE"
	exit "$status"
fi
