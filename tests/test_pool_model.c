/* SPDX-License-Identifier: MIT */
/*
 * Randomized model test of the pool: several mappings over mem engines
 * with volatile write caches share a pool whose budget is smaller than
 * what they hold together, while one thread runs random writes (some
 * larger than the budget), reads, truncates, writebacks, syncs,
 * invalidates, shrinks, fault rules (write errors, short writes, failing
 * flushes that may lose the cache, read errors) and power cuts. Some
 * seeds add a flusher thread.
 *
 * The model, per mapping: M, the content reads must see (zero past its
 * size); S, M at the start of the last sync that returned 0; per byte,
 * whether it was touched (written, or in the span of a truncate) since.
 *
 * Checks:
 *  (a) every read returns M (a reclaim that dropped dirty data, or
 *      unstable data after a flush lost it, shows up here);
 *  (b) after a sync that returns 0 the durable store equals M;
 *  (c) after a power cut, every durable byte that was not touched since
 *      the last good sync, below both sizes, equals S; the mapping is
 *      then discarded and opened again over the durable content;
 *  (d) after every operation the pool holds no more than its budget,
 *      and without flushers its counts are exact (cached bytes = the
 *      sizes of the mappings' folios, dirty and unstable = the sums of
 *      the mappings' own);
 *  (e) at the end, with faults cleared, every mapping syncs and the
 *      durable stores equal the models.
 *
 * Replay: the seed is printed; FOLIO_TEST_SEED=<seed> runs that seed
 * alone (exactly, for seeds without a flusher).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "folio_state.h"
#include "folio_state_mem.h"
#include "test_util.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define NMAP 3
#define SPACE (512u * 1024u)
#define MAX_IO (96u * 1024u)
#define SEEDS 8

struct model {
	struct folio_engine *e;
	struct folio_mapping *m;
	struct folio_mapping_opts opts;
	unsigned char *M, *S, *touched;
	uint64_t msize, ssize, min_trunc;
	unsigned rules;
};

struct world {
	uint64_t seed, rng;
	struct folio_pool *p;
	uint64_t budget;
	unsigned flushers;
	enum folio_mem_mode mode;
	struct model mm[NMAP];
	unsigned char *buf;
	unsigned ops, cuts, good_syncs, failed_syncs, short_writes;
};

#define TRACE(w, ...) TEST_TRACE((w)->ops, __VA_ARGS__)

static uint64_t rnd(struct world *w, uint64_t n)
{
	return test_rand_below(&w->rng, n);
}

static void touch(struct model *x, uint64_t a, uint64_t z)
{
	if (a < z)
		memset(x->touched + a, 1, (size_t)(z - a));
}

static void open_mapping(struct world *w, struct model *x)
{
	assert_int_equal(folio_mapping_new(&x->m, &x->opts), 0);
}

static void setup(struct world *w)
{
	static const uint64_t budgets[] = {256u << 10, 512u << 10, 1u << 20};
	w->budget = budgets[rnd(w, 3)];
	w->flushers = rnd(w, 3) == 0;
	w->mode = rnd(w, 2) ? FOLIO_MEM_SYNC : FOLIO_MEM_POLL;
	struct folio_pool_opts po = {.sz = sizeof(po), .budget = w->budget,
				     .flusher_threads = w->flushers,
				     .dirty_expire_ms = 20};
	if (rnd(w, 2))
		po.dirty_limit = w->budget / 2;
	assert_int_equal(folio_pool_new(&w->p, &po), 0);
	w->buf = malloc(4 * SPACE);
	assert_non_null(w->buf);
	for (unsigned i = 0; i < NMAP; i++) {
		struct model *x = &w->mm[i];
		assert_int_equal(folio_engine_mem(&x->e, 64u << 20), 0);
		assert_int_equal(folio_engine_mem_set_volatile(x->e, true), 0);
		assert_int_equal(folio_engine_mem_set_mode(x->e, w->mode,
							   w->seed + i),
				 0);
		size_t bs = rnd(w, 2) ? 512 : 4096;
		size_t maxf = (size_t)16384 << rnd(w, 3);
		unsigned flags = 0;
		/* A flusher writing a folio the main thread writes is a race
		 * by design (the engine copies either version and the folio
		 * is dirty again); TSan would report it. */
		if (!rnd(w, 4) || (TEST_UNDER_TSAN && w->flushers))
			flags |= FOLIO_MAPPING_STABLE_WRITES;
		if (!rnd(w, 5))
			flags |= FOLIO_MAPPING_FOLIO_DIRTY;
		x->opts = (struct folio_mapping_opts){
			.sz = sizeof(x->opts), .block_size = bs,
			.max_folio_size = maxf, .flags = flags,
			.engine = x->e, .pool = w->p};
		x->M = calloc(1, SPACE);
		x->S = calloc(1, SPACE);
		x->touched = calloc(1, SPACE);
		assert_true(x->M && x->S && x->touched);
		open_mapping(w, x);
	}
	printf("# seed %llu: budget %llu, %u flusher(s), %s mode\n",
	       (unsigned long long)w->seed, (unsigned long long)w->budget,
	       w->flushers, w->mode == FOLIO_MEM_SYNC ? "sync" : "poll");
}

/* (d): the budget always; exact counts when nothing else runs. */
static void check_pool(struct world *w)
{
	struct folio_pool_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_pool_stats(w->p, &st), 0);
	if (st.cached_bytes > w->budget)
		fail_msg("seed %llu op %u: %llu bytes cached, budget %llu",
			 (unsigned long long)w->seed, w->ops,
			 (unsigned long long)st.cached_bytes,
			 (unsigned long long)w->budget);
	if (w->flushers)
		return;
	uint64_t cached = 0, dirty = 0, unstable = 0;
	for (unsigned i = 0; i < NMAP; i++) {
		struct folio_mapping_stats ms =
			test_mapping_stats(w->mm[i].m);
		for (unsigned k = 0; k < FOLIO_STATS_SHIFTS; k++)
			cached += ms.folios_by_shift[k] << (9 + k);
		dirty += ms.dirty_bytes;
		unstable += ms.unstable_bytes;
	}
	if (st.cached_bytes != cached || st.dirty_bytes != dirty ||
	    st.unstable_bytes != unstable)
		fail_msg("seed %llu op %u: pool cached/dirty/unstable "
			 "%llu/%llu/%llu, mappings %llu/%llu/%llu",
			 (unsigned long long)w->seed, w->ops,
			 (unsigned long long)st.cached_bytes,
			 (unsigned long long)st.dirty_bytes,
			 (unsigned long long)st.unstable_bytes,
			 (unsigned long long)cached, (unsigned long long)dirty,
			 (unsigned long long)unstable);
}

static void compare(struct world *w, unsigned mi, const unsigned char *got,
		    uint64_t pos, size_t n, const char *what)
{
	const unsigned char *want = w->mm[mi].M + pos;
	if (!memcmp(got, want, n))
		return;
	size_t k = 0;
	while (got[k] == want[k])
		k++;
	fail_msg("seed %llu op %u: %s of mapping %u: byte %llu is %u, "
		 "model says %u",
		 (unsigned long long)w->seed, w->ops, what, mi,
		 (unsigned long long)(pos + k), got[k], want[k]);
}

static void do_write(struct world *w, unsigned mi)
{
	struct model *x = &w->mm[mi];
	/* Now and then one write larger than the whole budget. */
	size_t len = rnd(w, 20) ? 1 + rnd(w, MAX_IO)
				: (size_t)w->budget + rnd(w, w->budget);
	len = MIN(len, (size_t)SPACE);
	uint64_t pos = rnd(w, 3) ? rnd(w, SPACE - len + 1)
				 : MIN(x->msize, (uint64_t)(SPACE - len));
	unsigned char v = (unsigned char)(1 + rnd(w, 255));
	for (size_t i = 0; i < len; i++)
		w->buf[i] = (unsigned char)(v + i / 512);
	ssize_t n = folio_mapping_write(x->m, w->buf, len, pos);
	TRACE(w, "m%u write %zu at %llu: %zd", mi, len,
	      (unsigned long long)pos, n);
	/* Short or failed only for a failed edge read, or when nothing in
	 * the pool could be cleaned (faults). */
	if (n < 0) {
		assert_true(n == -EIO || n == -ENOMEM);
		return;
	}
	assert_true((size_t)n <= len);
	if ((size_t)n < len)
		w->short_writes++;
	/* Growing past the old EOF through a write fills zeros in M. */
	memcpy(x->M + pos, w->buf, (size_t)n);
	touch(x, pos, pos + (uint64_t)n);
	if (pos + (uint64_t)n > x->msize)
		x->msize = pos + (uint64_t)n;
}

static void do_read(struct world *w, unsigned mi)
{
	struct model *x = &w->mm[mi];
	size_t len = 1 + rnd(w, rnd(w, 8) ? MAX_IO : SPACE);
	uint64_t pos = rnd(w, SPACE);
	ssize_t n = folio_mapping_read(x->m, w->buf, len, pos);
	if (n < 0) {
		assert_true(n == -EIO || n == -ENOMEM);
		return;
	}
	uint64_t avail = pos < x->msize ? x->msize - pos : 0;
	assert_true((uint64_t)n <= MIN((uint64_t)len, avail));
	compare(w, mi, w->buf, pos, (size_t)n, "read");
}

static void do_truncate(struct world *w, unsigned mi)
{
	struct model *x = &w->mm[mi];
	uint64_t size = rnd(w, 4) ? rnd(w, SPACE + 1) : x->msize / 2;
	int r = folio_mapping_truncate(x->m, size);
	TRACE(w, "m%u truncate %llu -> %llu: %d", mi,
	      (unsigned long long)x->msize, (unsigned long long)size, r);
	if (r)
		return; /* a truncate fault: nothing changed */
	uint64_t old = x->msize;
	if (size < old)
		memset(x->M + size, 0, (size_t)(old - size));
	touch(x, MIN(size, old), MAX(size, old));
	x->min_trunc = MIN(x->min_trunc, size);
	x->msize = size;
}

static void check_durable(struct world *w, unsigned mi, const char *what)
{
	struct model *x = &w->mm[mi];
	assert_int_equal(folio_engine_mem_peek_durable(x->e, w->buf, SPACE,
						       0),
			 0);
	struct folio_mem_stats es = test_mem_stats(x->e);
	if (es.durable_size != x->msize)
		fail_msg("seed %llu op %u: %s of mapping %u: size %llu, model "
			 "says %llu", (unsigned long long)w->seed, w->ops,
			 what, mi, (unsigned long long)es.durable_size,
			 (unsigned long long)x->msize);
	compare(w, mi, w->buf, 0, SPACE, what);
}

static void synced(struct world *w, unsigned mi)
{
	struct model *x = &w->mm[mi];
	memcpy(x->S, x->M, SPACE);
	x->ssize = x->msize;
	x->min_trunc = x->msize;
	memset(x->touched, 0, SPACE);
}

static void do_sync(struct world *w, unsigned mi)
{
	struct model *x = &w->mm[mi];
	int r = folio_mapping_sync(x->m, NULL);
	TRACE(w, "m%u sync: %d", mi, r);
	if (r) {
		w->failed_syncs++;
		return;
	}
	w->good_syncs++;
	check_durable(w, mi, "durable store after a good sync");
	synced(w, mi);
}

static void do_fault(struct world *w, unsigned mi)
{
	struct model *x = &w->mm[mi];
	if (x->rules >= 6) {
		assert_int_equal(folio_engine_mem_clear_faults(x->e), 0);
		x->rules = 0;
		return;
	}
	struct folio_mem_fault f = test_random_fault(&w->rng, true, 8192, 3);
	/* Writes and flushes may fail a few times in a row. */
	if (f.ops == FOLIO_MEM_OP_WRITE || f.ops == FOLIO_MEM_OP_FLUSH)
		f.count = 1 + rnd(w, 3);
	if (rnd(w, 2)) {
		f.pos = rnd(w, SPACE);
		f.len = 1 + rnd(w, 65536);
	}
	assert_int_equal(folio_engine_mem_inject(x->e, &f), 0);
	TRACE(w, "m%u fault ops %#x err %d short %zu lose %u skip %llu "
	      "count %llu at %llu+%llu", mi, f.ops, f.error, f.short_len,
	      f.flags, (unsigned long long)f.skip,
	      (unsigned long long)f.count, (unsigned long long)f.pos,
	      (unsigned long long)f.len);
	x->rules++;
}

/* (c), then the mapping starts again over what survived. */
static void do_cut(struct world *w, unsigned mi)
{
	struct model *x = &w->mm[mi];
	unsigned flags = FOLIO_MEM_CUT_STAY_OFF |
			 (rnd(w, 2) ? FOLIO_MEM_CUT_KEEP_SOME : 0);
	assert_true(folio_engine_mem_power_cut(x->e, flags, w->rng) >= 0);
	struct folio_mem_stats es = test_mem_stats(x->e);
	uint64_t dsize = es.durable_size;
	TRACE(w, "m%u cut %#x: durable size %llu", mi, flags,
	      (unsigned long long)dsize);
	unsigned char *D = malloc(SPACE);
	assert_non_null(D);
	assert_int_equal(folio_engine_mem_peek_durable(x->e, D, SPACE, 0), 0);
	uint64_t lim = MIN(MIN(dsize, x->ssize), x->min_trunc);
	for (uint64_t b = 0; b < lim; b++)
		if (!x->touched[b] && D[b] != x->S[b])
			fail_msg("seed %llu op %u: cut of mapping %u lost "
				 "synced byte %llu (%u, synced %u)",
				 (unsigned long long)w->seed, w->ops, mi,
				 (unsigned long long)b, D[b], x->S[b]);
	/* The cache is stale now: thrown away, opened again. */
	assert_int_equal(folio_mapping_invalidate(x->m, 0, 0,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(folio_mapping_free(x->m), 0);
	assert_int_equal(folio_engine_mem_clear_faults(x->e), 0);
	x->rules = 0;
	assert_int_equal(folio_engine_mem_power_on(x->e), 0);
	memset(x->M, 0, SPACE);
	memcpy(x->M, D, (size_t)MIN(dsize, (uint64_t)SPACE));
	x->msize = dsize;
	synced(w, mi);
	x->opts.size = dsize;
	open_mapping(w, x);
	free(D);
	w->cuts++;
}

static void step(struct world *w)
{
	unsigned mi = (unsigned)rnd(w, NMAP);
	struct model *x = &w->mm[mi];
	unsigned r = (unsigned)rnd(w, 100);
	if (r < 38) {
		do_write(w, mi);
	} else if (r < 62) {
		do_read(w, mi);
	} else if (r < 68) {
		do_truncate(w, mi);
	} else if (r < 75) {
		struct folio_writeback_opts wo = {.sz = sizeof(wo)};
		if (rnd(w, 2))
			wo.flags = FOLIO_WB_WAIT;
		int64_t n = folio_mapping_writeback(x->m, &wo);
		TRACE(w, "m%u writeback %u: %lld", mi, wo.flags, (long long)n);
		assert_true(n >= 0);
	} else if (r < 83) {
		do_sync(w, mi);
	} else if (r < 87) {
		uint64_t pos = rnd(w, SPACE), len = rnd(w, SPACE);
		int rr = folio_mapping_invalidate(x->m, pos, len, 0);
		TRACE(w, "m%u invalidate %llu+%llu: %d", mi,
		      (unsigned long long)pos, (unsigned long long)len, rr);
		assert_true(rr == 0 || rr == -EBUSY);
	} else if (r < 91) {
		int64_t got = folio_pool_shrink(w->p, rnd(w, w->budget));
		TRACE(w, "shrink: %lld", (long long)got);
		assert_true(got >= 0);
	} else if (r < 98) {
		do_fault(w, mi);
	} else if (r < 99) {
		do_cut(w, mi);
	} else {
		/* Reopen cleanly: a mapping leaves the pool and comes back. */
		if (folio_mapping_sync(x->m, NULL) == 0) {
			check_durable(w, mi, "durable store before a reopen");
			synced(w, mi);
			assert_int_equal(folio_mapping_free(x->m), 0);
			x->opts.size = x->msize;
			open_mapping(w, x);
		}
	}
	if (test_trace_on() && getenv("FOLIO_TEST_TRACE")[0] == '2')
		for (unsigned i = 0; i < NMAP; i++) {
			struct folio_mem_stats es = test_mem_stats(w->mm[i].e);
			TRACE(w, "  m%u: model size %llu, store %llu, "
			      "durable %llu, %llu logged, %llu flushes, "
			      "%llu truncates",
			      i, (unsigned long long)w->mm[i].msize,
			      (unsigned long long)es.size,
			      (unsigned long long)es.durable_size,
			      (unsigned long long)es.volatile_ops,
			      (unsigned long long)es.flushes,
			      (unsigned long long)es.truncates);
		}
	w->ops++;
	check_pool(w);
}

static void settle(struct world *w)
{
	for (unsigned i = 0; i < NMAP; i++) {
		struct model *x = &w->mm[i];
		assert_int_equal(folio_engine_mem_clear_faults(x->e), 0);
		x->rules = 0;
		int r = -1;
		for (int tries = 0; tries < 3 && r; tries++)
			r = folio_mapping_sync(x->m, NULL);
		if (r)
			fail_msg("seed %llu: mapping %u does not sync (%d)",
				 (unsigned long long)w->seed, i, r);
		check_durable(w, i, "durable store at the end");
		/* And everything reads back through the pool. */
		ssize_t n = folio_mapping_read(x->m, w->buf, SPACE, 0);
		assert_int_equal(n, (ssize_t)x->msize);
		compare(w, i, w->buf, 0, (size_t)n, "final read");
	}
}

static void teardown(struct world *w)
{
	for (unsigned i = 0; i < NMAP; i++) {
		struct model *x = &w->mm[i];
		assert_int_equal(folio_mapping_free(x->m), 0);
		assert_int_equal(folio_engine_free(x->e), 0);
		free(x->M);
		free(x->S);
		free(x->touched);
	}
	struct folio_pool_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_pool_stats(w->p, &st), 0);
	assert_int_equal(st.cached_bytes, 0);
	printf("# seed %llu: %u ops, %u good and %u failed syncs, %u cuts, "
	       "%u short writes, %llu reclaimed, %llu memory waits, %llu "
	       "throttled, %llu pool flushes\n",
	       (unsigned long long)w->seed, w->ops, w->good_syncs,
	       w->failed_syncs, w->cuts, w->short_writes,
	       (unsigned long long)st.reclaimed_bytes,
	       (unsigned long long)st.memory_waits,
	       (unsigned long long)st.throttle_waits,
	       (unsigned long long)st.flushes);
	assert_int_equal(folio_pool_free(w->p), 0);
	free(w->buf);
}

static void run_seed(uint64_t seed, unsigned ops)
{
	struct world w;
	memset(&w, 0, sizeof(w));
	w.seed = seed;
	w.rng = seed * 0x9E3779B97F4A7C15ull + 1;
	setup(&w);
	while (w.ops < ops)
		step(&w);
	settle(&w);
	teardown(&w);
}

static void test_pool_model(void **state)
{
	(void)state;
	const char *fixed = getenv("FOLIO_TEST_SEED");
	uint64_t seed = test_seed("pool_model");
	unsigned ops = test_iters(2000, 150);
	unsigned seeds = fixed && *fixed ? 1 : test_iters(SEEDS, 2);
	for (unsigned i = 0; i < seeds; i++)
		run_seed(seed + i, ops);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pool_model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
