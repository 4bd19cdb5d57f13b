#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Install the build into a scratch directory and use it the way a user
# would: find it with pkg-config, compile and link a program against the
# installed header and shared library only, run it, and check that the
# library exports nothing but folio_* symbols.
#
# usage: install-test.sh MESON BUILDDIR PREFIX LIBDIR INCLUDEDIR [CFLAG...]
# The C compiler command is $FOLIO_TEST_CC (words), else $CC, else cc. The
# CFLAGs are what the installed library needs from its users (the
# sanitizer runtime of a sanitized build).
# Exit status: 0 pass, 1 fail, 77 skip (no pkg-config or C compiler).

set -u

# The valgrind test setup wraps every test, this shell included, and the
# shell's own leaks are not ours: re-executing drops valgrind, which does
# not follow exec (the program built below is run under it instead).
if [ -n "${FOLIO_TEST_VALGRIND:-}" ] && [ -z "${FOLIO_INSTALL_TEST_REEXEC:-}" ]; then
	FOLIO_INSTALL_TEST_REEXEC=1 exec /bin/sh "$0" "$@"
fi

if [ $# -lt 5 ]; then
	echo "usage: $0 MESON BUILDDIR PREFIX LIBDIR INCLUDEDIR [CFLAG...]" >&2
	exit 1
fi
meson=$1 builddir=$2 prefix=$3 libdir=$4 includedir=$5
shift 5
cc=${FOLIO_TEST_CC:-${CC:-cc}}

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

command -v pkg-config >/dev/null 2>&1 || { echo "SKIP: no pkg-config"; exit 77; }
# shellcheck disable=SC2086 # a compiler command may be several words
set -- $cc "$@"
command -v "$1" >/dev/null 2>&1 || { echo "SKIP: no C compiler '$1'"; exit 77; }

# meson hands relative libdir/includedir to the project; they are under
# the prefix.
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
case $includedir in /*) ;; *) includedir=$prefix/$includedir ;; esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/folio-install.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT INT TERM
dest=$tmp/dest

# --no-rebuild: the test runner has built everything already, and a
# rebuild from inside a running test would race the runner.
"$meson" install -C "$builddir" --destdir "$dest" --no-rebuild --quiet \
	>"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; fail "meson install"; }

for h in folio_state.h folio_state_mem.h; do
	[ -f "$dest$includedir/$h" ] || fail "$h not installed in $includedir"
done
pcdir=$dest$libdir/pkgconfig
[ -f "$pcdir/libfolio-state.pc" ] || fail "libfolio-state.pc not installed in $libdir/pkgconfig"
for f in libfolio-state.so libfolio-state.so.0; do
	[ -e "$dest$libdir/$f" ] || fail "$f not installed in $libdir"
done

# The scratch tree first, so that a copy installed elsewhere on the system
# loses (the ldd check below makes sure); the default path stays behind it
# for the library's own dependencies (liburing). The sysroot makes the .pc
# file's absolute -I/-L paths point into the scratch tree.
PKG_CONFIG_PATH=$pcdir
PKG_CONFIG_SYSROOT_DIR=$dest
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
cflags=$(pkg-config --cflags libfolio-state) || fail "pkg-config --cflags"
libs=$(pkg-config --libs libfolio-state) || fail "pkg-config --libs"
case " $libs " in *" -lfolio-state "*) ;; *) fail "pkg-config --libs lacks -lfolio-state: $libs" ;; esac

cat >"$tmp/prog.c" <<'EOF'
#include <folio_state.h>
#include <folio_state_mem.h>
#include <stdio.h>

int main(void)
{
	struct folio *f;
	struct folio_range r[4];
	if (folio_new(&f, 1 << 20, 1 << 16, 4096))
		return 1;
	if (folio_set_dirty_uptodate(f, 5000, 10000) != FOLIO_BECAME_DIRTY)
		return 2;
	if (folio_take_dirty(f, r, 4) != 1 || r[0].off != 4096 ||
	    r[0].len != 3 * 4096)
		return 3;
	folio_put(f);
	struct folio_engine *e;
	if (folio_engine_mem(&e, FOLIO_MEM_MAX_CAPACITY) ||
	    folio_engine_mem_poke(e, "x", 1, 7) || folio_engine_free(e))
		return 4;
	printf("folio-state %d.%d ok\n", FOLIO_STATE_VERSION_MAJOR,
	       FOLIO_STATE_VERSION_MINOR);
	return 0;
}
EOF
# shellcheck disable=SC2086 # the pkg-config output is a list of words
"$@" -std=c99 -Wall -Wextra -Werror $cflags -o "$tmp/prog" "$tmp/prog.c" $libs \
	>"$tmp/cc.log" 2>&1 || { cat "$tmp/cc.log" >&2; fail "compiling against the installed library"; }

run=
if [ -n "${FOLIO_TEST_VALGRIND:-}" ] && command -v valgrind >/dev/null 2>&1; then
	run="valgrind -q --error-exitcode=1 --leak-check=full"
fi
out=$(LD_LIBRARY_PATH=$dest$libdir $run "$tmp/prog") || fail "program exited with $?"
case $out in "folio-state "*" ok") ;; *) fail "program printed '$out'" ;; esac

# The program must have used the scratch copy, not one found elsewhere.
if command -v ldd >/dev/null 2>&1; then
	LD_LIBRARY_PATH=$dest$libdir ldd "$tmp/prog" | grep -F "libfolio-state.so.0 => $dest" >/dev/null ||
		fail "program did not load the installed libfolio-state"
fi

# Everything the library defines for others to link against must be
# folio_* (A entries are the version-script nodes, not symbols).
if command -v nm >/dev/null 2>&1; then
	nm -D --defined-only "$dest$libdir/libfolio-state.so.0" >"$tmp/syms" ||
		fail "nm -D failed"
	bad=$(awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' "$tmp/syms" | grep -v '^folio_')
	[ -z "$bad" ] || fail "exported symbols outside folio_*: $(echo $bad)"
	grep -q ' T folio_new' "$tmp/syms" || fail "folio_new is not exported"
	# folio_* internals (folio_alloc, ...) share the prefix; hidden
	# visibility must keep them out, so each export must be public API.
	for sym in $(awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' "$tmp/syms"); do
		grep -q "\<$sym(" "$dest$includedir/folio_state.h" \
			"$dest$includedir/folio_state_mem.h" ||
			fail "$sym is exported but declared in no installed header"
	done
else
	echo "note: no nm, export check skipped"
fi

echo "ok: installed, found with pkg-config, compiled, linked and ran: $out"
exit 0
