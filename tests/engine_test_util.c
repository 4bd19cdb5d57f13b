/* SPDX-License-Identifier: MIT */
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
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "engine_test_util.h"
#include "folio_state_mem.h"
#include "test_util.h"

/* ---- requests ------------------------------------------------------- */

static atomic_uint completion_rank;

uint32_t tio_default_flags;

pthread_t tio_main_thread;
atomic_int tio_on_main;

void tio_note_thread(struct tio *t)
{
	(void)t;
	if (pthread_equal(pthread_self(), tio_main_thread))
		atomic_fetch_add(&tio_on_main, 1);
}

void tio_prep_waited(struct tio *t, uint64_t pos, char *buf)
{
	tio_prep(t, FOLIO_IO_WRITE, pos, buf, 4096, 1, 0);
	t->rq.io.flags = FOLIO_IO_WAITED;
	t->hook = tio_note_thread;
}

static void tio_end(struct engine_io *rq, ssize_t result)
{
	struct tio *t = container_of(rq, struct tio, rq);
	atomic_store(&t->result, (long)result);
	atomic_store(&t->barrier, rq->barrier_error);
	atomic_store(&t->order, atomic_fetch_add(&completion_rank, 1));
	if (t->hook)
		t->hook(t);
	atomic_fetch_add_explicit(&t->ncomplete, 1, memory_order_release);
}

void tio_prep(struct tio *t, enum folio_io_op op, uint64_t pos, void *buf,
	      size_t len, int nseg, uint64_t seed)
{
	memset(t, 0, sizeof(*t));
	t->rq.end_io = tio_end;
	t->rq.io.op = op;
	t->rq.io.pos = pos;
	t->rq.io.dev_pos = pos;
	t->rq.io.len = len;
	t->rq.io.flags = tio_default_flags;
	t->iov = t->iov_inline;
	if (nseg > TIO_INLINE_IOV) {
		t->iov = calloc((size_t)nseg, sizeof(*t->iov));
		assert_non_null(t->iov);
	}
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
	atomic_init(&t->order, 0);
}

void tio_free(struct tio *t)
{
	if (t->iov != t->iov_inline)
		free(t->iov);
	t->iov = t->iov_inline;
}

int tio_done(struct tio *t)
{
	return atomic_load_explicit(&t->ncomplete, memory_order_acquire);
}

void tio_await(struct tio *t)
{
	for (int polls = 0; !tio_done(t); polls++) {
		assert_true(polls < 1000000);
		struct timespec ts = {0, 20000};
		nanosleep(&ts, NULL);
	}
}

void await_flag(atomic_bool *flag, bool want)
{
	for (int polls = 0; atomic_load(flag) != want; polls++) {
		assert_true(polls < 1000000);
		struct timespec ts = {0, 20000};
		nanosleep(&ts, NULL);
	}
}

unsigned tio_completion_rank(void)
{
	return atomic_load(&completion_rank);
}

int eng_submit(struct folio_engine *e, struct tio *t)
{
	return e->ops.submit(folio_engine_ctx(e), &t->rq.io);
}

int eng_wait(struct folio_engine *e)
{
	assert_non_null(e->ops.wait);
	return e->ops.wait(folio_engine_ctx(e));
}

int eng_unplug(struct folio_engine *e)
{
	return e->ops.unplug ? e->ops.unplug(folio_engine_ctx(e)) : 0;
}

int eng_flush(struct folio_engine *e)
{
	return e->ops.flush(folio_engine_ctx(e));
}

int eng_truncate(struct folio_engine *e, uint64_t size)
{
	return e->ops.truncate(folio_engine_ctx(e), size);
}

/* wait() with nothing in flight: returns at once, having reaped
 * nothing (0, or FOLIO_ENGINE_WAIT_IDLE from an engine whose wait()
 * only helps). */
static void assert_wait_nothing(struct folio_engine *e)
{
	int r = eng_wait(e);
	assert_true(r == 0 || r == FOLIO_ENGINE_WAIT_IDLE);
}

/* Let requests progress: wait(), or for an engine without one (which
 * completes on its own threads, as the posix engine's workers and the
 * remote engines do) a short sleep. */
void eng_progress(struct folio_engine *e)
{
	if (e->ops.wait) {
		int r = eng_wait(e);
		/* An engine whose wait() only helps found nothing to run:
		 * its threads complete what is in flight. */
		if (r != FOLIO_ENGINE_WAIT_IDLE) {
			assert_int_equal(r, 0);
			/* A 0 may mean another thread is delivering: under
			 * valgrind, which runs one thread at a time, a caller
			 * polling without a system call starves it. */
			sched_yield();
			return;
		}
	}
	struct timespec ts = {0, 50000};
	nanosleep(&ts, NULL);
}

/* eng_progress(), failing after two minutes of it (@since: when the
 * caller's rounds began, 0 before the first). Bounded by time, not
 * rounds: a wait() that returns at once makes rounds fast. */
static void eng_progress_bounded(struct folio_engine *e, uint64_t *since)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	uint64_t ns = (uint64_t)now.tv_sec * 1000000000u +
		      (uint64_t)now.tv_nsec;
	if (!*since)
		*since = ns;
	assert_true(ns - *since < UINT64_C(120000000000));
	eng_progress(e);
}

void wait_all(struct folio_engine *e, struct tio *t, int n)
{
	uint64_t since = 0;
	for (int i = 0; i < n; i++)
		while (!tio_done(&t[i]))
			eng_progress_bounded(e, &since);
}

void tio_read_back(struct folio_engine *e, struct tio *t, int n, size_t bs,
		   const void *in, void *out, bool backwards)
{
	memset(out, 0, (size_t)n * bs);
	for (int i = 0; i < n; i++) {
		int k = backwards ? n - 1 - i : i;
		tio_prep(&t[i], FOLIO_IO_READ, (uint64_t)k * bs,
			 (char *)out + (size_t)k * bs, bs, 1 + i % 2, 0);
		assert_int_equal(eng_submit(e, &t[i]), 0);
	}
	wait_all(e, t, n);
	for (int i = 0; i < n; i++)
		assert_int_equal(atomic_load(&t[i].result), (long)bs);
	assert_memory_equal(in, out, (size_t)n * bs);
}

long tio_run(struct folio_engine *e, struct tio *t)
{
	int ret = eng_submit(e, t);
	if (ret)
		return ret;
	assert_int_equal(eng_unplug(e), 0);
	wait_all(e, t, 1);
	assert_int_equal(tio_done(t), 1);
	return atomic_load(&t->result);
}

long tio_run_durable(struct folio_engine *e, struct tio *t,
		     bool *barrier_failed)
{
	long r = tio_run(e, t);
	int barrier = atomic_load(&t->barrier);
	if (barrier)
		assert_int_equal(r, (long)t->rq.io.len);
	if (barrier_failed)
		*barrier_failed = barrier != 0;
	return barrier ? barrier : r;
}

long do_io(struct folio_engine *e, enum folio_io_op op, uint64_t pos,
	   void *buf, size_t len, int nseg, uint64_t seed)
{
	struct tio t;
	tio_prep(&t, op, pos, buf, len, nseg, seed);
	long ret = tio_run(e, &t);
	tio_free(&t);
	return ret;
}

/* ---- completions that call back into the engine --------------------- */

static void chain_hook(struct tio *t)
{
	struct chain *ch = t->arg;
	int next = atomic_fetch_add(&ch->submitted, 1);
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

struct chain *chain_run(struct folio_engine *e, int n, uint64_t seed)
{
	assert_true(n >= 1 && n <= CHAIN_MAX);
	struct chain *ch = calloc(1, sizeof(*ch));
	assert_non_null(ch);
	ch->e = e;
	ch->n = n;
	for (int i = 0; i < n; i++)
		fill(ch->buf[i], 512, seed + (uint64_t)i);
	atomic_store(&ch->submitted, 1);
	tio_prep(&ch->t[0], FOLIO_IO_WRITE, 0, ch->buf[0], 512, 1, 0);
	ch->t[0].hook = chain_hook;
	ch->t[0].arg = ch;
	assert_int_equal(eng_submit(e, &ch->t[0]), 0);
	assert_int_equal(eng_unplug(e), 0);
	/* The tio slots are rewritten by hooks on a completion thread, so
	 * only the chain's own counter is watched. */
	uint64_t since = 0;
	while (atomic_load(&ch->hooked) < ch->n)
		eng_progress_bounded(e, &since);
	assert_int_equal(atomic_load(&ch->failed), 0);
	return ch;
}

void chain_finish(struct chain *ch)
{
	for (int i = 0; i < ch->n; i++) {
		assert_int_equal(tio_done(&ch->t[i]), 1);
		assert_int_equal(atomic_load(&ch->t[i].result), 512);
	}
	free(ch);
}

static atomic_int wait_hook_ret;

static void wait_hook(struct tio *t)
{
	atomic_store(&wait_hook_ret, eng_wait(t->arg));
}

long run_hooked(struct folio_engine *e, void (*hook)(struct tio *t))
{
	char buf[512] = {0};
	struct tio t;
	tio_prep(&t, FOLIO_IO_WRITE, 0, buf, 512, 1, 0);
	t.hook = hook;
	t.arg = e;
	return tio_run(e, &t);
}

void check_wait_in_completion(struct folio_engine *e)
{
	atomic_store(&wait_hook_ret, 1);
	assert_int_equal(run_hooked(e, wait_hook), 512);
	assert_int_equal(atomic_load(&wait_hook_ret), 0);
}

/* ---- memory --------------------------------------------------------- */

void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p)
		abort();
	return p;
}

void *xaligned(size_t n)
{
	/* aligned_alloc() wants a multiple of the alignment. */
	void *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
	assert_non_null(p);
	return p;
}

void fill(void *buf, size_t len, uint64_t seed)
{
	unsigned char *p = buf;
	uint64_t s = seed | 1;
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(test_rand(&s) >> 56);
}

bool all_bytes(const void *buf, size_t len, unsigned char v)
{
	const unsigned char *p = buf;
	for (size_t i = 0; i < len; i++)
		if (p[i] != v)
			return false;
	return true;
}

/* ---- the file engine under test ------------------------------------- */

const struct file_engine *fe_engine;

struct folio_engine *fe_new(int fd, unsigned flags)
{
	struct folio_engine *e = fe_engine->create(fd, flags);
	assert_non_null(e);
	return e;
}

/* The engine thread variants a test runs: 0, then the engine's
 * completion thread flag when it has one. */
static int fe_variants(void)
{
	return fe_engine->completion_thread_flag ? 2 : 1;
}

static unsigned fe_variant_flags(int v)
{
	return v ? fe_engine->completion_thread_flag : 0;
}

/* ---- temporary files ------------------------------------------------ */

static const char *const disk_dirs[] = {"/var/tmp", "/tmp", NULL};
static const char *const shm_dirs[] = {"/dev/shm", NULL};
struct where fe_disk = {.candidates = disk_dirs};
struct where fe_shm = {.candidates = shm_dirs};

static void where_setup(struct where *w)
{
	for (const char *const *c = w->candidates; *c; c++) {
		snprintf(w->dir, sizeof(w->dir), "%s/folio-%s-XXXXXX", *c,
			 fe_engine->name);
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

int fe_group_setup(void **state)
{
	where_setup(&fe_disk);
	where_setup(&fe_shm);
	return 0;
}

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

int fe_group_teardown(void **state)
{
	where_remove(&fe_disk);
	where_remove(&fe_shm);
	return 0;
}

bool tfile_open(struct tfile *f, void **state)
{
	struct where *w = state ? *state : NULL;
	if (w && !w->ok) {
		printf("# skipping: no directory in %s\n", w->candidates[0]);
		return false;
	}
	if (!w)
		w = fe_disk.ok ? &fe_disk : fe_shm.ok ? &fe_shm : NULL;
	if (!w) {
		printf("# skipping: no temporary directory\n");
		return false;
	}
	f->w = w;
	snprintf(f->path, sizeof(f->path), "%s/f-XXXXXX", w->dir);
	f->fd = mkstemp(f->path);
	assert_true(f->fd >= 0);
	return true;
}

void tfile_close(struct tfile *f)
{
	close(f->fd);
	unlink(f->path);
}

/* ---- tests shared by the file engines ------------------------------- */

void fe_test_round_trip(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	struct folio_engine *e = fe_new(f.fd, 0);
	enum { LEN = 300000 };
	char *in = xmalloc(LEN), *out = xmalloc(LEN);
	fill(in, LEN, 1);

	struct tio t;
	tio_prep(&t, FOLIO_IO_WRITE, 12345, in, LEN, 5, 0);
	assert_int_equal(eng_submit(e, &t), 0);
	if (fe_engine->completes_in_submit) {
		assert_int_equal(tio_done(&t), 1);
	} else if (!fe_engine->completes_on_threads) {
		/* Batched: nothing happens until unplug, and completions
		 * are only delivered by a reaper. */
		assert_int_equal(tio_done(&t), 0);
		assert_int_equal(eng_unplug(e), 0);
		assert_int_equal(tio_done(&t), 0);
	}
	wait_all(e, &t, 1);
	assert_int_equal(atomic_load(&t.result), LEN);
	tio_free(&t);
	if (e->ops.wait)
		assert_wait_nothing(e); /* nothing in flight */
	struct stat st;
	assert_int_equal(fstat(f.fd, &st), 0);
	assert_int_equal(st.st_size, 12345 + LEN);

	/* Independent check with pread, then through the engine. */
	memset(out, 0, LEN);
	assert_int_equal(pread(f.fd, out, LEN, 12345), LEN);
	assert_memory_equal(in, out, LEN);
	memset(out, 0xee, LEN);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 12345, out, LEN, 7, 0), LEN);
	assert_memory_equal(in, out, LEN);
	/* The hole before the data reads as zeros. */
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, out, 12345, 1, 0), 12345);
	assert_true(all_bytes(out, 12345, 0));
	/* Zero-length requests complete at once, with 0. */
	tio_prep(&t, FOLIO_IO_WRITE, 0, out, 0, 0, 0);
	assert_int_equal(eng_submit(e, &t), 0);
	assert_int_equal(tio_done(&t), 1);
	assert_int_equal(atomic_load(&t.result), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
	tfile_close(&f);
}

void fe_test_dev_pos(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	struct folio_engine *e = fe_new(f.fd, 0);
	char buf[1000], chk[1000];
	fill(buf, sizeof(buf), 2);
	/* The engine writes at dev_pos, not pos. */
	struct tio t;
	tio_prep(&t, FOLIO_IO_WRITE, 0, buf, sizeof(buf), 2, 0);
	t.rq.io.dev_pos = 50000;
	assert_int_equal(tio_run(e, &t), (long)sizeof(buf));
	assert_int_equal(pread(f.fd, chk, sizeof(chk), 50000),
			 (long)sizeof(chk));
	assert_memory_equal(buf, chk, sizeof(buf));
	assert_int_equal(folio_engine_free(e), 0);
	tfile_close(&f);
}

void fe_test_read_past_eof(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	struct folio_engine *e = fe_new(f.fd, 0);
	char data[1000], buf[8192];
	fill(data, sizeof(data), 3);
	assert_int_equal(pwrite(f.fd, data, sizeof(data), 0),
			 (long)sizeof(data));
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
	tfile_close(&f);
}

/* More segments than one preadv/pwritev call or one SQE takes (IOV_MAX =
 * 1024), of random lengths including empty ones: the engine goes on with
 * the rest as after any short transfer. */
void fe_test_many_segments(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	char name[64];
	snprintf(name, sizeof(name), "%s_many_segments", fe_engine->name);
	uint64_t seed = test_seed(name);
	struct folio_engine *e = fe_new(f.fd, 0);
	enum { LEN = 200000 };
	char *in = xmalloc(LEN), *out = xmalloc(LEN);
	fill(in, LEN, seed);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 4096, in, LEN, 2500,
			       test_rand(&seed)), LEN);
	memset(out, 0, LEN);
	assert_int_equal(pread(f.fd, out, LEN, 4096), LEN);
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
	tfile_close(&f);
}

/*
 * A short write is easy to force with RLIMIT_FSIZE: the write stops at the
 * limit and the next one fails with EFBIG. The engine must go on past the
 * first short transfer and then report the bytes it did write.
 */
void fsize_limit_begin(struct fsize_limit *l, uint64_t bytes)
{
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &l->old), 0);
	l->oldsig = signal(SIGXFSZ, SIG_IGN);
	struct rlimit lim = l->old;
	lim.rlim_cur = bytes;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
}

void fsize_limit_end(struct fsize_limit *l)
{
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &l->old), 0);
	signal(SIGXFSZ, l->oldsig);
}

void fe_test_short_write(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	struct folio_engine *e = fe_new(f.fd, 0);
	struct fsize_limit fl;
	fsize_limit_begin(&fl, 10000);
	char buf[30000], chk[30000];
	fill(buf, sizeof(buf), 5);
	long r = do_io(e, FOLIO_IO_WRITE, 0, buf, sizeof(buf), 7, 0);
	long r2 = do_io(e, FOLIO_IO_WRITE, 20000, buf, 100, 1, 0);
	fsize_limit_end(&fl);
	assert_int_equal(r, 10000);
	assert_int_equal(r2, -EFBIG); /* nothing written: the error */
	assert_int_equal(pread(f.fd, chk, sizeof(chk), 0), 10000);
	assert_memory_equal(chk, buf, 10000);
	/* Resubmitting the rest now works. */
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 10000, buf + 10000, 20000, 3,
			       0), 20000);
	assert_int_equal(pread(f.fd, chk, sizeof(chk), 0), 30000);
	assert_memory_equal(chk, buf, 30000);
	assert_int_equal(folio_engine_free(e), 0);
	tfile_close(&f);
}

/* flush() covers the writes submitted before it (an asynchronous engine
 * waits for them, delivering their completions), then syncs. truncate()
 * waits for everything. */
/*
 * ftruncate() as the engines in the shared library see it: the program's
 * definition comes first in symbol lookup (built with the library's
 * _FILE_OFFSET_BITS, so under the same symbol name). It fails with EINTR
 * while ftruncate_eintr says so, then once with ftruncate_errno when that
 * is set, and otherwise truncates.
 */
static atomic_int ftruncate_eintr, ftruncate_errno, ftruncate_calls;

int ftruncate(int fd, off_t length)
{
	atomic_fetch_add(&ftruncate_calls, 1);
	if (atomic_load(&ftruncate_eintr) > 0) {
		atomic_fetch_sub(&ftruncate_eintr, 1);
		errno = EINTR;
		return -1;
	}
	int err = atomic_exchange(&ftruncate_errno, 0);
	if (err) {
		errno = err;
		return -1;
	}
	return (int)syscall(SYS_ftruncate, fd, length);
}

/* An interrupted ftruncate() is retried; any other failure is the
 * truncate's result. */
void fe_test_truncate_eintr(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	for (int v = 0; v < fe_variants(); v++) {
		struct folio_engine *e = fe_new(f.fd, fe_variant_flags(v));
		struct stat st;
		atomic_store(&ftruncate_calls, 0);
		atomic_store(&ftruncate_eintr, 3);
		assert_int_equal(eng_truncate(e, 12345 + (uint64_t)v), 0);
		assert_int_equal(atomic_load(&ftruncate_calls), 4);
		assert_int_equal(fstat(f.fd, &st), 0);
		assert_int_equal(st.st_size, 12345 + v);

		atomic_store(&ftruncate_calls, 0);
		atomic_store(&ftruncate_eintr, 2);
		atomic_store(&ftruncate_errno, EFBIG);
		assert_int_equal(eng_truncate(e, 1 << 20), -EFBIG);
		assert_int_equal(atomic_load(&ftruncate_calls), 3);
		assert_int_equal(fstat(f.fd, &st), 0);
		assert_int_equal(st.st_size, 12345 + v);
		assert_int_equal(folio_engine_free(e), 0);
	}
	tfile_close(&f);
}

void fe_test_flush_truncate(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	for (int v = 0; v < fe_variants(); v++) {
		unsigned flags = fe_variant_flags(v);
		struct folio_engine *e = fe_new(f.fd, flags);
		enum { N = 64, BS = 8192 };
		char *in = xmalloc(N * BS);
		struct tio t[N];
		fill(in, N * BS, 6 + (uint64_t)v);
		for (int i = 0; i < N; i++) {
			tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * BS,
				 in + i * BS, BS, 2, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		/* None unplugged yet: flush must still cover them. The data
		 * is in the file when flush returns; the completions may
		 * still be on their way from a completion thread. */
		assert_int_equal(eng_flush(e), 0);
		char *chk = xmalloc(N * BS);
		assert_int_equal(pread(f.fd, chk, N * BS, 0), N * BS);
		assert_memory_equal(chk, in, N * BS);
		if (!flags)
			for (int i = 0; i < N; i++)
				assert_int_equal(tio_done(&t[i]), 1);
		wait_all(e, t, N);
		for (int i = 0; i < N; i++)
			assert_int_equal(atomic_load(&t[i].result), BS);

		for (int i = 0; i < N; i++) {
			tio_prep(&t[i], FOLIO_IO_READ, (uint64_t)i * BS,
				 chk + i * BS, BS, 1, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		assert_int_equal(eng_truncate(e, 5000), 0);
		if (!flags)
			for (int i = 0; i < N; i++)
				assert_int_equal(tio_done(&t[i]), 1);
		wait_all(e, t, N);
		/* Read before the truncate: the old contents. */
		for (int i = 0; i < N; i++)
			assert_int_equal(atomic_load(&t[i].result), BS);
		assert_memory_equal(chk, in, N * BS);
		struct stat st;
		assert_int_equal(fstat(f.fd, &st), 0);
		assert_int_equal(st.st_size, 5000);
		assert_int_equal(eng_truncate(e, 100000), 0);
		assert_int_equal(fstat(f.fd, &st), 0);
		assert_int_equal(st.st_size, 100000);
		memset(chk, 0xaa, 20000);
		assert_int_equal(do_io(e, FOLIO_IO_READ, 0, chk, 20000, 1, 0),
				 20000);
		assert_memory_equal(chk, in, 5000);
		assert_true(all_bytes(chk + 5000, 15000, 0));
		assert_int_equal(eng_truncate(e, (UINT64_C(1) << 62) + 1),
				 -EINVAL);
		assert_int_equal(eng_flush(e), 0);
		assert_int_equal(folio_engine_free(e), 0);
		free(in);
		free(chk);
	}
	tfile_close(&f);
}

/* Refused, not completed. */
static void check_refused(struct folio_engine *e, struct tio *t)
{
	assert_int_equal(eng_submit(e, t), -EINVAL);
	assert_int_equal(tio_done(t), 0);
}

int tfile_open_direct(struct tfile *f, void **state)
{
	if (!tfile_open(f, state))
		return -1;
	int fd = open(f->path, O_RDWR | O_DIRECT);
	if (fd < 0) {
		printf("# O_DIRECT not supported in %s (%s)\n", f->w->dir,
		       strerror(errno));
		tfile_close(f);
	}
	return fd;
}

/* The end of an O_DIRECT test: its two buffers, descriptor and file. */
static void direct_close(struct tfile *f, int fd, char *in, char *out)
{
	free(in);
	free(out);
	close(fd);
	tfile_close(f);
}

void fe_test_direct(void **state)
{
	struct tfile f;
	int fd = tfile_open_direct(&f, state);
	if (fd < 0)
		return;
	enum { LEN = 65536 };
	char *in = xaligned(LEN), *out = xaligned(LEN);
	fill(in, LEN, 7);

	for (int pass = 0; pass < 2; pass++) {
		/* pass 1: the flag is implied by the fd's O_DIRECT. */
		struct folio_engine *e =
			fe_new(fd, pass ? 0 : FOLIO_ENGINE_DIRECT);
		assert_int_equal(do_io(e, FOLIO_IO_WRITE, 8192, in, LEN, 4, 0),
				 LEN);
		memset(out, 0, LEN);
		assert_int_equal(do_io(e, FOLIO_IO_READ, 8192, out, LEN, 16, 0),
				 LEN);
		assert_memory_equal(in, out, LEN);

		/* Misaligned positions and buffers, off by a byte inside
		 * the first sector and past it. */
		static const size_t skew[] = {1, 512 + 1};
		struct tio t;
		for (size_t i = 0; i < sizeof(skew) / sizeof(skew[0]); i++) {
			tio_prep(&t, FOLIO_IO_READ, 8192 + skew[i], out, 4096,
				 1, 0);
			check_refused(e, &t);
			tio_prep(&t, FOLIO_IO_WRITE, 8192, out + skew[i], 4096,
				 1, 0);
			check_refused(e, &t);
		}
		tio_prep(&t, FOLIO_IO_READ, 8192, out, 4000, 1, 0);
		check_refused(e, &t);
		/* Segment lengths count too, even when the total is fine. */
		tio_prep(&t, FOLIO_IO_WRITE, 8192, out, 4096, 2, 0);
		t.iov[0].iov_len = 1000;
		t.iov[1].iov_base = out + 1000;
		t.iov[1].iov_len = 3096;
		check_refused(e, &t);

		/* A direct read that ends past EOF: the kernel returns an
		 * unaligned count; the rest is zero-filled. */
		assert_int_equal(ftruncate(f.fd, 8192 + 1000), 0);
		memset(out, 0xaa, LEN);
		assert_int_equal(do_io(e, FOLIO_IO_READ, 8192, out, LEN, 2, 0),
				 LEN);
		assert_memory_equal(out, in, 1000);
		assert_true(all_bytes(out + 1000, LEN - 1000, 0));
		memset(out, 0xaa, LEN);
		assert_int_equal(do_io(e, FOLIO_IO_READ, 1 << 20, out, 4096, 1,
				       0), 4096);
		assert_true(all_bytes(out, 4096, 0));
		assert_int_equal(eng_flush(e), 0);
		assert_int_equal(folio_engine_free(e), 0);
	}
	direct_close(&f, fd, in, out);
}

/*
 * On an O_DIRECT descriptor, a write that is aligned except for the end
 * of its last segment (writeback's last run of an object whose size is
 * not a multiple of a sector) goes through a buffered descriptor of the
 * same file; any other misalignment is still refused.
 */
void fe_test_direct_tail(void **state)
{
	struct tfile f;
	int fd = tfile_open_direct(&f, state);
	if (fd < 0)
		return;
	enum { LEN = 16384 };
	char *in = xaligned(LEN), *out = xaligned(LEN);
	fill(in, LEN, 9);
	struct folio_engine *e = fe_new(fd, 0);
	/* 2 segments of 4096, the second cut to 1000 bytes: file size
	 * 4096 + 1000 after the write. */
	struct tio t;
	tio_prep(&t, FOLIO_IO_WRITE, 0, in, 4096 + 1000, 2, 0);
	t.iov[0].iov_len = 4096;
	t.iov[1].iov_base = in + 4096;
	t.iov[1].iov_len = 1000;
	assert_int_equal(tio_run(e, &t), 4096 + 1000);
	tio_free(&t);
	assert_int_equal(eng_flush(e), 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 4096 + 1000);
	/* A direct read sees what the buffered tail wrote. */
	memset(out, 0xaa, LEN);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, out, 8192, 1, 0), 8192);
	assert_memory_equal(out, in, 4096 + 1000);
	assert_true(all_bytes(out + 4096 + 1000, 8192 - 4096 - 1000, 0));
	/* A short first segment is not a tail: refused. */
	tio_prep(&t, FOLIO_IO_WRITE, 0, in, 4096 + 1000, 2, 0);
	t.iov[0].iov_len = 1000;
	t.iov[1].iov_base = in + 1000;
	t.iov[1].iov_len = 4096;
	check_refused(e, &t);
	tio_free(&t);
	/* Nor is a misaligned position or a short read. */
	tio_prep(&t, FOLIO_IO_WRITE, 100, in, 1000, 1, 0);
	check_refused(e, &t);
	tio_free(&t);
	tio_prep(&t, FOLIO_IO_READ, 0, out, 1000, 1, 0);
	check_refused(e, &t);
	tio_free(&t);
	assert_int_equal(folio_engine_free(e), 0);
	direct_close(&f, fd, in, out);
}

/* Descriptors positioned I/O cannot use are refused at creation: a
 * directory, a pipe, an O_APPEND file (pwrite would append wherever the
 * library asked to write) with -EINVAL, an O_PATH one with -EBADF. Errors
 * of accepted descriptors complete the request with -errno: writing
 * through a read-only fd gives EBADF. */
void fe_test_errors(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	char buf[100] = {0};
	struct folio_engine *e = NULL;
	int dfd = open(f.w->dir, O_RDONLY | O_DIRECTORY);
	assert_true(dfd >= 0);
	assert_int_equal(fe_engine->try_create(&e, dfd, 0), -EINVAL);
	close(dfd);
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(fe_engine->try_create(&e, p[0], 0), -EINVAL);
	assert_int_equal(fe_engine->try_create(&e, p[1], 0), -EINVAL);
	close(p[0]);
	close(p[1]);
	int afd = open(f.path, O_RDWR | O_APPEND);
	assert_true(afd >= 0);
	assert_int_equal(fe_engine->try_create(&e, afd, 0), -EINVAL);
	close(afd);
	int pfd = open(f.path, O_PATH);
	assert_true(pfd >= 0);
	assert_int_equal(fe_engine->try_create(&e, pfd, 0), -EBADF);
	close(pfd);
	assert_null(e);

	int ro = open(f.path, O_RDONLY);
	assert_true(ro >= 0);
	e = fe_new(ro, 0);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 0, buf, sizeof(buf), 1, 0),
			 -EBADF);
	assert_int_equal(folio_engine_free(e), 0);
	close(ro);
	tfile_close(&f);
}

/*
 * The data tests again with FOLIO_IO_WAITED on every request, for engines
 * that take the hint: there a lone request may be transferred by the
 * thread that waits for it (the posix workers' wait(), io_uring's request
 * held out of the ring), a path of its own through segments, short
 * transfers, end of file, errors, flushes, truncates and direct I/O.
 */
void fe_test_waited(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	struct folio_engine *e = fe_new(f.fd, 0);
	bool takes_hint = e->ops.caps & FOLIO_ENGINE_CAP_WAITED;
	assert_int_equal(folio_engine_free(e), 0);
	tfile_close(&f);
	if (!takes_hint)
		return;
	tio_default_flags = FOLIO_IO_WAITED;
	fe_test_round_trip(state);
	fe_test_dev_pos(state);
	fe_test_read_past_eof(state);
	fe_test_many_segments(state);
	fe_test_short_write(state);
	fe_test_flush_truncate(state);
	fe_test_direct(state);
	fe_test_direct_tail(state);
	fe_test_errors(state);
	tio_default_flags = 0;
}

/* Malformed requests are refused before any I/O. */
void fe_test_bad_requests(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	struct folio_engine *e = fe_new(f.fd, 0);
	char buf[16] = {0};
	struct tio t;
	assert_int_equal(e->ops.submit(folio_engine_ctx(e), NULL), -EINVAL);
	tio_prep(&t, FOLIO_IO_READ, 0, buf, 16, 2, 0);
	t.rq.io.op = (enum folio_io_op)3;
	check_refused(e, &t);
	t.rq.io.op = FOLIO_IO_READ;
	t.rq.io.len = 15;
	check_refused(e, &t);
	t.rq.io.len = 16;
	t.rq.io.pos = UINT64_MAX - 1;
	check_refused(e, &t);
	t.rq.io.pos = 0;
	t.rq.io.dev_pos = UINT64_MAX - 1;
	check_refused(e, &t);
	t.rq.io.dev_pos = 0;
	t.rq.io.iovcnt = -2;
	check_refused(e, &t);
	if (e->ops.wait)
		assert_wait_nothing(e); /* nothing in flight */
	/* A file engine is not a mem engine. */
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_POLL, 0),
			 -EINVAL);
	assert_int_equal(folio_engine_mem_poke(e, buf, 1, 0), -EINVAL);
	assert_int_equal(folio_engine_free(e), 0);
	tfile_close(&f);
}

/*
 * fdatasync() as the engines see it (as for ftruncate() above): fails
 * once with fdatasync_errno when that is set; counts every call, so a
 * test can tell a barrier run in the ring from one run by the library.
 */
static atomic_int fdatasync_errno, fdatasync_calls;

int fdatasync(int fd)
{
	atomic_fetch_add(&fdatasync_calls, 1);
	int err = atomic_exchange(&fdatasync_errno, 0);
	if (err) {
		errno = err;
		return -1;
	}
	return (int)syscall(SYS_fdatasync, fd);
}

/* A durable write of buf at pos (tio_run_durable()). */
/* FOLIO_IO_WAITED on the durable writes of fe_test_durable(), or 0. */
static uint32_t durable_waited;

static long durable_io_barrier(struct folio_engine *e, uint64_t pos,
			       void *buf, size_t len, int nseg,
			       bool *barrier_failed)
{
	struct tio t;
	tio_prep(&t, FOLIO_IO_WRITE, pos, buf, len, nseg, 0);
	t.rq.io.flags = FOLIO_IO_DURABLE | durable_waited;
	long r = tio_run_durable(e, &t, barrier_failed);
	tio_free(&t);
	return r;
}

static long durable_io(struct folio_engine *e, uint64_t pos, void *buf,
		       size_t len, int nseg)
{
	return durable_io_barrier(e, pos, buf, len, nseg, NULL);
}

/*
 * FOLIO_IO_DURABLE: the data is in the file when the request completes
 * and the barrier ran (posix: its fdatasync() in submit; io_uring: the
 * linked fsync, no fdatasync() call, or fdatasync() in submit() for a
 * write its submitter waits for); a failed barrier fails the write;
 * a short write stays short (no barrier); write errors are the result;
 * many at once (pairs of SQEs) all complete; bad flags are refused.
 * Engines that take FOLIO_IO_WAITED run it all again with the hint.
 */
void fe_test_durable(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	enum { LEN = 30000, N = 24 };
	char *in = xmalloc(N * LEN), *chk = xmalloc(N * LEN);
	for (int run = 0; run < 2 * fe_variants(); run++) {
		int v = run / 2;
		bool waited = run % 2;
		struct folio_engine *e = fe_new(f.fd, fe_variant_flags(v));
		assert_true(e->ops.caps & FOLIO_ENGINE_CAP_DURABLE);
		if (waited && !(e->ops.caps & FOLIO_ENGINE_CAP_WAITED)) {
			assert_int_equal(folio_engine_free(e), 0);
			continue;
		}
		durable_waited = waited ? FOLIO_IO_WAITED : 0;
		bool fsync_barrier = waited
					     ? fe_engine->waited_barrier_is_fdatasync
					     : fe_engine->barrier_is_fdatasync;
		fill(in, N * LEN, 11 + (uint64_t)v);
		int calls = atomic_load(&fdatasync_calls);
		assert_int_equal(durable_io(e, 4096, in, LEN, 3), LEN);
		assert_int_equal(pread(f.fd, chk, LEN, 4096), LEN);
		assert_memory_equal(chk, in, LEN);
		/* One barrier, where the engine says it runs. */
		assert_int_equal(atomic_load(&fdatasync_calls) - calls,
				 fsync_barrier ? 1 : 0);

		/* Many in flight at once, from one batch. */
		struct tio t[N];
		for (int i = 0; i < N; i++) {
			tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * LEN,
				 in + i * LEN, LEN, 1 + i % 4, 0);
			t[i].rq.io.flags =
				i % 2 ? FOLIO_IO_DURABLE | durable_waited : 0;
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		assert_int_equal(eng_unplug(e), 0);
		wait_all(e, t, N);
		for (int i = 0; i < N; i++) {
			assert_int_equal(atomic_load(&t[i].result), LEN);
			tio_free(&t[i]);
		}
		assert_int_equal(pread(f.fd, chk, N * LEN, 0), N * LEN);
		assert_memory_equal(chk, in, N * LEN);

		/* A failed barrier after a full transfer: the write is
		 * reported written with the barrier's error beside it
		 * (folio_io_complete_durable()), and the bytes are in the
		 * file (only posix calls fdatasync() for it). */
		if (fsync_barrier) {
			bool barrier_failed = false;
			fill(in, 512, 99);
			atomic_store(&fdatasync_errno, EIO);
			assert_int_equal(durable_io_barrier(e, 0, in, 512, 1,
							    &barrier_failed),
					 -EIO);
			assert_true(barrier_failed);
			assert_int_equal(atomic_load(&fdatasync_errno), 0);
			assert_int_equal(pread(f.fd, chk, 512, 0), 512);
			assert_memory_equal(chk, in, 512);
		}
		/* Nothing to write: the barrier still runs. */
		calls = atomic_load(&fdatasync_calls);
		assert_int_equal(durable_io(e, 0, in, 0, 0), 0);
		assert_true(atomic_load(&fdatasync_calls) - calls <= 1);

		/* Short: stopped by a file-size limit, reported short; the
		 * rest fails. */
		assert_int_equal(eng_truncate(e, 0), 0);
		struct fsize_limit fl;
		fsize_limit_begin(&fl, 10000);
		long r1 = durable_io(e, 0, in, LEN, 5);
		long r2 = durable_io(e, 20000, in, 100, 1);
		fsize_limit_end(&fl);
		assert_int_equal(r1, 10000);
		assert_int_equal(r2, -EFBIG);
		assert_int_equal(pread(f.fd, chk, LEN, 0), 10000);
		assert_memory_equal(chk, in, 10000);

		/* Bad flags and durable reads are refused. */
		struct tio b;
		tio_prep(&b, FOLIO_IO_READ, 0, chk, 512, 1, 0);
		b.rq.io.flags = FOLIO_IO_DURABLE;
		check_refused(e, &b);
		tio_prep(&b, FOLIO_IO_WRITE, 0, in, 512, 1, 0);
		b.rq.io.flags = 0x80000000u;
		check_refused(e, &b);
		b.rq.io.flags = FOLIO_IO_DURABLE | 0x400u;
		check_refused(e, &b);
		if (e->ops.wait)
			assert_wait_nothing(e); /* nothing in flight */
		assert_int_equal(folio_engine_free(e), 0);
	}

	/* Write errors are the result: the barrier does not run. */
	int ro = open(f.path, O_RDONLY);
	assert_true(ro >= 0);
	struct folio_engine *e = fe_new(ro, 0);
	for (int waited = 0; waited < 2; waited++) {
		durable_waited = waited && (e->ops.caps & FOLIO_ENGINE_CAP_WAITED)
					 ? FOLIO_IO_WAITED : 0;
		int calls = atomic_load(&fdatasync_calls);
		assert_int_equal(durable_io(e, 0, in, 100, 1), -EBADF);
		assert_int_equal(atomic_load(&fdatasync_calls), calls);
	}
	durable_waited = 0;
	assert_int_equal(folio_engine_free(e), 0);
	close(ro);
	free(in);
	free(chk);
	tfile_close(&f);
}

/* What the kernel reads ahead on the device holding `fd`, found another
 * way than the engines do: the device's sysfs directory resolved, its
 * queue there or, for a partition, in its parent (the disk). 0: none. */
static uint64_t oracle_readahead(int fd)
{
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	char link[64], real[PATH_MAX], attr[PATH_MAX + 64];
	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(st.st_dev),
		 minor(st.st_dev));
	if (!realpath(link, real))
		return 0;
	for (int up = 0; up < 2; up++) {
		snprintf(attr, sizeof(attr), "%s/queue/read_ahead_kb", real);
		FILE *fp = fopen(attr, "r");
		if (fp) {
			unsigned long long kb = 0;
			int n = fscanf(fp, "%llu", &kb);
			fclose(fp);
			return n == 1 ? kb * 1024 : 0;
		}
		char *slash = strrchr(real, '/');
		if (!slash)
			break;
		*slash = 0;
	}
	return 0;
}

void fe_test_readahead_hint(void **state)
{
	struct tfile f;
	if (!tfile_open(&f, state))
		return;
	struct folio_engine *e = fe_new(f.fd, 0);
	uint64_t want = oracle_readahead(f.fd);
	printf("# %s: the device reads ahead %llu KiB\n", f.w->dir,
	       (unsigned long long)(want / 1024));
	assert_int_equal(e->readahead_hint, want);
	if (f.w == &fe_shm)
		assert_int_equal(e->readahead_hint, 0); /* tmpfs: no device */
	assert_int_equal(folio_engine_free(e), 0);
	tfile_close(&f);
}
