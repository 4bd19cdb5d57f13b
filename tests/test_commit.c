/* SPDX-License-Identifier: MIT */
/*
 * Flushes and unstable data (lib/mapping/commit.c): written blocks stay the
 * cache's until a flush that began after their write succeeds; a failed
 * flush makes them dirty again so the next sync rewrites them; flushes of
 * one mapping run one at a time and late arrivals share the next one.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <time.h>
#include <unistd.h>

#include "folio_state.h"
#include "folio_state_mem.h"
#include "test_util.h"
#include "mapping/commit.h"

#define KIB 1024u

static struct folio_mapping *new_mapping(struct folio_engine *e,
					 size_t max_folio, unsigned flags)
{
	struct folio_mapping_opts o = {.sz = sizeof(o),
				       .block_size = 4096,
				       .max_folio_size = max_folio,
				       .flags = flags,
				       .engine = e};
	struct folio_mapping *m;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	return m;
}

/* A 1 MiB mem engine, with a volatile cache when asked, and a mapping of
 * it (new_mapping()). */
static struct folio_mapping *mem_mapping(struct folio_engine **e,
					 bool volatile_cache,
					 size_t max_folio, unsigned flags)
{
	assert_int_equal(folio_engine_mem(e, 1u << 20), 0);
	if (volatile_cache)
		assert_int_equal(folio_engine_mem_set_volatile(*e, true), 0);
	return new_mapping(*e, max_folio, flags);
}

/* The next engine call among `ops` (FOLIO_MEM_OP_*) fails with -EIO;
 * `flags` are the rule's FOLIO_MEM_FAULT_* flags. */
static void fail_next(struct folio_engine *e, unsigned ops, unsigned flags)
{
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = ops,
				    .count = 1,
				    .error = -EIO,
				    .flags = flags};
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
}

static void pattern(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed * 29 + i * 13 + (i >> 8));
}

/*
 * A flush that fails, and loses what the disk cache held, must not be
 * forgotten: the next sync writes the bytes again and flushes again, and
 * only then returns 0 (defect: the second sync issued no write, returned
 * 0, and a power cut then lost the data).
 */
static void flush_failure_rewrites(unsigned fault_flags)
{
	struct folio_engine *e;
	struct folio_mapping *m = mem_mapping(&e, true, 64 * KIB, 0);
	unsigned char data[3 * 4096 + 100], got[sizeof(data)];
	pattern(data, sizeof(data), 1);
	assert_int_equal(folio_mapping_write(m, data, sizeof(data), 5000),
			 sizeof(data));
	fail_next(e, FOLIO_MEM_OP_FLUSH, fault_flags);
	folio_errseq_t other = folio_mapping_err_cursor(m);
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	/* Everything the failed flush covered is dirty again. */
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.unstable_bytes, 0);
	assert_true(st.dirty_bytes >= sizeof(data));
	uint64_t writes = test_mem_stats(e).write_bytes;
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_true(test_mem_stats(e).write_bytes >= writes + sizeof(data));
	/* Another cursor sees the error once. */
	assert_int_equal(folio_mapping_sync(m, &other), -EIO);
	assert_int_equal(folio_mapping_sync(m, &other), 0);
	/* Durable now: a power cut keeps it. */
	assert_int_equal(folio_engine_mem_power_cut(e, 0, 0), 0);
	assert_int_equal(folio_engine_mem_peek_durable(e, got, sizeof(got),
						       5000),
			 0);
	assert_memory_equal(got, data, sizeof(data));
	assert_int_equal(test_mem_stats(e).durable_size, 5000 + sizeof(data));
	test_close(m, e);
}

static void test_flush_failure_lose(void **state)
{
	(void)state;
	flush_failure_rewrites(FOLIO_MEM_FAULT_LOSE);
}

static void test_flush_failure_keep(void **state)
{
	(void)state;
	flush_failure_rewrites(0);
}

/* Drop policy (Linux): a failed flush is reported once and nothing is
 * kept for it. */
static void test_flush_failure_drop_policy(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = mem_mapping(&e, false, 64 * KIB,
					      FOLIO_MAPPING_DROP_ON_ERROR);
	unsigned char data[4096] = {7};
	assert_int_equal(folio_mapping_write(m, data, sizeof(data), 0),
			 sizeof(data));
	assert_int_equal(folio_mapping_writeback(m, NULL), 4096);
	assert_int_equal(test_mapping_stats(m).unstable_bytes, 0);
	fail_next(e, FOLIO_MEM_OP_FLUSH, 0);
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	uint64_t writes = test_mem_stats(e).write_requests;
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mem_stats(e).write_requests, writes);
	test_close(m, e);
}

/*
 * A failed flush redoes a pending truncate: it cuts the store and sets it
 * to EOF again. The store's size is then EOF, and a discard reaching EOF
 * must not pull the mapping below it (fuzz: with the write that would have
 * grown the store failing, the mapping still took the store to end at the
 * old cut, and the discard left it smaller than the store).
 */
static void test_redone_truncate_then_discard(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = mem_mapping(&e, false, 64 * KIB, 0);
	unsigned char data[20000];
	pattern(data, sizeof(data), 3);
	assert_int_equal(folio_mapping_write(m, data, sizeof(data), 0),
			 sizeof(data));
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(folio_mapping_truncate(m, 8000), 0);
	assert_int_equal(folio_mapping_write(m, data, 4096, 8192), 4096);
	/* The write fails (so nothing grows the store) and so does the
	 * flush (so the truncate is redone, up to EOF). */
	struct folio_mem_fault wfault = {.sz = sizeof(wfault),
					 .ops = FOLIO_MEM_OP_WRITE,
					 .pos = 8192,
					 .len = 4096,
					 .error = -EIO};
	assert_int_equal(folio_engine_mem_inject(e, &wfault), 0);
	fail_next(e, FOLIO_MEM_OP_FLUSH, 0);
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	assert_int_equal(test_mem_stats(e).size, 12288);
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	assert_int_equal(folio_mapping_invalidate(m, 10000, 0,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_true((uint64_t)folio_mapping_size(m) >= test_mem_stats(e).size);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mem_stats(e).size,
			 (uint64_t)folio_mapping_size(m));
	test_close(m, e);
}

/*
 * A failed flush that lost a truncate, whose redo of that truncate fails
 * too: the next flush must not succeed over a store that still holds
 * what the truncate cut (defect, found by test_pool_model: the next
 * sync's flush succeeded, settled the truncate, and the old tail was
 * durable past EOF), and reads of uncached blocks there must not return
 * that tail (they did, once reclaim had dropped the zeros). It redoes
 * the truncate first and fails once, the sync after it succeeds with the
 * store cut.
 */
static void test_failed_redo_is_owed(void **state)
{
	(void)state;
	struct folio_engine *e;
	/* One-block folios: the clean ones of the cut range can go. */
	struct folio_mapping *m = mem_mapping(&e, true, 4096, 0);
	unsigned char data[64 * 1024], got[64 * 1024];
	pattern(data, sizeof(data), 3);
	assert_int_equal(folio_mapping_write(m, data, sizeof(data), 0),
			 sizeof(data));
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(folio_mapping_truncate(m, 10000), 0);
	assert_int_equal(folio_mapping_write(m, data, 100, 20000), 100);
	fail_next(e, FOLIO_MEM_OP_FLUSH, FOLIO_MEM_FAULT_LOSE);
	fail_next(e, FOLIO_MEM_OP_TRUNCATE, 0);
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	/* The store is the durable one again, 64 KiB long, its old tail
	 * back; reads must not see it, cached or not. */
	assert_int_equal(test_mem_stats(e).size, sizeof(data));
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0), -EBUSY);
	memset(got, 0xee, sizeof(got));
	assert_int_equal(folio_mapping_read(m, got, sizeof(got), 0), 20100);
	assert_memory_equal(got, data, 10000);
	for (size_t i = 10000; i < 20000; i++)
		assert_int_equal(got[i], 0);
	assert_memory_equal(got + 20000, data, 100);
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO); /* the redo */
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	struct folio_mem_stats st = test_mem_stats(e);
	assert_int_equal(st.durable_size, 20100);
	memset(got, 0xee, sizeof(got));
	assert_int_equal(folio_engine_mem_peek_durable(e, got, 20100, 0), 0);
	assert_memory_equal(got, data, 10000);
	for (size_t i = 10000; i < 20000; i++)
		assert_int_equal(got[i], 0);
	assert_memory_equal(got + 20000, data, 100);
	test_close(m, e);
}

/*
 * A flush of the engine fails and loses the engine's cache outside this
 * mapping's own flushes (another mapping's sync over the same engine)
 * while a truncate of this mapping sits in that cache. This mapping's
 * next flush succeeds but proves nothing (a failure came since its
 * last one), so its sync fails, and it must redo the truncate as after
 * a failure of its own flush (defect: it only made unstable blocks dirty
 * again; the sync after it settled the truncate, and a power cut brought
 * the cut tail back).
 */
static void test_foreign_flush_failure_redoes_truncate(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = mem_mapping(&e, true, 64 * KIB, 0);
	struct folio_mapping *other = new_mapping(e, 64 * KIB, 0);
	unsigned char data[64 * KIB], got[64 * KIB];
	pattern(data, sizeof(data), 5);
	assert_int_equal(folio_mapping_write(m, data, sizeof(data), 0),
			 sizeof(data));
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(folio_mapping_truncate(m, 10000), 0);
	fail_next(e, FOLIO_MEM_OP_FLUSH, FOLIO_MEM_FAULT_LOSE);
	assert_int_equal(folio_mapping_sync(other, NULL), -EIO);
	/* The cache went with the failure: the store has its tail back. */
	assert_int_equal(test_mem_stats(e).size, sizeof(data));
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(folio_engine_mem_power_cut(e, 0, 0), 0);
	struct folio_mem_stats st = test_mem_stats(e);
	assert_int_equal(st.durable_size, 10000);
	assert_int_equal(folio_engine_mem_peek_durable(e, got, 10000, 0), 0);
	assert_memory_equal(got, data, 10000);
	assert_int_equal(folio_mapping_free(other), 0);
	test_close(m, e);
}

/* Written but not flushed: clean, counted, and kept by invalidate and
 * free until a sync made it durable. */
static void test_unstable_kept(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = mem_mapping(&e, false, 16 * KIB, 0);
	unsigned char data[10000];
	pattern(data, sizeof(data), 2);
	assert_int_equal(folio_mapping_write(m, data, sizeof(data), 0),
			 sizeof(data));
	assert_int_equal(folio_mapping_writeback(m, NULL), sizeof(data));
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.dirty_bytes, 0);
	assert_int_equal(st.unstable_bytes, 3 * 4096);
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0), -EBUSY);
	assert_int_equal(test_mapping_stats(m).folios, st.folios);
	assert_int_equal(folio_mapping_free(m), -EBUSY);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	st = test_mapping_stats(m);
	assert_int_equal(st.unstable_bytes, 0);
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0), 0);
	assert_int_equal(test_mapping_stats(m).folios, 0);
	/* Truncate forgets unstable bytes past the new size, discard those
	 * it throws away. */
	assert_int_equal(folio_mapping_write(m, data, sizeof(data), 0),
			 sizeof(data));
	assert_int_equal(folio_mapping_writeback(m, NULL), sizeof(data));
	assert_int_equal(folio_mapping_truncate(m, 4096), 0);
	assert_int_equal(test_mapping_stats(m).unstable_bytes, 4096);
	assert_int_equal(folio_mapping_invalidate(m, 0, 0,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	st = test_mapping_stats(m);
	assert_int_equal(st.unstable_bytes, 0);
	assert_int_equal(st.folios, 0);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

/*
 * A gated engine: writes complete inline into a buffer; flush() can be
 * held until the test releases it, so writes can complete while a flush
 * runs and several syncs can arrive during one.
 */
struct gated {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned char bytes[1u << 20];
	uint64_t size;
	bool hold;         /* flushes wait for release */
	unsigned in_flush; /* flushes waiting now */
	unsigned flushes;  /* flushes started */
	unsigned release;  /* flushes allowed to finish */
};

/* Move @io's bytes between its buffers and @store (a write into it, a
 * read out of it); returns where the transfer ended. */
static uint64_t io_copy(unsigned char *store, const struct folio_io *io)
{
	uint64_t at = io->dev_pos;
	for (int i = 0; i < io->iovcnt; i++) {
		if (io->op == FOLIO_IO_WRITE)
			memcpy(store + at, io->iov[i].iov_base,
			       io->iov[i].iov_len);
		else
			memcpy(io->iov[i].iov_base, store + at,
			       io->iov[i].iov_len);
		at += io->iov[i].iov_len;
	}
	return at;
}

static int gated_submit(void *ctx, struct folio_io *io)
{
	struct gated *g = ctx;
	pthread_mutex_lock(&g->lock);
	uint64_t at = io_copy(g->bytes, io);
	if (io->op == FOLIO_IO_WRITE && at > g->size)
		g->size = at;
	pthread_mutex_unlock(&g->lock);
	folio_io_complete(io, (ssize_t)io->len);
	return 0;
}

static int gated_flush(void *ctx)
{
	struct gated *g = ctx;
	pthread_mutex_lock(&g->lock);
	unsigned me = ++g->flushes;
	if (g->hold) {
		g->in_flush++;
		pthread_cond_broadcast(&g->cond);
		while (g->release < me)
			pthread_cond_wait(&g->cond, &g->lock);
		g->in_flush--;
	}
	pthread_mutex_unlock(&g->lock);
	return 0;
}

static int gated_truncate(void *ctx, uint64_t size)
{
	struct gated *g = ctx;
	pthread_mutex_lock(&g->lock);
	g->size = size;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

static struct gated *gated_new(struct folio_engine **e)
{
	struct gated *g = calloc(1, sizeof(*g));
	assert_non_null(g);
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	static const struct folio_engine_ops ops = {
		.sz = sizeof(ops),
		.submit = gated_submit,
		.flush = gated_flush,
		.truncate = gated_truncate,
	};
	assert_int_equal(folio_engine_new(e, &ops, g), 0);
	return g;
}

static void gated_free(struct gated *g)
{
	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

/* Wait until `n` flushes are being held. */
static void gated_wait_held(struct gated *g, unsigned n)
{
	pthread_mutex_lock(&g->lock);
	while (g->in_flush < n)
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
}

static void gated_release(struct gated *g, unsigned upto)
{
	pthread_mutex_lock(&g->lock);
	g->release = upto;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

/* Stop holding flushes and let the first `upto` finish. */
static void gated_open(struct gated *g, unsigned upto)
{
	pthread_mutex_lock(&g->lock);
	g->hold = false;
	pthread_mutex_unlock(&g->lock);
	gated_release(g, upto);
}

static unsigned gated_flushes(struct gated *g)
{
	pthread_mutex_lock(&g->lock);
	unsigned n = g->flushes;
	pthread_mutex_unlock(&g->lock);
	return n;
}

struct syncer {
	pthread_t thread;
	struct folio_mapping *m;
	folio_errseq_t cursor;
	int result;
	atomic_bool done;
};

static void *syncer_main(void *arg)
{
	struct syncer *s = arg;
	s->result = folio_mapping_sync(s->m, &s->cursor);
	atomic_store(&s->done, true);
	return NULL;
}

static void syncer_start(struct syncer *s, struct folio_mapping *m)
{
	s->m = m;
	s->cursor = folio_mapping_err_cursor(m);
	s->result = 1;
	atomic_store(&s->done, false);
	assert_int_equal(pthread_create(&s->thread, NULL, syncer_main, s), 0);
}

/*
 * A flush round for several syncs lets the writes other syncs have in
 * flight complete first, for at most one flush time (commit.c,
 * wait_writes_in_flight()), so that its flush covers them. The engine
 * holds back the write at BATCH_HOLD_POS and notes, at each flush,
 * whether it was still held.
 */
#define BATCH_HOLD_POS (256u * 1024)
struct batchy {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned char bytes[1u << 20];
	struct folio_io *held;
	unsigned flushes;
	bool held_at_flush[8];
	useconds_t flush_us;
};

static int batchy_submit(void *ctx, struct folio_io *io)
{
	struct batchy *b = ctx;
	pthread_mutex_lock(&b->lock);
	io_copy(b->bytes, io);
	bool hold = io->op == FOLIO_IO_WRITE && io->dev_pos == BATCH_HOLD_POS;
	if (hold) {
		b->held = io;
		pthread_cond_broadcast(&b->cond);
	}
	pthread_mutex_unlock(&b->lock);
	if (!hold)
		folio_io_complete(io, (ssize_t)io->len);
	return 0;
}

static int batchy_flush(void *ctx)
{
	struct batchy *b = ctx;
	pthread_mutex_lock(&b->lock);
	unsigned n = b->flushes++;
	if (n < 8)
		b->held_at_flush[n] = b->held != NULL;
	useconds_t us = b->flush_us;
	pthread_mutex_unlock(&b->lock);
	usleep(us);
	return 0;
}

/* The store has no size of its own to cut. */
static int noop_truncate(void *ctx, uint64_t size)
{
	(void)ctx;
	(void)size;
	return 0;
}

static void batchy_complete_held(struct batchy *b)
{
	pthread_mutex_lock(&b->lock);
	struct folio_io *io = b->held;
	b->held = NULL;
	pthread_mutex_unlock(&b->lock);
	folio_io_complete(io, (ssize_t)io->len);
}

static struct batchy *batch_engine;
static struct folio_mapping *batch_m;
static struct syncer batch_b;
static pthread_t batch_releaser;
static bool batch_hook_fired, batch_release_early;

static void *batch_release_later(void *arg)
{
	usleep(1000);
	batchy_complete_held(arg);
	return NULL;
}

/* In the round of the test's own sync, before it looks: another sync
 * whose write is in flight, which that round's sync does not need. */
static void batch_hook(struct folio_mapping *m)
{
	if (m != batch_m || batch_hook_fired)
		return;
	batch_hook_fired = true;
	unsigned char b[4096];
	pattern(b, sizeof(b), 7);
	assert_int_equal(folio_mapping_write(m, b, sizeof(b), BATCH_HOLD_POS),
			 4096);
	syncer_start(&batch_b, m);
	pthread_mutex_lock(&batch_engine->lock);
	while (!batch_engine->held)
		pthread_cond_wait(&batch_engine->cond, &batch_engine->lock);
	pthread_mutex_unlock(&batch_engine->lock);
	if (batch_release_early)
		assert_int_equal(pthread_create(&batch_releaser, NULL,
						batch_release_later,
						batch_engine),
				 0);
}

/* `early`: the held write completes 1 ms into the round's wait (bounded
 * by the 10 ms cap, the last flush having taken 20); otherwise only after
 * the test's sync returned, which it must do all the same. */
static void batch_round(bool early)
{
	struct batchy *b = calloc(1, sizeof(*b));
	assert_non_null(b);
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cond, NULL);
	static const struct folio_engine_ops ops = {
		.sz = sizeof(ops),
		.submit = batchy_submit,
		.flush = batchy_flush,
		.truncate = noop_truncate,
	};
	struct folio_engine *e;
	assert_int_equal(folio_engine_new(&e, &ops, b), 0);
	struct folio_mapping *m = new_mapping(e, 4096, 0);
	unsigned char a[4096];
	pattern(a, sizeof(a), 5);
	/* A first sync times the engine's flush: the wait's bound. */
	b->flush_us = 20000;
	assert_int_equal(folio_mapping_write(m, a, sizeof(a), 0), 4096);
	folio_errseq_t cur = folio_mapping_err_cursor(m);
	assert_int_equal(folio_mapping_sync(m, &cur), 0);
	pthread_mutex_lock(&b->lock);
	b->flush_us = 0;
	pthread_mutex_unlock(&b->lock);

	a[0]++;
	assert_int_equal(folio_mapping_write(m, a, sizeof(a), 0), 4096);
	batch_engine = b;
	batch_m = m;
	batch_hook_fired = false;
	batch_release_early = early;
	atomic_store(&mapping_commit_batch_hook, batch_hook);
	assert_int_equal(folio_mapping_sync(m, &cur), 0);
	atomic_store(&mapping_commit_batch_hook, NULL);
	assert_true(batch_hook_fired);
	if (early)
		pthread_join(batch_releaser, NULL);
	else
		batchy_complete_held(b);
	pthread_join(batch_b.thread, NULL);
	assert_int_equal(batch_b.result, 0);
	pthread_mutex_lock(&b->lock);
	assert_true(b->flushes >= 2);
	/* Flush 0 was the first sync's; flush 1 the round under test. */
	assert_int_equal(b->held_at_flush[1], !early);
	pthread_mutex_unlock(&b->lock);
	assert_int_equal(test_mapping_stats(m).unstable_bytes, 0);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

static void test_round_waits_for_writes_in_flight(void **state)
{
	(void)state;
	batch_round(true);
}

static void test_round_wait_is_bounded(void **state)
{
	(void)state;
	batch_round(false);
}

/*
 * A write that completes while a flush runs may not be covered by it: it
 * stays unstable after that flush succeeds, and the next flush releases
 * it. One block per folio, so the two writes are apart.
 */
static void test_write_during_flush_stays_unstable(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct gated *g = gated_new(&e);
	struct folio_mapping *m = new_mapping(e, 4096, 0);
	unsigned char a[4096], b[4096];
	pattern(a, sizeof(a), 3);
	pattern(b, sizeof(b), 4);
	assert_int_equal(folio_mapping_write(m, a, sizeof(a), 0), 4096);
	g->hold = true;
	struct syncer s;
	syncer_start(&s, m);
	gated_wait_held(g, 1);
	/* The sync wrote block 0 and is inside its flush. */
	assert_int_equal(folio_mapping_write(m, b, sizeof(b), 8192), 4096);
	assert_int_equal(folio_mapping_writeback(m, NULL), 4096);
	gated_open(g, 1);
	pthread_join(s.thread, NULL);
	assert_int_equal(s.result, 0);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.unstable_bytes, 4096);
	struct folio *f;
	assert_int_equal(folio_mapping_lookup(m, 8192, &f), 0);
	folio_put(f);
	assert_int_equal(folio_mapping_invalidate(m, 8192, 4096, 0), -EBUSY);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mapping_stats(m).unstable_bytes, 0);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	gated_free(g);
}

/*
 * A sync settles the folios its own passes wrote without walking the
 * index, then walks only when other folios are still unstable: those
 * written by a writeback pass before the sync, here every other one of
 * 40 (more than the list holds before it grows), must be released by
 * the same flush.
 */
static void test_sync_settles_other_unstable(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = mem_mapping(&e, false, 4096, 0);
	unsigned char block[4096];
	pattern(block, sizeof(block), 7);
	enum { FOLIOS = 40 };
	for (unsigned i = 0; i < FOLIOS; i += 2)
		assert_int_equal(folio_mapping_write(m, block, sizeof(block),
						     (uint64_t)i * 8192),
				 sizeof(block));
	assert_int_equal(folio_mapping_writeback(m, NULL),
			 FOLIOS / 2 * sizeof(block));
	assert_int_equal(test_mapping_stats(m).unstable_bytes,
			 FOLIOS / 2 * sizeof(block));
	for (unsigned i = 1; i < FOLIOS; i += 2)
		assert_int_equal(folio_mapping_write(m, block, sizeof(block),
						     (uint64_t)i * 8192),
				 sizeof(block));
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.unstable_bytes, 0);
	assert_int_equal(st.dirty_bytes, 0);
	/* Stable, so nothing keeps them. */
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0), 0);
	assert_int_equal(test_mapping_stats(m).folios, 0);
	/* And the other way round: the sync's own folios are all there is. */
	for (unsigned i = 0; i < FOLIOS; i++)
		assert_int_equal(folio_mapping_write(m, block, sizeof(block),
						     (uint64_t)i * 8192),
				 sizeof(block));
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mapping_stats(m).unstable_bytes, 0);
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0), 0);
	test_close(m, e);
}

/*
 * Folios a sync wrote are thrown away (invalidate with discard) while its
 * flush runs: the sync still holds them in its list, and settling must
 * skip them, since the index node that held them went with them, while
 * it releases the folio that stayed, in another node.
 */
static void test_sync_written_folios_discarded(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct gated *g = gated_new(&e);
	struct folio_mapping *m = new_mapping(e, 4096, 0);
	unsigned char data[4 * 4096], far[4096];
	pattern(data, sizeof(data), 8);
	pattern(far, sizeof(far), 9);
	/* 4 KiB folios: a leaf node spans 256 KiB. */
	const uint64_t far_pos = 512 * KIB;
	assert_int_equal(folio_mapping_write(m, data, sizeof(data), 0),
			 sizeof(data));
	assert_int_equal(folio_mapping_write(m, far, sizeof(far), far_pos),
			 sizeof(far));
	g->hold = true;
	struct syncer s;
	syncer_start(&s, m);
	gated_wait_held(g, 1);
	assert_int_equal(test_mapping_stats(m).unstable_bytes,
			 sizeof(data) + sizeof(far));
	assert_int_equal(folio_mapping_invalidate(m, 0, sizeof(data),
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.folios, 1);
	assert_int_equal(st.unstable_bytes, sizeof(far));
	gated_open(g, 1);
	pthread_join(s.thread, NULL);
	assert_int_equal(s.result, 0);
	assert_int_equal(test_mapping_stats(m).unstable_bytes, 0);
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0), 0);
	assert_int_equal(test_mapping_stats(m).folios, 0);
	assert_memory_equal(g->bytes + far_pos, far, sizeof(far));
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	gated_free(g);
}

/*
 * Group commit: syncs that arrive while a flush runs do not rely on it
 * (it may have begun before their writes completed): they wait, and all
 * of them share the one flush that starts next.
 */
static void test_group_commit(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct gated *g = gated_new(&e);
	struct folio_mapping *m = new_mapping(e, 4096, 0);
	unsigned char a[4096];
	pattern(a, sizeof(a), 5);
	g->hold = true;
	struct syncer first, late[4];
	syncer_start(&first, m);
	gated_wait_held(g, 1);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(folio_mapping_write(m, a, sizeof(a),
						     (uint64_t)i * 8192),
				 4096);
		syncer_start(&late[i], m);
	}
	/* The late syncs write their data and then wait: none of them may
	 * finish on the first flush. */
	for (int spin = 0; spin < 1000 &&
			   test_mapping_stats(m).dirty_bytes; spin++)
		sched_yield();
	gated_release(g, 1);
	pthread_join(first.thread, NULL);
	assert_int_equal(first.result, 0);
	gated_wait_held(g, 1); /* the second flush, started for them */
	for (unsigned i = 0; i < 4; i++)
		assert_false(atomic_load(&late[i].done));
	/* A late sync whose pass ended after the second flush began needs
	 * a third: let every later flush through. */
	gated_open(g, UINT32_MAX);
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(late[i].thread, NULL);
		assert_int_equal(late[i].result, 0);
	}
	assert_true(gated_flushes(g) >= 2);
	assert_true(gated_flushes(g) <= 5); /* never more than one per sync */
	assert_int_equal(test_mapping_stats(m).unstable_bytes, 0);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	gated_free(g);
}

/*
 * An engine with a volatile cache it drops when a flush fails, shared by
 * two mappings (A at 0, B at 1 MiB), that can hold one write's completion
 * back after the data reached the cache: a flush failing in between
 * drops that write, however the write's completion and the failed
 * flush's settling interleave. It takes durable writes too: their
 * barrier runs at submission, like a linked fsync the kernel ran, and
 * their completion can be held back past it.
 */
#define LOSSY_SIZE (2u * 1024 * 1024)
struct lossy {
	pthread_mutex_t lock;
	unsigned char vol[LOSSY_SIZE], durable[LOSSY_SIZE];
	bool vol_set[LOSSY_SIZE / 4096];
	bool hold_next, fail_next;
	struct folio_io *held;
	ssize_t held_result;
	atomic_uint flushes; /* flush() calls, barriers not counted */
	/* hold_flush: the next flush() returns only once release_flush is
	 * set (flush_held says it got there), as a flush still in the
	 * kernel would. */
	atomic_bool hold_flush, flush_held, release_flush;
};

/* Flush the cache into the durable store, or drop it when the flush is
 * to fail; lock held. */
static int lossy_barrier_locked(struct lossy *l)
{
	bool fail = l->fail_next;
	l->fail_next = false;
	for (size_t b = 0; b < LOSSY_SIZE / 4096; b++) {
		if (l->vol_set[b] && !fail)
			memcpy(l->durable + b * 4096, l->vol + b * 4096, 4096);
		l->vol_set[b] = false;
	}
	return fail ? -EIO : 0;
}

static int lossy_submit(void *ctx, struct folio_io *io)
{
	struct lossy *l = ctx;
	pthread_mutex_lock(&l->lock);
	size_t at = (size_t)io->pos;
	for (int i = 0; i < io->iovcnt; i++) {
		if (io->op == FOLIO_IO_WRITE) {
			memcpy(l->vol + at, io->iov[i].iov_base,
			       io->iov[i].iov_len);
			for (size_t b = at; b < at + io->iov[i].iov_len;
			     b += 4096)
				l->vol_set[b / 4096] = true;
		} else {
			memcpy(io->iov[i].iov_base, l->durable + at,
			       io->iov[i].iov_len);
		}
		at += io->iov[i].iov_len;
	}
	ssize_t result = (ssize_t)io->len;
	if (io->flags & FOLIO_IO_DURABLE) {
		int r = lossy_barrier_locked(l);
		if (r)
			result = r;
	}
	bool hold = io->op == FOLIO_IO_WRITE && l->hold_next;
	if (hold) {
		l->hold_next = false;
		l->held = io;
		l->held_result = result;
	}
	pthread_mutex_unlock(&l->lock);
	if (!hold)
		folio_io_complete(io, result);
	return 0;
}

static int lossy_flush(void *ctx)
{
	struct lossy *l = ctx;
	pthread_mutex_lock(&l->lock);
	int r = lossy_barrier_locked(l);
	pthread_mutex_unlock(&l->lock);
	atomic_fetch_add(&l->flushes, 1);
	if (atomic_exchange(&l->hold_flush, false)) {
		atomic_store(&l->flush_held, true);
		while (!atomic_load(&l->release_flush))
			sched_yield();
	}
	return r;
}

/* The lossy engine (taking durable writes or not), mappings A and B on it,
 * and a block of data for each. */
struct lossy_pair {
	struct lossy *l;
	struct folio_engine *e;
	struct folio_mapping *a, *b;
	unsigned char data[4096], other[4096];
};

static struct lossy_pair *lossy_pair_new(bool durable)
{
	struct lossy_pair *p = calloc(1, sizeof(*p));
	assert_non_null(p);
	p->l = calloc(1, sizeof(*p->l));
	assert_non_null(p->l);
	pthread_mutex_init(&p->l->lock, NULL);
	struct folio_engine_ops ops = {.sz = sizeof(ops),
				       .submit = lossy_submit,
				       .flush = lossy_flush,
				       .truncate = noop_truncate,
				       .caps = durable ? FOLIO_ENGINE_CAP_DURABLE
						       : 0};
	assert_int_equal(folio_engine_new(&p->e, &ops, p->l), 0);
	p->a = new_mapping(p->e, 64 * KIB, 0);
	p->b = new_mapping(p->e, 64 * KIB, 0);
	memset(p->data, 0xa1, sizeof(p->data));
	memset(p->other, 0xb2, sizeof(p->other));
	return p;
}

static void lossy_pair_free(struct lossy_pair *p)
{
	assert_int_equal(folio_mapping_free(p->a), 0);
	assert_int_equal(folio_mapping_free(p->b), 0);
	assert_int_equal(folio_engine_free(p->e), 0);
	pthread_mutex_destroy(&p->l->lock);
	free(p->l);
	free(p);
}

static void lossy_run(bool in_flight)
{
	struct lossy_pair *p = lossy_pair_new(false);
	struct lossy *l = p->l;
	struct folio_mapping *a = p->a, *b = p->b;
	const unsigned char *data = p->data, *other = p->other;
	assert_int_equal(folio_mapping_write(a, data, 4096, 0), 4096);
	l->hold_next = in_flight;
	assert_true(folio_mapping_writeback(a, NULL) > 0);
	/* A's data is in the engine's cache (its completion held back or
	 * done): B's sync fails its flush, and the cache is gone. */
	assert_int_equal(folio_mapping_write(b, other, 4096, 1u << 20), 4096);
	l->fail_next = true;
	assert_int_equal(folio_mapping_sync(b, NULL), -EIO);
	if (in_flight) {
		assert_non_null(l->held);
		folio_io_complete(l->held, 4096);
	}
	/* A never reports its lost write as durable: a sync that returns 0
	 * has written it again. */
	int r = folio_mapping_sync(a, NULL);
	if (r)
		assert_int_equal(folio_mapping_sync(a, NULL), 0);
	assert_memory_equal(l->durable, data, 4096);
	assert_int_equal(folio_mapping_sync(b, NULL), 0);
	assert_memory_equal(l->durable + (1u << 20), other, 4096);
	lossy_pair_free(p);
}

static void test_failed_flush_of_other_mapping(void **state)
{
	(void)state;
	lossy_run(false); /* A's write completed before the failure */
	lossy_run(true);  /* ... completed after it */
}

/*
 * A's write W is in flight when B's flush fails and drops the engine's
 * cache, W's data with it. Before W completes, A settles that failure on
 * its own (a pool shrink flushes A for its other unstable block, and the
 * flush fails on the count). Then W completes: it must come back dirty
 * (wb_end_io() sees the failure that happened while it was in flight),
 * so that A's next sync writes it again. Were it merely unstable, A's
 * next flush would succeed and settle it as lost, dirty again but after
 * the sync's writeback pass: a sync whose error cursor was taken after
 * the failure had been reported would return 0 with W's data gone from
 * the store.
 */
static void test_write_in_flight_across_settled_failure(void **state)
{
	(void)state;
	struct lossy_pair *p = lossy_pair_new(false);
	struct lossy *l = p->l;
	struct folio_mapping *b = p->b;
	struct folio_pool *pool;
	struct folio_pool_opts po = {.sz = sizeof(po), .budget = 8u << 20};
	assert_int_equal(folio_pool_new(&pool, &po), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o),
				       .block_size = 4096,
				       .max_folio_size = 64 * KIB,
				       .engine = p->e,
				       .pool = pool};
	struct folio_mapping *a;
	assert_int_equal(folio_mapping_new(&a, &o), 0);
	/* A: block Y written back and unstable, then W of block X held. */
	assert_int_equal(folio_mapping_write(a, p->other, 4096, 256 * KIB),
			 4096);
	assert_true(folio_mapping_writeback(a, NULL) > 0);
	assert_int_equal(folio_mapping_write(a, p->data, 4096, 0), 4096);
	l->hold_next = true;
	assert_true(folio_mapping_writeback(a, NULL) > 0);
	assert_non_null(l->held);
	/* B's flush fails and the cache, W's data in it, is gone. */
	assert_int_equal(folio_mapping_write(b, p->other, 4096, 1u << 20),
			 4096);
	l->fail_next = true;
	assert_int_equal(folio_mapping_sync(b, NULL), -EIO);
	/* A settles the failure (Y becomes dirty), W still in flight. */
	uint64_t flushes = atomic_load(&l->flushes);
	folio_pool_shrink(pool, UINT64_MAX / 2);
	assert_true(atomic_load(&l->flushes) > flushes);
	folio_io_complete(l->held, 4096);
	/* A cursor from now on has no error to see: a sync that returns 0
	 * to it must have made W's data durable. */
	folio_errseq_t cursor = folio_mapping_err_cursor(a);
	assert_int_equal(folio_mapping_sync(a, &cursor), 0);
	assert_memory_equal(l->durable, p->data, 4096);
	assert_memory_equal(l->durable + 256 * KIB, p->other, 4096);
	assert_int_equal(folio_mapping_sync(b, NULL), 0);
	assert_int_equal(folio_mapping_free(a), 0);
	assert_int_equal(folio_pool_free(pool), 0);
	lossy_pair_free(p);
}

/*
 * A sync's durable write appends a block; the engine writes it (the store
 * grows) and only the barrier fails, as a FUA write that failed after the
 * device took it would. The sync fails and the block is dirty again. A
 * discard of the appended block then moves EOF back, but never below the
 * store's size: the mapping counted the bytes the store holds
 * (folio_io_complete_durable()). Before, it counted nothing of a failed
 * durable write, EOF went back to 0 and the store kept 12 KiB that the
 * mapping no longer knew of (fuzz known bug e).
 */
static void test_barrier_failure_after_write_keeps_store_size(void **state)
{
	(void)state;
	struct folio_engine *e;
	assert_int_equal(folio_engine_mem(&e, 1u << 20), 0);
	struct folio_mapping *m = new_mapping(e, 64 * KIB, 0);
	unsigned char data[4096];
	pattern(data, sizeof(data), 7);
	assert_int_equal(folio_mapping_write(m, data, sizeof(data), 8192),
			 sizeof(data));
	struct folio_mem_fault fault = {.sz = sizeof(fault),
					.ops = FOLIO_MEM_OP_FLUSH,
					.count = 1,
					.error = -ENOSPC};
	assert_int_equal(folio_engine_mem_inject(e, &fault), 0);
	assert_int_equal(folio_mapping_sync(m, NULL), -ENOSPC);
	struct folio_mem_stats st = test_mem_stats(e);
	assert_int_equal(st.durable_writes, 1);
	assert_int_equal(st.size, 12288);
	assert_true(test_mapping_stats(m).dirty_bytes >= sizeof(data));

	assert_int_equal(folio_mapping_invalidate(m, 8192, 0,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(folio_mapping_size(m), 12288);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mem_stats(e).size, 12288);
	assert_int_equal(test_mem_stats(e).durable_size, 12288);
	test_close(m, e);
}

/*
 * A write that reached the store and failed all the same (a remote store
 * that applied it and lost the reply), past the store's known size; then
 * a discard of that data lowers EOF. The store must not keep the bytes:
 * they were thrown away, and would show once EOF grows again. Without the
 * cut in the discard, the store stayed 12 KiB long with them in it.
 */
/* 4 KiB synced, then 4 KiB at 8 KiB whose write lands in the store and
 * fails all the same (FOLIO_MEM_FAULT_APPLIED). */
static struct folio_mapping *applied_failed_write(struct folio_engine **e)
{
	struct folio_mapping *m = mem_mapping(e, false, 64 * KIB, 0);
	unsigned char data[4096];
	pattern(data, sizeof(data), 11);
	assert_int_equal(folio_mapping_write(m, data, sizeof(data), 0),
			 sizeof(data));
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(folio_mapping_write(m, data, sizeof(data), 8192),
			 sizeof(data));
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_WRITE,
				    .count = 1,
				    .error = -EIO,
				    .flags = FOLIO_MEM_FAULT_APPLIED};
	assert_int_equal(folio_engine_mem_inject(*e, &f), 0);
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	assert_int_equal(test_mem_stats(*e).size, 12288); /* it landed */
	return m;
}

static void test_discard_after_applied_failed_write(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = applied_failed_write(&e);
	unsigned char got[4096];
	assert_int_equal(folio_mapping_invalidate(m, 8192, 0,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(folio_mapping_size(m), 4096);
	assert_int_equal(test_mem_stats(e).size, 4096);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mem_stats(e).durable_size, 4096);
	/* Grown again, the range reads as zeros, cached or not. */
	assert_int_equal(folio_mapping_truncate(m, 12288), 0);
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0), 0);
	memset(got, 0xee, sizeof(got));
	assert_int_equal(folio_mapping_read(m, got, sizeof(got), 8192),
			 sizeof(got));
	for (size_t i = 0; i < sizeof(got); i++)
		assert_int_equal(got[i], 0);
	test_close(m, e);
}

/* The same when the cut fails: owed, the next flush redoes it and fails
 * once; reads past the new EOF never see the landed bytes meanwhile. */
static void test_discard_after_applied_failed_write_cut_fails(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = applied_failed_write(&e);
	unsigned char got[4096];
	fail_next(e, FOLIO_MEM_OP_TRUNCATE, 0);
	folio_errseq_t cur = folio_mapping_err_cursor(m);
	assert_int_equal(folio_mapping_invalidate(m, 8192, 0,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(folio_mapping_size(m), 4096);
	assert_int_equal(test_mem_stats(e).size, 12288); /* not cut yet */
	assert_int_equal(folio_mapping_truncate(m, 12288), 0);
	memset(got, 0xee, sizeof(got));
	assert_int_equal(folio_mapping_read(m, got, sizeof(got), 8192),
			 sizeof(got));
	for (size_t i = 0; i < sizeof(got); i++)
		assert_int_equal(got[i], 0);
	/* The cut's own error, then the redo's round. */
	assert_int_equal(folio_mapping_sync(m, &cur), -EIO);
	assert_int_equal(folio_mapping_sync(m, &cur), 0);
	memset(got, 0xee, sizeof(got));
	assert_int_equal(folio_engine_mem_peek_durable(e, got, sizeof(got),
						       8192), 0);
	for (size_t i = 0; i < sizeof(got); i++)
		assert_int_equal(got[i], 0);
	test_close(m, e);
}

/*
 * Truncates racing syncs of the same mapping. The resize bookkeeping
 * (pending, low mark, generation, owed redo) is written by truncate with
 * io_lock exclusive and by the flush role's holder without it, under
 * commit.lock: TSan fails this test when that lock goes. One thread
 * writes and truncates (the only one to change the data, so it keeps the
 * model), one syncs, one makes every third flush fail and lose the
 * engine's volatile cache (so redone truncates run too). At the end a
 * sync that returns 0 must have made the store equal to the model, and a
 * power cut keeps it.
 */
#define RT_SPACE (256 * KIB)

struct rt_ctx {
	struct folio_engine *e;
	struct folio_mapping *m;
	atomic_bool stop;
	uint64_t seed;
	unsigned char model[RT_SPACE];
	uint64_t size;
};

static void *rt_syncer(void *p)
{
	struct rt_ctx *c = p;
	while (!atomic_load(&c->stop))
		(void)folio_mapping_sync(c->m, NULL);
	return NULL;
}

static void *rt_faulter(void *p)
{
	struct rt_ctx *c = p;
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_FLUSH,
				    .skip = 2,
				    .count = 1,
				    .error = -EIO,
				    .flags = FOLIO_MEM_FAULT_LOSE};
	while (!atomic_load(&c->stop)) {
		assert_int_equal(folio_engine_mem_inject(c->e, &f), 0);
		struct timespec ts = {0, 2 * 1000 * 1000};
		nanosleep(&ts, NULL);
		assert_int_equal(folio_engine_mem_clear_faults(c->e), 0);
	}
	return NULL;
}

static void test_truncate_races_sync(void **state)
{
	(void)state;
	static struct rt_ctx c;
	memset(&c, 0, sizeof(c));
	c.seed = test_seed("truncate_races_sync");
	assert_int_equal(folio_engine_mem(&c.e, RT_SPACE), 0);
	assert_int_equal(folio_engine_mem_set_volatile(c.e, true), 0);
	/* Stable writes: the writer does not change data writeback is
	 * copying, a race the library allows and TSan would report. */
	c.m = new_mapping(c.e, 16 * KIB, FOLIO_MAPPING_STABLE_WRITES);
	pthread_t ts, tf;
	assert_int_equal(pthread_create(&ts, NULL, rt_syncer, &c), 0);
	assert_int_equal(pthread_create(&tf, NULL, rt_faulter, &c), 0);
	unsigned char buf[8192];
	unsigned iters = test_iters(3000, 300);
	for (unsigned i = 0; i < iters; i++) {
		uint64_t r = test_rand(&c.seed);
		if (r % 4 == 0) {
			uint64_t size = test_rand(&c.seed) % (RT_SPACE / 2);
			assert_int_equal(folio_mapping_truncate(c.m, size), 0);
			if (size < c.size)
				memset(c.model + size, 0, c.size - size);
			c.size = size;
			continue;
		}
		size_t len = 1 + test_rand(&c.seed) % sizeof(buf);
		uint64_t pos = test_rand(&c.seed) % (RT_SPACE - len);
		for (size_t k = 0; k < len; k++)
			buf[k] = (unsigned char)test_rand(&c.seed);
		assert_int_equal(folio_mapping_write(c.m, buf, len, pos),
				 (ssize_t)len);
		memcpy(c.model + pos, buf, len);
		if (pos + len > c.size)
			c.size = pos + len;
	}
	atomic_store(&c.stop, true);
	assert_int_equal(pthread_join(ts, NULL), 0);
	assert_int_equal(pthread_join(tf, NULL), 0);
	assert_int_equal(folio_engine_mem_clear_faults(c.e), 0);
	int r = -EIO;
	for (int tries = 0; r && tries < 8; tries++)
		r = folio_mapping_sync(c.m, NULL);
	assert_int_equal(r, 0);
	assert_int_equal(folio_engine_mem_power_cut(c.e, 0, 0), 0);
	static unsigned char got[RT_SPACE];
	assert_int_equal(test_mem_stats(c.e).durable_size, c.size);
	assert_int_equal(folio_engine_mem_peek_durable(c.e, got, c.size, 0),
			 0);
	assert_memory_equal(got, c.model, c.size);
	test_close(c.m, c.e);
}

struct barrier_sync {
	struct lossy *l;
	struct folio_mapping *m;
	int result;
};

static void *barrier_sync_main(void *p)
{
	struct barrier_sync *s = p;
	s->result = folio_mapping_sync(s->m, NULL);
	return NULL;
}

/* Completes the held durable write with its failure once a flush has
 * run, late: the flush's success is known before the barrier's failure
 * is counted. */
static void *barrier_late_main(void *p)
{
	struct lossy *l = p;
	while (!atomic_load(&l->flushes))
		sched_yield();
	struct timespec ts = {0, 20 * 1000 * 1000};
	nanosleep(&ts, NULL);
	pthread_mutex_lock(&l->lock);
	struct folio_io *io = l->held;
	ssize_t result = l->held_result;
	pthread_mutex_unlock(&l->lock);
	folio_io_complete(io, result);
	return NULL;
}

/*
 * B's sync sends its one write durable, and the barrier fails, dropping
 * the cache with A's unstable write in it, but the completion that
 * reports it is late (the kernel ran the linked fsync; nobody reaped it
 * yet). A's sync meanwhile flushes, and its flush succeeds: the cache is
 * empty. That success must wait for the barrier's failure to be counted
 * and must not release A's write.
 */
static void test_failed_barrier_of_other_mapping(void **state)
{
	(void)state;
	struct lossy_pair *p = lossy_pair_new(true);
	struct lossy *l = p->l;
	struct folio_mapping *a = p->a, *b = p->b;
	const unsigned char *data = p->data, *other = p->other;
	assert_int_equal(folio_mapping_write(a, data, 4096, 0), 4096);
	assert_true(folio_mapping_writeback(a, NULL) > 0);
	assert_int_equal(folio_mapping_write(b, other, 4096, 1u << 20), 4096);
	pthread_mutex_lock(&l->lock);
	l->fail_next = true;
	l->hold_next = true;
	pthread_mutex_unlock(&l->lock);
	struct barrier_sync bs = {.l = l, .m = b};
	pthread_t tb, tl;
	assert_int_equal(pthread_create(&tb, NULL, barrier_sync_main, &bs), 0);
	for (bool held = false; !held; sched_yield()) {
		pthread_mutex_lock(&l->lock);
		held = l->held != NULL;
		pthread_mutex_unlock(&l->lock);
	}
	assert_int_equal(pthread_create(&tl, NULL, barrier_late_main, l), 0);
	/* A never reports its lost write as durable: a sync that returns 0
	 * has written it again. */
	int r = folio_mapping_sync(a, NULL);
	assert_int_equal(pthread_join(tl, NULL), 0);
	assert_int_equal(pthread_join(tb, NULL), 0);
	assert_int_equal(bs.result, -EIO);
	if (r)
		assert_int_equal(folio_mapping_sync(a, NULL), 0);
	assert_memory_equal(l->durable, data, 4096);
	assert_int_equal(folio_mapping_sync(b, NULL), 0);
	assert_memory_equal(l->durable + (1u << 20), other, 4096);
	lossy_pair_free(p);
}

/*
 * Syncs under threads and faults (model check). Writer threads each own a
 * 64 KiB region and write 1..3 blocks of it, sometimes in two places (two
 * requests: the sync falls back to flush()) or with a writeback between
 * the two (the first is unstable or in flight when the sync goes: a
 * durable write's barrier must cover it), then sync; the mem engine completes requests late,
 * on its own thread, over its volatile cache, while a fault thread keeps
 * injecting write errors, short writes and failing flushes and barriers
 * (with and without LOSE). Whenever a sync returns 0, the durable store must hold
 * the thread's region exactly as the thread wrote it (it is the region's
 * only writer). Once faults stop, syncs succeed, and a power cut keeps
 * every region. Shared: all writers on one mapping (they contend for its
 * flush role); else a mapping each over the one engine (one mapping's
 * failed flush must fail the others' syncs).
 *
 * With several writers this lost data (a region's blocks clean and stable
 * in the mapping, gone from the engine) in up to half the runs, two ways:
 * a losing flush of one mapping discarded another's write and was counted
 * only after that other mapping's next flush had succeeded and trusted
 * the count (flushes of an engine now count their failure before the
 * next one may run); and a write in flight across a losing flush was
 * marked unstable at completion, then released by the next flush before
 * the completion made it dirty again (a folio now remembers the failure
 * count its writes were submitted under, and a flush that counted a later
 * failure makes it dirty instead of releasing it).
 */
#define DT_THREADS 4 /* FOLIO_TEST_DT_THREADS=1..4, default 4 */
#define DT_REGION (64 * KIB)

static int dt_n = DT_THREADS;
struct dt_ctx {
	struct folio_engine *e;
	struct folio_mapping *m[DT_THREADS];
	atomic_bool stop;
	unsigned iters;
	uint64_t seed;
};

struct dt_arg {
	struct dt_ctx *c;
	int id;
	unsigned char model[DT_REGION];
	unsigned ok, failed, checked;
	int bad;
};

static bool dt_durable_matches(struct dt_arg *a)
{
	unsigned char got[DT_REGION];
	uint64_t base = (uint64_t)a->id * DT_REGION;
	assert_int_equal(folio_engine_mem_peek_durable(a->c->e, got,
						       sizeof(got), base),
			 0);
	return !memcmp(got, a->model, sizeof(got));
}

/* Which blocks of a region are not durable, and whether the engine's
 * cache and the mapping hold them: where a failure lost them. */
static void dt_explain(struct dt_arg *a, struct folio_mapping *m, unsigned it)
{
	unsigned char dur[DT_REGION], vol[DT_REGION], map[DT_REGION];
	uint64_t base = (uint64_t)a->id * DT_REGION;
	folio_engine_mem_peek_durable(a->c->e, dur, sizeof(dur), base);
	folio_engine_mem_peek(a->c->e, vol, sizeof(vol), base);
	folio_mapping_read(m, map, sizeof(map), base);
	for (unsigned b = 0; b < DT_REGION / 4096; b++) {
		size_t o = b * 4096;
		bool d = !memcmp(dur + o, a->model + o, 4096);
		bool v = !memcmp(vol + o, a->model + o, 4096);
		bool mp = !memcmp(map + o, a->model + o, 4096);
		if (!d)
			fprintf(stderr, "# writer %d, sync %u: block %u not "
				"durable (in the engine's cache: %d, in the "
				"mapping: %d)\n", a->id, it, b, v, mp);
	}
}

static void *dt_main(void *p)
{
	struct dt_arg *a = p;
	struct folio_mapping *m = a->c->m[a->id];
	uint64_t seed = a->c->seed * 31 + (uint64_t)a->id;
	uint64_t base = (uint64_t)a->id * DT_REGION;
	folio_errseq_t cur = folio_mapping_err_cursor(m);
	unsigned char buf[3 * 4096];
	/* Past the iterations asked for until a fault has fired and a sync
	 * of this writer succeeded: on a busy machine the writers could
	 * finish before the fault thread got to run, and under valgrind
	 * faults come so often that a short run may see no sync succeed;
	 * either way the model would check nothing. */
	for (unsigned i = 0;
	     i < a->c->iters ||
	     (i < 20 * a->c->iters &&
	      (!a->ok || !test_mem_stats(a->c->e).faults));
	     i++) {
		int runs = test_rand_below(&seed, 4) ? 1 : 2;
		for (int r = 0; r < runs; r++) {
			size_t n = 4096 * (1 + test_rand_below(&seed, 3));
			size_t off = 4096 * test_rand_below(
						&seed, (DT_REGION - n) / 4096 + 1);
			pattern(buf, n, (unsigned)test_rand(&seed));
			if (folio_mapping_write(m, buf, n, base + off) !=
			    (ssize_t)n)
				a->bad++;
			memcpy(a->model + off, buf, n);
			/* Sometimes written back first: unstable (or in
			 * flight) when the sync's durable write goes. */
			if (!r && runs == 1 && test_rand_below(&seed, 3) == 0) {
				folio_mapping_writeback(m, NULL);
				runs = 2;
			}
		}
		if (folio_mapping_sync(m, &cur)) {
			a->failed++;
			continue;
		}
		a->ok++;
		if (!dt_durable_matches(a)) {
			a->bad++;
			dt_explain(a, m, i);
		}
	}
	return NULL;
}

static void *dt_faults(void *p)
{
	struct dt_ctx *c = p;
	uint64_t seed = c->seed ^ 0xfa17;
	while (!atomic_load(&c->stop)) {
		struct folio_mem_fault f =
			test_random_fault(&seed, false, 3584, 4);
		if (folio_engine_mem_inject(c->e, &f) == -ENOSPC)
			folio_engine_mem_clear_faults(c->e);
		/* About as many faults per sync under valgrind, whose
		 * writers run tens of times slower. */
		struct timespec ts = {0, test_slow_env() ? 2000000 : 200000};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void sync_threads_run(bool shared, uint64_t seed)
{
	struct dt_ctx c = {.iters = test_iters(150, 25), .seed = seed};
	const char *nt = getenv("FOLIO_TEST_DT_THREADS");
	if (nt && *nt) {
		int n = atoi(nt);
		dt_n = n < 1 ? 1 : n > DT_THREADS ? DT_THREADS : n;
	}
	atomic_init(&c.stop, false);
	assert_int_equal(folio_engine_mem(&c.e, DT_THREADS * DT_REGION), 0);
	assert_int_equal(folio_engine_mem_set_volatile(c.e, true), 0);
	/* Stable writes: a writer waits for its folio's writeback, so the
	 * engine never copies bytes being written (the race that the flag
	 * exists to rule out, not this test's subject). */
	struct folio_mapping_opts o = {.sz = sizeof(o), .block_size = 4096,
				       .max_folio_size = 16 * KIB,
				       .flags = FOLIO_MAPPING_STABLE_WRITES,
				       .engine = c.e};
	for (int i = 0; i < dt_n; i++) {
		if (i && shared)
			c.m[i] = c.m[0];
		else
			assert_int_equal(folio_mapping_new(&c.m[i], &o), 0);
	}
	/* The regions exist, zeroed and durable, before the faults. */
	for (int i = 0; i < dt_n; i++) {
		static const unsigned char zero[DT_REGION];
		assert_int_equal(folio_mapping_write(c.m[i], zero, DT_REGION,
						     (uint64_t)i * DT_REGION),
				 DT_REGION);
		assert_int_equal(folio_mapping_sync(c.m[i], NULL), 0);
	}
	assert_int_equal(folio_engine_mem_set_mode(c.e, FOLIO_MEM_THREAD,
						   seed),
			 0);
	struct dt_arg *a = calloc(DT_THREADS, sizeof(*a));
	assert_non_null(a);
	pthread_t th[DT_THREADS], ft;
	assert_int_equal(pthread_create(&ft, NULL, dt_faults, &c), 0);
	for (int i = 0; i < dt_n; i++) {
		a[i].c = &c;
		a[i].id = i;
		assert_int_equal(pthread_create(&th[i], NULL, dt_main, &a[i]),
				 0);
	}
	for (int i = 0; i < dt_n; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	atomic_store(&c.stop, true);
	assert_int_equal(pthread_join(ft, NULL), 0);
	assert_int_equal(folio_engine_mem_clear_faults(c.e), 0);
	unsigned ok = 0, failed = 0;
	for (int i = 0; i < dt_n; i++) {
		assert_int_equal(a[i].bad, 0);
		ok += a[i].ok;
		failed += a[i].failed;
		/* Faults gone: a sync settles everything left. */
		int r = -1;
		for (int k = 0; k < 4 && r; k++)
			r = folio_mapping_sync(c.m[i], NULL);
		assert_int_equal(r, 0);
		assert_true(dt_durable_matches(&a[i]));
	}
	struct folio_mem_stats st = test_mem_stats(c.e);
	printf("# sync_threads %s: %u syncs ok, %u failed, %llu durable "
	       "writes, %llu flushes, %llu faults\n",
	       shared ? "shared" : "own", ok, failed,
	       (unsigned long long)st.durable_writes,
	       (unsigned long long)st.flushes, (unsigned long long)st.faults);
	/* Both paths and the faults were exercised. */
	assert_true(st.durable_writes > 0 && st.faults > 0 && ok > 0);
	assert_int_equal(folio_engine_mem_power_cut(c.e, 0, 0), 0);
	for (int i = 0; i < dt_n; i++)
		assert_true(dt_durable_matches(&a[i]));
	for (int i = 0; i < dt_n; i++)
		if (!i || !shared)
			assert_int_equal(folio_mapping_free(c.m[i]), 0);
	assert_int_equal(folio_engine_free(c.e), 0);
	free(a);
}

static void test_sync_threads_faults(void **state)
{
	(void)state;
	uint64_t seed = test_seed("commit_sync_threads");
	sync_threads_run(true, seed);
	sync_threads_run(false, seed + 1);
}

static void *release_flush_late(void *p)
{
	struct lossy *l = p;
	struct timespec ts = {0, 20 * 1000 * 1000};
	nanosleep(&ts, NULL);
	atomic_store(&l->release_flush, true);
	return NULL;
}

/*
 * The other way round: A's flush fails and drops the engine's cache, with
 * B's unstable write in it, but has not returned (nor been counted) when
 * B's sync sends its next write durable. The barrier succeeds (the cache
 * is empty) and its completion sees the old failure count; it must not be
 * trusted while a flush runs, or B's sync reports the dropped write as
 * durable.
 */
static void test_barrier_during_failing_flush(void **state)
{
	(void)state;
	struct lossy_pair *p = lossy_pair_new(true);
	struct lossy *l = p->l;
	struct folio_mapping *a = p->a, *b = p->b;
	const unsigned char *data = p->data, *first = p->other;
	unsigned char second[4096];
	memset(second, 0xc3, sizeof(second));
	const uint64_t at = 1u << 20;
	assert_int_equal(folio_mapping_write(b, first, 4096, at), 4096);
	assert_true(folio_mapping_writeback(b, NULL) > 0); /* unstable */
	assert_int_equal(folio_mapping_write(a, data, 4096, 0), 4096);
	pthread_mutex_lock(&l->lock);
	l->fail_next = true;
	pthread_mutex_unlock(&l->lock);
	atomic_store(&l->hold_flush, true);
	/* A's sync: its one write goes plain (A's flush role is free, but
	 * the test wants a flush(), so A writes back first), then flush()
	 * fails, dropping the cache, and is held. */
	assert_true(folio_mapping_writeback(a, NULL) > 0);
	struct barrier_sync as = {.l = l, .m = a};
	pthread_t ta, tr;
	assert_int_equal(pthread_create(&ta, NULL, barrier_sync_main, &as), 0);
	while (!atomic_load(&l->flush_held))
		sched_yield();
	assert_int_equal(pthread_create(&tr, NULL, release_flush_late, l), 0);
	assert_int_equal(folio_mapping_write(b, second, 4096, at + 4096),
			 4096);
	int r = folio_mapping_sync(b, NULL);
	assert_int_equal(pthread_join(tr, NULL), 0);
	assert_int_equal(pthread_join(ta, NULL), 0);
	assert_int_equal(as.result, -EIO);
	/* B never reports its dropped first write as durable. */
	if (r)
		assert_int_equal(folio_mapping_sync(b, NULL), 0);
	assert_memory_equal(l->durable + at, first, 4096);
	assert_memory_equal(l->durable + at + 4096, second, 4096);
	assert_int_equal(folio_mapping_sync(a, NULL), 0);
	assert_memory_equal(l->durable, data, 4096);
	lossy_pair_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flush_failure_lose),
		cmocka_unit_test(test_flush_failure_keep),
		cmocka_unit_test(test_flush_failure_drop_policy),
		cmocka_unit_test(test_failed_redo_is_owed),
		cmocka_unit_test(test_redone_truncate_then_discard),
		cmocka_unit_test(test_foreign_flush_failure_redoes_truncate),
		cmocka_unit_test(test_unstable_kept),
		cmocka_unit_test(test_write_during_flush_stays_unstable),
		cmocka_unit_test(test_sync_settles_other_unstable),
		cmocka_unit_test(test_sync_written_folios_discarded),
		cmocka_unit_test(test_group_commit),
		cmocka_unit_test(test_round_waits_for_writes_in_flight),
		cmocka_unit_test(test_round_wait_is_bounded),
		cmocka_unit_test(test_sync_threads_faults),
		cmocka_unit_test(test_failed_flush_of_other_mapping),
		cmocka_unit_test(test_failed_barrier_of_other_mapping),
		cmocka_unit_test(test_write_in_flight_across_settled_failure),
		cmocka_unit_test(test_truncate_races_sync),
		cmocka_unit_test(
			test_barrier_failure_after_write_keeps_store_size),
		cmocka_unit_test(test_discard_after_applied_failed_write),
		cmocka_unit_test(
			test_discard_after_applied_failed_write_cut_fails),
		cmocka_unit_test(test_barrier_during_failing_flush),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
