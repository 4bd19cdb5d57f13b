#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Build tests/subproject/consumer (a project whose meson.build says
# dependency('libfolio-state')) in a scratch directory with this
# repository linked in as subprojects/libfolio-state, run the program, and
# check that it embeds the library (a static-only subproject: no
# libfolio-state.so needed at run time). --wrap-mode=forcefallback keeps a
# copy installed on the system from being found instead. Only the
# consumer and what it needs are compiled (about 25 files).
#
# usage: run.sh MESON SRCROOT
# The C compiler is $FOLIO_TEST_CC (words), else $CC, else meson's choice.
# Exit status: 0 pass, 1 fail, 77 skip (no ninja).

set -u

# The valgrind test setup wraps every test, this shell included; meson and
# the compiler are not what it should check (see install-test.sh).
if [ -n "${FOLIO_TEST_VALGRIND:-}" ] && [ -z "${FOLIO_SUBPROJECT_REEXEC:-}" ]; then
	FOLIO_SUBPROJECT_REEXEC=1 exec /bin/sh "$0" "$@"
fi

if [ $# -ne 2 ]; then
	echo "usage: $0 MESON SRCROOT" >&2
	exit 1
fi
meson=$1 srcroot=$2
here=$(cd "$(dirname "$0")" && pwd)

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

command -v ninja >/dev/null 2>&1 || command -v samu >/dev/null 2>&1 ||
	{ echo "SKIP: no ninja"; exit 77; }
if [ -n "${FOLIO_TEST_CC:-}" ]; then
	CC=$FOLIO_TEST_CC
	export CC
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/folio-subproject.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp/src/subprojects" || fail "mkdir"
cp "$here/consumer/meson.build" "$here/consumer/consumer.c" "$tmp/src/" || fail "copy"
ln -s "$srcroot" "$tmp/src/subprojects/libfolio-state" || fail "symlink"
# The wrap file only says which dependency the subproject provides, so that
# a plain dependency('libfolio-state') falls back to it; the directory is
# there already, nothing is downloaded.
cat >"$tmp/src/subprojects/libfolio-state.wrap" <<'WRAP' || fail "wrap file"
[wrap-file]
directory = libfolio-state

[provide]
dependency_names = libfolio-state
WRAP

"$meson" setup "$tmp/build" "$tmp/src" --wrap-mode=forcefallback \
	-Ddefault_library=static -Dlibfolio-state:tests=disabled \
	>"$tmp/setup.log" 2>&1 || { cat "$tmp/setup.log" >&2; fail "meson setup"; }
# "(overridden)": found through the subproject's override_dependency().
if ! grep -q "^Dependency libfolio-state found: YES .*(overridden)" "$tmp/setup.log" ||
	! grep -q "^Executing subproject libfolio-state" "$tmp/setup.log"; then
	cat "$tmp/setup.log" >&2
	fail "libfolio-state was not taken from the subproject"
fi
"$meson" compile -C "$tmp/build" -j 2 consumer >"$tmp/build.log" 2>&1 ||
	{ cat "$tmp/build.log" >&2; fail "building the consumer"; }

out=$("$tmp/build/consumer") || fail "consumer exited with $?"
case $out in "consumer ok: "*) ;; *) fail "consumer printed '$out'" ;; esac
if command -v ldd >/dev/null 2>&1; then
	! ldd "$tmp/build/consumer" | grep -F libfolio-state >/dev/null ||
		fail "the consumer needs a libfolio-state.so; a static subproject should embed it"
fi
echo "ok: $out"
exit 0
