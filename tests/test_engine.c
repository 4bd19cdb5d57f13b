/* SPDX-License-Identifier: MIT */
/*
 * The engine object itself (lib/engine.c): creating engines from user
 * callbacks, sized ops structs, destroy, and how the mapping treats an
 * engine that refuses requests or returns positive values.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "folio_state.h"
#include "test_util.h"

struct fake {
	int destroyed;
	int submits;
	int refuse;      /* what submit returns instead of accepting */
	int flush_ret;
	unsigned char store[65536];
};

static int fake_submit(void *ctx, struct folio_io *io)
{
	struct fake *f = ctx;
	f->submits++;
	if (f->refuse)
		return f->refuse;
	size_t at = (size_t)io->dev_pos;
	for (int i = 0; i < io->iovcnt; i++) {
		if (io->op == FOLIO_IO_WRITE)
			memcpy(f->store + at, io->iov[i].iov_base,
			       io->iov[i].iov_len);
		else
			memcpy(io->iov[i].iov_base, f->store + at,
			       io->iov[i].iov_len);
		at += io->iov[i].iov_len;
	}
	folio_io_complete(io, (ssize_t)io->len);
	return 0;
}

static int fake_flush(void *ctx)
{
	return ((struct fake *)ctx)->flush_ret;
}

static int fake_truncate(void *ctx, uint64_t size)
{
	(void)ctx;
	(void)size;
	return 0;
}

static void fake_destroy(void *ctx)
{
	((struct fake *)ctx)->destroyed++;
}

static const struct folio_engine_ops fake_ops = {
	.sz = sizeof(struct folio_engine_ops),
	.submit = fake_submit,
	.flush = fake_flush,
	.truncate = fake_truncate,
	.destroy = fake_destroy,
};

static void test_new_bad_input(void **state)
{
	(void)state;
	struct fake f = {0};
	struct folio_engine *e = (struct folio_engine *)(uintptr_t)1;
	struct folio_engine_ops ops = fake_ops;
	assert_int_equal(folio_engine_new(NULL, &ops, &f), -EINVAL);
	assert_int_equal(folio_engine_new(&e, NULL, &f), -EINVAL);
	ops.submit = NULL;
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	ops = fake_ops;
	ops.flush = NULL;
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	ops = fake_ops;
	ops.truncate = NULL;
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	ops = fake_ops;
	ops.sz = offsetof(struct folio_engine_ops, truncate);
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	ops.sz = 0;
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	/* Nothing was created or written. */
	assert_ptr_equal(e, (struct folio_engine *)(uintptr_t)1);
	assert_int_equal(f.destroyed, 0);
	assert_null(folio_engine_ctx(NULL));
	assert_int_equal(folio_engine_free(NULL), 0);
	folio_io_complete(NULL, 0); /* ignored */
}

static void test_lifecycle(void **state)
{
	(void)state;
	struct fake f = {0};
	struct folio_engine *e;
	assert_int_equal(folio_engine_new(&e, &fake_ops, &f), 0);
	assert_ptr_equal(folio_engine_ctx(e), &f);
	assert_int_equal(folio_engine_free(e), 0);
	assert_int_equal(f.destroyed, 1);
}

/* An older caller's smaller ops struct: fields past its sz are unset,
 * whatever the memory after it holds. */
static void test_sized_ops(void **state)
{
	(void)state;
	struct fake f = {0};
	struct folio_engine_ops ops = fake_ops;
	ops.sz = offsetof(struct folio_engine_ops, map);
	ops.destroy = fake_destroy; /* past sz: must be ignored */
	struct folio_engine *e;
	assert_int_equal(folio_engine_new(&e, &ops, &f), 0);
	assert_int_equal(folio_engine_free(e), 0);
	assert_int_equal(f.destroyed, 0);
}

/* A refused request fails the operation with the engine's errno, a
 * positive return counts as -EIO, and nothing is lost. */
static void test_refused_requests(void **state)
{
	(void)state;
	struct fake f = {0};
	struct folio_engine *e;
	struct folio_mapping *m;
	assert_int_equal(folio_engine_new(&e, &fake_ops, &f), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o), .engine = e,
				       .size = 8192};
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	unsigned char buf[100];
	memset(buf, 7, sizeof(buf));

	f.refuse = -EAGAIN;
	assert_int_equal(folio_mapping_read(m, buf, 10, 0), -EAGAIN);
	f.refuse = 0;
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 10), 100);
	f.refuse = 5; /* not a valid return: treated as -EIO */
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, 4096);
	f.refuse = 0;
	f.flush_ret = 3;
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	f.flush_ret = 0;
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_memory_equal(f.store + 10, buf, sizeof(buf));
	test_close(m, e);
	assert_int_equal(f.destroyed, 1);
}

/* A newer caller's larger ops struct is taken when the part this library
 * does not know is zero, refused with -E2BIG when it holds anything: an
 * unknown callback must never be ignored silently. */
static void test_larger_ops(void **state)
{
	(void)state;
	struct fake f = {0};
	struct {
		struct folio_engine_ops ops;
		void (*newer)(void *);
	} big = {.ops = fake_ops};
	big.ops.sz = sizeof(big);
	big.newer = fake_destroy;
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_new(&e, &big.ops, &f), -E2BIG);
	assert_null(e);
	big.newer = NULL;
	assert_int_equal(folio_engine_new(&e, &big.ops, &f), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

/* A polled engine whose wait() fails a few times before it completes
 * what it holds: sync reports the error instead of claiming success,
 * waits for its requests all the same (they point into folio memory)
 * without spinning, and the next sync succeeds. */
struct flaky {
	struct fake base;
	struct folio_io *held[16];
	int nheld;
	int wait_failures; /* wait() calls still to fail */
	int waits;
};

static int flaky_submit(void *ctx, struct folio_io *io)
{
	struct flaky *k = ctx;
	if (k->nheld == 16)
		return -EAGAIN;
	k->held[k->nheld++] = io;
	return 0;
}

static int flaky_wait(void *ctx)
{
	struct flaky *k = ctx;
	k->waits++;
	if (k->wait_failures > 0) {
		k->wait_failures--;
		return -EIO;
	}
	while (k->nheld)
		fake_submit(&k->base, k->held[--k->nheld]);
	return 0;
}

/* A mapping over a user engine that holds requests until @wait runs. */
static struct folio_mapping *held_mapping(struct flaky *k,
					  int (*wait)(void *ctx),
					  struct folio_engine **e)
{
	struct folio_engine_ops ops = fake_ops;
	ops.submit = flaky_submit;
	ops.wait = wait;
	ops.destroy = NULL;
	struct folio_mapping *m;
	assert_int_equal(folio_engine_new(e, &ops, k), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o), .engine = *e};
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	return m;
}

static void test_wait_error(void **state)
{
	(void)state;
	struct flaky k = {.wait_failures = 3};
	struct folio_engine *e;
	struct folio_mapping *m = held_mapping(&k, flaky_wait, &e);
	unsigned char buf[5000], got[5000];
	memset(buf, 0x42, sizeof(buf));
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 0),
			 sizeof(buf));
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	assert_int_equal(k.nheld, 0);
	assert_int_equal(k.waits, 4);
	assert_memory_equal(k.base.store, buf, sizeof(buf));
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	/* A read whose requests completed after wait() failed has its
	 * bytes: they are what it returns. */
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0), 0);
	k.wait_failures = 1;
	assert_int_equal(folio_mapping_read(m, got, sizeof(got), 0),
			 sizeof(got));
	assert_int_equal(k.nheld, 0);
	assert_memory_equal(got, buf, sizeof(got));
	test_close(m, e);
}

/* Its wait() answers FOLIO_ENGINE_WAIT_IDLE while it still holds
 * requests, `idle_answers` times, then completes them: an engine that
 * looked before a request it must poll for arrived. */
static int late_wait(void *ctx)
{
	struct flaky *k = ctx;
	k->waits++;
	if (k->wait_failures > 0) {
		k->wait_failures--;
		return FOLIO_ENGINE_WAIT_IDLE;
	}
	return flaky_wait(ctx);
}

struct late_sync {
	struct folio_mapping *m;
	atomic_int ret; /* 1 until the sync returned */
};

static void *late_sync_main(void *p)
{
	struct late_sync *ls = p;
	atomic_store(&ls->ret, folio_mapping_sync(ls->m, NULL));
	return NULL;
}

/* After FOLIO_ENGINE_WAIT_IDLE the library still calls wait() again
 * before long (ENGINE_IDLE_RECHECK_NS), though no completion woke it. */
static void test_wait_idle_rechecks(void **state)
{
	(void)state;
	struct flaky k = {.wait_failures = 2};
	struct folio_engine *e;
	struct folio_mapping *m = held_mapping(&k, late_wait, &e);
	unsigned char buf[4096];
	memset(buf, 0x37, sizeof(buf));
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 0),
			 sizeof(buf));
	/* Static: a failed check leaves the thread running. */
	static struct late_sync ls;
	ls.m = m;
	atomic_store(&ls.ret, 1);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, late_sync_main, &ls), 0);
	struct timespec nap = {0, 1000000};
	for (int ms = 0; atomic_load(&ls.ret) == 1; ms++) {
		if (ms == 10000)
			fail_msg("sync still waiting after an idle wait()");
		nanosleep(&nap, NULL);
	}
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(atomic_load(&ls.ret), 0);
	assert_int_equal(k.nheld, 0);
	assert_true(k.waits >= 3);
	assert_memory_equal(k.base.store, buf, sizeof(buf));
	test_close(m, e);
}

/*
 * A user engine that takes durable writes (FOLIO_ENGINE_CAP_DURABLE),
 * counting them and its flush() calls; a durable write may be made to
 * fail (its barrier) or to stop short.
 */
struct dfake {
	struct fake base;
	int flushes, durables, plain;
	ssize_t durable_result; /* 0: complete in full */
};

static int dfake_submit(void *ctx, struct folio_io *io)
{
	struct dfake *d = ctx;
	if (io->op != FOLIO_IO_WRITE || !(io->flags & FOLIO_IO_DURABLE)) {
		d->plain += io->op == FOLIO_IO_WRITE;
		return fake_submit(&d->base, io);
	}
	d->durables++;
	size_t at = (size_t)io->dev_pos;
	for (int i = 0; i < io->iovcnt; i++) {
		memcpy(d->base.store + at, io->iov[i].iov_base,
		       io->iov[i].iov_len);
		at += io->iov[i].iov_len;
	}
	ssize_t r = d->durable_result ? d->durable_result : (ssize_t)io->len;
	d->durable_result = 0;
	folio_io_complete(io, r);
	return 0;
}

static int dfake_flush(void *ctx)
{
	struct dfake *d = ctx;
	d->flushes++;
	return d->base.flush_ret;
}

static struct folio_mapping *dfake_mapping(struct dfake *d, uint64_t caps,
					   struct folio_engine **e)
{
	struct folio_engine_ops ops = fake_ops;
	ops.submit = dfake_submit;
	ops.flush = dfake_flush;
	ops.destroy = NULL;
	ops.caps = caps;
	assert_int_equal(folio_engine_new(e, &ops, d), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o), .engine = *e,
				       .size = 65536,
				       .max_folio_size = 16384};
	struct folio_mapping *m;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	return m;
}

/* Unknown capability bits are refused; a struct that ends before caps
 * has none, whatever follows it. */
static void test_caps_bad_input(void **state)
{
	(void)state;
	struct fake f = {0};
	struct folio_engine *e = NULL;
	struct folio_engine_ops ops = fake_ops;
	ops.caps = 0x4;
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	ops.caps = ~(uint64_t)0;
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	assert_null(e);
	ops.sz = offsetof(struct folio_engine_ops, caps);
	assert_int_equal(folio_engine_new(&e, &ops, &f), 0);
	assert_int_equal(folio_engine_free(e), 0);
	assert_int_equal(f.destroyed, 1);

	/* Taken for none: its sync writes, then flushes. */
	struct dfake d = {0};
	ops = fake_ops;
	ops.submit = dfake_submit;
	ops.flush = dfake_flush;
	ops.destroy = NULL;
	ops.caps = FOLIO_ENGINE_CAP_DURABLE;
	ops.sz = offsetof(struct folio_engine_ops, caps);
	assert_int_equal(folio_engine_new(&e, &ops, &d), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o), .engine = e};
	struct folio_mapping *m;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	unsigned char buf[100] = {1};
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 0), 100);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(d.durables, 0);
	assert_int_equal(d.flushes, 1);
	test_close(m, e);
}

/*
 * How a sync uses the capability: one request goes durable and no
 * flush() follows (unstable data of earlier writeback is covered by its
 * barrier); two requests go plain and one flush() follows; an engine
 * without the capability always gets plain writes and a flush(). A failed
 * durable write fails the sync and everything unstable is written again;
 * a short one is finished plain and then flushed.
 */
static void test_durable_sync(void **state)
{
	(void)state;
	unsigned char buf[4096], big[3 * 4096];
	memset(buf, 0x33, sizeof(buf));
	memset(big, 0x44, sizeof(big));
	struct folio_engine *e;

	struct dfake d = {0};
	struct folio_mapping *m = dfake_mapping(&d, 0, &e);
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 0), 4096);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(d.durables, 0);
	assert_int_equal(d.plain, 1);
	assert_int_equal(d.flushes, 1);
	test_close(m, e);

	d = (struct dfake){0};
	m = dfake_mapping(&d, FOLIO_ENGINE_CAP_DURABLE, &e);
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 0), 4096);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(d.durables, 1);
	assert_int_equal(d.flushes, 0);
	assert_int_equal(test_mapping_stats(m).flushes, 1);
	assert_memory_equal(d.base.store, buf, sizeof(buf));

	/* Earlier writeback left block 8192 unstable: covered too. */
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 8192), 4096);
	struct folio_writeback_opts wo = {.sz = sizeof(wo),
					  .flags = FOLIO_WB_WAIT};
	assert_int_equal(folio_mapping_writeback(m, &wo), 4096);
	assert_int_equal(test_mapping_stats(m).unstable_bytes, 4096);
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 0), 4096);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(d.durables, 2);
	assert_int_equal(d.flushes, 0);
	assert_int_equal(test_mapping_stats(m).unstable_bytes, 0);

	/* Two requests: plain writes, one flush. */
	int plain = d.plain;
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 0), 4096);
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 32768),
			 4096);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(d.durables, 2);
	assert_int_equal(d.plain, plain + 2);
	assert_int_equal(d.flushes, 1);

	/* The durable write fails: so does the sync; block 8192, written
	 * back before and unstable, is dirty again with block 0. */
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 8192), 4096);
	assert_int_equal(folio_mapping_writeback(m, &wo), 4096);
	assert_int_equal(folio_mapping_write(m, big, sizeof(big), 16384),
			 sizeof(big));
	d.durable_result = -EIO;
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.dirty_bytes, 4096 + sizeof(big));
	assert_int_equal(st.unstable_bytes, 0);
	assert_int_equal(st.errors, 1);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, 0);
	assert_memory_equal(d.base.store + 16384, big, sizeof(big));

	/* Short: the rest goes plain, then a flush covers both. */
	plain = d.plain;
	int flushes = d.flushes, durables = d.durables;
	assert_int_equal(folio_mapping_write(m, big, sizeof(big), 16384),
			 sizeof(big));
	d.durable_result = 1000;
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(d.durables, durables + 1);
	assert_int_equal(d.plain, plain + 1);
	assert_int_equal(d.flushes, flushes + 1);
	st = test_mapping_stats(m);
	assert_int_equal(st.dirty_bytes, 0);
	assert_int_equal(st.unstable_bytes, 0);

	/* A failing flush() after a short durable write fails the sync. */
	assert_int_equal(folio_mapping_write(m, big, sizeof(big), 16384),
			 sizeof(big));
	d.durable_result = 1000;
	d.base.flush_ret = -EIO;
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, sizeof(big));
	d.base.flush_ret = 0;
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	test_close(m, e);
}

/* Counts the requests of each op that carried FOLIO_IO_WAITED. */
struct wfake {
	struct fake base;
	int waited[2], plain[2]; /* by op: [FOLIO_IO_READ], [FOLIO_IO_WRITE] */
};

static int wfake_submit(void *ctx, struct folio_io *io)
{
	struct wfake *w = ctx;
	int op = io->op == FOLIO_IO_WRITE;
	if (io->flags & FOLIO_IO_WAITED)
		w->waited[op]++;
	else
		w->plain[op]++;
	return fake_submit(&w->base, io);
}

/*
 * Which requests carry the FOLIO_IO_WAITED hint: those whose submitter
 * waits for them next (a sync's writes, reads a read or write needs, a
 * direct transfer), never readahead or a writeback that does not wait,
 * and nothing at all to an engine that does not take the hint.
 */
static void test_waited_hint(void **state)
{
	(void)state;
	for (int cap = 0; cap < 2; cap++) {
		struct wfake w = {0};
		struct folio_engine_ops ops = fake_ops;
		ops.submit = wfake_submit;
		ops.destroy = NULL;
		ops.caps = cap ? FOLIO_ENGINE_CAP_WAITED : 0;
		struct folio_engine *e;
		assert_int_equal(folio_engine_new(&e, &ops, &w), 0);
		struct folio_mapping_opts o = {.sz = sizeof(o), .engine = e,
					       .size = 65536,
					       .max_folio_size = 4096,
					       .flags = FOLIO_MAPPING_NO_READAHEAD};
		struct folio_mapping *m;
		assert_int_equal(folio_mapping_new(&m, &o), 0);
		static _Alignas(4096) unsigned char buf[4096];
		memset(buf, 0x5a, sizeof(buf));
		int *hinted = cap ? w.waited : w.plain;

		/* A write of part of a block reads the block first. */
		assert_int_equal(folio_mapping_write(m, buf, 100, 4096), 100);
		assert_int_equal(hinted[0], 1);
		assert_int_equal(w.waited[0] + w.plain[0], 1);
		/* A read that misses. */
		assert_int_equal(folio_mapping_read(m, buf, 4096, 8192), 4096);
		assert_int_equal(hinted[0], 2);
		/* Readahead: nobody waits for it yet. */
		int plain_reads = w.plain[0];
		assert_int_equal(folio_mapping_readahead(m, 16384, 8192), 0);
		assert_true(w.plain[0] > plain_reads);
		assert_int_equal(w.waited[0], cap ? 2 : 0);
		plain_reads = w.plain[0];

		/* Writeback that does not wait, then a sync. */
		struct folio_writeback_opts wo = {.sz = sizeof(wo)};
		assert_int_equal(folio_mapping_writeback(m, &wo), 4096);
		assert_int_equal(w.plain[1], 1);
		assert_int_equal(folio_mapping_write(m, buf, 4096, 0), 4096);
		assert_int_equal(folio_mapping_sync(m, NULL), 0);
		assert_int_equal(hinted[1], cap ? 1 : 2);
		/* Direct transfers wait for their requests. */
		assert_int_equal(folio_mapping_write_direct(m, buf, 4096, 32768,
							    0),
				 4096);
		assert_int_equal(folio_mapping_read_direct(m, buf, 4096, 32768),
				 4096);
		assert_int_equal(w.waited[1], cap ? 2 : 0);
		assert_int_equal(w.waited[0], cap ? 3 : 0);
		assert_int_equal(w.plain[1], cap ? 1 : 3);
		assert_int_equal(w.plain[0], plain_reads + (cap ? 0 : 1));
		test_close(m, e);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_bad_input),
		cmocka_unit_test(test_lifecycle),
		cmocka_unit_test(test_sized_ops),
		cmocka_unit_test(test_refused_requests),
		cmocka_unit_test(test_larger_ops),
		cmocka_unit_test(test_wait_error),
		cmocka_unit_test(test_wait_idle_rechecks),
		cmocka_unit_test(test_caps_bad_input),
		cmocka_unit_test(test_durable_sync),
		cmocka_unit_test(test_waited_hint),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
