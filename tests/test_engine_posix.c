/* SPDX-License-Identifier: MIT */
/*
 * Tests of the posix engine on real files, inline (FOLIO_POSIX_INLINE: I/O
 * inside submit()); test_engine_posix_workers.c runs the shared tests with
 * engine threads. What it shares with the io_uring engine is tested by
 * engine_test_util.c; here are only what is its own: its constructors'
 * arguments, and that by default the kernel's page cache does not keep a
 * second copy of what the engine read or wrote (mincore() on a mapping of
 * the file tells what the kernel holds).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "engine_test_util.h"

static int posix_try(struct folio_engine **out, int fd, unsigned flags)
{
	struct folio_posix_opts o = {
		.sz = sizeof(o), .flags = flags, .workers = FOLIO_POSIX_INLINE};
	return folio_engine_posix_opts(out, fd, &o);
}

static struct folio_engine *posix_new(int fd, unsigned flags)
{
	struct folio_engine *e = NULL;
	assert_int_equal(posix_try(&e, fd, flags), 0);
	assert_non_null(e);
	return e;
}

static const struct file_engine posix_engine = {
	.name = "posix",
	.create = posix_new,
	.try_create = posix_try,
	.completes_in_submit = true,
	.barrier_is_fdatasync = true,
	.waited_barrier_is_fdatasync = true,
};

#define SIZEOF_THROUGH_FLAGS \
	(offsetof(struct folio_posix_opts, flags) + sizeof(unsigned))

static void test_bad_input(void **state)
{
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_posix(NULL, 0, 0), -EINVAL);
	assert_int_equal(folio_engine_posix(&e, -1, 0), -EINVAL);
	assert_int_equal(folio_engine_posix(&e, 0, 0x100), -EINVAL);
	assert_int_equal(folio_engine_posix(&e, 0,
					    FOLIO_POSIX_KEEP_PAGE_CACHE | 0x8),
			 -EINVAL);
	assert_int_equal(folio_engine_posix(&e, 0,
					    FOLIO_URING_COMPLETION_THREAD),
			 -EINVAL);
	int fd = dup(STDERR_FILENO);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(folio_engine_posix(&e, fd, 0), -EBADF);
	assert_null(e);

	/* The options: sized, checked before the descriptor. */
	struct {
		struct folio_posix_opts o;
		char tail[8];
	} big = {.o = {.sz = sizeof(big)}};
	assert_int_equal(folio_engine_posix_opts(NULL, 0, NULL), -EINVAL);
	assert_int_equal(folio_engine_posix_opts(&e, -1, NULL), -EINVAL);
	struct folio_posix_opts o = {.sz = sizeof(o), .workers = -2};
	assert_int_equal(folio_engine_posix_opts(&e, 0, &o), -EINVAL);
	o.workers = FOLIO_POSIX_MAX_WORKERS + 1;
	assert_int_equal(folio_engine_posix_opts(&e, 0, &o), -EINVAL);
	o.workers = 0;
	o.flags = FOLIO_URING_COMPLETION_THREAD;
	assert_int_equal(folio_engine_posix_opts(&e, 0, &o), -EINVAL);
	o.flags = 0;
	o.sz = offsetof(struct folio_posix_opts, flags);
	assert_int_equal(folio_engine_posix_opts(&e, 0, &o), -EINVAL);
	big.tail[3] = 1;
	assert_int_equal(folio_engine_posix_opts(&e, 0, &big.o), -E2BIG);
	assert_int_equal(folio_engine_posix_opts(&e, fd, NULL), -EBADF);
	assert_null(e);

	/* An older caller's struct (no workers field) gets the default;
	 * a larger one with a zero tail is accepted. */
	FILE *tmp = tmpfile();
	assert_non_null(tmp);
	o.sz = SIZEOF_THROUGH_FLAGS;
	assert_int_equal(folio_engine_posix_opts(&e, fileno(tmp), &o), 0);
	assert_int_equal(folio_engine_free(e), 0);
	big.tail[3] = 0;
	big.o.workers = 1;
	assert_int_equal(folio_engine_posix_opts(&e, fileno(tmp), &big.o), 0);
	assert_int_equal(folio_engine_free(e), 0);
	assert_int_equal(folio_engine_posix_opts(&e, fileno(tmp), NULL), 0);
	assert_int_equal(folio_engine_free(e), 0);
	fclose(tmp);
}

/* ---- one copy in RAM ------------------------------------------------ */

/* Large enough for the kernel's readahead to build large folios, which
 * straddle the requests (see posix.c). */
enum { PC_LEN = 32 << 20, PC_CHUNK = 1 << 20 };

/* Pages of [0, len) of fd that the kernel's page cache holds. */
static size_t cached_pages(int fd, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t n = (len + page - 1) / page;
	void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(m != MAP_FAILED);
	unsigned char *vec = xmalloc(n);
	assert_int_equal(mincore(m, len, vec), 0);
	size_t in = 0;
	for (size_t i = 0; i < n; i++)
		in += vec[i] & 1;
	free(vec);
	munmap(m, len);
	return in;
}

/*
 * The kernel may reclaim clean page cache on its own while a test runs
 * (DAMON_RECLAIM is on on some hosts; valgrind makes a test slow enough
 * for it), which a check that pages were *kept* would blame on the
 * engine. A second file, cached the same way and never touched, tells:
 * when it lost pages too, a "kept" check is not made (and says so). That
 * misses a reclaim that hit only the file under test (DAMON pages out
 * cold physical regions, wherever each file's pages lie), so a "kept"
 * check that fails with the control untouched marks the case missed, and
 * the case runs again, up to PC_ATTEMPTS times (pc_retry()): an engine
 * that drops pages it must keep misses every time. The checks that
 * pages were *dropped* are always made.
 */
struct pc_control {
	struct tfile f;
	size_t cached;
	bool missed; /* a "kept" check failed, the control untouched */
};

static void control_open(struct pc_control *c, const struct tfile *near)
{
	void *w = near->w;
	assert_true(tfile_open(&c->f, &w));
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	char *buf = xmalloc(page);
	memset(buf, 0x5a, page);
	for (size_t off = 0; off < PC_LEN; off += page)
		assert_int_equal(pwrite(c->f.fd, buf, page, (off_t)off),
				 (ssize_t)page);
	free(buf);
	assert_int_equal(fdatasync(c->f.fd), 0);
	c->cached = cached_pages(c->f.fd, PC_LEN);
	c->missed = false;
}

static bool reclaimed_meanwhile(struct pc_control *c)
{
	size_t now = cached_pages(c->f.fd, PC_LEN);
	if (now >= c->cached)
		return false;
	printf("# the kernel reclaimed %zu pages of an untouched file "
	       "meanwhile: a \"kept\" check is not made\n", c->cached - now);
	return true;
}

static void kept_check(bool kept, struct pc_control *c, int line)
{
	if (kept || reclaimed_meanwhile(c))
		return;
	printf("# line %d: pages the engine had to keep are gone\n", line);
	c->missed = true;
}

#define assert_kept(cond, ctl) kept_check((cond), (ctl), __LINE__)

#define PC_ATTEMPTS 3

/* Run a page-cache case (returning whether a "kept" check missed) until
 * none misses, at most PC_ATTEMPTS times. */
static void pc_retry(bool (*run)(unsigned flags), unsigned flags)
{
	for (int attempt = 1;; attempt++) {
		if (!run(flags))
			return;
		assert_true(attempt < PC_ATTEMPTS);
		printf("# running the case again (attempt %d)\n", attempt + 1);
	}
}

/* A file on a disk file system, whose page cache can be dropped (tmpfs
 * pages are the file itself); false: skip. */
static bool disk_file(struct tfile *f)
{
	void *w = &fe_disk;
	if (!tfile_open(f, &w))
		return false;
	struct statfs sf;
	assert_int_equal(fstatfs(f->fd, &sf), 0);
	if (sf.f_type == 0x01021994 /* TMPFS_MAGIC */) {
		printf("# skipping: %s is tmpfs\n", f->w->dir);
		tfile_close(f);
		return false;
	}
	return true;
}

static void rw_chunks(struct folio_engine *e, enum folio_io_op op, char *buf)
{
	for (size_t off = 0; off < PC_LEN; off += PC_CHUNK)
		assert_int_equal(do_io(e, op, off, buf + off, PC_CHUNK, 3, 0),
				 PC_CHUNK);
}

/*
 * Default: written pages stay cached (dirty) until a flush, then go; read
 * pages go right after the read. With FOLIO_POSIX_KEEP_PAGE_CACHE all of
 * them stay. Data is right either way.
 */
static bool page_cache_case(unsigned flags)
{
	struct tfile f;
	if (!disk_file(&f))
		return false;
	bool keep = flags & FOLIO_POSIX_KEEP_PAGE_CACHE;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), all = PC_LEN / page;
	/* "Nearly none": another process touching the file, or the
	 * kernel's readahead racing the drop, may leave a few. */
	size_t few = all / 64;
	char *in = xaligned(PC_LEN), *out = xaligned(PC_LEN);
	fill(in, PC_LEN, 11);
	struct pc_control ctl;
	control_open(&ctl, &f);
	struct folio_engine *e = posix_new(f.fd, flags);

	rw_chunks(e, FOLIO_IO_WRITE, in);
	/* Dirty: nothing may drop it before the flush. */
	assert_kept(cached_pages(f.fd, PC_LEN) >= all - few, &ctl);
	assert_int_equal(eng_flush(e), 0);
	size_t after_flush = cached_pages(f.fd, PC_LEN);
	if (keep)
		assert_kept(after_flush >= all - few, &ctl);
	else
		assert_true(after_flush <= few);

	/* Reads from a cold file (the kernel reads it in, with its own
	 * readahead), and from a hot one (nothing to read in). */
	for (int hot = 0; hot < 2; hot++) {
		if (!hot) {
			assert_int_equal(fdatasync(f.fd), 0);
			assert_int_equal(posix_fadvise(f.fd, 0, 0,
						       POSIX_FADV_DONTNEED),
					 0);
		} else {
			assert_int_equal(pread(f.fd, out, PC_LEN, 0), PC_LEN);
		}
		memset(out, 0, PC_LEN);
		rw_chunks(e, FOLIO_IO_READ, out);
		assert_memory_equal(in, out, PC_LEN);
		size_t after_read = cached_pages(f.fd, PC_LEN);
		if (keep)
			assert_kept(after_read >= all - few, &ctl);
		else
			assert_true(after_read <= few);
	}
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
	tfile_close(&ctl.f);
	tfile_close(&f);
	return ctl.missed;
}

static void test_page_cache_dropped(void **state)
{
	(void)state;
	pc_retry(page_cache_case, 0);
}

static void test_page_cache_kept(void **state)
{
	(void)state;
	pc_retry(page_cache_case, FOLIO_POSIX_KEEP_PAGE_CACHE);
}

/* Each flush drops what was written since the one before, wherever it
 * was, and nothing else: pages the caller cached itself through @fd stay
 * (the engine must not wipe the whole file's cache on every flush). */
static bool page_cache_ranges(unsigned flags)
{
	(void)flags;
	struct tfile f;
	if (!disk_file(&f))
		return false;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), half = PC_LEN / 2 / page;
	char *in = xaligned(PC_LEN), *out = xaligned(PC_LEN);
	fill(in, PC_LEN, 12);
	struct pc_control ctl;
	control_open(&ctl, &f);
	struct folio_engine *e = posix_new(f.fd, 0);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, PC_LEN / 2, in + PC_LEN / 2,
			       PC_LEN / 2, 1, 0),
			 PC_LEN / 2);
	assert_int_equal(eng_flush(e), 0);
	assert_true(cached_pages(f.fd, PC_LEN) <= half / 64);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 0, in, PC_LEN / 2, 2, 0),
			 PC_LEN / 2);
	assert_kept(cached_pages(f.fd, PC_LEN) >= half - half / 64, &ctl);
	assert_int_equal(eng_flush(e), 0);
	assert_true(cached_pages(f.fd, PC_LEN) <= half / 64);
	/* A flush with nothing written drops nothing it should not: pages
	 * the caller read itself stay. */
	assert_int_equal(pread(f.fd, out, PC_LEN, 0), PC_LEN);
	assert_memory_equal(in, out, PC_LEN);
	assert_int_equal(eng_flush(e), 0);
	assert_kept(cached_pages(f.fd, PC_LEN) >= 2 * half - half / 32, &ctl);
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
	tfile_close(&ctl.f);
	tfile_close(&f);
	return ctl.missed;
}

static void test_page_cache_ranges(void **state)
{
	(void)state;
	pc_retry(page_cache_ranges, 0);
}

/* Scattered reads and writes drop their own pages and nothing around
 * them: a file the kernel holds but the library has yet to read keeps
 * its cache, or the library's first reads of it would go to the device. */
static bool page_cache_neighbours(unsigned flags)
{
	(void)flags;
	struct tfile f;
	if (!disk_file(&f))
		return false;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), all = PC_LEN / page;
	enum { N = 8, LEN = 64 << 10 };
	char *in = xaligned(PC_LEN), *out = xaligned(PC_LEN);
	fill(in, PC_LEN, 13);
	/* Written in pages, so the kernel's folios are small and a drop
	 * takes exactly what it covers. */
	for (size_t off = 0; off < PC_LEN; off += page)
		assert_int_equal(pwrite(f.fd, in + off, page, (off_t)off),
				 (ssize_t)page);
	assert_int_equal(fdatasync(f.fd), 0);
	struct pc_control ctl;
	control_open(&ctl, &f);
	assert_kept(cached_pages(f.fd, PC_LEN) >= all - all / 64, &ctl);
	struct folio_engine *e = posix_new(f.fd, 0);
	/* Far apart and out of order: no stream, more than one range. */
	for (int i = 0; i < N; i++) {
		uint64_t pos = (uint64_t)((i * 5) % N) * (PC_LEN / N) + LEN;
		assert_int_equal(do_io(e, FOLIO_IO_READ, pos, out, LEN, 1, 0),
				 LEN);
		assert_memory_equal(in + pos, out, LEN);
		pos += 2 * LEN;
		assert_int_equal(do_io(e, FOLIO_IO_WRITE, pos, in + pos, LEN,
				       1, 0),
				 LEN);
	}
	assert_int_equal(eng_flush(e), 0);
	size_t gone = 2 * N * (LEN / page), left = cached_pages(f.fd, PC_LEN);
	assert_true(left <= all - gone + all / 64);
	assert_kept(left >= all - gone, &ctl);
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
	tfile_close(&ctl.f);
	tfile_close(&f);
	return ctl.missed;
}

static void test_page_cache_neighbours(void **state)
{
	(void)state;
	pc_retry(page_cache_neighbours, 0);
}

int main(void)
{
	fe_engine = &posix_engine;
	const struct CMUnitTest tests[] = {
		FE_ALL_TESTS,
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_page_cache_dropped),
		cmocka_unit_test(test_page_cache_kept),
		cmocka_unit_test(test_page_cache_ranges),
		cmocka_unit_test(test_page_cache_neighbours),
	};
	return cmocka_run_group_tests(tests, fe_group_setup, fe_group_teardown);
}
