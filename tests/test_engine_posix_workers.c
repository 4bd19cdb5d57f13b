/* SPDX-License-Identifier: MIT */
/*
 * The posix engine with engine threads (the default): the tests it shares
 * with the io_uring engine (engine_test_util.c: data, end of file,
 * segments, short writes, errors, durable writes, O_DIRECT), then what
 * the workers add: requests complete on an engine thread, many in flight
 * through few workers, completions that submit or truncate, truncate
 * after requests it must wait for, freeing with requests queued, and
 * several threads submitting, flushing and truncating at once (suite
 * 'threads', run under TSan).
 */
#include <dirent.h>
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
#include <sys/stat.h>
#include <unistd.h>

#include "engine_test_util.h"
#include "test_util.h"

static int workers_try(struct folio_engine **out, int fd, unsigned flags,
		       int workers)
{
	struct folio_posix_opts o = {
		.sz = sizeof(o), .flags = flags, .workers = workers};
	return folio_engine_posix_opts(out, fd, &o);
}

static struct folio_engine *workers_new(int fd, int workers)
{
	struct folio_engine *e = NULL;
	assert_int_equal(workers_try(&e, fd, 0, workers), 0);
	assert_non_null(e);
	return e;
}

/* The shared tests run with 4 workers whatever the descriptor. */
static int shared_try(struct folio_engine **out, int fd, unsigned flags)
{
	return workers_try(out, fd, flags, 4);
}

static struct folio_engine *shared_new(int fd, unsigned flags)
{
	struct folio_engine *e = NULL;
	assert_int_equal(shared_try(&e, fd, flags), 0);
	assert_non_null(e);
	return e;
}

static const struct file_engine posix_workers_engine = {
	.name = "posixw",
	.create = shared_new,
	.try_create = shared_try,
	.completes_on_threads = true,
	.barrier_is_fdatasync = true,
	.waited_barrier_is_fdatasync = true,
};

/* ---- completions on workers ----------------------------------------- */

/*
 * The default: in direct mode submit() returns before the I/O and the
 * completion comes from an engine thread (or from a thread's wait(),
 * test_wait_helps); on a buffered descriptor the request completes
 * inside submit().
 */
static void test_default_workers(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	tio_main_thread = pthread_self();
	enum { N = 16 };
	static _Alignas(4096) char buf[N][4096];
	for (int direct = 0; direct < 2; direct++) {
		struct folio_engine *e = NULL;
		assert_int_equal(folio_engine_posix(&e, f.fd, direct
				 ? FOLIO_ENGINE_DIRECT : 0), 0);
		atomic_store(&tio_on_main, 0);
		struct tio t[N];
		for (int i = 0; i < N; i++) {
			fill(buf[i], 4096, (uint64_t)i + 1);
			tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 4096,
				 buf[i], 4096, 1, 0);
			t[i].hook = tio_note_thread;
			assert_int_equal(eng_submit(e, &t[i]), 0);
			if (!direct)
				assert_int_equal(tio_done(&t[i]), 1);
		}
		/* Waiting without wait(): all from engine threads. */
		for (int i = 0; i < N; i++)
			tio_await(&t[i]);
		for (int i = 0; i < N; i++)
			assert_int_equal(atomic_load(&t[i].result), 4096);
		assert_int_equal(atomic_load(&tio_on_main), direct ? 0 : N);
		assert_int_equal(folio_engine_free(e), 0);
	}
	tfile_close(&f);
}

/* Holds the only worker inside a completion until released. */
static atomic_bool hold_worker, worker_held;

static void hold_hook(struct tio *t)
{
	(void)t;
	atomic_store(&worker_held, true);
	await_flag(&hold_worker, false);
}

/* Submit *t, a write of buf at 0, whose completion holds e's only worker
 * until hold_worker is cleared; return once it holds it. */
static void hold_only_worker(struct folio_engine *e, struct tio *t,
			     char *buf, size_t len)
{
	atomic_store(&hold_worker, true);
	atomic_store(&worker_held, false);
	tio_prep(t, FOLIO_IO_WRITE, 0, buf, len, 1, 0);
	t->hook = hold_hook;
	assert_int_equal(eng_submit(e, t), 0);
	await_flag(&worker_held, true);
}

/*
 * wait() runs a queued request in the waiting thread: with the only
 * worker held inside a completion, a second request stays queued, and
 * the main thread's wait() writes it and completes it there. With
 * nothing queued, wait() says it has nothing to do
 * (FOLIO_ENGINE_WAIT_IDLE) and the held request completes from the
 * worker once let go. Also on an inline engine, wait() has nothing.
 */
static void test_wait_helps(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	tio_main_thread = pthread_self();
	static _Alignas(4096) char a[4096], b[4096], chk[4096];
	fill(a, sizeof(a), 11);
	fill(b, sizeof(b), 12);
	struct folio_engine *e = workers_new(f.fd, 1);
	assert_non_null(e->ops.wait);
	assert_int_equal(eng_wait(e), FOLIO_ENGINE_WAIT_IDLE);
	atomic_store(&tio_on_main, 0);
	struct tio ta, tb;
	hold_only_worker(e, &ta, a, sizeof(a));
	tio_prep(&tb, FOLIO_IO_WRITE, 4096, b, sizeof(b), 1, 0);
	tb.hook = tio_note_thread;
	assert_int_equal(eng_submit(e, &tb), 0);
	assert_int_equal(tio_done(&tb), 0);
	assert_int_equal(eng_wait(e), 0);
	assert_int_equal(tio_done(&tb), 1);
	assert_int_equal(atomic_load(&tb.result), 4096);
	assert_int_equal(atomic_load(&tio_on_main), 1);
	assert_int_equal(pread(f.fd, chk, sizeof(chk), 4096), 4096);
	assert_memory_equal(chk, b, sizeof(b));
	/* Only the held one is in flight, on the worker. */
	assert_int_equal(eng_wait(e), FOLIO_ENGINE_WAIT_IDLE);
	assert_int_equal(tio_done(&ta), 0);
	atomic_store(&hold_worker, false);
	wait_all(e, &ta, 1);
	assert_int_equal(atomic_load(&ta.result), 4096);
	tio_free(&ta);
	tio_free(&tb);
	assert_int_equal(folio_engine_free(e), 0);

	struct folio_engine *in = workers_new(f.fd, FOLIO_POSIX_INLINE);
	assert_int_equal(eng_wait(in), FOLIO_ENGINE_WAIT_IDLE);
	assert_int_equal(folio_engine_free(in), 0);
	tfile_close(&f);
}

/* Count of the engine's threads: the process's, less those it had. */
static int threads_now(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/task");
	assert_non_null(d);
	for (struct dirent *de; (de = readdir(d));)
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* The written file at pos holds buf. */
static void assert_file(struct tfile *f, uint64_t pos, const char *buf)
{
	static _Alignas(4096) char chk[4096];
	assert_int_equal(pread(f->fd, chk, 4096, (off_t)pos), 4096);
	assert_memory_equal(chk, buf, 4096);
}

/*
 * FOLIO_IO_WAITED: a lone request its submitter is about to wait for is
 * left for that thread's wait(), which runs it; no worker is woken or
 * started for it. Every other way the queue moves still gets it done
 * without that wait(): a second request queued behind it (which starts
 * a worker), the submitter's flush() and truncate(), and freeing the
 * engine.
 */
static void test_waited_hint(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	tio_main_thread = pthread_self();
	static _Alignas(4096) char buf[6][4096];
	for (int i = 0; i < 6; i++)
		fill(buf[i], 4096, (uint64_t)i + 31);
	struct tio t[6];

	/* Alone: queued, no thread started; wait() runs it here. */
	int before = threads_now();
	struct folio_engine *e = workers_new(f.fd, 2);
	atomic_store(&tio_on_main, 0);
	tio_prep_waited(&t[0], 0, buf[0]);
	assert_int_equal(eng_submit(e, &t[0]), 0);
	assert_int_equal(tio_done(&t[0]), 0);
	assert_int_equal(threads_now(), before);
	assert_int_equal(eng_wait(e), 0);
	assert_int_equal(tio_done(&t[0]), 1);
	assert_int_equal(atomic_load(&t[0].result), 4096);
	assert_int_equal(atomic_load(&tio_on_main), 1);
	assert_int_equal(eng_wait(e), FOLIO_ENGINE_WAIT_IDLE);
	assert_file(&f, 0, buf[0]);

	/* A second request behind it starts a worker, which runs both
	 * while nobody calls wait(). */
	atomic_store(&tio_on_main, 0);
	tio_prep_waited(&t[1], 4096, buf[1]);
	tio_prep_waited(&t[2], 8192, buf[2]);
	assert_int_equal(eng_submit(e, &t[1]), 0);
	assert_int_equal(eng_submit(e, &t[2]), 0);
	tio_await(&t[1]);
	tio_await(&t[2]);
	assert_int_equal(atomic_load(&tio_on_main), 0);
	assert_true(threads_now() > before);

	/* With its worker asleep (most likely by now), the submitter's
	 * flush gets one left queued written by waking it. */
	struct timespec settle = {0, 50000000};
	nanosleep(&settle, NULL);
	tio_prep_waited(&t[3], 12288, buf[3]);
	assert_int_equal(eng_submit(e, &t[3]), 0);
	assert_int_equal(eng_flush(e), 0);
	assert_int_equal(tio_done(&t[3]), 1);
	assert_int_equal(folio_engine_free(e), 0);

	/* With no worker yet, the submitter's flush and truncate start
	 * one for a request left queued. */
	for (int truncate = 0; truncate < 2; truncate++) {
		e = workers_new(f.fd, 2);
		tio_prep_waited(&t[4], 16384, buf[4]);
		assert_int_equal(eng_submit(e, &t[4]), 0);
		assert_int_equal(tio_done(&t[4]), 0);
		if (truncate)
			assert_int_equal(eng_truncate(e, 65536), 0);
		else
			assert_int_equal(eng_flush(e), 0);
		assert_int_equal(tio_done(&t[4]), 1);
		assert_int_equal(folio_engine_free(e), 0);
	}
	for (int i = 1; i <= 4; i++) {
		assert_int_equal(atomic_load(&t[i].result), 4096);
		assert_file(&f, (uint64_t)i * 4096, buf[i]);
	}

	/* Freeing an engine that never started a worker completes it. */
	e = workers_new(f.fd, 2);
	tio_prep_waited(&t[5], 20480, buf[5]);
	assert_int_equal(eng_submit(e, &t[5]), 0);
	assert_int_equal(tio_done(&t[5]), 0);
	assert_int_equal(folio_engine_free(e), 0);
	assert_int_equal(tio_done(&t[5]), 1);
	assert_int_equal(atomic_load(&t[5].result), 4096);
	assert_file(&f, 20480, buf[5]);
	assert_int_equal(threads_now(), before);
	tfile_close(&f);
}

/* A thread's write that the main thread runs as a helper, and that
 * thread's flush of it (test_flush_waits_for_helper). */
struct helped {
	struct folio_engine *e;
	struct tio w;
	atomic_bool submitted, running, finished, flush_saw_finished;
};

static void helped_hook(struct tio *t)
{
	struct helped *h = t->arg;
	atomic_store(&h->running, true);
	/* The flush must wait for this completion to return. */
	struct timespec ts = {0, 20000000};
	nanosleep(&ts, NULL);
	atomic_store(&h->finished, true);
}

static void *helped_writer(void *arg)
{
	struct helped *h = arg;
	assert_int_equal(eng_submit(h->e, &h->w), 0);
	atomic_store(&h->submitted, true);
	await_flag(&h->running, true);
	assert_int_equal(eng_flush(h->e), 0);
	atomic_store(&h->flush_saw_finished, atomic_load(&h->finished));
	return NULL;
}

/*
 * A write another thread runs in its wait() is still that writer's
 * write in flight: the writer's flush waits until its completion
 * returned, as for one a worker runs (drains see helpers).
 */
static void test_flush_waits_for_helper(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	static _Alignas(4096) char a[4096], b[4096];
	fill(a, sizeof(a), 21);
	fill(b, sizeof(b), 22);
	static struct helped h;
	memset(&h, 0, sizeof(h));
	h.e = workers_new(f.fd, 1);
	struct tio ta;
	hold_only_worker(h.e, &ta, a, sizeof(a));
	tio_prep(&h.w, FOLIO_IO_WRITE, 4096, b, sizeof(b), 1, 0);
	h.w.hook = helped_hook;
	h.w.arg = &h;
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, helped_writer, &h), 0);
	await_flag(&h.submitted, true);
	assert_int_equal(eng_wait(h.e), 0); /* runs the writer's write */
	pthread_join(t, NULL);
	assert_true(atomic_load(&h.flush_saw_finished));
	atomic_store(&hold_worker, false);
	wait_all(h.e, &ta, 1);
	tio_free(&ta);
	tio_free(&h.w);
	assert_int_equal(folio_engine_free(h.e), 0);
	tfile_close(&f);
}

/* 2000 scattered writes through 1 and 3 workers, then read back through
 * the engine in another order. */
static void test_many_in_flight(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	uint64_t seed = test_seed("posixw_many");
	const int n = (int)test_iters(2000, 200);
	const size_t bs = 4096;
	char *in = xmalloc((size_t)n * bs), *out = xmalloc((size_t)n * bs);
	struct tio *t = calloc((size_t)n, sizeof(*t));
	assert_non_null(t);
	for (int workers = 1; workers <= 3; workers += 2) {
		struct folio_engine *e = workers_new(f.fd, workers);
		fill(in, (size_t)n * bs, seed + (uint64_t)workers);
		for (int i = 0; i < n; i++) {
			int k = (int)(((uint64_t)i * 7919) % (uint64_t)n);
			tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)k * bs,
				 in + (size_t)k * bs, bs, 1 + i % 3, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		wait_all(e, t, n);
		for (int i = 0; i < n; i++)
			assert_int_equal(atomic_load(&t[i].result), (long)bs);
		tio_read_back(e, t, n, bs, in, out, true);
		assert_int_equal(folio_engine_free(e), 0);
	}
	free(t);
	free(in);
	free(out);
	tfile_close(&f);
}

/* Completions that submit the next write: no engine lock is held while
 * completing. */
static void test_chain(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	for (int workers = 1; workers <= 2; workers++) {
		struct folio_engine *e = workers_new(f.fd, workers);
		struct chain *ch = chain_run(e, CHAIN_MAX, 40);
		char chk[512];
		for (int i = 0; i < CHAIN_MAX; i++) {
			assert_int_equal(pread(f.fd, chk, 512, (off_t)i * 512),
					 512);
			assert_memory_equal(chk, ch->buf[i], 512);
		}
		assert_int_equal(folio_engine_free(e), 0);
		chain_finish(ch);
	}
	tfile_close(&f);
}

/*
 * truncate() waits for every request accepted before it: writes past the
 * new size, still queued or running when truncate() is called, are done
 * before ftruncate(), so the file ends at the size asked for.
 */
static void test_truncate_waits(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	enum { N = 64, LEN = 8192 };
	char *buf = xmalloc(LEN);
	fill(buf, LEN, 5);
	for (int workers = 1; workers <= 4; workers *= 2) {
		struct folio_engine *e = workers_new(f.fd, workers);
		struct tio t[N];
		for (int i = 0; i < N; i++) {
			tio_prep(&t[i], FOLIO_IO_WRITE,
				 (uint64_t)(N - i) * LEN * 4, buf, LEN, 1, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		assert_int_equal(eng_truncate(e, 100), 0);
		for (int i = 0; i < N; i++)
			assert_int_equal(tio_done(&t[i]), 1);
		struct stat st;
		assert_int_equal(fstat(f.fd, &st), 0);
		assert_int_equal(st.st_size, 100);
		assert_int_equal(folio_engine_free(e), 0);
	}
	free(buf);
	tfile_close(&f);
}

/* A completion that truncates, on the only worker, while more requests
 * are queued behind it: it runs them itself rather than wait for them
 * forever. */
static atomic_int hook_truncate_ret;

static void truncate_hook(struct tio *t)
{
	atomic_store(&hook_truncate_ret, eng_truncate(t->arg, 4096));
}

static void test_truncate_in_completion(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	struct folio_engine *e = workers_new(f.fd, 1);
	enum { N = 32 };
	static char buf[N][4096];
	struct tio t[N];
	atomic_store(&hook_truncate_ret, 1);
	for (int i = 0; i < N; i++) {
		fill(buf[i], 4096, (uint64_t)i + 70);
		tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 4096, buf[i],
			 4096, 1, 0);
		if (!i) {
			t[i].hook = truncate_hook;
			t[i].arg = e;
		}
		assert_int_equal(eng_submit(e, &t[i]), 0);
	}
	wait_all(e, t, N);
	assert_int_equal(atomic_load(&hook_truncate_ret), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(atomic_load(&t[i].result), 4096);
	assert_int_equal(folio_engine_free(e), 0);
	tfile_close(&f);
}

/* Freeing the engine runs every request it accepted, even those only
 * queued. */
static void test_free_in_flight(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	for (int workers = 1; workers <= 3; workers += 2) {
		struct folio_engine *e = workers_new(f.fd, workers);
		enum { N = 200 };
		struct tio *t = calloc(N, sizeof(*t));
		static char buf[N][4096];
		assert_non_null(t);
		for (int i = 0; i < N; i++) {
			fill(buf[i], 4096, (uint64_t)i + 9);
			tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 4096,
				 buf[i], 4096, 1 + i % 2, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		assert_int_equal(folio_engine_free(e), 0);
		for (int i = 0; i < N; i++) {
			assert_int_equal(tio_done(&t[i]), 1);
			assert_int_equal(atomic_load(&t[i].result), 4096);
		}
		char chk[4096];
		for (int i = 0; i < N; i += 37) {
			assert_int_equal(pread(f.fd, chk, 4096,
					       (off_t)i * 4096),
					 4096);
			assert_memory_equal(chk, buf[i], 4096);
		}
		free(t);
	}
	tfile_close(&f);
}


/* ---- the library over the workers ------------------------------------ */

/*
 * A mapping over 4 workers: a sync of scattered dirty blocks (writeback
 * submits them all before it waits, so they are in flight together), then
 * sequential reads (readahead windows complete on the workers) while
 * another thread invalidates the cached folios, and a truncate: the data
 * read is always the file's.
 */
enum { MT_SIZE = 8 << 20, MT_BLOCKS = 600 };

struct mt_reader {
	struct folio_mapping *m;
	const char *want;
	atomic_bool stop;
	int errors;
};

static void *mt_invalidate(void *p)
{
	struct mt_reader *r = p;
	while (!atomic_load(&r->stop))
		if (folio_mapping_invalidate(r->m, 0, 0, 0))
			r->errors++;
	return NULL;
}

static void test_mapping_over_workers(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	char *want = xmalloc(MT_SIZE), *got = xmalloc(MT_SIZE);
	memset(want, 0, MT_SIZE);
	assert_int_equal(ftruncate(f.fd, MT_SIZE), 0);
	struct folio_engine *e = workers_new(f.fd, 4);
	struct folio_mapping_opts mo = {.sz = sizeof(mo), .block_size = 4096,
					.size = MT_SIZE, .engine = e};
	struct folio_mapping *m = NULL;
	assert_int_equal(folio_mapping_new(&m, &mo), 0);
	uint64_t seed = test_seed("posixw_mapping");
	for (int i = 0; i < MT_BLOCKS; i++) {
		uint64_t pos = test_rand_below(&seed, MT_SIZE / 4096) * 4096;
		fill(want + pos, 4096, test_rand(&seed));
		assert_int_equal(folio_mapping_write(m, want + pos, 4096, pos),
				 4096);
	}
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(pread(f.fd, got, MT_SIZE, 0), MT_SIZE);
	assert_memory_equal(got, want, MT_SIZE);

	struct mt_reader r = {.m = m, .want = want};
	atomic_init(&r.stop, false);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, mt_invalidate, &r), 0);
	for (int round = 0; round < 3; round++) {
		memset(got, 0xee, MT_SIZE);
		for (size_t at = 0; at < MT_SIZE; at += 16384)
			assert_int_equal(folio_mapping_read(m, got + at, 16384,
							    at),
					 16384);
		assert_memory_equal(got, want, MT_SIZE);
	}
	atomic_store(&r.stop, true);
	pthread_join(th, NULL);
	assert_int_equal(r.errors, 0);

	/* Reads running ahead of a truncate: what is past the new end is
	 * gone, what is before it is the file's. */
	for (size_t at = 0; at < MT_SIZE / 2; at += 16384)
		assert_int_equal(folio_mapping_read(m, got + at, 16384, at),
				 16384);
	assert_int_equal(folio_mapping_truncate(m, MT_SIZE / 4), 0);
	assert_int_equal(folio_mapping_read(m, got, MT_SIZE, 0), MT_SIZE / 4);
	assert_memory_equal(got, want, MT_SIZE / 4);
	struct stat st;
	assert_int_equal(fstat(f.fd, &st), 0);
	assert_int_equal(st.st_size, MT_SIZE / 4);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(want);
	free(got);
	tfile_close(&f);
}

/* ---- threads -------------------------------------------------------- */

/*
 * Several threads on one engine with 3 workers, each on its own slots:
 * batches of writes (some durable) and reads of what it wrote, with
 * flushes, and one thread truncating beyond everybody's slots meanwhile.
 * Once on a buffered descriptor, once on an O_DIRECT one, where the
 * workers send what they find queued together as kernel AIO batches
 * (whole sectors, one segment each, there).
 */
#define TH_THREADS 6
#define TH_SLOTS 16
#define TH_SLOT 8192

struct th_arg {
	struct folio_engine *e;
	int id;
	unsigned rounds;
	uint64_t seed;
	bool direct;
	int errors;
};

static void *th_main(void *p)
{
	struct th_arg *a = p;
	uint64_t seed = a->seed;
	struct tio t[TH_SLOTS];
	char *buf = xaligned(TH_SLOTS * TH_SLOT);
	char *chk = xaligned(TH_SLOTS * TH_SLOT);
	for (unsigned round = 0; round < a->rounds; round++) {
		size_t len[TH_SLOTS];
		for (int k = 0; k < TH_SLOTS; k++) {
			uint64_t pos = ((uint64_t)k * TH_THREADS +
					(uint64_t)a->id) * TH_SLOT;
			len[k] = 1 + test_rand_below(&seed, TH_SLOT);
			if (a->direct)
				len[k] = (len[k] + 511) & ~(size_t)511;
			fill(buf + k * TH_SLOT, len[k], test_rand(&seed));
			uint64_t cuts = test_rand(&seed);
			tio_prep(&t[k], FOLIO_IO_WRITE, pos, buf + k * TH_SLOT,
				 len[k], a->direct ? 1 : 1 + k % 3,
				 a->direct ? 0 : cuts);
			if (test_rand(&seed) & 1)
				t[k].rq.io.flags = FOLIO_IO_DURABLE;
			if (eng_submit(a->e, &t[k]))
				a->errors++;
		}
		for (int k = 0; k < TH_SLOTS; k++) {
			while (!tio_done(&t[k]))
				eng_progress(a->e);
			if (atomic_load(&t[k].result) != (long)len[k])
				a->errors++;
			tio_free(&t[k]);
			uint64_t pos = ((uint64_t)k * TH_THREADS +
					(uint64_t)a->id) * TH_SLOT;
			tio_prep(&t[k], FOLIO_IO_READ, pos, chk + k * TH_SLOT,
				 len[k], a->direct ? 1 : 2, 0);
			if (eng_submit(a->e, &t[k]))
				a->errors++;
		}
		for (int k = 0; k < TH_SLOTS; k++) {
			while (!tio_done(&t[k]))
				eng_progress(a->e);
			if (atomic_load(&t[k].result) != (long)len[k] ||
			    memcmp(chk + k * TH_SLOT, buf + k * TH_SLOT, len[k]))
				a->errors++;
			tio_free(&t[k]);
		}
		if (a->id == 0) {
			if (eng_truncate(a->e, (uint64_t)TH_SLOTS *
						       TH_THREADS * TH_SLOT +
						       round))
				a->errors++;
		} else if (eng_flush(a->e)) {
			a->errors++;
		}
	}
	free(buf);
	free(chk);
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	uint64_t seed = test_seed("posixw_threads");
	unsigned rounds = test_iters(40, 4);
	for (int direct = 0; direct < 2; direct++) {
		int fd = direct ? open(f.path, O_RDWR | O_DIRECT) : f.fd;
		if (fd < 0) {
			printf("# O_DIRECT not supported in %s\n", f.w->dir);
			break;
		}
		struct folio_engine *e = workers_new(fd, 3);
		pthread_t th[TH_THREADS];
		struct th_arg a[TH_THREADS];
		for (int i = 0; i < TH_THREADS; i++) {
			a[i] = (struct th_arg){e, i, rounds,
					       seed + (uint64_t)i, direct, 0};
			assert_int_equal(pthread_create(&th[i], NULL, th_main,
							&a[i]),
					 0);
		}
		for (int i = 0; i < TH_THREADS; i++) {
			pthread_join(th[i], NULL);
			assert_int_equal(a[i].errors, 0);
		}
		assert_int_equal(folio_engine_free(e), 0);
		if (direct)
			close(fd);
	}
	tfile_close(&f);
}

int main(void)
{
	fe_engine = &posix_workers_engine;
	const struct CMUnitTest tests[] = {
		FE_ALL_TESTS,
		cmocka_unit_test(test_default_workers),
		cmocka_unit_test(test_wait_helps),
		cmocka_unit_test(test_waited_hint),
		cmocka_unit_test(test_flush_waits_for_helper),
		ON_BOTH(test_many_in_flight),
		cmocka_unit_test(test_chain),
		cmocka_unit_test(test_truncate_waits),
		cmocka_unit_test(test_truncate_in_completion),
		cmocka_unit_test(test_free_in_flight),
		cmocka_unit_test(test_mapping_over_workers),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, fe_group_setup, fe_group_teardown);
}
