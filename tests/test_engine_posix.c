/* SPDX-License-Identifier: MIT */
/*
 * Tests of the posix engine on real files: one directory on a disk file
 * system (/var/tmp, else /tmp) and one on tmpfs (/dev/shm). Each data
 * test runs on both; a missing directory skips its half.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "internal.h"
#include "test_util.h"

/* ---- request helper ------------------------------------------------- */

struct tio {
	struct fs_io rq;
	struct iovec *iov;
	atomic_int ncomplete;
	atomic_long result;
};

static void tio_end(struct fs_io *rq, ssize_t result)
{
	struct tio *t = container_of(rq, struct tio, rq);
	atomic_store(&t->result, (long)result);
	atomic_fetch_add(&t->ncomplete, 1);
}

/* Splits buf into nseg segments; lengths are cut at the given pseudo-
 * random points when seed != 0, else about equal. */
static void tio_prep(struct tio *t, enum folio_io_op op, uint64_t pos,
		     void *buf, size_t len, int nseg, uint64_t seed)
{
	memset(t, 0, sizeof(*t));
	t->rq.end_io = tio_end;
	t->rq.io.op = op;
	t->rq.io.pos = pos;
	t->rq.io.dev_pos = pos;
	t->rq.io.len = len;
	t->iov = calloc((size_t)MAX(nseg, 1), sizeof(*t->iov));
	assert_non_null(t->iov);
	size_t at = 0;
	for (int i = 0; i < nseg; i++) {
		size_t left = len - at, l;
		if (i == nseg - 1)
			l = left;
		else if (seed)
			l = (size_t)test_rand_below(&seed,
						    2 * left / (size_t)(nseg - i) + 1);
		else
			l = len / (size_t)nseg;
		l = MIN(l, left);
		t->iov[i].iov_base = (char *)buf + at;
		t->iov[i].iov_len = l;
		at += l;
	}
	t->rq.io.iov = t->iov;
	t->rq.io.iovcnt = nseg;
}

static void tio_free(struct tio *t)
{
	free(t->iov);
	t->iov = NULL;
}

/* Submit; the posix engine completes inside submit(). */
static long do_io(struct folio_engine *e, enum folio_io_op op, uint64_t pos,
		  void *buf, size_t len, int nseg, uint64_t seed)
{
	struct tio t;
	tio_prep(&t, op, pos, buf, len, nseg, seed);
	int ret = e->ops.submit(folio_engine_ctx(e), &t.rq.io);
	tio_free(&t);
	if (ret)
		return ret;
	assert_int_equal(atomic_load(&t.ncomplete), 1);
	return atomic_load(&t.result);
}

/* malloc that never returns NULL (abort() is known not to return, which
 * keeps the compiler from warning about NULL paths). */
static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p)
		abort();
	return p;
}

static void fill(void *buf, size_t len, uint64_t seed)
{
	unsigned char *p = buf;
	uint64_t s = seed | 1;
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(test_rand(&s) >> 56);
}

static bool all_bytes(const void *buf, size_t len, unsigned char v)
{
	const unsigned char *p = buf;
	for (size_t i = 0; i < len; i++)
		if (p[i] != v)
			return false;
	return true;
}

/* ---- file fixtures -------------------------------------------------- */

struct where {
	const char *const *candidates;
	char dir[256];
	bool ok;
};

static const char *const disk_dirs[] = {"/var/tmp", "/tmp", NULL};
static const char *const shm_dirs[] = {"/dev/shm", NULL};
static struct where disk = {.candidates = disk_dirs};
static struct where shm = {.candidates = shm_dirs};

static void where_setup(struct where *w)
{
	for (const char *const *c = w->candidates; *c; c++) {
		snprintf(w->dir, sizeof(w->dir), "%s/folio-posix-XXXXXX", *c);
		if (mkdtemp(w->dir)) {
			struct statfs sf;
			if (!statfs(w->dir, &sf))
				printf("# %s: f_type 0x%lx\n", w->dir,
				       (unsigned long)sf.f_type);
			w->ok = true;
			return;
		}
	}
}

static int group_setup(void **state)
{
	where_setup(&disk);
	where_setup(&shm);
	return 0;
}

/* Files a failed test left behind go too. */
static void where_remove(struct where *w)
{
	if (!w->ok)
		return;
	DIR *d = opendir(w->dir);
	if (d) {
		struct dirent *de;
		while ((de = readdir(d)))
			if (de->d_name[0] != '.')
				unlinkat(dirfd(d), de->d_name, 0);
		closedir(d);
	}
	rmdir(w->dir);
}

static int group_teardown(void **state)
{
	where_remove(&disk);
	where_remove(&shm);
	return 0;
}

/*
 * A test that cannot run here says why and returns. cmocka 1.1.5 reports
 * skip() in TAP as "not ok N # SKIP", which meson 1.0 counts as a failure,
 * so skip() is not used.
 */
static struct where *where_of(void **state)
{
	struct where *w = *state;
	if (!w->ok) {
		printf("# skipping: no directory in %s\n", w->candidates[0]);
		return NULL;
	}
	return w;
}

/* A fresh empty file in w; returns the fd (open flags extra). */
static int tmpfile_in(struct where *w, int extra, char *path, size_t n)
{
	snprintf(path, n, "%s/f-XXXXXX", w->dir);
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	if (extra) {
		int fd2 = open(path, O_RDWR | extra);
		close(fd);
		fd = fd2;
	}
	return fd;
}

static struct folio_engine *posix_new(int fd, unsigned flags)
{
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_posix(&e, fd, flags), 0);
	assert_non_null(e);
	return e;
}

/* ---- tests ---------------------------------------------------------- */

static void test_round_trip(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, 0, path, sizeof(path));
	struct folio_engine *e = posix_new(fd, 0);
	enum { LEN = 300000 };
	char *in = xmalloc(LEN), *out = xmalloc(LEN);
	fill(in, LEN, 1);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 12345, in, LEN, 5, 0), LEN);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 12345 + LEN);
	/* Independent check with pread, then through the engine. */
	memset(out, 0, LEN);
	assert_int_equal(pread(fd, out, LEN, 12345), LEN);
	assert_memory_equal(in, out, LEN);
	memset(out, 0xee, LEN);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 12345, out, LEN, 7, 0), LEN);
	assert_memory_equal(in, out, LEN);
	/* The hole before the data reads as zeros. */
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, out, 12345, 1, 0), 12345);
	assert_true(all_bytes(out, 12345, 0));
	/* Zero-length requests complete with 0. */
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 0, out, 0, 0, 0), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
	close(fd);
	unlink(path);
}

static void test_dev_pos(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, 0, path, sizeof(path));
	struct folio_engine *e = posix_new(fd, 0);
	char buf[1000], chk[1000];
	fill(buf, sizeof(buf), 2);
	/* The engine writes at dev_pos, not pos. */
	struct tio t;
	tio_prep(&t, FOLIO_IO_WRITE, 0, buf, sizeof(buf), 2, 0);
	t.rq.io.dev_pos = 50000;
	assert_int_equal(e->ops.submit(folio_engine_ctx(e), &t.rq.io), 0);
	assert_int_equal(atomic_load(&t.result), (long)sizeof(buf));
	tio_free(&t);
	assert_int_equal(pread(fd, chk, sizeof(chk), 50000), (long)sizeof(chk));
	assert_memory_equal(buf, chk, sizeof(buf));
	assert_int_equal(folio_engine_free(e), 0);
	close(fd);
	unlink(path);
}

static void test_read_past_eof(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, 0, path, sizeof(path));
	struct folio_engine *e = posix_new(fd, 0);
	char data[1000], buf[8192];
	fill(data, sizeof(data), 3);
	assert_int_equal(pwrite(fd, data, sizeof(data), 0), (long)sizeof(data));
	/* Spanning EOF, split so that the EOF falls inside a segment. */
	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, buf, sizeof(buf), 3, 0),
			 (long)sizeof(buf));
	assert_memory_equal(buf, data, sizeof(data));
	assert_true(all_bytes(buf + 1000, sizeof(buf) - 1000, 0));
	/* Wholly past EOF. */
	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(do_io(e, FOLIO_IO_READ, 1 << 20, buf, sizeof(buf), 4,
			       0), (long)sizeof(buf));
	assert_true(all_bytes(buf, sizeof(buf), 0));
	/* Many segments across EOF. */
	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(do_io(e, FOLIO_IO_READ, 500, buf, sizeof(buf), 300,
			       77), (long)sizeof(buf));
	assert_memory_equal(buf, data + 500, 500);
	assert_true(all_bytes(buf + 500, sizeof(buf) - 500, 0));
	assert_int_equal(folio_engine_free(e), 0);
	close(fd);
	unlink(path);
}

/* More segments than one preadv/pwritev call takes (IOV_MAX = 1024), of
 * random lengths including empty ones. */
static void test_many_segments(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	uint64_t seed = test_seed("many_segments");
	char path[300];
	int fd = tmpfile_in(w, 0, path, sizeof(path));
	struct folio_engine *e = posix_new(fd, 0);
	enum { LEN = 200000 };
	char *in = xmalloc(LEN), *out = xmalloc(LEN);
	fill(in, LEN, seed);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 4096, in, LEN, 2500,
			       test_rand(&seed)), LEN);
	memset(out, 0, LEN);
	assert_int_equal(pread(fd, out, LEN, 4096), LEN);
	assert_memory_equal(in, out, LEN);
	memset(out, 0xee, LEN);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 4096, out, LEN, 1024,
			       test_rand(&seed)), LEN);
	assert_memory_equal(in, out, LEN);
	memset(out, 0xee, LEN);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 4096, out, LEN, 3000,
			       test_rand(&seed)), LEN);
	assert_memory_equal(in, out, LEN);
	/* Across EOF with more than IOV_MAX segments: 100000 real bytes. */
	memset(out, 0xee, LEN);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 4096 + LEN - 100000, out, LEN,
			       2000, test_rand(&seed)), LEN);
	assert_memory_equal(out, in + LEN - 100000, 100000);
	assert_true(all_bytes(out + 100000, LEN - 100000, 0));
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
	close(fd);
	unlink(path);
}

/*
 * A short write is easy to force with RLIMIT_FSIZE: pwritev stops at the
 * limit and the next call fails with EFBIG. The engine must loop past the
 * first short return and then report the bytes it did write.
 */
static void test_short_write(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, 0, path, sizeof(path));
	struct folio_engine *e = posix_new(fd, 0);
	struct rlimit old, lim;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
	lim = old;
	lim.rlim_cur = 10000;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	char buf[30000], chk[30000];
	fill(buf, sizeof(buf), 5);
	long r = do_io(e, FOLIO_IO_WRITE, 0, buf, sizeof(buf), 7, 0);
	long r2 = do_io(e, FOLIO_IO_WRITE, 20000, buf, 100, 1, 0);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, oldsig);
	assert_int_equal(r, 10000);
	assert_int_equal(r2, -EFBIG); /* nothing written: the error */
	assert_int_equal(pread(fd, chk, sizeof(chk), 0), 10000);
	assert_memory_equal(chk, buf, 10000);
	/* Resubmitting the rest now works. */
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 10000, buf + 10000, 20000, 3,
			       0), 20000);
	assert_int_equal(pread(fd, chk, sizeof(chk), 0), 30000);
	assert_memory_equal(chk, buf, 30000);
	assert_int_equal(folio_engine_free(e), 0);
	close(fd);
	unlink(path);
}

static void test_flush_truncate(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, 0, path, sizeof(path));
	struct folio_engine *e = posix_new(fd, 0);
	char buf[20000];
	fill(buf, sizeof(buf), 6);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 0, buf, sizeof(buf), 2, 0),
			 (long)sizeof(buf));
	assert_int_equal(e->ops.flush(folio_engine_ctx(e)), 0);
	assert_int_equal(e->ops.truncate(folio_engine_ctx(e), 5000), 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 5000);
	assert_int_equal(e->ops.truncate(folio_engine_ctx(e), 100000), 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 100000);
	char chk[20000];
	memset(chk, 0xaa, sizeof(chk));
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, chk, sizeof(chk), 1, 0),
			 (long)sizeof(chk));
	assert_memory_equal(chk, buf, 5000);
	assert_true(all_bytes(chk + 5000, sizeof(chk) - 5000, 0));
	assert_int_equal(e->ops.truncate(folio_engine_ctx(e),
					 (UINT64_C(1) << 62) + 1), -EINVAL);
	assert_int_equal(e->ops.flush(folio_engine_ctx(e)), 0);
	assert_int_equal(folio_engine_free(e), 0);
	close(fd);
	unlink(path);
}

static void *aligned(size_t len)
{
	void *p = aligned_alloc(4096, len);
	assert_non_null(p);
	return p;
}

static void test_direct(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	char path[300];
	snprintf(path, sizeof(path), "%s/direct-XXXXXX", w->dir);
	int tfd = mkstemp(path);
	assert_true(tfd >= 0);
	int fd = open(path, O_RDWR | O_DIRECT);
	if (fd < 0) {
		printf("# O_DIRECT not supported in %s (%s)\n", w->dir,
		       strerror(errno));
		close(tfd);
		unlink(path);
		return;
	}
	enum { LEN = 65536 };
	char *in = aligned(LEN), *out = aligned(LEN);
	fill(in, LEN, 7);

	for (int pass = 0; pass < 2; pass++) {
		/* pass 1: the flag is implied by the fd's O_DIRECT. */
		struct folio_engine *e =
			posix_new(fd, pass ? 0 : FOLIO_ENGINE_DIRECT);
		assert_int_equal(do_io(e, FOLIO_IO_WRITE, 8192, in, LEN, 4, 0),
				 LEN);
		memset(out, 0, LEN);
		assert_int_equal(do_io(e, FOLIO_IO_READ, 8192, out, LEN, 16, 0),
				 LEN);
		assert_memory_equal(in, out, LEN);

		/* Misaligned requests are refused, not completed. */
		struct tio t;
		tio_prep(&t, FOLIO_IO_READ, 8192 + 1, out, 4096, 1, 0);
		assert_int_equal(e->ops.submit(folio_engine_ctx(e), &t.rq.io),
				 -EINVAL);
		assert_int_equal(atomic_load(&t.ncomplete), 0);
		tio_free(&t);
		tio_prep(&t, FOLIO_IO_READ, 8192, out, 4000, 1, 0);
		assert_int_equal(e->ops.submit(folio_engine_ctx(e), &t.rq.io),
				 -EINVAL);
		tio_free(&t);
		tio_prep(&t, FOLIO_IO_WRITE, 8192, out + 1, 4096, 1, 0);
		assert_int_equal(e->ops.submit(folio_engine_ctx(e), &t.rq.io),
				 -EINVAL);
		tio_free(&t);
		/* Segment lengths count too, even when the total is fine. */
		tio_prep(&t, FOLIO_IO_WRITE, 8192, out, 4096, 2, 0);
		t.iov[0].iov_len = 1000;
		t.iov[1].iov_base = out + 1000;
		t.iov[1].iov_len = 3096;
		assert_int_equal(e->ops.submit(folio_engine_ctx(e), &t.rq.io),
				 -EINVAL);
		assert_int_equal(atomic_load(&t.ncomplete), 0);
		tio_free(&t);

		/* A direct read that ends past EOF: the kernel returns an
		 * unaligned count; the rest is zero-filled. */
		assert_int_equal(ftruncate(tfd, 8192 + 1000), 0);
		memset(out, 0xaa, LEN);
		assert_int_equal(do_io(e, FOLIO_IO_READ, 8192, out, LEN, 2, 0),
				 LEN);
		assert_memory_equal(out, in, 1000);
		assert_true(all_bytes(out + 1000, LEN - 1000, 0));
		memset(out, 0xaa, LEN);
		assert_int_equal(do_io(e, FOLIO_IO_READ, 1 << 20, out, 4096, 1,
				       0), 4096);
		assert_true(all_bytes(out, 4096, 0));
		assert_int_equal(e->ops.flush(folio_engine_ctx(e)), 0);
		assert_int_equal(folio_engine_free(e), 0);
	}
	free(in);
	free(out);
	close(fd);
	close(tfd);
	unlink(path);
}

/* Errors complete the request with -errno: preadv on a pipe gives
 * ESPIPE; ftruncate on it gives EINVAL. */
static void test_errors(void **state)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	struct folio_engine *e = posix_new(p[0], 0);
	char buf[100] = {0};
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, buf, sizeof(buf), 1, 0),
			 -ESPIPE);
	assert_int_equal(e->ops.truncate(folio_engine_ctx(e), 0), -EINVAL);
	assert_true(e->ops.flush(folio_engine_ctx(e)) <= 0);
	assert_int_equal(folio_engine_free(e), 0);
	close(p[0]);
	close(p[1]);

	/* Writing to a read-only fd: EBADF. */
	struct where *w = disk.ok ? &disk : &shm;
	if (!w->ok)
		return;
	char path[300];
	int fd = tmpfile_in(w, 0, path, sizeof(path));
	int ro = open(path, O_RDONLY);
	assert_true(ro >= 0);
	e = posix_new(ro, 0);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 0, buf, sizeof(buf), 1, 0),
			 -EBADF);
	assert_int_equal(folio_engine_free(e), 0);
	close(ro);
	close(fd);
	unlink(path);
}

static void test_bad_input(void **state)
{
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_posix(NULL, 0, 0), -EINVAL);
	assert_int_equal(folio_engine_posix(&e, -1, 0), -EINVAL);
	assert_int_equal(folio_engine_posix(&e, 0, 0x100), -EINVAL);
	assert_int_equal(folio_engine_posix(&e, 0,
					    FOLIO_URING_COMPLETION_THREAD),
			 -EINVAL);
	int fd = dup(STDERR_FILENO);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(folio_engine_posix(&e, fd, 0), -EBADF);
	assert_null(e);

	e = posix_new(STDERR_FILENO, 0);
	char buf[16] = {0};
	struct tio t;
	assert_int_equal(e->ops.submit(folio_engine_ctx(e), NULL), -EINVAL);
	tio_prep(&t, FOLIO_IO_READ, 0, buf, 16, 2, 0);
	t.rq.io.op = (enum folio_io_op)3;
	assert_int_equal(e->ops.submit(folio_engine_ctx(e), &t.rq.io), -EINVAL);
	t.rq.io.op = FOLIO_IO_READ;
	t.rq.io.len = 15;
	assert_int_equal(e->ops.submit(folio_engine_ctx(e), &t.rq.io), -EINVAL);
	t.rq.io.len = 16;
	t.rq.io.dev_pos = UINT64_MAX - 1;
	assert_int_equal(e->ops.submit(folio_engine_ctx(e), &t.rq.io), -EINVAL);
	t.rq.io.dev_pos = 0;
	t.rq.io.iovcnt = -2;
	assert_int_equal(e->ops.submit(folio_engine_ctx(e), &t.rq.io), -EINVAL);
	assert_int_equal(atomic_load(&t.ncomplete), 0);
	tio_free(&t);
	/* A posix engine is not a mem engine. */
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_POLL, 0),
			 -EINVAL);
	assert_int_equal(folio_engine_free(e), 0);
}

/* Each data test once per file system, named after it. */
#define ON_BOTH(f)                                       \
	{#f "_disk", f, NULL, NULL, &disk},              \
	{#f "_shm", f, NULL, NULL, &shm}

int main(void)
{
	const struct CMUnitTest tests[] = {
		ON_BOTH(test_round_trip),
		ON_BOTH(test_dev_pos),
		ON_BOTH(test_read_past_eof),
		ON_BOTH(test_many_segments),
		ON_BOTH(test_short_write),
		ON_BOTH(test_flush_truncate),
		ON_BOTH(test_direct),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_bad_input),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
