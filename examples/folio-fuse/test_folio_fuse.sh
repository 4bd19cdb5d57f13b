#!/usr/bin/env bash
# folio-fuse end to end: mount it over a temporary backing directory and
# run real, unmodified programs on it, each also in a plain directory;
# their outputs and the trees they leave must be the same. Then unmount
# (folio-fuse must exit 0: every sync at unmount worked), remount with the
# other mode and check that the data is there; kill -9 the server after
# fsync and check that what was synced is in the backing files.
#
#   test_folio_fuse.sh FOLIO_FUSE TMPDIR
#
# Exit 77 (skipped in meson) without /dev/fuse or fusermount3.
set -euo pipefail

ff=$(realpath "$1") # absolute: some steps run in other directories
tmproot=$2

skip() { echo "SKIP: $*"; exit 77; }
[ -c /dev/fuse ] || skip "no /dev/fuse"
command -v fusermount3 >/dev/null || skip "no fusermount3"
here=$(cd "$(dirname "$0")" && pwd)

mkdir -p "$tmproot"
work=$(mktemp -d "$tmproot/run.XXXXXX")
back=$work/back mnt=$work/mnt plain=$work/plain
mkdir "$back" "$mnt" "$plain"
ffpid= ffback=$back small=

cleanup() {
	if [ -n "$ffpid" ]; then
		fusermount3 -u -z "$mnt" 2>/dev/null || true
		kill "$ffpid" 2>/dev/null || true
		wait "$ffpid" 2>/dev/null || true
	fi
	[ -n "$small" ] && umount "$small"
	rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; [ -f "$work/ff.log" ] && tail -20 "$work/ff.log" >&2; exit 1; }
step() { printf '%-12s %s\n' "$1" "$2"; }

mount_ff() { # options; the backing directory is $ffback
	"$ff" -f --stats "$work/stats.json" "$@" "$ffback" "$mnt" \
		2>>"$work/ff.log" &
	ffpid=$!
	for _ in $(seq 100); do
		grep -q " $mnt fuse" /proc/mounts && return 0
		kill -0 "$ffpid" 2>/dev/null || break
		sleep 0.1
	done
	ffpid=
	if grep -qi "permission denied\|not permitted\|device not found" \
		"$work/ff.log"; then
		skip "cannot mount FUSE here: $(tail -1 "$work/ff.log")"
	fi
	fail "folio-fuse did not mount within 10 s"
}

umount_ff() { # [the exit status expected, default 0]
	fusermount3 -u "$mnt" || fail "fusermount3 -u"
	local rc=0
	wait "$ffpid" || rc=$?
	ffpid=
	[ "$rc" -eq "${1:-0}" ] || fail "folio-fuse exited $rc"
}

# ---- command line errors: exit 2, before mounting anything ----------
for bad in "--budget 12Q" "--tracking page" "--block-size 3000" \
	   "--folio-size 1K --block-size 4K" "--flushers 1000" \
	   "--min-folio-size 128K --folio-size 64K" "--budget 1M" \
	   "--threads 0" "--threads 5000"; do
	rc=0
	# shellcheck disable=SC2086
	"$ff" $bad "$back" "$mnt" 2>/dev/null || rc=$?
	[ "$rc" -eq 2 ] || fail "'$bad' exited $rc, not 2"
done
rc=0
"$ff" "$work/missing" "$mnt" 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "a missing backing directory exited $rc, not 2"
rc=0
"$ff" "$back" "$work/missing" 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "a missing mount point exited $rc, not 2"
rc=0
"$ff" -o no_such_fuse_option "$back" "$mnt" 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "an unknown -o option exited $rc, not 2"
step options "bad options, a missing backing dir or mount point exit 2"

# ---- inputs ---------------------------------------------------------
head -c $((5 << 20)) /dev/urandom >"$work/src"
head -c 777 /dev/urandom >"$work/patch"
cat >"$work/db.sql" <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);
CREATE INDEX tk ON t(k);
SQL
for i in $(seq 0 19); do
	cat >>"$work/db.sql" <<SQL
BEGIN;
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 200)
INSERT INTO t(k, v) SELECT (x * 7919 + $i) % 1000, printf('%0*d', x % 300, $i) FROM n;
UPDATE t SET v = v || 'u' WHERE k % 17 = $i;
DELETE FROM t WHERE k % 101 = $i;
COMMIT;
SQL
done
cat >>"$work/db.sql" <<'SQL'
PRAGMA integrity_check;
SELECT count(*), sum(k), total(length(v)) FROM t;
SELECT k, count(*), sum(length(v)) FROM t GROUP BY k ORDER BY k LIMIT 20;
SQL

# ---- the workloads, each run on the mount and on the plain dir ------
w_cp() {
	cp "$work/src" "$1/big"
	cmp "$work/src" "$1/big"
	# A sparse file through cp --sparse=always: same bytes, holes kept
	# as holes in the copy (its allocation far below its size).
	truncate -s 8M "$1/holey"
	dd if="$work/patch" of="$1/holey" bs=777 seek=3000 conv=notrunc \
		status=none
	cp --sparse=always "$1/holey" "$1/holey.cp"
	cmp "$1/holey" "$1/holey.cp"
	sync "$1/holey.cp"
	[ "$(du -k "$1/holey.cp" | cut -f1)" -lt 1024 ] ||
		echo "holey.cp: holes not kept"
}

w_dd() {
	cp "$work/src" "$1/dd"
	for off in 1 4097 65535 1000003 3333333 5242000 6000001; do
		dd if="$work/patch" of="$1/dd" bs=777 count=1 seek="$off" \
			oflag=seek_bytes conv=notrunc status=none
	done
	md5sum <"$1/dd"
	# O_DIRECT is accepted (and not passed to the backing file).
	dd if="$work/src" of="$1/direct" bs=64k count=16 oflag=direct \
		status=none
	dd if="$1/direct" bs=64k iflag=direct status=none | md5sum
}

w_truncate() {
	head -c 100000 "$work/src" >"$1/tr"
	truncate -s 7000001 "$1/tr"
	truncate -s 12345 "$1/tr"
	truncate -s +100000 "$1/tr"
	printf 'tail' >>"$1/tr"
	stat -c %s "$1/tr"
	md5sum <"$1/tr"
}

w_tar() {
	tar -C "$here/../.." -cf "$1/src.tar" lib include
	mkdir "$1/x"
	tar -C "$1/x" -xf "$1/src.tar"
	diff -r "$here/../../lib" "$1/x/lib"
	tar -C "$1/x" -cf - lib include | tar -tvf - | sort
}

# Enough names that readdir takes several replies and resumes.
w_many() {
	mkdir "$1/many"
	for i in $(seq 1500); do : >"$1/many/file-with-a-long-name-$i"; done
	ls -f "$1/many" | LC_ALL=C sort | md5sum
	rm "$1"/many/*-1?? "$1"/many/*-5*
	find "$1/many" -type f | wc -l
}

# A shared writable mapping: refused by direct_io files (ENODEV on libfuse
# 3.14), works with --kernel-cache (the kernel writes it back through us).
w_mmap() {
	python3 - "$1/mm" <<'PY'
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 1 << 20)
m = mmap.mmap(fd, 1 << 20)
for off in range(0, 1 << 20, 65536 + 123):
    m[off:off + 5] = b"mmap!"
m.flush()
m.close()
os.fsync(fd)
os.close(fd)
print(open(sys.argv[1], "rb").read().count(b"mmap!"))
PY
}

w_sqlite() {
	sqlite3 "$1/db" <"$work/db.sql"
}

w_git() {
	export GIT_AUTHOR_DATE=1700000000 GIT_COMMITTER_DATE=1700000000
	export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t
	export GIT_COMMITTER_EMAIL=t@t GIT_CONFIG_NOSYSTEM=1 HOME=$work
	git init -q -b main "$1/repo"
	cp -r "$here/../../lib" "$1/repo/"
	git -C "$1/repo" add -A
	git -C "$1/repo" commit -qm one
	echo change >>"$1/repo/lib/meson.build"
	git -C "$1/repo" commit -qam two
	git -C "$1/repo" gc -q
	git -C "$1/repo" fsck --strict --no-progress
	git clone -q "$1/repo" "$1/clone"
	git -C "$1/clone" fsck --strict --no-progress
	git -C "$1/repo" log --format='%H %T'
	git -C "$1/clone" log --format='%H %T'
	# Its reflog names the source's path, which differs between the two
	# sides of the comparison.
	rm -rf "$1/clone"
}

# SQLite in WAL mode: its shared-memory index is a shared writable
# mapping, so this needs --kernel-cache (direct_io files refuse it).
w_sqlite_wal() {
	{ echo "PRAGMA journal_mode=WAL;"; cat "$work/db.sql"; } |
		sqlite3 "$1/wal.db"
	sqlite3 "$1/wal.db" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
	sqlite3 "$1/wal.db" "PRAGMA integrity_check; SELECT count(*), sum(k) FROM t;"
}

have() { command -v "$1" >/dev/null; }
# fallocate punch/zero and lseek SEEK_DATA/SEEK_HOLE over data still
# dirty in the cache: the bytes read back and the data/hole map must be
# those of the plain directory.
w_space() {
	python3 - "$1" <<'PY'
import ctypes, hashlib, os, random, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                           ctypes.c_int64]
KEEP, PUNCH, ZERO = 0x01, 0x02, 0x10
def falloc(fd, mode, off, n):
    if libc.fallocate(fd, mode, off, n):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
def layout(fd):
    out, pos, end = [], 0, os.fstat(fd).st_size
    while pos < end:
        try:
            d = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:
            break
        h = os.lseek(fd, d, os.SEEK_HOLE)
        out.append((d, h))
        pos = h
    return out
rng = random.Random(7)
fd = os.open(sys.argv[1] + "/space", os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, rng.randbytes(1 << 20), 0)
os.fsync(fd)
# Cached, not written back yet, then holes and zeros across them.
os.pwrite(fd, rng.randbytes(50000), 3000)
os.pwrite(fd, rng.randbytes(9000), 700000)
falloc(fd, PUNCH | KEEP, 5000, 70000)
falloc(fd, PUNCH | KEEP, 128 << 10, 64 << 10)
falloc(fd, ZERO | KEEP, 650000, 100000)
falloc(fd, ZERO, (1 << 20) - 1000, 50000)   # grows the file
os.pwrite(fd, b"back", 5001)
data = os.pread(fd, 2 << 20, 0)
print(len(data), hashlib.md5(data).hexdigest())
# Zeros may be reported either way (ext4 calls an unwritten extent with
# no cached pages a hole): every hole must read as zeros, and the second
# punched range must be a hole. (Not the first: the write at 5001 may
# write its whole folio back, zeros included, with --tracking folio.)
spans = layout(fd)
def in_data(pos):
    return any(d <= pos < h for d, h in spans)
print("holes read as zeros:",
      all(b == 0 for i, b in enumerate(data) if not in_data(i)))
print("punched blocks are holes:",
      not any(in_data(p) for p in range(128 << 10, 192 << 10, 4096)))
os.close(fd)
# Data only in the cache: the holes between must show.
fd = os.open(sys.argv[1] + "/sparse", os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"a" * 8192, 0)
os.pwrite(fd, b"b" * 4096, 1 << 20)
os.ftruncate(fd, 2 << 20)
print(layout(fd))
os.close(fd)
PY
}


run() { # name: the workload on both sides, outputs compared
	local name=$1 t0=$SECONDS
	"w_$name" "$mnt" >"$work/$name.mnt" 2>&1 ||
		{ cat "$work/$name.mnt"; fail "$name on folio-fuse"; }
	"w_$name" "$plain" >"$work/$name.plain" 2>&1 ||
		{ cat "$work/$name.plain"; fail "$name on a plain directory"; }
	diff "$work/$name.plain" "$work/$name.mnt" ||
		fail "$name: output differs"
	step "$name" "same as on a plain directory ($((SECONDS - t0)) s)"
}

# A budget smaller than the data: the pool must reclaim and write back.
mount_ff --budget 4M --folio-size 256K --dirty-expire 500 --flushers 1
run cp
run dd
run truncate
run tar
run many
if have sqlite3; then run sqlite; else step sqlite "skipped: no sqlite3"; fi
if have git; then run git; else step git "skipped: no git"; fi

if have fio; then
	# Random 4 KiB, random unaligned 1000-byte, sequential, and mixed
	# sizes, each written with fsyncs and read back against crc32c.
	for job in "--rw=randwrite --bs=4k" \
		"--rw=randwrite --bs=1000 --blockalign=1000" \
		"--rw=write --bs=64k" \
		"--rw=randwrite --bssplit=512/20:4k/40:12k/20:128k/20"; do
		# shellcheck disable=SC2086
		fio --name=verify --filename="$mnt/fio.dat" --size=4M \
			$job --ioengine=psync --fsync=8 \
			--verify=crc32c --do_verify=1 --randrepeat=1 \
			--verify_state_save=0 \
			--output="$work/fio.out" >/dev/null ||
			{ cat "$work/fio.out"; fail "fio $job"; }
		grep -q "err= 0" "$work/fio.out" || fail "fio $job: errors"
		step fio "$job + crc32c verify passed"
	done
	rm -f "$mnt/fio.dat"
else
	step fio "skipped: no fio"
fi

# Concurrent O_APPEND writers over a few files while the kernel drops its
# inodes (forgets racing lookups; mappings freed and created again): no
# line may be lost, torn or doubled.
w_appenders() {
	mkdir "$1/app"
	local j pids=()
	for j in 1 2 3; do
		(
			for i in $(seq 100); do
				echo "$j $i" >>"$1/app/f$((i % 20))"
				cat "$1/app/f$(((i + j) % 20))" >/dev/null \
					2>&1 || true # not written yet
			done
		) &
		pids+=($!)
	done
	if [ -w /proc/sys/vm/drop_caches ] && [ "$1" = "$mnt" ]; then
		for _ in $(seq 20); do
			echo 2 >/proc/sys/vm/drop_caches
			sleep 0.05
		done
	fi
	wait "${pids[@]}" # not folio-fuse
	cat "$1"/app/f* | LC_ALL=C sort
}
run appenders
if have python3; then
	run space
	# Collapse would have to move the cache's folios: refused, file kept.
	python3 - "$mnt/space" <<'PY' || fail "fallocate collapse not refused"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                           ctypes.c_int64]
fd = os.open(sys.argv[1], os.O_RDWR)
size = os.fstat(fd).st_size
if libc.fallocate(fd, 0x08, 0, 4096) == 0 or \
        ctypes.get_errno() != errno.EOPNOTSUPP or os.fstat(fd).st_size != size:
    sys.exit("collapse: not EOPNOTSUPP, or the size changed")
PY
fi
rm -r "$mnt/app" "$plain/app" # the order of the lines differs, rightly

# Statistics on SIGUSR1, with the counters summed over inodes.
rm -f "$work/stats.json"
kill -USR1 "$ffpid"
for _ in $(seq 50); do [ -s "$work/stats.json" ] && break; sleep 0.1; done
grep -q '"bytes_written": [1-9]' "$work/stats.json" ||
	fail "no statistics after SIGUSR1"
step stats "SIGUSR1 wrote $work/stats.json"

umount_ff
grep -q '"write_amplification"' "$work/stats.json" ||
	fail "no statistics at unmount"
diff -r -x index "$plain" "$back" || fail "backing dir differs after unmount"
step unmount "exit 0; the backing directory holds every change"

# The other mode, and other geometry: data written before is read back.
mount_ff --kernel-cache --tracking folio --block-size 512 \
	--min-folio-size 16K --folio-size 64K --flushers 0
diff -r -x index "$plain" "$mnt" || fail "remounted tree differs"
step remount "--kernel-cache: the tree reads back the same"
rm -rf "${mnt:?}"/* "${plain:?}"/*
run cp
run dd
run truncate
if have sqlite3; then run sqlite; run sqlite_wal; fi
if have python3; then run mmap; run space; fi
umount_ff
diff -r "$plain" "$back" || fail "backing dir differs after the second unmount"
step unmount "exit 0 again"
# kill -9 of the server after fsync returned: what was fsync'd is in the
# backing files, byte for byte; data written after the last fsync may be
# missing, never mangled into what was synced.
if have python3; then
	crash=$work/crash
	mkdir "$crash"
	ffback=$crash
	mount_ff --budget 16M --flushers 1
	python3 - "$mnt" "$work/crash.want" <<'PY' || fail "writes before the crash"
import os, random, sys
mnt, want = sys.argv[1], sys.argv[2]
rng = random.Random(4242)
out = open(want, "wb")
for i in range(12):
    path = os.path.join(mnt, "f%d" % i)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    data = bytearray(rng.randbytes(rng.randrange(1, 300000)))
    os.pwrite(fd, data, 0)
    for _ in range(20):  # overwrites at odd offsets, inside the file
        at = rng.randrange(len(data))
        piece = rng.randbytes(min(rng.randrange(1, 9000), len(data) - at))
        os.pwrite(fd, piece, at)
        data[at:at + len(piece)] = piece
    (os.fdatasync if i % 2 else os.fsync)(fd)
    out.write(b"%s %d\n" % (path.encode(), len(data)))
    open(want + ".%d" % i, "wb").write(data)
    # After the sync: may be lost, must not replace synced bytes with
    # anything but themselves.
    os.pwrite(fd, b"\xee" * 4096, len(data))
    os.close(fd) if i % 3 else None
out.close()
PY
	kill -9 "$ffpid"
	wait "$ffpid" 2>/dev/null || true
	ffpid=
	fusermount3 -u -z "$mnt" 2>/dev/null || true
	for i in $(seq 0 11); do
		want=$work/crash.want.$i
		n=$(stat -c %s "$want")
		cmp -n "$n" "$want" "$crash/f$i" ||
			fail "f$i: fsync'd bytes differ after kill -9"
	done
	step kill-9 "12 files: every fsync'd byte is in the backing files"
	ffback=$back
else
	step kill-9 "skipped: no python3"
fi

# --passthrough (the benchmarks' bare FUSE baseline): the same programs,
# data straight to the backing files.
ffback=$work/pt
mkdir "$ffback"
# A relative --stats name is the caller's, though -f changes to /.
cd "$work"
mount_ff --passthrough --stats rel-stats.json --threads 2
cd - >/dev/null
rm -rf "${plain:?}"/*
run cp
run dd
run truncate
umount_ff
diff -r "$plain" "$ffback" || fail "--passthrough: backing dir differs"
[ -s "$work/rel-stats.json" ] || fail "--stats with a relative name"
step passthrough "the same files, no cache"
ffback=$back

# Memory: 4x the budget written and read through the mount (sequential
# files, then random 4 KiB reads and writes over them) must leave the
# server's peak RSS within the budget plus its fixed costs: start-up
# (~2 MiB), libfuse's worker threads (up to 10, each with a 1 MiB receive
# buffer of which a 128 KiB request touches 132 KiB) and their malloc
# arenas, the library's metadata. Measured: budget + 7.5..9.5 MiB; the
# bound is budget + 16 MiB, far below the 64 MiB an unbounded cache would
# take. Without meson's MALLOC_PERTURB_, which fills every malloc()ed
# buffer and so makes all of libfuse's buffers resident (budget + 16 MiB
# measured with it). The default 2 MiB largest folio: 2 MiB folios mixed
# with small ones fragment the folio allocator's chunks, and this checks
# that their free blocks do not stay resident (before the allocator
# bounded them the peak was 37-38 MiB). Under sanitizers only the data is
# checked (ASan's shadow and quarantine are not ours).
budget_mib=16 over_mib=16
mem=$work/mem
mkdir "$mem"
ffback=$mem
MALLOC_PERTURB_=0 mount_ff --budget ${budget_mib}M
for i in 0 1 2 3; do
	head -c $((16 << 20)) /dev/urandom >"$work/mem.$i"
	dd if="$work/mem.$i" of="$mnt/m$i" bs=1M conv=fsync status=none
done
for i in 0 1 2 3; do
	cmp "$work/mem.$i" "$mnt/m$i" || fail "memory: m$i reads back wrong"
done
if have fio; then
	fio --name=mem --directory="$mnt" --filename=m0:m1:m2:m3 \
		--size=64M --rw=randrw --bs=4k --ioengine=psync --numjobs=2 \
		--runtime=2 --time_based --output=/dev/null ||
		fail "memory: fio randrw"
fi
hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$ffpid/status")
# gcc links the sanitizer runtimes as libraries, clang into the binary.
sanitized=0
if grep -q 'libasan\|libubsan' "/proc/$ffpid/maps" ||
	grep -qa "AddressSanitizer\|UndefinedBehaviorSanitizer" "$ff"; then
	sanitized=1
fi
umount_ff
ffback=$back
limit=$(((budget_mib + over_mib) << 10))
if [ "$sanitized" = 1 ]; then
	step memory "64 MiB through a $budget_mib MiB budget; peak RSS $((hwm >> 10)) MiB not checked under sanitizers"
else
	[ "$hwm" -le "$limit" ] ||
		fail "memory: peak RSS $hwm KiB > budget + $over_mib MiB"
	step memory "64 MiB through a $budget_mib MiB budget: peak RSS $((hwm >> 10)) MiB <= $((limit >> 10)) MiB"
fi

# A backing file system that fills up: the writes land in the cache, and
# ENOSPC must reach fsync and close; at unmount folio-fuse names the file
# it could not write and exits 1. Needs a tmpfs mount (root).
small=$work/small
mkdir "$small"
if have python3 &&
	mount -t tmpfs -o size=1m folio-fuse-test "$small" 2>/dev/null; then
	ffback=$small
	mount_ff --budget 8M --flushers 0
	python3 - "$mnt/full" <<'PY' || fail "ENOSPC did not reach fsync/close"
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"x" * (3 << 20))        # fits the cache, not the disk
for call in (lambda: os.fsync(fd), lambda: os.close(fd)):
    try:
        call()
        sys.exit("no error")
    except OSError as e:
        if e.errno != errno.ENOSPC:
            sys.exit("got %s, not ENOSPC" % e)
PY
	umount_ff 1
	grep -q "sync failed: No space left on device" "$work/ff.log" ||
		fail "the unwritable file was not reported at unmount"
	step enospc "fsync and close report ENOSPC; unmount exits 1"
	umount "$small"
	small=
else
	step enospc "skipped: no python3, or cannot mount a tmpfs"
fi
echo "ok"
