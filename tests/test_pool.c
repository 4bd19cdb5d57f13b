/* SPDX-License-Identifier: MIT */
/*
 * The pool: options and bad input, membership, exact accounting after
 * every kind of operation, what reclaim may and may not take, room for
 * writes and reads larger than the budget, throttling and the flushers,
 * expiry, S3-FIFO's scan resistance and ghosts, shrink, statistics.
 *
 * "Exact" means: with nothing running, the pool's cached bytes are the
 * sizes of its mappings' folios, its dirty and unstable bytes the sums of
 * the mappings' own counts, nothing is under writeback, and every
 * charged folio is in one of the two queues.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "folio_state.h"
#include "folio_state_mem.h"
#include "test_util.h"

#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define KiB 1024u
#define MiB (1024u * 1024u)

static struct folio_pool_stats pool_stats(struct folio_pool *p)
{
	struct folio_pool_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_pool_stats(p, &st), 0);
	return st;
}

static uint64_t folio_bytes(const struct folio_mapping_stats *st)
{
	uint64_t b = 0;
	for (unsigned k = 0; k < FOLIO_STATS_SHIFTS; k++)
		b += st->folios_by_shift[k] << (9 + k);
	return b;
}

#define MAXM 4

struct env {
	struct folio_pool *p;
	struct folio_engine *e[MAXM];
	struct folio_mapping *m[MAXM];
	unsigned n;
};

static struct folio_pool *new_pool(uint64_t budget, unsigned flushers)
{
	struct folio_pool *p;
	struct folio_pool_opts o = {.sz = sizeof(o), .budget = budget,
				    .flusher_threads = flushers};
	assert_int_equal(folio_pool_new(&p, &o), 0);
	return p;
}

static void add_mapping(struct env *v, size_t bs, size_t max_folio,
			unsigned flags)
{
	assert_true(v->n < MAXM);
	unsigned i = v->n++;
	assert_int_equal(folio_engine_mem(&v->e[i], 256ull * MiB), 0);
	struct folio_mapping_opts mo = {
		.sz = sizeof(mo), .block_size = bs, .max_folio_size = max_folio,
		.flags = flags, .engine = v->e[i], .pool = v->p,
	};
	assert_int_equal(folio_mapping_new(&v->m[i], &mo), 0);
}

static void env_close(struct env *v)
{
	for (unsigned i = 0; i < v->n; i++)
		test_close(v->m[i], v->e[i]);
	struct folio_pool_stats st = pool_stats(v->p);
	assert_int_equal(st.cached_bytes, 0);
	assert_int_equal(st.mappings, 0);
	assert_int_equal(folio_pool_free(v->p), 0);
	memset(v, 0, sizeof(*v));
}

/* The pool's counts against the mappings' own, with nothing running. */
static void check_exact(struct env *v)
{
	struct folio_pool_stats st = pool_stats(v->p);
	uint64_t cached = 0, dirty = 0, unstable = 0;
	for (unsigned i = 0; i < v->n; i++) {
		if (!v->m[i])
			continue;
		struct folio_mapping_stats ms = test_mapping_stats(v->m[i]);
		cached += folio_bytes(&ms);
		dirty += ms.dirty_bytes;
		unstable += ms.unstable_bytes;
	}
	assert_int_equal(st.cached_bytes, cached);
	assert_int_equal(st.dirty_bytes, dirty);
	assert_int_equal(st.unstable_bytes, unstable);
	assert_int_equal(st.writeback_bytes, 0);
	assert_int_equal(st.small_bytes + st.main_bytes, cached);
	assert_true(st.cached_bytes <= st.budget);
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 131 + seed * 7 + 1);
}

/* ---- options --------------------------------------------------------- */

static void test_bad_opts(void **state)
{
	(void)state;
	struct folio_pool *p = (struct folio_pool *)(uintptr_t)0x1;
	struct folio_pool_opts o = {.sz = sizeof(o), .budget = 1 * MiB};
	assert_int_equal(folio_pool_new(NULL, &o), -EINVAL);
	assert_int_equal(folio_pool_new(&p, NULL), -EINVAL);
	struct {
		const char *what;
		struct folio_pool_opts o;
		int want;
	} cases[] = {
		{"sz too small", {.sz = sizeof(size_t), .budget = MiB},
		 -EINVAL},
		{"no budget", {.sz = sizeof(o)}, -EINVAL},
		{"unknown flags", {.sz = sizeof(o), .budget = MiB, .flags = 1},
		 -EINVAL},
		{"budget below a block", {.sz = sizeof(o), .budget = 511},
		 -ERANGE},
		{"budget past 2^62",
		 {.sz = sizeof(o), .budget = (UINT64_C(1) << 62) + 1}, -ERANGE},
		{"limit above budget",
		 {.sz = sizeof(o), .budget = MiB, .dirty_limit = MiB + 1},
		 -ERANGE},
		{"background above limit",
		 {.sz = sizeof(o), .budget = MiB, .dirty_limit = 100 * KiB,
		  .dirty_background = 100 * KiB + 1},
		 -ERANGE},
		{"background above the default limit",
		 {.sz = sizeof(o), .budget = MiB, .dirty_background = MiB / 2},
		 -ERANGE},
		{"expiry too long",
		 {.sz = sizeof(o), .budget = MiB,
		  .dirty_expire_ms = FOLIO_POOL_MAX_EXPIRE_MS + 1},
		 -ERANGE},
		{"too many flushers",
		 {.sz = sizeof(o), .budget = MiB,
		  .flusher_threads = FOLIO_POOL_MAX_FLUSHERS + 1},
		 -ERANGE},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int r = folio_pool_new(&p, &cases[i].o);
		if (r != cases[i].want)
			fail_msg("%s: %d, expected %d", cases[i].what, r,
				 cases[i].want);
		assert_ptr_equal(p, (struct folio_pool *)(uintptr_t)0x1);
	}

	/* A newer caller's larger struct: zero tail accepted, else E2BIG. */
	struct {
		struct folio_pool_opts o;
		uint64_t future;
	} big = {.o = {.sz = sizeof(big), .budget = MiB}, .future = 1};
	assert_int_equal(folio_pool_new(&p, &big.o), -E2BIG);
	big.future = 0;
	assert_int_equal(folio_pool_new(&p, &big.o), 0);
	assert_int_equal(folio_pool_free(p), 0);
	assert_int_equal(folio_pool_free(NULL), 0);
}

static void test_defaults(void **state)
{
	(void)state;
	/* An older caller knowing only sz and budget. */
	struct folio_pool_opts o = {
		.sz = offsetof(struct folio_pool_opts, budget) +
		      sizeof(uint64_t),
		.budget = 10 * MiB, .dirty_limit = 123};
	struct folio_pool *p;
	assert_int_equal(folio_pool_new(&p, &o), 0);
	struct folio_pool_stats st = pool_stats(p);
	assert_int_equal(st.budget, 10 * MiB);
	assert_int_equal(st.dirty_background, MiB);
	assert_int_equal(st.dirty_limit, 2 * MiB);
	assert_int_equal(st.dirty_expire_ms, 30000);
	assert_int_equal(st.flusher_threads, 0);
	assert_int_equal(st.cached_bytes, 0);
	assert_true(st.metadata_bytes > 0); /* the pool's own tables */
	assert_int_equal(folio_pool_free(p), 0);

	/* A limit below the default background: background is half of it. */
	struct folio_pool_opts o2 = {.sz = sizeof(o2), .budget = 10 * MiB,
				     .dirty_limit = 512 * KiB};
	assert_int_equal(folio_pool_new(&p, &o2), 0);
	st = pool_stats(p);
	assert_int_equal(st.dirty_limit, 512 * KiB);
	assert_int_equal(st.dirty_background, 256 * KiB);
	assert_int_equal(folio_pool_free(p), 0);

	/* Statistics: an older struct gets its prefix, a newer one E2BIG. */
	struct folio_pool_opts o3 = {.sz = sizeof(o3), .budget = MiB};
	assert_int_equal(folio_pool_new(&p, &o3), 0);
	struct folio_pool_stats small;
	memset(&small, 0xab, sizeof(small));
	small.sz = offsetof(struct folio_pool_stats, dirty_background);
	assert_int_equal(folio_pool_stats(p, &small), 0);
	assert_int_equal(small.budget, MiB);
	assert_int_equal(small.dirty_background, 0xabababababababab);
	struct {
		struct folio_pool_stats st;
		uint64_t future;
	} large = {.st = {.sz = sizeof(large)}, .future = 7};
	assert_int_equal(folio_pool_stats(p, &large.st), -E2BIG);
	assert_int_equal(folio_pool_stats(p, NULL), -EINVAL);
	assert_int_equal(folio_pool_stats(NULL, &small), -EINVAL);
	small.sz = 1;
	assert_int_equal(folio_pool_stats(p, &small), -EINVAL);
	assert_int_equal(folio_pool_shrink(NULL, 1), -EINVAL);
	assert_int_equal(folio_pool_shrink(p, 0), 0);
	assert_int_equal(folio_pool_shrink(p, UINT64_MAX), 0);
	assert_int_equal(folio_pool_free(p), 0);
}

static void test_membership(void **state)
{
	(void)state;
	struct folio_pool *p = new_pool(256 * KiB, 0);
	struct folio_engine *e;
	assert_int_equal(folio_engine_mem(&e, MiB), 0);
	struct folio_mapping *m = (struct folio_mapping *)(uintptr_t)0x1;
	/* Folios of up to 512 KiB cannot fit a 256 KiB budget. */
	struct folio_mapping_opts mo = {.sz = sizeof(mo),
					.max_folio_size = 512 * KiB,
					.engine = e, .pool = p};
	assert_int_equal(folio_mapping_new(&m, &mo), -ERANGE);
	assert_ptr_equal(m, (struct folio_mapping *)(uintptr_t)0x1);
	assert_int_equal(pool_stats(p).mappings, 0);
	assert_int_equal(folio_engine_free(e), 0); /* not left in use */
	assert_int_equal(folio_engine_mem(&e, MiB), 0);

	/* An older caller's options end before pool: unbounded. */
	mo.engine = e;
	mo.max_folio_size = 0;
	mo.sz = offsetof(struct folio_mapping_opts, pool);
	assert_int_equal(folio_mapping_new(&m, &mo), 0);
	assert_int_equal(pool_stats(p).mappings, 0);
	unsigned char buf[4096] = {1};
	for (unsigned i = 0; i < 128; i++) /* 512 KiB: over the budget */
		assert_int_equal(folio_mapping_write(m, buf, sizeof(buf),
						     i * 4096ull),
				 4096);
	assert_int_equal(pool_stats(p).cached_bytes, 0);
	test_close(m, e);

	assert_int_equal(folio_engine_mem(&e, MiB), 0);
	mo.engine = e;
	mo.sz = sizeof(mo);
	mo.max_folio_size = 256 * KiB; /* exactly the budget: fits */
	assert_int_equal(folio_mapping_new(&m, &mo), 0);
	assert_int_equal(pool_stats(p).mappings, 1);
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 0), 4096);
	assert_int_equal(folio_pool_free(p), -EBUSY);
	assert_int_equal(pool_stats(p).cached_bytes, 4096);
	/* Dirty data keeps the mapping, and its charge, in the pool. */
	assert_int_equal(folio_mapping_free(m), -EBUSY);
	assert_int_equal(pool_stats(p).mappings, 1);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(folio_mapping_free(m), 0);
	struct folio_pool_stats st = pool_stats(p);
	assert_int_equal(st.mappings, 0);
	assert_int_equal(st.cached_bytes, 0);
	assert_int_equal(folio_engine_free(e), 0);
	assert_int_equal(folio_pool_free(p), 0);
}

/* ---- accounting -------------------------------------------------------- */

static void test_accounting_exact(void **state)
{
	(void)state;
	struct env v = {0};
	v.p = new_pool(2 * MiB, 0);
	add_mapping(&v, 512, 64 * KiB, 0);
	add_mapping(&v, 4096, 256 * KiB, FOLIO_MAPPING_FOLIO_DIRTY);
	add_mapping(&v, 1024, 32 * KiB, FOLIO_MAPPING_DROP_ON_ERROR);
	static unsigned char buf[300 * 1024], back[300 * 1024];
	fill(buf, sizeof(buf), 1);
	check_exact(&v);

	for (unsigned i = 0; i < v.n; i++) {
		struct folio_mapping *m = v.m[i];
		/* Unaligned writes: partial blocks, several folios. */
		assert_int_equal(folio_mapping_write(m, buf, 10000, 777),
				 10000);
		check_exact(&v);
		assert_int_equal(folio_mapping_write(m, buf, 70000, 100000),
				 70000);
		check_exact(&v);
		/* Overwrite of dirty blocks: nothing new is dirty. */
		assert_int_equal(folio_mapping_write(m, buf, 5000, 1000), 5000);
		check_exact(&v);
		assert_int_equal(folio_mapping_read(m, back, 200000, 0),
				 170000);
		check_exact(&v);
		/* Writeback completes inline: dirty becomes unstable. */
		struct folio_writeback_opts wo = {.sz = sizeof(wo),
						  .end = 50000};
		assert_true(folio_mapping_writeback(m, &wo) > 0);
		check_exact(&v);
		/* Re-dirty unstable blocks, then cut through both. */
		assert_int_equal(folio_mapping_write(m, buf, 3000, 2000), 3000);
		check_exact(&v);
		assert_int_equal(folio_mapping_truncate(m, 1500), 0);
		check_exact(&v);
		assert_int_equal(folio_mapping_truncate(m, 150000), 0);
		check_exact(&v);
		assert_int_equal(folio_mapping_write(m, buf, 40000, 60000),
				 40000);
		check_exact(&v);
		/* A failed write puts its bytes back dirty. */
		struct folio_mem_fault wf = {.sz = sizeof(wf),
					     .ops = FOLIO_MEM_OP_WRITE,
					     .error = -EIO, .count = 1};
		assert_int_equal(folio_engine_mem_inject(v.e[i], &wf), 0);
		assert_int_not_equal(folio_mapping_sync(m, NULL), 0);
		check_exact(&v);
		/* A failed flush makes unstable data dirty again. */
		assert_int_equal(folio_mapping_writeback(m, NULL) >= 0, 1);
		check_exact(&v);
		struct folio_mem_fault ff = {.sz = sizeof(ff),
					     .ops = FOLIO_MEM_OP_FLUSH,
					     .error = -EIO, .count = 1};
		assert_int_equal(folio_engine_mem_inject(v.e[i], &ff), 0);
		folio_mapping_sync(m, NULL);
		check_exact(&v);
		assert_int_equal(folio_mapping_sync(m, NULL), 0);
		check_exact(&v);
		/* Zero-copy write. */
		struct folio *f;
		ssize_t n = folio_mapping_write_begin(m, 90001, 3000, &f);
		assert_true(n > 0);
		memset((char *)folio_data(f) + (90001 - folio_pos(f)), 9,
		       (size_t)n);
		assert_int_equal(folio_mapping_write_end(m, f, 90001,
							 (size_t)n),
				 n);
		check_exact(&v);
		/* Discard part of the dirty data, then drop clean folios. */
		assert_int_equal(folio_mapping_invalidate(
					 m, 89000, 2000,
					 FOLIO_INVALIDATE_DISCARD),
				 0);
		check_exact(&v);
		assert_int_equal(folio_mapping_sync(m, NULL), 0);
		assert_int_equal(folio_mapping_invalidate(m, 0, 65536, 0), 0);
		check_exact(&v);
	}
	/* Shrink everything clean; then free one mapping. */
	assert_true(folio_pool_shrink(v.p, UINT64_MAX) >= 0);
	check_exact(&v);
	assert_int_equal(folio_mapping_write(v.m[0], buf, 5000, 0), 5000);
	assert_int_equal(folio_mapping_sync(v.m[0], NULL), 0);
	uint64_t before = pool_stats(v.p).cached_bytes;
	struct folio_mapping_stats ms = test_mapping_stats(v.m[0]);
	assert_true(folio_bytes(&ms) > 0);
	assert_int_equal(folio_mapping_free(v.m[0]), 0);
	v.m[0] = NULL;
	assert_int_equal(pool_stats(v.p).cached_bytes,
			 before - folio_bytes(&ms));
	check_exact(&v);
	assert_int_equal(folio_engine_free(v.e[0]), 0);
	for (unsigned i = 1; i < v.n; i++)
		test_close(v.m[i], v.e[i]);
	v.n = 0;
	env_close(&v);
}

/* ---- what reclaim takes ------------------------------------------------ */

static void test_reclaim_skips_busy(void **state)
{
	(void)state;
	struct env v = {0};
	v.p = new_pool(MiB, 0);
	add_mapping(&v, 4096, 64 * KiB, 0);
	struct folio_mapping *m = v.m[0];
	static unsigned char buf[64 * 1024];
	fill(buf, sizeof(buf), 3);
	const uint64_t F = 64 * KiB;
	/* Folio k at k * F. 0: referenced, 1: locked by write_begin,
	 * 2: dirty, 3: unstable, 4..9: clean and stable. */
	assert_int_equal(folio_engine_mem_poke(v.e[0], buf, sizeof(buf),
					       9 * F),
			 0);
	for (unsigned k = 0; k < 10; k++)
		assert_int_equal(folio_mapping_write(m, buf, F, k * F),
				 (ssize_t)F);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	struct folio *held, *locked;
	assert_int_equal(folio_mapping_lookup(m, 0, &held), 0);
	assert_int_equal(folio_mapping_write_begin(m, F + 100, 100, &locked),
			 100);
	assert_int_equal(folio_mapping_write(m, buf, 100, 2 * F), 100);
	assert_int_equal(folio_mapping_write(m, buf, 100, 3 * F), 100);
	struct folio_writeback_opts wo = {.sz = sizeof(wo), .start = 3 * F,
					  .end = 4 * F};
	assert_true(folio_mapping_writeback(m, &wo) > 0);
	/* The last folio this thread used is remembered, not held. */
	unsigned char small[16];
	assert_int_equal(folio_mapping_read(m, small, sizeof(small), 9 * F),
			 16);
	check_exact(&v);

	/* The six clean folios: exactly what shrink may take without a
	 * flush. */
	assert_int_equal(folio_pool_shrink(v.p, 6 * F), (int64_t)(6 * F));
	check_exact(&v);
	struct folio *f;
	for (unsigned k = 0; k < 4; k++) {
		assert_int_equal(folio_mapping_lookup(m, k * F, &f), 0);
		if (k == 0)
			assert_ptr_equal(f, held);
		if (k == 1)
			assert_ptr_equal(f, locked);
		folio_put(f);
	}
	for (unsigned k = 4; k < 10; k++)
		assert_int_equal(folio_mapping_lookup(m, k * F, &f), -ENOENT);
	struct folio_mapping_stats ms = test_mapping_stats(m);
	assert_int_equal(ms.unstable_bytes, 4096); /* the block written */
	assert_true(ms.dirty_bytes > 0);
	assert_int_equal(pool_stats(v.p).flushes, 0);

	/* More: only the unstable folio can go, after a flush. */
	struct folio_mem_stats es = test_mem_stats(v.e[0]);
	assert_int_equal(folio_pool_shrink(v.p, UINT64_MAX), (int64_t)F);
	assert_int_equal(test_mem_stats(v.e[0]).flushes, es.flushes + 1);
	assert_int_equal(pool_stats(v.p).flushes, 1);
	assert_int_equal(folio_mapping_lookup(m, 3 * F, &f), -ENOENT);
	check_exact(&v);
	/* Nothing else moves. */
	assert_int_equal(folio_pool_shrink(v.p, UINT64_MAX), 0);

	assert_int_equal(folio_mapping_write_end(m, locked, F + 100, 100),
			 100);
	folio_put(held);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(folio_pool_shrink(v.p, UINT64_MAX), (int64_t)(3 * F));
	check_exact(&v);
	assert_int_equal(pool_stats(v.p).cached_bytes, 0);
	/* Everything written is in the store. */
	static unsigned char want[10 * 64 * 1024], got[10 * 64 * 1024];
	for (unsigned k = 0; k < 10; k++)
		memcpy(want + k * F, buf, F);
	/* write_end() committed the bytes already there (buf's). */
	memcpy(want + 2 * F, buf, 100);
	memcpy(want + 3 * F, buf, 100);
	assert_int_equal(folio_engine_mem_peek(v.e[0], got, sizeof(got), 0),
			 0);
	assert_memory_equal(got, want, sizeof(got));
	assert_int_equal(folio_mapping_read(m, got, sizeof(got), 0),
			 (ssize_t)sizeof(got));
	assert_memory_equal(got, want, sizeof(got));
	env_close(&v);
}

/* ---- room ----------------------------------------------------------- */

static void big_io(unsigned flushers)
{
	struct env v = {0};
	v.p = new_pool(256 * KiB, flushers);
	add_mapping(&v, 4096, 64 * KiB, 0);
	size_t len = test_slow_env() ? 2 * MiB : 8 * MiB;
	unsigned char *buf = malloc(len), *back = malloc(len);
	assert_non_null(buf);
	assert_non_null(back);
	fill(buf, len, flushers);
	/* One call, many times the budget: it completes in pieces. */
	assert_int_equal(folio_mapping_write(v.m[0], buf, len, 0),
			 (ssize_t)len);
	struct folio_pool_stats st = pool_stats(v.p);
	assert_true(st.cached_bytes <= st.budget);
	assert_true(st.reclaimed_bytes >= len - st.budget);
	memset(back, 0, len);
	assert_int_equal(folio_mapping_read(v.m[0], back, len, 0),
			 (ssize_t)len);
	assert_memory_equal(back, buf, len);
	assert_int_equal(folio_mapping_sync(v.m[0], NULL), 0);
	memset(back, 0, len);
	assert_int_equal(folio_engine_mem_peek(v.e[0], back, len, 0), 0);
	assert_memory_equal(back, buf, len);
	/* Reading it all again, after the cache was emptied. */
	assert_true(folio_pool_shrink(v.p, UINT64_MAX) > 0);
	memset(back, 0, len);
	assert_int_equal(folio_mapping_read(v.m[0], back, len, 0),
			 (ssize_t)len);
	assert_memory_equal(back, buf, len);
	st = pool_stats(v.p);
	assert_true(st.cached_bytes <= st.budget);
	if (!flushers)
		assert_true(st.memory_waits > 0);
	check_exact(&v);
	free(buf);
	free(back);
	env_close(&v);
}

static void test_big_io_no_flushers(void **state)
{
	(void)state;
	big_io(0);
}

static void test_big_io_flushers(void **state)
{
	(void)state;
	big_io(2);
}

/* Room taken by unstable data: the pool flushes the engine itself. */
static void test_unstable_room(void **state)
{
	(void)state;
	struct env v = {0};
	/* No throttling: the write must leave all of it dirty. */
	struct folio_pool_opts o = {.sz = sizeof(o), .budget = 512 * KiB,
				    .dirty_background = 512 * KiB,
				    .dirty_limit = 512 * KiB};
	assert_int_equal(folio_pool_new(&v.p, &o), 0);
	add_mapping(&v, 4096, 64 * KiB, 0);
	add_mapping(&v, 4096, 64 * KiB, 0);
	static unsigned char buf[512 * 1024];
	fill(buf, sizeof(buf), 5);
	const size_t part = 448 * KiB; /* below the limit */
	assert_int_equal(folio_mapping_write(v.m[0], buf, part, 0),
			 (ssize_t)part);
	assert_int_equal(folio_mapping_writeback(v.m[0], NULL),
			 (int64_t)part);
	struct folio_pool_stats st = pool_stats(v.p);
	assert_int_equal(st.unstable_bytes, part);
	assert_int_equal(st.dirty_bytes, 0);
	/* Another mapping needs the room for data it cannot let go of
	 * (a read could go on in pieces, reusing its own clean folios):
	 * m[0]'s engine gets flushed and its folios reclaimed. */
	assert_int_equal(folio_mapping_write(v.m[1], buf, sizeof(buf), 0),
			 (ssize_t)sizeof(buf));
	assert_int_equal(folio_mapping_sync(v.m[1], NULL), 0);
	static unsigned char back[512 * 1024];
	assert_int_equal(folio_engine_mem_peek(v.e[1], back, sizeof(back), 0),
			 0);
	assert_memory_equal(back, buf, sizeof(buf));
	assert_true(test_mem_stats(v.e[0]).flushes >= 1);
	st = pool_stats(v.p);
	assert_true(st.flushes >= 1);
	assert_true(st.cached_bytes <= st.budget);
	check_exact(&v);
	env_close(&v);
}

/* Nothing can be freed: -ENOMEM, not a hang, and no data lost. */
static void test_enomem(void **state)
{
	(void)state;
	struct env v = {0};
	v.p = new_pool(256 * KiB, 0);
	add_mapping(&v, 4096, 64 * KiB, 0);
	const uint64_t F = 64 * KiB;
	static unsigned char buf[64 * 1024];
	fill(buf, sizeof(buf), 7);
	struct folio *held[4];
	for (unsigned k = 0; k < 4; k++) {
		assert_int_equal(folio_mapping_write(v.m[0], buf, F, k * F),
				 (ssize_t)F);
	}
	assert_int_equal(folio_mapping_sync(v.m[0], NULL), 0);
	for (unsigned k = 0; k < 4; k++)
		assert_int_equal(folio_mapping_lookup(v.m[0], k * F, &held[k]),
				 0);
	/* Every folio referenced: no room can come. */
	assert_int_equal(folio_mapping_write(v.m[0], buf, 10, 5 * F),
			 -ENOMEM);
	assert_int_equal(folio_mapping_read(v.m[0], buf, 10, 0), 10);
	for (unsigned k = 0; k < 4; k++)
		folio_put(held[k]);
	check_exact(&v);

	/* Dirty data that cannot be written: -ENOMEM, or a short write,
	 * once nothing moves; the data stays and is written later. */
	struct folio_mem_fault wf = {.sz = sizeof(wf),
				     .ops = FOLIO_MEM_OP_WRITE, .error = -EIO};
	assert_int_equal(folio_engine_mem_inject(v.e[0], &wf), 0);
	static unsigned char big[512 * 1024];
	fill(big, sizeof(big), 8);
	ssize_t n = folio_mapping_write(v.m[0], big, sizeof(big), 0);
	assert_true(n == -ENOMEM || (n > 0 && n < (ssize_t)sizeof(big)));
	size_t done = n > 0 ? (size_t)n : 0;
	assert_int_equal(folio_engine_mem_clear_faults(v.e[0]), 0);
	folio_mapping_sync(v.m[0], NULL); /* reports the failed writes */
	assert_int_equal(folio_mapping_sync(v.m[0], NULL), 0);
	static unsigned char want[512 * 1024], got[512 * 1024];
	for (unsigned k = 0; k < 4; k++)
		memcpy(want + k * F, buf, F);
	memcpy(want, big, done);
	assert_int_equal(folio_engine_mem_peek(v.e[0], got, 4 * F, 0), 0);
	assert_memory_equal(got, want, 4 * F);
	check_exact(&v);
	env_close(&v);
}

/* ---- dirty control ------------------------------------------------------ */

static void throttle_run(unsigned flushers, enum folio_mem_mode mode)
{
	struct env v = {0};
	struct folio_pool_opts o = {.sz = sizeof(o), .budget = 4 * MiB,
				    .dirty_background = 128 * KiB,
				    .dirty_limit = 256 * KiB,
				    .flusher_threads = flushers};
	assert_int_equal(folio_pool_new(&v.p, &o), 0);
	add_mapping(&v, 4096, 64 * KiB, 0);
	assert_int_equal(folio_engine_mem_set_mode(v.e[0], mode, 1), 0);
	static unsigned char buf[4096];
	fill(buf, sizeof(buf), 9);
	unsigned writes = test_slow_env() ? 128 : 512;
	uint64_t worst = 0;
	for (unsigned i = 0; i < writes; i++) {
		assert_int_equal(folio_mapping_write(v.m[0], buf, sizeof(buf),
						     i * 4096ull),
				 4096);
		struct folio_pool_stats st = pool_stats(v.p);
		worst = MAX(worst, st.dirty_bytes + st.writeback_bytes);
	}
	struct folio_pool_stats st = pool_stats(v.p);
	/* A writer looks every ratelimit bytes (4 KiB here) and is then
	 * held until below: the limit plus one write's worth. */
	if (worst > o.dirty_limit + 2 * 4096)
		fail_msg("dirty + writeback reached %llu (limit %llu)",
			 (unsigned long long)worst,
			 (unsigned long long)o.dirty_limit);
	/* Flushers may keep up so well that nobody waits (see
	 * test_throttle_wakes for a writer that must). */
	if (flushers) {
		assert_true(st.flusher_bytes > 0);
	} else {
		assert_true(st.throttle_waits > 0);
		assert_true(test_mem_stats(v.e[0]).write_requests > 0);
	}
	assert_int_equal(folio_mapping_sync(v.m[0], NULL), 0);
	assert_int_equal(folio_engine_mem_set_mode(v.e[0], FOLIO_MEM_SYNC, 1),
			 0);
	check_exact(&v);
	env_close(&v);
}

static void test_throttle_self(void **state)
{
	(void)state;
	throttle_run(0, FOLIO_MEM_SYNC);
	throttle_run(0, FOLIO_MEM_POLL);
}

static void test_throttle_flushers(void **state)
{
	(void)state;
	/* Completions come late from the engine's thread: throttled
	 * writers must be woken by them. */
	throttle_run(1, FOLIO_MEM_THREAD);
	throttle_run(2, FOLIO_MEM_SYNC);
}

/*
 * An engine that holds every write until the test opens its gate: a
 * writer above the limit must then wait (for the flusher's requests or
 * its own), and be woken by the completions when the gate opens.
 */
struct gate {
	pthread_mutex_t lock;
	bool open;
	struct folio_io *held[256];
	unsigned nheld;
};

/* Complete a request at once: reads find zeros, writes go nowhere. */
static void complete_now(struct folio_io *io)
{
	if (io->op == FOLIO_IO_READ)
		for (int i = 0; i < io->iovcnt; i++)
			memset(io->iov[i].iov_base, 0, io->iov[i].iov_len);
	folio_io_complete(io, (ssize_t)io->len);
}

static int gate_submit(void *ctx, struct folio_io *io)
{
	struct gate *g = ctx;
	pthread_mutex_lock(&g->lock);
	bool hold = !g->open && io->op == FOLIO_IO_WRITE && g->nheld < 256;
	if (hold)
		g->held[g->nheld++] = io;
	pthread_mutex_unlock(&g->lock);
	if (!hold)
		complete_now(io);
	return 0;
}

static int gate_ok(void *ctx)
{
	(void)ctx;
	return 0;
}

static int gate_truncate(void *ctx, uint64_t size)
{
	(void)ctx;
	(void)size;
	return 0;
}

static void gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = true;
	unsigned n = g->nheld;
	g->nheld = 0;
	pthread_mutex_unlock(&g->lock);
	for (unsigned i = 0; i < n; i++)
		folio_io_complete(g->held[i], (ssize_t)g->held[i]->len);
}

struct gated_writer {
	struct folio_mapping *m;
	atomic_bool done;
};

static void *gated_write(void *arg)
{
	struct gated_writer *w = arg;
	static unsigned char buf[4096];
	for (unsigned i = 0; i < 256; i++) /* 1 MiB, four times the limit */
		if (folio_mapping_write(w->m, buf, sizeof(buf),
					i * 4096ull) != 4096)
			abort();
	atomic_store(&w->done, true);
	return NULL;
}

static void throttle_wakes(unsigned flushers)
{
	struct gate g = {.open = false};
	pthread_mutex_init(&g.lock, NULL);
	struct folio_engine_ops ops = {.sz = sizeof(ops),
				       .submit = gate_submit,
				       .flush = gate_ok,
				       .truncate = gate_truncate};
	struct folio_engine *e;
	assert_int_equal(folio_engine_new(&e, &ops, &g), 0);
	struct folio_pool *p;
	struct folio_pool_opts o = {.sz = sizeof(o), .budget = 4 * MiB,
				    .dirty_background = 128 * KiB,
				    .dirty_limit = 256 * KiB,
				    .flusher_threads = flushers};
	assert_int_equal(folio_pool_new(&p, &o), 0);
	struct folio_mapping_opts mo = {.sz = sizeof(mo),
					.max_folio_size = 64 * KiB,
					.engine = e, .pool = p};
	struct gated_writer w = {.done = false};
	assert_int_equal(folio_mapping_new(&w.m, &mo), 0);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, gated_write, &w), 0);
	/* The writer reaches the limit and waits: nothing completes. */
	while (!pool_stats(p).throttle_waits)
		usleep(1000);
	usleep(20000);
	assert_false(atomic_load(&w.done));
	struct folio_pool_stats st = pool_stats(p);
	assert_true(st.dirty_bytes + st.writeback_bytes >= o.dirty_limit);
	assert_true(st.writeback_bytes > 0);
	gate_open(&g);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(atomic_load(&w.done));
	st = pool_stats(p);
	assert_true(st.throttle_ns >= 20000000u);
	assert_int_equal(folio_mapping_sync(w.m, NULL), 0);
	assert_int_equal(folio_mapping_free(w.m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	assert_int_equal(folio_pool_free(p), 0);
	pthread_mutex_destroy(&g.lock);
}

static void test_throttle_wakes(void **state)
{
	(void)state;
	throttle_wakes(0); /* the writer's own writeback is held */
	throttle_wakes(1); /* the flusher's is */
}

/*
 * A flusher that cannot take a step (here: its flush is held, as on a
 * loaded machine it may simply not be scheduled) says nothing about the
 * engine: the throttled writer must write back itself, not give up and
 * pass the limit. Writes complete at once; only flushes are held, until
 * the writer is done or a safety timer opens them.
 */
struct flush_gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
	unsigned held;
};

static int flush_gate_submit(void *ctx, struct folio_io *io)
{
	(void)ctx;
	complete_now(io);
	return 0;
}

static int flush_gate_flush(void *ctx)
{
	struct flush_gate *g = ctx;
	pthread_mutex_lock(&g->lock);
	g->held++;
	while (!g->open)
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
	return 0;
}

static void flush_gate_open(struct flush_gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = true;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

static void *flush_gate_timer(void *arg)
{
	struct flush_gate *g = arg;
	/* Long past what the writer needs: only a writer stuck behind the
	 * held flush is still writing then. */
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += 30;
	pthread_mutex_lock(&g->lock);
	while (!g->open &&
	       pthread_cond_timedwait(&g->cond, &g->lock, &t) == 0)
		;
	g->open = true;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

static void test_throttle_flusher_stuck(void **state)
{
	(void)state;
	struct flush_gate g = {.open = false};
	pthread_mutex_init(&g.lock, NULL);
	pthread_cond_init(&g.cond, NULL);
	struct folio_engine_ops ops = {.sz = sizeof(ops),
				       .submit = flush_gate_submit,
				       .flush = flush_gate_flush,
				       .truncate = gate_truncate};
	struct folio_engine *e;
	assert_int_equal(folio_engine_new(&e, &ops, &g), 0);
	struct folio_pool *p;
	struct folio_pool_opts o = {.sz = sizeof(o), .budget = 8 * MiB,
				    .dirty_background = 128 * KiB,
				    .dirty_limit = 256 * KiB,
				    .flusher_threads = 1};
	assert_int_equal(folio_pool_new(&p, &o), 0);
	struct folio_mapping_opts mo = {.sz = sizeof(mo),
					.max_folio_size = 64 * KiB,
					.engine = e, .pool = p};
	struct folio_mapping *m;
	assert_int_equal(folio_mapping_new(&m, &mo), 0);
	pthread_t timer;
	assert_int_equal(pthread_create(&timer, NULL, flush_gate_timer, &g),
			 0);
	static unsigned char buf[4096];
	uint64_t worst = 0;
	for (unsigned i = 0; i < 1024; i++) { /* 4 MiB, 16 times the limit */
		assert_int_equal(folio_mapping_write(m, buf, sizeof(buf),
						     i * 4096ull),
				 4096);
		struct folio_pool_stats st = pool_stats(p);
		worst = MAX(worst, st.dirty_bytes + st.writeback_bytes);
	}
	pthread_mutex_lock(&g.lock);
	bool held = !g.open && g.held > 0;
	pthread_mutex_unlock(&g.lock);
	flush_gate_open(&g);
	assert_int_equal(pthread_join(timer, NULL), 0);
	if (worst > o.dirty_limit + 2 * 4096)
		fail_msg("dirty + writeback reached %llu (limit %llu)",
			 (unsigned long long)worst,
			 (unsigned long long)o.dirty_limit);
	/* The flusher was stuck in its flush all along. */
	assert_true(held);
	assert_true(pool_stats(p).throttle_waits > 0);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	assert_int_equal(folio_pool_free(p), 0);
	pthread_cond_destroy(&g.cond);
	pthread_mutex_destroy(&g.lock);
}

/* A caller's struct that ends at @end (a field added later starts
 * there): folio_pool_stats() writes nothing past it. */
static void stats_stop_before(struct folio_pool *p, size_t end)
{
	union {
		struct folio_pool_stats st;
		unsigned char b[sizeof(struct folio_pool_stats)];
	} old;
	memset(&old, 0x5a, sizeof(old));
	old.st.sz = end;
	assert_int_equal(folio_pool_stats(p, &old.st), 0);
	for (size_t i = end; i < sizeof(old); i++)
		assert_int_equal(old.b[i], 0x5a);
}

/* Folios a thread frees land in its cache, outside the budget; the
 * pool's stats count them, and they go back when the thread ends, or
 * when it shrinks the pool (which gives free memory to the kernel). */
struct tc_thread {
	struct env *v;
	uint64_t before, after_free, after_shrink;
};

static void *tc_main(void *arg)
{
	struct tc_thread *t = arg;
	static unsigned char buf[4096];
	t->before = pool_stats(t->v->p).thread_cache_bytes;
	for (unsigned i = 0; i < 8; i++)
		if (folio_mapping_write(t->v->m[0], buf, sizeof(buf),
					i * 4096ull) != 4096 ||
		    folio_mapping_sync(t->v->m[0], NULL) != 0)
			abort();
	if (folio_mapping_truncate(t->v->m[0], 0) != 0)
		abort();
	t->after_free = pool_stats(t->v->p).thread_cache_bytes;
	if (folio_pool_shrink(t->v->p, 4096) != 0)
		abort();
	t->after_shrink = pool_stats(t->v->p).thread_cache_bytes;
	return NULL;
}

static void test_thread_cache_bytes(void **state)
{
	(void)state;
	struct env v = {.p = new_pool(4 * MiB, 0)};
	add_mapping(&v, 4096, 4096, 0);
	struct tc_thread t = {.v = &v};
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, tc_main, &t), 0);
	assert_int_equal(pthread_join(tid, NULL), 0);
	assert_true(t.after_free >= t.before + 8 * 4096);
	assert_true(t.after_shrink + 8 * 4096 <= t.after_free);
	assert_true(pool_stats(v.p).thread_cache_bytes < t.after_free);
	stats_stop_before(v.p, offsetof(struct folio_pool_stats,
					 thread_cache_bytes));
	env_close(&v);
}

/* The allocator's own pages (chunk headers, slab slack, free memory kept
 * for reuse) are reported apart from metadata_bytes: at least the
 * headers of the chunks the data needs, at most those, a small share of
 * the data and the resident free memory the allocator may keep. */
static void test_allocator_bytes(void **state)
{
	(void)state;
	const uint64_t data = 8 * MiB;
	struct env v = {.p = new_pool(2 * data, 0)};
	/* Regions the tests before freed stay as spares for a while: give
	 * them back, they are not this test's. */
	assert_int_equal(folio_pool_shrink(v.p, 1), 0);
	add_mapping(&v, 4096, 4096, 0);
	static unsigned char buf[64 * 1024];
	for (uint64_t at = 0; at < data; at += sizeof(buf))
		assert_int_equal(folio_mapping_write(v.m[0], buf, sizeof(buf),
						     at),
				 (ssize_t)sizeof(buf));
	struct folio_pool_stats st = pool_stats(v.p);
	assert_int_equal(st.cached_bytes, data);
	/* 8 MiB of 4 KiB blocks spans at least 4 chunks, each described by
	 * at least one header page. */
	assert_true(st.allocator_bytes >= 4 * 4096);
	assert_true(st.allocator_bytes <= data / 64 + 6 * MiB);
	stats_stop_before(v.p, offsetof(struct folio_pool_stats,
					 allocator_bytes));
	env_close(&v);
}

static bool wait_clean(struct folio_pool *p, unsigned ms)
{
	for (unsigned t = 0; t < ms; t += 5) {
		struct folio_pool_stats st = pool_stats(p);
		if (!st.dirty_bytes && !st.writeback_bytes)
			return true;
		usleep(5000);
	}
	return false;
}

static void test_expire(void **state)
{
	(void)state;
	struct env v = {0};
	struct folio_pool_opts o = {.sz = sizeof(o), .budget = 4 * MiB,
				    .dirty_expire_ms = 50,
				    .flusher_threads = 1};
	assert_int_equal(folio_pool_new(&v.p, &o), 0);
	add_mapping(&v, 4096, 64 * KiB, 0);
	add_mapping(&v, 4096, 64 * KiB, 0);
	static unsigned char buf[8192];
	fill(buf, sizeof(buf), 11);
	/* Far below the background threshold: only age gets it written. */
	assert_int_equal(folio_mapping_write(v.m[0], buf, 8192, 0), 8192);
	assert_int_equal(folio_mapping_write(v.m[1], buf, 100, 77777), 100);
	assert_true(wait_clean(v.p, 5000));
	struct folio_pool_stats st = pool_stats(v.p);
	assert_true(st.flusher_bytes >= 8192 + 4096);
	assert_true(st.unstable_bytes > 0); /* written, nobody synced */
	assert_int_equal(folio_mapping_sync(v.m[0], NULL), 0);
	assert_int_equal(folio_mapping_sync(v.m[1], NULL), 0);
	check_exact(&v);
	env_close(&v);

	/* Long expiry, above background: written down to below it. */
	struct folio_pool_opts o2 = {.sz = sizeof(o2), .budget = 4 * MiB,
				     .dirty_background = 64 * KiB,
				     .dirty_limit = 2 * MiB,
				     .dirty_expire_ms =
					     FOLIO_POOL_MAX_EXPIRE_MS,
				     .flusher_threads = 1};
	assert_int_equal(folio_pool_new(&v.p, &o2), 0);
	add_mapping(&v, 4096, 64 * KiB, 0);
	static unsigned char big[512 * 1024];
	fill(big, sizeof(big), 12);
	assert_int_equal(folio_mapping_write(v.m[0], big, sizeof(big), 0),
			 (ssize_t)sizeof(big));
	bool below = false;
	for (unsigned t = 0; t < 5000 && !below; t += 5) {
		st = pool_stats(v.p);
		below = st.dirty_bytes + st.writeback_bytes < 64 * KiB;
		if (!below)
			usleep(5000);
	}
	assert_true(below);
	assert_true(pool_stats(v.p).flusher_passes > 0);
	assert_int_equal(folio_mapping_sync(v.m[0], NULL), 0);
	env_close(&v);
}

/*
 * Lookup hits: each cached read of a folio counts one (through the
 * thread's hint or the index), a write that finds its folio one, a miss
 * none; every mapping counts its own and the pool adds them up, keeping
 * the count of a mapping that left.
 */
static void test_stats_hits(void **state)
{
	(void)state;
	struct env v = {0};
	v.p = new_pool(4 * MiB, 0);
	add_mapping(&v, 4096, 64 * KiB, FOLIO_MAPPING_NO_READAHEAD);
	add_mapping(&v, 4096, 64 * KiB, FOLIO_MAPPING_NO_READAHEAD);
	static unsigned char b[8192];
	fill(b, sizeof(b), 7);
	struct folio_pool_stats st = pool_stats(v.p);
	uint64_t hits = st.hits, misses = st.misses;
	/* New folios: misses. */
	assert_int_equal(folio_mapping_write(v.m[0], b, 4096, 0), 4096);
	assert_int_equal(folio_mapping_write(v.m[1], b, 4096, 0), 4096);
	st = pool_stats(v.p);
	assert_int_equal(st.misses, misses + 2);
	assert_int_equal(st.hits, hits);
	/* Reads of the two folios of m[0], alternating so that both the
	 * hint and the index find them, and a write that finds one. */
	assert_int_equal(folio_mapping_write(v.m[0], b, 4096, 65536), 4096);
	misses = pool_stats(v.p).misses;
	for (int i = 0; i < 6; i++)
		assert_int_equal(folio_mapping_read(v.m[0], b, 4096,
						    i % 2 ? 65536 : 0),
				 4096);
	assert_int_equal(folio_mapping_read(v.m[0], b, 4096, 0), 4096);
	assert_int_equal(folio_mapping_write(v.m[1], b, 100, 0), 100);
	st = pool_stats(v.p);
	assert_int_equal(st.hits, hits + 8);
	assert_int_equal(st.misses, misses);
	/* m[0] leaves: its hits stay counted. */
	test_close(v.m[0], v.e[0]);
	v.m[0] = NULL;
	v.e[0] = NULL;
	assert_int_equal(pool_stats(v.p).hits, hits + 8);
	assert_int_equal(folio_mapping_read(v.m[1], b, 4096, 0), 4096);
	assert_int_equal(pool_stats(v.p).hits, hits + 9);
	env_close(&v);
}

/* ---- policy ----------------------------------------------------------- */

/* Read the 64 KiB folio at each position (a read that long creates
 * folios that large), returning the misses. */
static uint64_t touch(struct env *v, unsigned mi, const uint64_t *pos,
		      unsigned n)
{
	static unsigned char b[64 * 1024];
	uint64_t before = pool_stats(v->p).misses;
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(folio_mapping_read(v->m[mi], b, sizeof(b),
						    pos[i]),
				 (ssize_t)sizeof(b));
	return pool_stats(v->p).misses - before;
}

static void test_scan_resistance(void **state)
{
	(void)state;
	struct env v = {0};
	const uint64_t F = 64 * KiB, budget = 2 * MiB;
	v.p = new_pool(budget, 0);
	/* The hot set is counted in misses, which readahead would hide;
	 * the scan keeps readahead on: its folios must not push the hot
	 * set out either. */
	add_mapping(&v, 4096, F, FOLIO_MAPPING_NO_READAHEAD); /* hot data */
	add_mapping(&v, 4096, F, 0); /* what is scanned */
	uint64_t scan = 10 * budget;
	assert_int_equal(folio_mapping_truncate(v.m[0], budget), 0);
	assert_int_equal(folio_mapping_truncate(v.m[1], scan), 0);
	/* The hot set: half the budget, each folio used a few times. */
	enum { HOT = 16 };
	uint64_t hot[HOT];
	for (unsigned i = 0; i < HOT; i++)
		hot[i] = i * F;
	assert_int_equal(touch(&v, 0, hot, HOT), HOT);
	for (int round = 0; round < 3; round++)
		assert_int_equal(touch(&v, 0, hot, HOT), 0);
	/* One pass over ten times the budget, in small reads. */
	static unsigned char chunk[16 * 1024];
	for (uint64_t at = 0; at < scan; at += sizeof(chunk))
		assert_int_equal(folio_mapping_read(v.m[1], chunk,
						    sizeof(chunk), at),
				 (ssize_t)sizeof(chunk));
	struct folio_pool_stats st = pool_stats(v.p);
	assert_true(st.reclaimed_bytes >= scan - budget);
	uint64_t missed = touch(&v, 0, hot, HOT);
	if (missed * 10 > HOT)
		fail_msg("%llu of %d hot folios were pushed out by a scan",
			 (unsigned long long)missed, HOT);
	check_exact(&v);
	env_close(&v);
}

/* Read folio 0 of mapping 0 (folios of F bytes, a 1 MiB pool), then push
 * it out with 24 other folios read once each: its key is a ghost. */
static void evict_into_ghosts(struct env *v, uint64_t F)
{
	uint64_t x = 0;
	assert_int_equal(touch(v, 0, &x, 1), 1);
	for (uint64_t k = 1; k <= 24; k++) {
		uint64_t pos = k * F;
		touch(v, 0, &pos, 1);
	}
}

static void test_ghost(void **state)
{
	(void)state;
	struct env v = {0};
	const uint64_t F = 64 * KiB;
	v.p = new_pool(MiB, 0);
	/* Each folio is read once, sequentially: without readahead, so
	 * that every one is a miss of its own. */
	add_mapping(&v, 4096, F, FOLIO_MAPPING_NO_READAHEAD);
	assert_int_equal(folio_mapping_truncate(v.m[0], 64 * MiB), 0);
	uint64_t x = 0;
	evict_into_ghosts(&v, F);
	struct folio *f;
	assert_int_equal(folio_mapping_lookup(v.m[0], 0, &f), -ENOENT);
	struct folio_pool_stats st = pool_stats(v.p);
	assert_int_equal(st.ghost_hits, 0);
	assert_int_equal(st.main_bytes, 0);
	/* Missed again soon: a ghost hit, straight into the main queue. */
	assert_int_equal(touch(&v, 0, &x, 1), 1);
	st = pool_stats(v.p);
	assert_int_equal(st.ghost_hits, 1);
	assert_int_equal(st.main_bytes, F);
	/* And it stays while another scan goes by. */
	for (uint64_t k = 100; k < 140; k++) {
		uint64_t pos = k * F;
		touch(&v, 0, &pos, 1);
	}
	assert_int_equal(touch(&v, 0, &x, 1), 0);
	check_exact(&v);
	env_close(&v);
}

/* The ghost table grows with the folios the queues hold, not with the
 * budget: 64 KiB folios in a large pool get a few slots each (sized by
 * the budget they had 32, and scattered keys make every page of them
 * resident). Keys already in the table survive its growth. */
static void test_ghost_sized_by_folios(void **state)
{
	(void)state;
	struct env v = {0};
	const uint64_t F = 64 * KiB;
	v.p = new_pool(256 * MiB, 0);
	add_mapping(&v, 4096, F, FOLIO_MAPPING_NO_READAHEAD);
	assert_int_equal(folio_mapping_truncate(v.m[0], 64 * MiB), 0);
	enum { N = 200 };
	for (uint64_t k = 0; k < N; k++) {
		uint64_t pos = k * F;
		assert_int_equal(touch(&v, 0, &pos, 1), 1);
	}
	struct folio_pool_stats st = pool_stats(v.p);
	/* Headers, index and queue nodes are under 256 bytes a folio; the
	 * budget's 131072 ghost slots would be 2 MiB. */
	if (st.metadata_bytes > N * 1024)
		fail_msg("%llu bytes of metadata for %d folios",
			 (unsigned long long)st.metadata_bytes, N);
	check_exact(&v);
	env_close(&v);

	/* A 1 MiB pool: a 64 KiB folio evicted into the ghost table, then
	 * 4 KiB folios that make the node array (and so the table) grow. */
	memset(&v, 0, sizeof(v));
	v.p = new_pool(MiB, 0);
	add_mapping(&v, 4096, F, FOLIO_MAPPING_NO_READAHEAD);
	add_mapping(&v, 4096, 4096, FOLIO_MAPPING_NO_READAHEAD);
	assert_int_equal(folio_mapping_truncate(v.m[0], 64 * MiB), 0);
	assert_int_equal(folio_mapping_truncate(v.m[1], 64 * MiB), 0);
	uint64_t x = 0;
	evict_into_ghosts(&v, F);
	uint64_t meta0 = pool_stats(v.p).metadata_bytes;
	for (uint64_t k = 0; k < 12; k++) {
		uint64_t pos = k * F;
		touch(&v, 1, &pos, 1);
	}
	st = pool_stats(v.p);
	assert_true(st.metadata_bytes > meta0);
	assert_int_equal(st.ghost_hits, 0);
	assert_int_equal(touch(&v, 0, &x, 1), 1);
	st = pool_stats(v.p);
	assert_int_equal(st.ghost_hits, 1);
	check_exact(&v);
	env_close(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_opts),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_membership),
		cmocka_unit_test(test_accounting_exact),
		cmocka_unit_test(test_reclaim_skips_busy),
		cmocka_unit_test(test_big_io_no_flushers),
		cmocka_unit_test(test_big_io_flushers),
		cmocka_unit_test(test_unstable_room),
		cmocka_unit_test(test_enomem),
		cmocka_unit_test(test_throttle_self),
		cmocka_unit_test(test_throttle_flushers),
		cmocka_unit_test(test_throttle_wakes),
		cmocka_unit_test(test_throttle_flusher_stuck),
		cmocka_unit_test(test_thread_cache_bytes),
		cmocka_unit_test(test_allocator_bytes),
		cmocka_unit_test(test_expire),
		cmocka_unit_test(test_stats_hits),
		cmocka_unit_test(test_scan_resistance),
		cmocka_unit_test(test_ghost),
		cmocka_unit_test(test_ghost_sized_by_folios),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
