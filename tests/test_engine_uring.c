/* SPDX-License-Identifier: MIT */
/*
 * Tests of the io_uring engine on real files. What it shares with the posix
 * engine is tested by engine_test_util.c; here is what is its own: many
 * requests in flight through small rings, the completion thread, several
 * threads submitting and waiting at once (more than it has rings, across a
 * file-size limit), requests whose submitter never waits, completions that
 * submit or wait, a lone FOLIO_IO_WAITED request held out of the ring, and
 * freeing with requests in flight. Where io_uring is unavailable the
 * whole program is skipped (see main()).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "engine_test_util.h"
#include "test_util.h"

/* main() has checked that io_uring works here. */
static struct folio_engine *uring_new(int fd, unsigned depth, unsigned flags)
{
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_uring(&e, fd, depth, flags), 0);
	assert_non_null(e);
	return e;
}

static struct folio_engine *uring_new_default(int fd, unsigned flags)
{
	return uring_new(fd, 8, flags);
}

static int uring_try(struct folio_engine **out, int fd, unsigned flags)
{
	return folio_engine_uring(out, fd, 8, flags);
}

static const struct file_engine uring_engine = {
	.name = "uring",
	.create = uring_new_default,
	.try_create = uring_try,
	.completion_thread_flag = FOLIO_URING_COMPLETION_THREAD,
	.waited_barrier_is_fdatasync = true,
};

static bool file_holds(int fd, uint64_t pos, const char *buf)
{
	char chk[4096];
	return pread(fd, chk, 4096, (off_t)pos) == 4096 &&
	       !memcmp(chk, buf, 4096);
}

/* Poll until the file holds buf at pos, without calling the engine: the
 * kernel must have the write. Fails after about 10 s. */
static void await_file(int fd, uint64_t pos, const char *buf)
{
	for (int polls = 0; !file_holds(fd, pos, buf); polls++) {
		assert_true(polls < 500000);
		struct timespec ts = {0, 20000};
		nanosleep(&ts, NULL);
	}
}

/* 1000 requests through a 32-entry ring: the SQ fills (submit() then
 * submits), the admission limit is hit (the rest waits in the engine) and
 * everything still completes. Until the limit, submit() delivers no
 * completion; beyond it, submit() itself reaps what has completed and lets
 * the backlog in, so the requests keep moving before anyone waits. */
static void test_many_in_flight(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	uint64_t seed = test_seed("many_in_flight");
	struct folio_engine *e = uring_new(f.fd, 32, 0);
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
	memset(out, 0, (size_t)n * bs);
	assert_int_equal(pwrite(f.fd, out, (size_t)n * bs, 0),
			 (long)((size_t)n * bs));
	for (int i = 0; i < n; i++)
		perm[i] = i;
	for (int i = n - 1; i > 0; i--) {
		int j = (int)test_rand_below(&seed, (uint64_t)i + 1), x = perm[i];
		perm[i] = perm[j];
		perm[j] = x;
	}
	/* The ring's admission limit: its CQ entries. */
	const int limit = 2 * 32;
	int early = 0;
	for (int k = 0; k < n; k++) {
		int i = perm[k];
		tio_prep(&t[k], FOLIO_IO_WRITE, (uint64_t)i * bs, in + i * bs,
			 bs, 1 + k % 4, 0);
		assert_int_equal(eng_submit(e, &t[k]), 0);
		if (k + 1 == limit) {
			for (int j = 0; j <= k; j++)
				early += tio_done(&t[j]);
			assert_int_equal(early, 0);
			/* Let the first write finish in the kernel, which
			 * may run it on a worker thread (tmpfs does not
			 * take writes without blocking). */
			await_file(f.fd, (uint64_t)perm[0] * bs,
				   in + (size_t)perm[0] * bs);
			struct timespec ts = {0, 2000000};
			nanosleep(&ts, NULL);
		}
	}
	for (int k = 0; k < n; k++)
		early += tio_done(&t[k]);
	/* The first write had completed when the next submit() found the
	 * ring full and reaped. */
	assert_true(early > 0);
	assert_int_equal(eng_unplug(e), 0);
	wait_all(e, t, n);
	for (int k = 0; k < n; k++) {
		assert_int_equal(atomic_load(&t[k].result), (long)bs);
		tio_free(&t[k]);
	}
	assert_int_equal(pread(f.fd, out, (size_t)n * bs, 0),
			 (long)((size_t)n * bs));
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
	tfile_close(&f);
}

static void test_completion_thread(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	struct folio_engine *e = uring_new(f.fd, 16,
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
		while (!tio_done(&t[i])) {
			nanosleep(&nap, NULL);
			clock_gettime(CLOCK_MONOTONIC, &now);
			assert_true(now.tv_sec - start.tv_sec < 120);
		}
		assert_int_equal(atomic_load(&t[i].result), (long)bs);
		tio_free(&t[i]);
	}
	assert_int_equal(eng_wait(e), 0);
	assert_int_equal(pread(f.fd, out, (size_t)n * bs, 0),
			 (long)((size_t)n * bs));
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
	tfile_close(&f);
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
			while (!tio_done(&t[k]))
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
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	uint64_t seed = test_seed(name);
	struct folio_engine *e = uring_new(f.fd, 8, flags);
	pthread_t th[TH_N];
	struct th_arg a[TH_N];
	for (int i = 0; i < TH_N; i++) {
		a[i] = (struct th_arg){.e = e, .fd = f.fd, .id = i,
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
	tfile_close(&f);
}

static void test_threads(void **state)
{
	run_threads(0, "uring_threads");
}

static void test_threads_completion_thread(void **state)
{
	run_threads(FOLIO_URING_COMPLETION_THREAD, "uring_threads_ct");
}

/*
 * More threads than the engine has rings, so some share one, each writing
 * bursts across a file-size limit (RLIMIT_FSIZE): writes below it complete
 * whole, those crossing it come back short (the engine resubmits the rest,
 * which fails, and reports what was written), those past it fail with
 * -EFBIG; half the writes are FOLIO_IO_DURABLE, whose linked fsync such
 * writes cancel. Every burst ends with a flush, as concurrent syncers do.
 */
#define SE_THREADS 24
#define SE_SLOTS 12
#define SE_SLOT 8192

struct se_arg {
	struct folio_engine *e;
	int fd;
	int id;
	unsigned rounds;
	uint64_t limit;
	uint64_t seed;
	int errors;
};

static void *se_main(void *p)
{
	struct se_arg *a = p;
	uint64_t seed = a->seed;
	struct tio t[SE_SLOTS];
	char *buf = xmalloc(SE_SLOTS * SE_SLOT), *chk = xmalloc(SE_SLOT);
	for (unsigned round = 0; round < a->rounds; round++) {
		uint64_t pos[SE_SLOTS];
		size_t len[SE_SLOTS];
		for (int k = 0; k < SE_SLOTS; k++) {
			/* Slots interleave across threads, so every thread
			 * has some below, across and past the limit. */
			pos[k] = ((uint64_t)k * SE_THREADS + (uint64_t)a->id) *
				 SE_SLOT;
			len[k] = 1 + test_rand_below(&seed, SE_SLOT);
			fill(buf + k * SE_SLOT, len[k], test_rand(&seed));
			tio_prep(&t[k], FOLIO_IO_WRITE, pos[k],
				 buf + k * SE_SLOT, len[k], 1 + k % 3,
				 test_rand(&seed));
			/* Half durable: a linked fsync that a short or
			 * failed write cancels, with the same results. */
			if (test_rand(&seed) & 1)
				t[k].rq.io.flags = FOLIO_IO_DURABLE;
			if (eng_submit(a->e, &t[k]))
				a->errors++;
		}
		if (eng_unplug(a->e))
			a->errors++;
		for (int k = 0; k < SE_SLOTS; k++) {
			while (!tio_done(&t[k]))
				if (eng_wait(a->e))
					a->errors++;
			long want = pos[k] >= a->limit ? -EFBIG
				    : len[k] < a->limit - pos[k]
					    ? (long)len[k]
					    : (long)(a->limit - pos[k]);
			if (atomic_load(&t[k].result) != want)
				a->errors++;
			tio_free(&t[k]);
			if (want <= 0)
				continue;
			if (pread(a->fd, chk, (size_t)want, (off_t)pos[k]) !=
				    want ||
			    memcmp(chk, buf + k * SE_SLOT, (size_t)want))
				a->errors++;
		}
		if (eng_flush(a->e))
			a->errors++;
	}
	free(buf);
	free(chk);
	return NULL;
}

static void test_threads_short_errors(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	uint64_t seed = test_seed("uring_short_errors");
	struct folio_engine *e = uring_new(f.fd, 4, 0);
	/* Inside slot row SE_SLOTS / 2, not on a slot boundary. */
	uint64_t limit = (uint64_t)SE_SLOTS / 2 * SE_THREADS * SE_SLOT +
			 SE_THREADS / 2 * SE_SLOT + 1234;
	struct fsize_limit fl;
	fsize_limit_begin(&fl, limit);
	pthread_t th[SE_THREADS];
	struct se_arg a[SE_THREADS];
	for (int i = 0; i < SE_THREADS; i++) {
		a[i] = (struct se_arg){.e = e, .fd = f.fd, .id = i,
				       .rounds = test_iters(40, 6),
				       .limit = limit,
				       .seed = seed + (uint64_t)i * 131};
		assert_int_equal(pthread_create(&th[i], NULL, se_main, &a[i]),
				 0);
	}
	int errors = 0;
	for (int i = 0; i < SE_THREADS; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		errors += a[i].errors;
	}
	fsize_limit_end(&fl);
	assert_int_equal(errors, 0);
	assert_int_equal(folio_engine_free(e), 0);
	tfile_close(&f);
}

/*
 * Requests whose submitter never waits (it has gone): another thread's
 * wait() must still complete them, though they sit in a ring it does not
 * submit to.
 */
struct orphan_arg {
	struct folio_engine *e;
	struct tio *t;
	char *buf;
	int errors;
};

static void *orphan_main(void *p)
{
	struct orphan_arg *a = p;
	for (int k = 0; k < 8; k++) {
		tio_prep(&a->t[k], FOLIO_IO_WRITE, (uint64_t)k * 4096,
			 a->buf + k * 4096, 4096, 1, 0);
		if (eng_submit(a->e, &a->t[k]))
			a->errors++;
		/* Half unplugged, half left queued. */
		if (k == 3 && eng_unplug(a->e))
			a->errors++;
	}
	return NULL;
}

static void test_orphans(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	struct folio_engine *e = uring_new(f.fd, 4, 0);
	struct tio t[8];
	char *buf = xmalloc(8 * 4096), *chk = xmalloc(8 * 4096);
	fill(buf, 8 * 4096, 77);
	/* This thread has a ring of its own before the other submits. */
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 65536, buf, 4096, 1, 0),
			 4096);
	struct orphan_arg a = {.e = e, .t = t, .buf = buf};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, orphan_main, &a), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(a.errors, 0);
	wait_all(e, t, 8);
	for (int k = 0; k < 8; k++) {
		assert_int_equal(atomic_load(&t[k].result), 4096);
		tio_free(&t[k]);
	}
	assert_int_equal(pread(f.fd, chk, 8 * 4096, 0), 8 * 4096);
	assert_memory_equal(chk, buf, 8 * 4096);
	assert_int_equal(folio_engine_free(e), 0);
	free(buf);
	free(chk);
	tfile_close(&f);
}

/* Run `body` on an engine of a new file with queue depth `depth`, once
 * reaping in the submitting threads and once with a completion thread.
 * The body frees the engine (when is part of what it tests). */
static void in_both_modes(unsigned depth,
			  void (*body)(struct folio_engine *e, int fd))
{
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	for (int thread = 0; thread < 2; thread++)
		body(uring_new(f.fd, depth,
			       thread ? FOLIO_URING_COMPLETION_THREAD : 0),
		     f.fd);
	tfile_close(&f);
}

static void reentrant_submit(struct folio_engine *e, int fd)
{
	struct chain *ch = chain_run(e, 32, 50);
	assert_int_equal(folio_engine_free(e), 0);
	for (int i = 0; i < ch->n; i++) {
		char chk[512];
		assert_int_equal(pread(fd, chk, 512, i * 512), 512);
		assert_memory_equal(chk, ch->buf[i], 512);
	}
	chain_finish(ch);
}

static void test_reentrant_submit(void **state)
{
	in_both_modes(2, reentrant_submit);
}

static void wait_in_completion(struct folio_engine *e, int fd)
{
	(void)fd;
	check_wait_in_completion(e);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_wait_in_completion(void **state)
{
	in_both_modes(4, wait_in_completion);
}

/* Freeing the engine completes everything first, even requests that were
 * only queued. */
static void destroy_in_flight(struct folio_engine *e, int fd)
{
	(void)fd;
	enum { N = 100 };
	struct tio t[N];
	static char buf[N][4096];
	for (int i = 0; i < N; i++) {
		fill(buf[i], 4096, (uint64_t)i + 9);
		tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 4096, buf[i],
			 4096, 1, 0);
		assert_int_equal(eng_submit(e, &t[i]), 0);
		if (i == N / 2)
			assert_int_equal(eng_unplug(e), 0);
	}
	assert_int_equal(folio_engine_free(e), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(tio_done(&t[i]), 1);
		assert_int_equal(atomic_load(&t[i].result), 4096);
		tio_free(&t[i]);
	}
}

static void test_destroy_in_flight(void **state)
{
	in_both_modes(4, destroy_in_flight);
}

static void test_depths(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	unsigned depths[] = {1, 3, 4096};
	for (size_t d = 0; d < 3; d++) {
		struct folio_engine *e = uring_new(f.fd, depths[d], 0);
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
			assert_int_equal(pread(f.fd, chk, 1000, i * 1000), 1000);
			assert_memory_equal(chk, buf[i], 1000);
		}
		assert_int_equal(folio_engine_free(e), 0);
	}
	tfile_close(&f);
}

/* A ring of one entry (two in the kernel at once) with long vectors that
 * need resubmitting while the ring is full, writes and reads mixed, and a
 * flush that has to wait for room for its fsync. */
static void test_tiny_ring(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	uint64_t seed = test_seed("tiny_ring");
	struct folio_engine *e = uring_new(f.fd, 1, 0);
	enum { N = 6, LEN = 40000 };
	char *in = xmalloc(N * LEN), *out = xmalloc(N * LEN);
	fill(in, N * LEN, seed);
	assert_int_equal(pwrite(f.fd, in, N * LEN, 0), N * LEN);
	memset(out, 0, N * LEN);
	struct tio r[N], wt[N];
	/* Writes first: the reads behind them fill the ring by the time
	 * the flush wants a slot. */
	for (int i = 0; i < N; i++) {
		tio_prep(&wt[i], FOLIO_IO_WRITE, (uint64_t)(N + i) * LEN,
			 in + i * LEN, LEN, 1100, test_rand(&seed));
		/* A durable write's pair of SQEs is all a 1-entry ring's
		 * admission limit holds. */
		wt[i].rq.io.flags = i % 2 ? FOLIO_IO_DURABLE : 0;
		assert_int_equal(eng_submit(e, &wt[i]), 0);
	}
	for (int i = 0; i < N; i++) {
		tio_prep(&r[i], FOLIO_IO_READ, (uint64_t)i * LEN, out + i * LEN,
			 LEN, 1500, test_rand(&seed));
		assert_int_equal(eng_submit(e, &r[i]), 0);
	}
	assert_int_equal(eng_flush(e), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(tio_done(&wt[i]), 1);
	wait_all(e, r, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(atomic_load(&r[i].result), LEN);
		assert_int_equal(atomic_load(&wt[i].result), LEN);
		tio_free(&r[i]);
		tio_free(&wt[i]);
	}
	assert_memory_equal(in, out, N * LEN);
	assert_int_equal(pread(f.fd, out, N * LEN, N * LEN), N * LEN);
	assert_memory_equal(in, out, N * LEN);
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
	tfile_close(&f);
}

/* ---- FOLIO_IO_WAITED: a lone request held out of the ring ----------- */

struct lone_arg {
	struct folio_engine *e;
	struct tio *t;
};

/* Submit a lone waited write and leave without waiting for it. */
static void *lone_submitter(void *p)
{
	struct lone_arg *a = p;
	assert_int_equal(eng_submit(a->e, a->t), 0);
	assert_int_equal(eng_unplug(a->e), 0);
	return NULL;
}

/*
 * A lone FOLIO_IO_WAITED request stays out of the ring until a thread
 * would sleep for it: wait() then writes it in the calling thread. Every
 * other way the shard moves still gets it written: a second request
 * (both go to the kernel), the submitter's flush() and truncate(),
 * another thread's wait(), freeing the engine, and with the completion
 * thread the submitter's wait().
 */
static void test_waited_deferred(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	tio_main_thread = pthread_self();
	static char buf[9][4096];
	for (int i = 0; i < 9; i++)
		fill(buf[i], 4096, (uint64_t)i + 41);
	struct tio t[9];
	struct timespec settle = {0, 20000000};

	/* Alone: not in the kernel after unplug; wait() writes it here. */
	struct folio_engine *e = uring_new(f.fd, 8, 0);
	atomic_store(&tio_on_main, 0);
	tio_prep_waited(&t[0], 0, buf[0]);
	assert_int_equal(eng_submit(e, &t[0]), 0);
	assert_int_equal(eng_unplug(e), 0);
	nanosleep(&settle, NULL);
	assert_int_equal(tio_done(&t[0]), 0);
	assert_false(file_holds(f.fd, 0, buf[0]));
	assert_int_equal(eng_wait(e), 0);
	assert_int_equal(tio_done(&t[0]), 1);
	assert_int_equal(atomic_load(&t[0].result), 4096);
	assert_int_equal(atomic_load(&tio_on_main), 1);
	assert_true(file_holds(f.fd, 0, buf[0]));

	/* A second request behind it: both reach the kernel at unplug. */
	tio_prep_waited(&t[1], 4096, buf[1]);
	tio_prep_waited(&t[2], 8192, buf[2]);
	assert_int_equal(eng_submit(e, &t[1]), 0);
	assert_int_equal(eng_submit(e, &t[2]), 0);
	assert_int_equal(eng_unplug(e), 0);
	await_file(f.fd, 4096, buf[1]);
	await_file(f.fd, 8192, buf[2]);
	wait_all(e, &t[1], 2);

	/* The submitter's flush and truncate write it. */
	tio_prep_waited(&t[3], 12288, buf[3]);
	assert_int_equal(eng_submit(e, &t[3]), 0);
	assert_int_equal(eng_flush(e), 0);
	assert_int_equal(tio_done(&t[3]), 1);
	tio_prep_waited(&t[4], 16384, buf[4]);
	assert_int_equal(eng_submit(e, &t[4]), 0);
	assert_int_equal(eng_truncate(e, 65536), 0);
	assert_int_equal(tio_done(&t[4]), 1);

	/* Another thread's, which never waits: our wait() writes it. */
	atomic_store(&tio_on_main, 0);
	tio_prep_waited(&t[5], 20480, buf[5]);
	struct lone_arg a = {e, &t[5]};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, lone_submitter, &a), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(tio_done(&t[5]), 0);
	assert_int_equal(eng_wait(e), 0);
	assert_int_equal(tio_done(&t[5]), 1);
	assert_int_equal(atomic_load(&tio_on_main), 1);

	/* Freeing the engine writes it. */
	tio_prep_waited(&t[6], 24576, buf[6]);
	assert_int_equal(eng_submit(e, &t[6]), 0);
	assert_int_equal(folio_engine_free(e), 0);
	assert_int_equal(tio_done(&t[6]), 1);

	/* With the completion thread, wait() still writes it here. */
	e = uring_new(f.fd, 8, FOLIO_URING_COMPLETION_THREAD);
	atomic_store(&tio_on_main, 0);
	tio_prep_waited(&t[7], 28672, buf[7]);
	assert_int_equal(eng_submit(e, &t[7]), 0);
	assert_int_equal(eng_unplug(e), 0);
	nanosleep(&settle, NULL);
	assert_int_equal(tio_done(&t[7]), 0);
	assert_int_equal(eng_wait(e), 0);
	assert_int_equal(tio_done(&t[7]), 1);
	assert_int_equal(atomic_load(&tio_on_main), 1);
	/* A request without the hint goes to the ring as before. */
	tio_prep(&t[8], FOLIO_IO_WRITE, 32768, buf[8], 4096, 1, 0);
	assert_int_equal(eng_submit(e, &t[8]), 0);
	assert_int_equal(eng_unplug(e), 0);
	await_file(f.fd, 32768, buf[8]);
	wait_all(e, &t[8], 1);
	assert_int_equal(folio_engine_free(e), 0);

	for (int i = 1; i < 9; i++) {
		assert_int_equal(atomic_load(&t[i].result), 4096);
		assert_true(file_holds(f.fd, (uint64_t)i * 4096, buf[i]));
	}
	tfile_close(&f);
}

/* A completion hook that holds the thread delivering it until released. */
static atomic_bool in_held_completion, release_completion;

static void hold_in_completion(struct tio *t)
{
	(void)t;
	atomic_store(&in_held_completion, true);
	await_flag(&release_completion, true);
}

static void *waited_writer(void *p)
{
	struct lone_arg *a = p;
	assert_int_equal(eng_submit(a->e, a->t), 0);
	assert_int_equal(eng_wait(a->e), 0); /* transfers it inline */
	return NULL;
}

/*
 * What wait() tells a thread with nothing of its own in flight: while
 * another thread completes a request inline (nothing any ring needs
 * polled for), FOLIO_ENGINE_WAIT_IDLE, so the library sleeps with no
 * short timeout (engine_wait_until()); while a request sits in another
 * shard's ring with nobody reaping it, 0 after reaping it, as before; and
 * with nothing in flight at all, 0.
 */
static void test_wait_idle_only_when_unpolled(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	static char buf[2][4096];
	fill(buf[0], 4096, 5);
	fill(buf[1], 4096, 6);
	struct folio_engine *e = uring_new(f.fd, 8, 0);
	assert_int_equal(eng_wait(e), 0);

	/* Another thread's write, held in its completion. */
	struct tio t[2];
	tio_prep(&t[0], FOLIO_IO_WRITE, 0, buf[0], 4096, 1, 0);
	t[0].rq.io.flags = FOLIO_IO_WAITED;
	t[0].hook = hold_in_completion;
	atomic_store(&in_held_completion, false);
	atomic_store(&release_completion, false);
	struct lone_arg a = {e, &t[0]};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, waited_writer, &a), 0);
	await_flag(&in_held_completion, true);
	assert_int_equal(eng_wait(e), FOLIO_ENGINE_WAIT_IDLE);
	atomic_store(&release_completion, true);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(atomic_load(&t[0].result), 4096);

	/* Another thread's write in its ring, which it never reaps: this
	 * thread's wait() must keep polling for it. */
	tio_prep(&t[1], FOLIO_IO_WRITE, 4096, buf[1], 4096, 1, 0);
	a.t = &t[1];
	assert_int_equal(pthread_create(&th, NULL, lone_submitter, &a), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	while (!tio_done(&t[1]))
		assert_int_equal(eng_wait(e), 0);
	assert_int_equal(atomic_load(&t[1].result), 4096);
	assert_int_equal(eng_wait(e), 0);

	assert_int_equal(folio_engine_free(e), 0);
	for (int i = 0; i < 2; i++) {
		assert_true(file_holds(f.fd, (uint64_t)i * 4096, buf[i]));
		tio_free(&t[i]);
	}
	tfile_close(&f);
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
}

/*
 * Where io_uring is refused (old kernel, seccomp or a sysctl in a sandbox,
 * a valgrind that does not know the syscalls, or a build without liburing)
 * the whole program is skipped with a TAP "1..0 # SKIP" plan, which meson
 * reports as skipped.
 */
static int uring_unavailable(void)
{
	/* Engines take regular files and block devices only. */
	FILE *tmp = tmpfile();
	if (!tmp)
		return -errno;
	struct folio_engine *e = NULL;
	int ret = folio_engine_uring(&e, fileno(tmp), 4, 0);
	if (!ret)
		folio_engine_free(e);
	fclose(tmp);
	return ret;
}

int main(void)
{
	int ret = uring_unavailable();
	if (ret) {
		printf("1..0 # SKIP io_uring unavailable: %s\n", strerror(-ret));
		return 0;
	}
	fe_engine = &uring_engine;
	const struct CMUnitTest tests[] = {
		FE_ON_BOTH(round_trip),
		FE_ON_BOTH(dev_pos),
		ON_BOTH(test_many_in_flight),
		FE_ON_BOTH(read_past_eof),
		FE_ON_BOTH(many_segments),
		FE_ON_BOTH(short_write),
		FE_ON_BOTH(flush_truncate),
		FE_ON_BOTH(truncate_eintr),
		ON_BOTH(test_completion_thread),
		FE_ON_BOTH(direct),
		FE_ON_BOTH(direct_tail),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_threads_completion_thread),
		cmocka_unit_test(test_threads_short_errors),
		cmocka_unit_test(test_orphans),
		cmocka_unit_test(test_reentrant_submit),
		cmocka_unit_test(test_wait_in_completion),
		cmocka_unit_test(test_destroy_in_flight),
		FE_TEST(errors),
		cmocka_unit_test(test_depths),
		cmocka_unit_test(test_tiny_ring),
		FE_TEST(bad_requests),
		FE_ON_BOTH(durable),
		FE_ON_BOTH(waited),
		cmocka_unit_test(test_waited_deferred),
		cmocka_unit_test(test_wait_idle_only_when_unpolled),
		cmocka_unit_test(test_bad_input),
	};
	return cmocka_run_group_tests(tests, fe_group_setup, fe_group_teardown);
}
