#!/usr/bin/env bash
# Which known bug does a crashing fuzz input hit?
#
#   tests/fuzz/classify.sh REPLAY_BINARY INPUT...
#
# For each input: runs fuzz_mapping_replay with nothing masked, then with
# each known bug (a..f) masked alone. Prints "ok" when it passes unmasked,
# the letters whose masking alone makes it pass, or NEW when it still
# fails with every known bug masked (a bug outside the list, or a harness
# problem), with the first diagnostic line.
set -uo pipefail
bin=$1
shift
# A child killed by abort() makes bash report it on its own stderr: run it
# from a subshell whose stderr is gone.
run() { (FUZZ_SKIP_KNOWN=$1 "$bin" "$2" >/dev/null 2>&1; exit $?) 2>/dev/null; }
for f in "$@"; do
	if run "" "$f"; then
		echo "ok     $f"
		continue
	fi
	why=$( (FUZZ_SKIP_KNOWN= "$bin" "$f" 2>&1; exit 0) 2>/dev/null | grep -A1 'CHECK FAILED' |
		tail -n 1 | sed 's/^ *//' | cut -c1-100)
	if ! run all "$f"; then
		echo "NEW    $f: $why"
		continue
	fi
	hits=
	for b in a b c d e f; do
		run "$b" "$f" && hits="$hits$b"
	done
	printf "%-6s %s: %s\n" "${hits:-combo}" "$f" "$why"
done
