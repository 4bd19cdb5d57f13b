#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Build libfolio-state.a from the library's objects so that it defines no
# global symbol but the exported API:
#   1. partially link every object into one relocatable object (cc -r), so
#      that calls between the library's files become references inside one
#      object;
#   2. objcopy --localize-hidden: the objects are compiled with
#      -fvisibility=hidden and only FOLIO_EXPORT declarations have default
#      visibility, so every internal function and variable (bitmap_*,
#      index_*, internal folio_*, ...) becomes a local symbol;
#   3. archive that one object.
# A program linking the archive can then define its own bitmap_set_range()
# or index_insert() without a clash, as it can with the shared library.
#
# usage: static-archive.sh OUT.a OBJCOPY AR CC [CC-WORD...] -- INPUT...
# where the INPUTs are objects and linker options for them (e.g. an archive
# between -Wl,--whole-archive and -Wl,--no-whole-archive).
set -eu

if [ $# -lt 6 ]; then
	echo "usage: $0 OUT.a OBJCOPY AR CC [CC-WORD...] -- INPUT..." >&2
	exit 2
fi
out=$1 objcopy=$2 ar=$3
shift 3

# The compiler command (it may be several words, e.g. ccache cc) ends at
# --; -r -nostdlib -o OBJ takes the place of the --, objects follow.
obj=${out%.a}.o
rm -f "$out" "$obj"
seen=
for a in "$@"; do
	shift
	if [ -z "$seen" ] && [ "$a" = -- ]; then
		seen=1
		set -- "$@" -r -nostdlib -o "$obj"
	else
		set -- "$@" "$a"
	fi
done
[ -n "$seen" ] || { echo "$0: no -- before the objects" >&2; exit 2; }
"$@"
"$objcopy" --localize-hidden "$obj"
"$ar" rcsD "$out" "$obj"
rm -f "$obj"
