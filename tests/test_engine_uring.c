/* SPDX-License-Identifier: MIT */
/*
 * Tests of the io_uring engine on real files, on a disk file system
 * (/var/tmp, else /tmp) and on tmpfs (/dev/shm). Every test that needs a
 * ring skips when the kernel or a sandbox refuses io_uring, or when the
 * library was built without it (-ENOSYS).
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
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "test_util.h"

/* ---- request helper ------------------------------------------------- */

struct tio {
	struct fs_io rq;
	struct iovec *iov;
	atomic_int ncomplete;
	atomic_long result;
	void (*hook)(struct tio *t); /* runs inside the completion */
	void *arg;
};

static void tio_end(struct fs_io *rq, ssize_t result)
{
	struct tio *t = container_of(rq, struct tio, rq);
	atomic_store(&t->result, (long)result);
	if (t->hook)
		t->hook(t);
	atomic_fetch_add_explicit(&t->ncomplete, 1, memory_order_release);
}

/* buf split into nseg segments: about equal, or cut at pseudo-random
 * points when seed != 0 (some segments then are empty). */
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
	atomic_init(&t->ncomplete, 0);
	atomic_init(&t->result, 0);
}

static void tio_free(struct tio *t)
{
	free(t->iov);
	t->iov = NULL;
}

static int done(struct tio *t)
{
	return atomic_load_explicit(&t->ncomplete, memory_order_acquire);
}

static int eng_submit(struct folio_engine *e, struct tio *t)
{
	return e->ops.submit(folio_engine_ctx(e), &t->rq.io);
}

static int eng_wait(struct folio_engine *e)
{
	return e->ops.wait(folio_engine_ctx(e));
}

static int eng_unplug(struct folio_engine *e)
{
	return e->ops.unplug(folio_engine_ctx(e));
}

static void wait_all(struct folio_engine *e, struct tio *t, int n)
{
	for (int i = 0; i < n; i++)
		while (!done(&t[i]))
			assert_int_equal(eng_wait(e), 0);
}

static long do_io(struct folio_engine *e, enum folio_io_op op, uint64_t pos,
		  void *buf, size_t len, int nseg, uint64_t seed)
{
	struct tio t;
	tio_prep(&t, op, pos, buf, len, nseg, seed);
	int ret = eng_submit(e, &t);
	if (ret) {
		tio_free(&t);
		return ret;
	}
	assert_int_equal(eng_unplug(e), 0);
	wait_all(e, &t, 1);
	assert_int_equal(done(&t), 1);
	tio_free(&t);
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

/* ---- fixtures ------------------------------------------------------- */

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
		snprintf(w->dir, sizeof(w->dir), "%s/folio-uring-XXXXXX", *c);
		if (mkdtemp(w->dir)) {
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

static struct where *any_where(void)
{
	if (disk.ok)
		return &disk;
	if (shm.ok)
		return &shm;
	printf("# skipping: no temporary directory\n");
	return NULL;
}

static int tmpfile_in(struct where *w, char *path, size_t n)
{
	snprintf(path, n, "%s/f-XXXXXX", w->dir);
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	return fd;
}

/* main() has checked that io_uring works here. */
static struct folio_engine *uring_new(int fd, unsigned depth, unsigned flags)
{
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_uring(&e, fd, depth, flags), 0);
	assert_non_null(e);
	return e;
}

static void *aligned(size_t len)
{
	void *p = aligned_alloc(4096, len);
	assert_non_null(p);
	return p;
}

/* ---- tests ---------------------------------------------------------- */

static void test_round_trip(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	struct folio_engine *e = uring_new(fd, 8, 0);
	enum { LEN = 300000 };
	char *in = xmalloc(LEN), *out = xmalloc(LEN);
	fill(in, LEN, 1);

	struct tio t;
	tio_prep(&t, FOLIO_IO_WRITE, 12345, in, LEN, 5, 0);
	assert_int_equal(eng_submit(e, &t), 0);
	/* Batched: nothing happens until unplug, and completions are only
	 * delivered by a reaper. */
	assert_int_equal(done(&t), 0);
	assert_int_equal(eng_unplug(e), 0);
	assert_int_equal(done(&t), 0);
	wait_all(e, &t, 1);
	assert_int_equal(atomic_load(&t.result), LEN);
	tio_free(&t);
	assert_int_equal(eng_wait(e), 0); /* nothing in flight */

	memset(out, 0, LEN);
	assert_int_equal(pread(fd, out, LEN, 12345), LEN);
	assert_memory_equal(in, out, LEN);
	memset(out, 0xee, LEN);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 12345, out, LEN, 7, 0), LEN);
	assert_memory_equal(in, out, LEN);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, out, 12345, 1, 0), 12345);
	assert_true(all_bytes(out, 12345, 0));
	/* Zero-length requests complete at once. */
	tio_prep(&t, FOLIO_IO_WRITE, 0, out, 0, 0, 0);
	assert_int_equal(eng_submit(e, &t), 0);
	assert_int_equal(done(&t), 1);
	assert_int_equal(atomic_load(&t.result), 0);
	tio_free(&t);
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
	close(fd);
	unlink(path);
}

/* 1000 requests through a 32-entry ring: the SQ fills (submit() then
 * submits), the admission limit is hit (the rest waits in the engine) and
 * everything still completes. */
static void test_many_in_flight(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	uint64_t seed = test_seed("many_in_flight");
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	struct folio_engine *e = uring_new(fd, 32, 0);
	const int n = (int)test_iters(1000, 200);
	const size_t bs = 4096;
	char *in = xmalloc((size_t)n * bs), *out = xmalloc((size_t)n * bs);
	struct tio *t = calloc((size_t)n, sizeof(*t));
	int *perm = xmalloc((size_t)n * sizeof(int));
	assert_non_null(in);
	assert_non_null(out);
	assert_non_null(t);
	assert_non_null(perm);
	fill(in, (size_t)n * bs, seed);
	for (int i = 0; i < n; i++)
		perm[i] = i;
	for (int i = n - 1; i > 0; i--) {
		int j = (int)test_rand_below(&seed, (uint64_t)i + 1), x = perm[i];
		perm[i] = perm[j];
		perm[j] = x;
	}
	for (int k = 0; k < n; k++) {
		int i = perm[k];
		tio_prep(&t[k], FOLIO_IO_WRITE, (uint64_t)i * bs, in + i * bs,
			 bs, 1 + k % 4, 0);
		assert_int_equal(eng_submit(e, &t[k]), 0);
	}
	int early = 0;
	for (int k = 0; k < n; k++)
		early += done(&t[k]);
	assert_int_equal(early, 0); /* submit() never delivers completions */
	assert_int_equal(eng_unplug(e), 0);
	wait_all(e, t, n);
	for (int k = 0; k < n; k++) {
		assert_int_equal(atomic_load(&t[k].result), (long)bs);
		tio_free(&t[k]);
	}
	assert_int_equal(pread(fd, out, (size_t)n * bs, 0), (long)((size_t)n * bs));
	assert_memory_equal(in, out, (size_t)n * bs);

	memset(out, 0, (size_t)n * bs);
	for (int k = 0; k < n; k++) {
		int i = perm[k];
		tio_prep(&t[k], FOLIO_IO_READ, (uint64_t)i * bs, out + i * bs,
			 bs, 1 + k % 3, 0);
		assert_int_equal(eng_submit(e, &t[k]), 0);
		if (k % 100 == 99)
			assert_int_equal(eng_unplug(e), 0);
	}
	assert_int_equal(eng_unplug(e), 0);
	wait_all(e, t, n);
	for (int k = 0; k < n; k++) {
		assert_int_equal(atomic_load(&t[k].result), (long)bs);
		tio_free(&t[k]);
	}
	assert_memory_equal(in, out, (size_t)n * bs);
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
	free(t);
	free(perm);
	close(fd);
	unlink(path);
}

static void test_read_past_eof(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	struct folio_engine *e = uring_new(fd, 4, 0);
	char data[1000], buf[8192];
	fill(data, sizeof(data), 3);
	assert_int_equal(pwrite(fd, data, sizeof(data), 0), (long)sizeof(data));
	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, buf, sizeof(buf), 3, 0),
			 (long)sizeof(buf));
	assert_memory_equal(buf, data, sizeof(data));
	assert_true(all_bytes(buf + 1000, sizeof(buf) - 1000, 0));
	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(do_io(e, FOLIO_IO_READ, 1 << 20, buf, sizeof(buf), 4,
			       0), (long)sizeof(buf));
	assert_true(all_bytes(buf, sizeof(buf), 0));
	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(do_io(e, FOLIO_IO_READ, 500, buf, sizeof(buf), 300,
			       77), (long)sizeof(buf));
	assert_memory_equal(buf, data + 500, 500);
	assert_true(all_bytes(buf + 500, sizeof(buf) - 500, 0));
	assert_int_equal(folio_engine_free(e), 0);
	close(fd);
	unlink(path);
}

/* More segments than one SQE takes (IOV_MAX): the engine resubmits the
 * rest as it does after any short transfer. */
static void test_many_segments(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	uint64_t seed = test_seed("uring_many_segments");
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	struct folio_engine *e = uring_new(fd, 4, 0);
	enum { LEN = 200000 };
	char *in = xmalloc(LEN), *out = xmalloc(LEN);
	fill(in, LEN, seed);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 4096, in, LEN, 2500,
			       test_rand(&seed)), LEN);
	memset(out, 0, LEN);
	assert_int_equal(pread(fd, out, LEN, 4096), LEN);
	assert_memory_equal(in, out, LEN);
	memset(out, 0xee, LEN);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 4096, out, LEN, 3000,
			       test_rand(&seed)), LEN);
	assert_memory_equal(in, out, LEN);
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

/* RLIMIT_FSIZE forces a short write; the engine resubmits the rest, gets
 * EFBIG and reports the bytes it wrote. */
static void test_short_write(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	struct folio_engine *e = uring_new(fd, 4, 0);
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
	assert_int_equal(r2, -EFBIG);
	assert_int_equal(pread(fd, chk, sizeof(chk), 0), 10000);
	assert_memory_equal(chk, buf, 10000);
	assert_int_equal(folio_engine_free(e), 0);
	close(fd);
	unlink(path);
}

/* flush() waits for the writes submitted before it (delivering their
 * completions), then fsyncs. truncate() waits for everything. */
static void test_flush_truncate(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	for (int thread = 0; thread < 2; thread++) {
		struct folio_engine *e = uring_new(
			fd, 8, thread ? FOLIO_URING_COMPLETION_THREAD : 0);
		enum { N = 64, BS = 8192 };
		char *in = xmalloc(N * BS);
		struct tio t[N];
		fill(in, N * BS, 6 + (uint64_t)thread);
		for (int i = 0; i < N; i++) {
			tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * BS,
				 in + i * BS, BS, 2, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		/* None unplugged yet: flush must still cover them. The data
		 * is in the file when flush returns; the completions may
		 * still be on their way from the completion thread. */
		assert_int_equal(e->ops.flush(folio_engine_ctx(e)), 0);
		char *chk = xmalloc(N * BS);
		assert_int_equal(pread(fd, chk, N * BS, 0), N * BS);
		assert_memory_equal(chk, in, N * BS);
		if (!thread)
			for (int i = 0; i < N; i++)
				assert_int_equal(done(&t[i]), 1);
		wait_all(e, t, N);
		for (int i = 0; i < N; i++) {
			assert_int_equal(atomic_load(&t[i].result), BS);
			tio_free(&t[i]);
		}

		for (int i = 0; i < N; i++) {
			tio_prep(&t[i], FOLIO_IO_READ, (uint64_t)i * BS,
				 chk + i * BS, BS, 1, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		assert_int_equal(e->ops.truncate(folio_engine_ctx(e), 5000), 0);
		if (!thread)
			for (int i = 0; i < N; i++)
				assert_int_equal(done(&t[i]), 1);
		wait_all(e, t, N);
		for (int i = 0; i < N; i++) {
			/* Read before the truncate: the old contents. */
			assert_int_equal(atomic_load(&t[i].result), BS);
			tio_free(&t[i]);
		}
		assert_memory_equal(chk, in, N * BS);
		struct stat st;
		assert_int_equal(fstat(fd, &st), 0);
		assert_int_equal(st.st_size, 5000);
		assert_int_equal(e->ops.truncate(folio_engine_ctx(e), 100000), 0);
		assert_int_equal(fstat(fd, &st), 0);
		assert_int_equal(st.st_size, 100000);
		memset(chk, 0xaa, 20000);
		assert_int_equal(do_io(e, FOLIO_IO_READ, 0, chk, 20000, 1, 0),
				 20000);
		assert_memory_equal(chk, in, 5000);
		assert_true(all_bytes(chk + 5000, 15000, 0));
		assert_int_equal(e->ops.truncate(folio_engine_ctx(e),
						 (UINT64_C(1) << 62) + 1),
				 -EINVAL);
		assert_int_equal(e->ops.flush(folio_engine_ctx(e)), 0);
		assert_int_equal(folio_engine_free(e), 0);
		free(in);
		free(chk);
	}
	close(fd);
	unlink(path);
}

static void test_completion_thread(void **state)
{
	struct where *w = where_of(state);
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	struct folio_engine *e = uring_new(fd, 16,
					   FOLIO_URING_COMPLETION_THREAD);
	const int n = (int)test_iters(500, 100);
	const size_t bs = 4096;
	char *in = xmalloc((size_t)n * bs), *out = xmalloc((size_t)n * bs);
	struct tio *t = calloc((size_t)n, sizeof(*t));
	fill(in, (size_t)n * bs, 8);
	for (int i = 0; i < n; i++) {
		tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * bs, in + i * bs,
			 bs, 2, 0);
		assert_int_equal(eng_submit(e, &t[i]), 0);
	}
	assert_int_equal(eng_unplug(e), 0);
	/* Nobody calls wait(): the engine's thread completes them. */
	struct timespec start, now, nap = {0, 1000000};
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (int i = 0; i < n; i++) {
		while (!done(&t[i])) {
			nanosleep(&nap, NULL);
			clock_gettime(CLOCK_MONOTONIC, &now);
			assert_true(now.tv_sec - start.tv_sec < 120);
		}
		assert_int_equal(atomic_load(&t[i].result), (long)bs);
		tio_free(&t[i]);
	}
	assert_int_equal(eng_wait(e), 0);
	assert_int_equal(pread(fd, out, (size_t)n * bs, 0), (long)((size_t)n * bs));
	assert_memory_equal(in, out, (size_t)n * bs);
	/* wait() still works in this mode: it sleeps until progress. */
	memset(out, 0, (size_t)n * bs);
	for (int i = 0; i < n; i++) {
		tio_prep(&t[i], FOLIO_IO_READ, (uint64_t)i * bs, out + i * bs,
			 bs, 1, 0);
		assert_int_equal(eng_submit(e, &t[i]), 0);
	}
	wait_all(e, t, n); /* wait() submits what is queued */
	for (int i = 0; i < n; i++)
		tio_free(&t[i]);
	assert_memory_equal(in, out, (size_t)n * bs);
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
	free(t);
	close(fd);
	unlink(path);
}

/* Several threads submit and wait() at once on one engine. */
#define TH_N 4
#define TH_BURST 24

struct th_arg {
	struct folio_engine *e;
	int fd;
	int id;
	unsigned iters;
	uint64_t seed;
	int errors;
};

static void *th_main(void *p)
{
	struct th_arg *a = p;
	uint64_t seed = a->seed;
	struct tio *t = calloc(TH_BURST, sizeof(*t));
	char *buf = xmalloc(TH_BURST * 8192), *chk = xmalloc(8192);
	if (!t || !buf || !chk) {
		a->errors++;
		goto out;
	}
	uint64_t base = (uint64_t)a->id << 24;
	for (unsigned i = 0; i < a->iters; i += TH_BURST) {
		size_t len[TH_BURST];
		for (int k = 0; k < TH_BURST; k++) {
			len[k] = 1 + test_rand_below(&seed, 8192);
			fill(buf + k * 8192, len[k], test_rand(&seed));
			tio_prep(&t[k], FOLIO_IO_WRITE, base + (uint64_t)k * 8192,
				 buf + k * 8192, len[k], 1 + k % 3, 0);
			if (eng_submit(a->e, &t[k]))
				a->errors++;
			if (test_rand_below(&seed, 8) == 0 && eng_unplug(a->e))
				a->errors++;
		}
		if (eng_unplug(a->e))
			a->errors++;
		for (int k = 0; k < TH_BURST; k++) {
			while (!done(&t[k]))
				if (eng_wait(a->e))
					a->errors++;
			if (atomic_load(&t[k].result) != (long)len[k])
				a->errors++;
			tio_free(&t[k]);
		}
		for (int k = 0; k < TH_BURST; k++) {
			if (pread(a->fd, chk, len[k],
				  (off_t)(base + (uint64_t)k * 8192)) !=
				    (ssize_t)len[k] ||
			    memcmp(chk, buf + k * 8192, len[k]))
				a->errors++;
		}
	}
out:
	free(t);
	free(buf);
	free(chk);
	return NULL;
}

static void run_threads(unsigned flags, const char *name)
{
	struct where *w = any_where();
	if (!w)
		return;
	uint64_t seed = test_seed(name);
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	struct folio_engine *e = uring_new(fd, 8, flags);
	pthread_t th[TH_N];
	struct th_arg a[TH_N];
	for (int i = 0; i < TH_N; i++) {
		a[i] = (struct th_arg){.e = e, .fd = fd, .id = i,
				       .iters = test_iters(480, 48),
				       .seed = seed + (uint64_t)i * 31};
		assert_int_equal(pthread_create(&th[i], NULL, th_main, &a[i]),
				 0);
	}
	for (int i = 0; i < TH_N; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(a[i].errors, 0);
	}
	assert_int_equal(folio_engine_free(e), 0);
	close(fd);
	unlink(path);
}

static void test_threads(void **state)
{
	run_threads(0, "uring_threads");
}

static void test_threads_completion_thread(void **state)
{
	run_threads(FOLIO_URING_COMPLETION_THREAD, "uring_threads_ct");
}

/* A completion that submits the next request (the engine must not hold
 * a lock while completing). */
struct chain {
	struct folio_engine *e;
	struct tio t[32];
	char buf[32][512];
	int n;
	atomic_int next;
	atomic_int hooked;
	atomic_int failed;
};

static void chain_hook(struct tio *t)
{
	struct chain *ch = t->arg;
	int next = atomic_fetch_add(&ch->next, 1);
	if (next < ch->n) {
		struct tio *nt = &ch->t[next];
		tio_prep(nt, FOLIO_IO_WRITE, (uint64_t)next * 512,
			 ch->buf[next], 512, 1, 0);
		nt->hook = chain_hook;
		nt->arg = ch;
		if (eng_submit(ch->e, nt) || eng_unplug(ch->e))
			atomic_fetch_add(&ch->failed, 1);
	}
	atomic_fetch_add(&ch->hooked, 1);
}

static void test_reentrant_submit(void **state)
{
	struct where *w = any_where();
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	for (int thread = 0; thread < 2; thread++) {
		struct chain *ch = calloc(1, sizeof(*ch));
		assert_non_null(ch);
		ch->e = uring_new(fd, 2,
				  thread ? FOLIO_URING_COMPLETION_THREAD : 0);
		ch->n = 32;
		for (int i = 0; i < ch->n; i++)
			fill(ch->buf[i], 512, (uint64_t)i + 50);
		atomic_store(&ch->next, 1);
		tio_prep(&ch->t[0], FOLIO_IO_WRITE, 0, ch->buf[0], 512, 1, 0);
		ch->t[0].hook = chain_hook;
		ch->t[0].arg = ch;
		assert_int_equal(eng_submit(ch->e, &ch->t[0]), 0);
		assert_int_equal(eng_unplug(ch->e), 0);
		while (atomic_load(&ch->hooked) < ch->n)
			assert_int_equal(eng_wait(ch->e), 0);
		/* Freeing waits for the last completion to return. */
		assert_int_equal(folio_engine_free(ch->e), 0);
		assert_int_equal(atomic_load(&ch->failed), 0);
		for (int i = 0; i < ch->n; i++) {
			char chk[512];
			assert_int_equal(done(&ch->t[i]), 1);
			assert_int_equal(atomic_load(&ch->t[i].result), 512);
			tio_free(&ch->t[i]);
			assert_int_equal(pread(fd, chk, 512, i * 512), 512);
			assert_memory_equal(chk, ch->buf[i], 512);
		}
		free(ch);
	}
	close(fd);
	unlink(path);
}

/* wait() inside a completion must not wait for that very request. */
static atomic_int hook_ret;

static void wait_hook(struct tio *t)
{
	struct folio_engine *e = t->arg;
	atomic_store(&hook_ret, eng_wait(e));
}

static void test_wait_in_completion(void **state)
{
	struct where *w = any_where();
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	for (int thread = 0; thread < 2; thread++) {
		struct folio_engine *e = uring_new(
			fd, 4, thread ? FOLIO_URING_COMPLETION_THREAD : 0);
		char buf[512] = {0};
		struct tio t;
		tio_prep(&t, FOLIO_IO_WRITE, 0, buf, 512, 1, 0);
		t.hook = wait_hook;
		t.arg = e;
		atomic_store(&hook_ret, 1);
		assert_int_equal(eng_submit(e, &t), 0);
		assert_int_equal(eng_unplug(e), 0);
		wait_all(e, &t, 1);
		assert_int_equal(atomic_load(&hook_ret), 0);
		tio_free(&t);
		assert_int_equal(folio_engine_free(e), 0);
	}
	close(fd);
	unlink(path);
}

/* Freeing the engine completes everything first, even requests that were
 * only queued. */
static void test_destroy_in_flight(void **state)
{
	struct where *w = any_where();
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	for (int thread = 0; thread < 2; thread++) {
		struct folio_engine *e = uring_new(
			fd, 4, thread ? FOLIO_URING_COMPLETION_THREAD : 0);
		enum { N = 100 };
		struct tio t[N];
		static char buf[N][4096];
		for (int i = 0; i < N; i++) {
			fill(buf[i], 4096, (uint64_t)i + 9);
			tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 4096,
				 buf[i], 4096, 1, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
			if (i == N / 2)
				assert_int_equal(eng_unplug(e), 0);
		}
		assert_int_equal(folio_engine_free(e), 0);
		for (int i = 0; i < N; i++) {
			assert_int_equal(done(&t[i]), 1);
			assert_int_equal(atomic_load(&t[i].result), 4096);
			tio_free(&t[i]);
		}
	}
	close(fd);
	unlink(path);
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
	fill(in, LEN, 10);
	for (int pass = 0; pass < 2; pass++) {
		struct folio_engine *e =
			uring_new(fd, 8, pass ? 0 : FOLIO_ENGINE_DIRECT);
		assert_int_equal(do_io(e, FOLIO_IO_WRITE, 8192, in, LEN, 4, 0),
				 LEN);
		memset(out, 0, LEN);
		assert_int_equal(do_io(e, FOLIO_IO_READ, 8192, out, LEN, 16, 0),
				 LEN);
		assert_memory_equal(in, out, LEN);
		struct tio t;
		tio_prep(&t, FOLIO_IO_READ, 8192 + 512 + 1, out, 4096, 1, 0);
		assert_int_equal(eng_submit(e, &t), -EINVAL);
		tio_free(&t);
		tio_prep(&t, FOLIO_IO_READ, 8192, out, 4000, 1, 0);
		assert_int_equal(eng_submit(e, &t), -EINVAL);
		tio_free(&t);
		tio_prep(&t, FOLIO_IO_WRITE, 8192, out + 512 + 1, 4096, 1, 0);
		assert_int_equal(eng_submit(e, &t), -EINVAL);
		assert_int_equal(done(&t), 0);
		tio_free(&t);
		assert_int_equal(ftruncate(tfd, 8192 + 1000), 0);
		memset(out, 0xaa, LEN);
		assert_int_equal(do_io(e, FOLIO_IO_READ, 8192, out, LEN, 2, 0),
				 LEN);
		assert_memory_equal(out, in, 1000);
		assert_true(all_bytes(out + 1000, LEN - 1000, 0));
		assert_int_equal(e->ops.flush(folio_engine_ctx(e)), 0);
		assert_int_equal(folio_engine_free(e), 0);
	}
	free(in);
	free(out);
	close(fd);
	close(tfd);
	unlink(path);
}

static void test_errors(void **state)
{
	struct where *w = any_where();
	if (!w)
		return;
	char buf[100] = {0};
	/* Reading a directory: EISDIR in the CQE. */
	int dfd = open(w->dir, O_RDONLY | O_DIRECTORY);
	assert_true(dfd >= 0);
	struct folio_engine *e = uring_new(dfd, 2, 0);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, buf, sizeof(buf), 1, 0),
			 -EISDIR);
	assert_int_equal(folio_engine_free(e), 0);
	close(dfd);
	/* Writing through a read-only fd: EBADF. */
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	int ro = open(path, O_RDONLY);
	assert_true(ro >= 0);
	e = uring_new(ro, 2, 0);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 0, buf, sizeof(buf), 1, 0),
			 -EBADF);
	assert_int_equal(folio_engine_free(e), 0);
	close(ro);
	close(fd);
	unlink(path);
}

static void test_depths(void **state)
{
	struct where *w = any_where();
	if (!w)
		return;
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	unsigned depths[] = {1, 3, 4096};
	for (size_t d = 0; d < 3; d++) {
		struct folio_engine *e = uring_new(fd, depths[d], 0);
		enum { N = 20 };
		struct tio t[N];
		static char buf[N][1000];
		for (int i = 0; i < N; i++) {
			fill(buf[i], 1000, (uint64_t)i + 11 * d);
			tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 1000,
				 buf[i], 1000, 1, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		assert_int_equal(eng_unplug(e), 0);
		wait_all(e, t, N);
		for (int i = 0; i < N; i++) {
			char chk[1000];
			assert_int_equal(atomic_load(&t[i].result), 1000);
			tio_free(&t[i]);
			assert_int_equal(pread(fd, chk, 1000, i * 1000), 1000);
			assert_memory_equal(chk, buf[i], 1000);
		}
		assert_int_equal(folio_engine_free(e), 0);
	}
	close(fd);
	unlink(path);
}

/* A ring of one entry (two in the kernel at once) with long vectors that
 * need resubmitting while the ring is full, writes and reads mixed, and a
 * flush that has to wait for room for its fsync. */
static void test_tiny_ring(void **state)
{
	struct where *w = any_where();
	if (!w)
		return;
	uint64_t seed = test_seed("tiny_ring");
	char path[300];
	int fd = tmpfile_in(w, path, sizeof(path));
	struct folio_engine *e = uring_new(fd, 1, 0);
	enum { N = 6, LEN = 40000 };
	char *in = xmalloc(N * LEN), *out = xmalloc(N * LEN);
	fill(in, N * LEN, seed);
	assert_int_equal(pwrite(fd, in, N * LEN, 0), N * LEN);
	memset(out, 0, N * LEN);
	struct tio r[N], wt[N];
	/* Writes first: the reads behind them fill the ring by the time
	 * the flush wants a slot. */
	for (int i = 0; i < N; i++) {
		tio_prep(&wt[i], FOLIO_IO_WRITE, (uint64_t)(N + i) * LEN,
			 in + i * LEN, LEN, 1100, test_rand(&seed));
		assert_int_equal(eng_submit(e, &wt[i]), 0);
	}
	for (int i = 0; i < N; i++) {
		tio_prep(&r[i], FOLIO_IO_READ, (uint64_t)i * LEN, out + i * LEN,
			 LEN, 1500, test_rand(&seed));
		assert_int_equal(eng_submit(e, &r[i]), 0);
	}
	assert_int_equal(e->ops.flush(folio_engine_ctx(e)), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(done(&wt[i]), 1);
	wait_all(e, r, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(atomic_load(&r[i].result), LEN);
		assert_int_equal(atomic_load(&wt[i].result), LEN);
		tio_free(&r[i]);
		tio_free(&wt[i]);
	}
	assert_memory_equal(in, out, N * LEN);
	assert_int_equal(pread(fd, out, N * LEN, N * LEN), N * LEN);
	assert_memory_equal(in, out, N * LEN);
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
	close(fd);
	unlink(path);
}

static void test_bad_input(void **state)
{
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_uring(NULL, 0, 8, 0), -EINVAL);
	assert_int_equal(folio_engine_uring(&e, -1, 8, 0), -EINVAL);
	assert_int_equal(folio_engine_uring(&e, 0, 0, 0), -EINVAL);
	assert_int_equal(folio_engine_uring(&e, 0, 4097, 0), -EINVAL);
	assert_int_equal(folio_engine_uring(&e, 0, 8, 0x80), -EINVAL);
	assert_null(e);
	int fd = dup(STDERR_FILENO);
	assert_true(fd >= 0);
	close(fd);
	int ret = folio_engine_uring(&e, fd, 8, 0);
	assert_true(ret == -EBADF || ret == -ENOSYS);
	assert_null(e);

	e = uring_new(STDERR_FILENO, 8, 0);
	char buf[16] = {0};
	struct tio t;
	assert_int_equal(e->ops.submit(folio_engine_ctx(e), NULL), -EINVAL);
	tio_prep(&t, FOLIO_IO_READ, 0, buf, 16, 2, 0);
	t.rq.io.op = (enum folio_io_op)3;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	t.rq.io.op = FOLIO_IO_READ;
	t.rq.io.len = 15;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	t.rq.io.len = 16;
	t.rq.io.pos = UINT64_MAX - 1;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	assert_int_equal(done(&t), 0);
	tio_free(&t);
	assert_int_equal(eng_wait(e), 0);
	assert_int_equal(folio_engine_mem_poke(e, buf, 1, 0), -EINVAL);
	assert_int_equal(folio_engine_free(e), 0);
}

#define ON_BOTH(f)                                       \
	{#f "_disk", f, NULL, NULL, &disk},              \
	{#f "_shm", f, NULL, NULL, &shm}

/*
 * Where io_uring is refused (old kernel, seccomp or a sysctl in a sandbox,
 * a valgrind that does not know the syscalls, or a build without liburing)
 * the whole program is skipped with a TAP "1..0 # SKIP" plan, which meson
 * reports as skipped.
 */
static int uring_unavailable(void)
{
	int fd = open("/dev/null", O_RDWR);
	if (fd < 0)
		return -errno;
	struct folio_engine *e = NULL;
	int ret = folio_engine_uring(&e, fd, 4, 0);
	if (!ret)
		folio_engine_free(e);
	close(fd);
	return ret;
}

int main(void)
{
	int ret = uring_unavailable();
	if (ret) {
		printf("1..0 # SKIP io_uring unavailable: %s\n", strerror(-ret));
		return 0;
	}
	const struct CMUnitTest tests[] = {
		ON_BOTH(test_round_trip),
		ON_BOTH(test_many_in_flight),
		ON_BOTH(test_read_past_eof),
		ON_BOTH(test_many_segments),
		ON_BOTH(test_short_write),
		ON_BOTH(test_flush_truncate),
		ON_BOTH(test_completion_thread),
		ON_BOTH(test_direct),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_threads_completion_thread),
		cmocka_unit_test(test_reentrant_submit),
		cmocka_unit_test(test_wait_in_completion),
		cmocka_unit_test(test_destroy_in_flight),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_depths),
		cmocka_unit_test(test_tiny_ring),
		cmocka_unit_test(test_bad_input),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
