#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Install the build into a scratch directory and use it the way a user
# would: check that exactly the files a user needs were installed (the
# libraries default_library asks for, the two headers, the pkg-config file,
# folio-bench, and folio-fuse where libfuse3 was found (FOLIO_TEST_FUSE=1);
# no test programs, other examples or bench scripts), find it
# with pkg-config, compile and link a program against the installed
# headers and the shared library (dynamically) and the static archive
# (pkg-config --static), run it, and check that the libraries define
# nothing for others to link against but the API of the installed headers.
#
# usage: install-test.sh MESON BUILDDIR PREFIX LIBDIR INCLUDEDIR BINDIR
#                        DEFAULT_LIBRARY SOVERSION LIBVERSION [CFLAG...]
# DEFAULT_LIBRARY is shared, static or both; the shared library is
# libfolio-state.so.LIBVERSION with the soname libfolio-state.so.SOVERSION.
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

if [ $# -lt 9 ]; then
	echo "usage: $0 MESON BUILDDIR PREFIX LIBDIR INCLUDEDIR BINDIR DEFAULT_LIBRARY SOVERSION LIBVERSION [CFLAG...]" >&2
	exit 1
fi
meson=$1 builddir=$2 prefix=$3 libdir=$4 includedir=$5 bindir=$6
default_library=$7 soversion=$8 libversion=$9
shift 9
case $default_library in
shared) want_shared=1 want_static='' ;;
static) want_shared='' want_static=1 ;;
both) want_shared=1 want_static=1 ;;
*) echo "$0: DEFAULT_LIBRARY must be shared, static or both" >&2; exit 1 ;;
esac
cc=${FOLIO_TEST_CC:-${CC:-cc}}

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

command -v pkg-config >/dev/null 2>&1 || { echo "SKIP: no pkg-config"; exit 77; }
# shellcheck disable=SC2086 # a compiler command may be several words
set -- $cc "$@"
command -v "$1" >/dev/null 2>&1 || { echo "SKIP: no C compiler '$1'"; exit 77; }

# meson hands relative libdir/includedir/bindir to the project; they are
# under the prefix.
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
case $includedir in /*) ;; *) includedir=$prefix/$includedir ;; esac
case $bindir in /*) ;; *) bindir=$prefix/$bindir ;; esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/folio-install.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT INT TERM
dest=$tmp/dest

# --no-rebuild: the test runner has built everything already, and a
# rebuild from inside a running test would race the runner.
"$meson" install -C "$builddir" --destdir "$dest" --no-rebuild --quiet \
	>"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; fail "meson install"; }

# Exactly these files (and symlinks), nothing else.
{
	echo "$bindir/folio-bench"
	if [ "${FOLIO_TEST_FUSE:-0}" = 1 ]; then
		echo "$bindir/folio-fuse"
	fi
	echo "$includedir/folio_state.h"
	echo "$includedir/folio_state_mem.h"
	echo "$includedir/folio_state_nbd.h"
	echo "$includedir/folio_state_rados.h"
	echo "$libdir/pkgconfig/libfolio-state.pc"
	if [ -n "$want_shared" ]; then
		echo "$libdir/libfolio-state.so"
		echo "$libdir/libfolio-state.so.$soversion"
		echo "$libdir/libfolio-state.so.$libversion"
	fi
	if [ -n "$want_static" ]; then
		echo "$libdir/libfolio-state.a"
	fi
} | LC_ALL=C sort >"$tmp/expected"
(cd "$dest" && find . -type f -o -type l) | sed 's|^\.||' | LC_ALL=C sort >"$tmp/installed"
if ! cmp -s "$tmp/expected" "$tmp/installed"; then
	echo "installed files differ from the expected list (default_library=$default_library):" >&2
	diff -u "$tmp/expected" "$tmp/installed" | sed -n '3,$p' >&2
	fail "meson install installed the wrong set of files"
fi
pcdir=$dest$libdir/pkgconfig

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
#include <folio_state_nbd.h>
#include <folio_state_rados.h>
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
run=
if [ -n "${FOLIO_TEST_VALGRIND:-}" ] && command -v valgrind >/dev/null 2>&1; then
	run="valgrind -q --error-exitcode=1 --leak-check=full"
fi
ran=

# The shared library: the plain pkg-config --libs, and the program must
# load the scratch copy, not one found elsewhere.
if [ -n "$want_shared" ]; then
	# shellcheck disable=SC2086 # the pkg-config output is a list of words
	"$@" -std=c99 -Wall -Wextra -Werror $cflags -o "$tmp/prog" "$tmp/prog.c" $libs \
		>"$tmp/cc.log" 2>&1 || { cat "$tmp/cc.log" >&2; fail "compiling against the installed shared library"; }
	out=$(LD_LIBRARY_PATH=$dest$libdir $run "$tmp/prog") || fail "program exited with $?"
	case $out in "folio-state "*" ok") ;; *) fail "program printed '$out'" ;; esac
	if command -v ldd >/dev/null 2>&1; then
		LD_LIBRARY_PATH=$dest$libdir ldd "$tmp/prog" | grep -F "libfolio-state.so.$soversion => $dest" >/dev/null ||
			fail "program did not load the installed libfolio-state"
	fi
	ran="$ran shared"
fi

# The static archive: pkg-config --static adds what the archive needs
# (Libs.private, Requires.private); -l:libfolio-state.a picks the archive
# even when the shared library is installed next to it.
if [ -n "$want_static" ]; then
	slibs=$(pkg-config --static --libs libfolio-state) || fail "pkg-config --static --libs"
	case " $slibs " in *" -lfolio-state "*) ;; *) fail "pkg-config --static --libs lacks -lfolio-state: $slibs" ;; esac
	slibs=$(echo " $slibs " | sed 's/ -lfolio-state / -l:libfolio-state.a /')
	# shellcheck disable=SC2086 # the pkg-config output is a list of words
	"$@" -std=c99 -Wall -Wextra -Werror $cflags -o "$tmp/prog-static" "$tmp/prog.c" $slibs \
		>"$tmp/cc.log" 2>&1 || { cat "$tmp/cc.log" >&2; fail "linking statically with pkg-config --static --libs ($slibs)"; }
	out=$($run "$tmp/prog-static") || fail "statically linked program exited with $?"
	case $out in "folio-state "*" ok") ;; *) fail "statically linked program printed '$out'" ;; esac
	if command -v ldd >/dev/null 2>&1; then
		! ldd "$tmp/prog-static" | grep -F libfolio-state >/dev/null ||
			fail "the statically linked program needs a libfolio-state.so"
	fi
	ran="$ran static"
fi

# Everything the libraries define for others to link against must be
# declared in an installed header (A entries are the version-script nodes,
# not symbols; tests/abi checks the names against the headers exactly).
headers_declare() {
	grep -q "\<$1(" "$dest$includedir/folio_state.h" "$dest$includedir/folio_state_mem.h" \
		"$dest$includedir/folio_state_nbd.h" \
		"$dest$includedir/folio_state_rados.h"
}
if command -v nm >/dev/null 2>&1; then
	if [ -n "$want_shared" ]; then
		nm -D --defined-only "$dest$libdir/libfolio-state.so.$soversion" >"$tmp/syms" ||
			fail "nm -D failed"
		grep -q ' T folio_new' "$tmp/syms" || fail "folio_new is not exported"
		# folio_* internals (folio_alloc, ...) share the prefix; hidden
		# visibility must keep them out, so each export must be public API.
		for sym in $(awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' "$tmp/syms"); do
			headers_declare "$sym" ||
				fail "$sym is exported but declared in no installed header"
		done
	fi
	if [ -n "$want_static" ]; then
		nm -g --defined-only "$dest$libdir/libfolio-state.a" >"$tmp/ssyms" ||
			fail "nm on libfolio-state.a failed"
		grep -q ' T folio_new$' "$tmp/ssyms" || fail "libfolio-state.a does not define folio_new"
		for sym in $(awk 'NF >= 2 && $(NF-1) !~ /^[Uwv]$/ { print $NF }' "$tmp/ssyms"); do
			headers_declare "$sym" ||
				fail "libfolio-state.a defines $sym as a global, declared in no installed header"
		done
	fi
else
	echo "note: no nm, export check skipped"
fi

echo "ok: the expected $(wc -l <"$tmp/expected") files installed (default_library=$default_library); found with pkg-config, compiled, linked ($ran ) and ran: $out"
exit 0
