/* SPDX-License-Identifier: MIT */
/*
 * Direct I/O (lib/mapping/direct.c): arguments, coherence with the cache,
 * the overwrite fast path and its extent cache, durability and faults, a
 * byte-array model mixing both paths, and threads racing on one mapping.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "folio_state.h"
#include "folio_state_mem.h"
#include "test_util.h"

#define BS 4096u
#define KIB 1024u

static struct folio_mapping *new_mapping(struct folio_engine *e,
					 uint64_t size, unsigned flags)
{
	struct folio_mapping_opts o = {.sz = sizeof(o),
				       .block_size = BS,
				       .max_folio_size = 16 * KIB,
				       .size = size,
				       .flags = flags,
				       .engine = e};
	struct folio_mapping *m;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	return m;
}

static unsigned char *abuf(size_t n)
{
	unsigned char *p = aligned_alloc(FOLIO_ENGINE_DIRECT_ALIGN, n);
	assert_non_null(p);
	return p;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed * 31 + i * 7 + (i >> 9) + 1);
}

/* A mem engine holding `size` bytes of pattern 0, and a mapping over it. */
static struct folio_mapping *setup(struct folio_engine **e, uint64_t size,
				   unsigned flags)
{
	assert_int_equal(folio_engine_mem(e, 1u << 22), 0);
	if (size) {
		unsigned char *init = malloc(size);
		fill(init, size, 0);
		assert_int_equal(folio_engine_mem_poke(*e, init, size, 0), 0);
		free(init);
	}
	return new_mapping(*e, size, flags);
}


static void expect_direct(struct folio_mapping *m, const unsigned char *want,
			  size_t n, uint64_t pos)
{
	unsigned char *got = abuf(n);
	assert_int_equal(folio_mapping_read_direct(m, got, n, pos),
			 (ssize_t)n);
	assert_memory_equal(got, want, n);
	free(got);
}

/* ---- arguments ------------------------------------------------------- */

static void test_bad_args(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = setup(&e, 64 * KIB, 0);
	unsigned char *b = abuf(3 * BS);
	fill(b, 3 * BS, 9);
	uint64_t writes = test_mem_stats(e).write_requests;
	assert_int_equal(folio_mapping_write_direct(NULL, b, BS, 0, 0),
			 -EINVAL);
	assert_int_equal(folio_mapping_write_direct(m, NULL, BS, 0, 0),
			 -EINVAL);
	assert_int_equal(folio_mapping_write_direct(m, b, BS, 512, 0),
			 -EINVAL);
	assert_int_equal(folio_mapping_write_direct(m, b, BS + 512, 0, 0),
			 -EINVAL);
	assert_int_equal(folio_mapping_write_direct(m, b + 8, BS, 0, 0),
			 -EINVAL);
	assert_int_equal(folio_mapping_write_direct(m, b, BS, 0, 0x80),
			 -EINVAL);
	assert_int_equal(folio_mapping_write_direct(m, b, BS, FOLIO_MAX_POS,
						    0),
			 -EFBIG);
	assert_int_equal(folio_mapping_read_direct(NULL, b, BS, 0), -EINVAL);
	assert_int_equal(folio_mapping_read_direct(m, b + 16, BS, 0),
			 -EINVAL);
	assert_int_equal(folio_mapping_read_direct(m, b, 100, 0), -EINVAL);
	assert_int_equal(folio_mapping_read_direct(m, b, BS, 4000), -EINVAL);
	/* Nothing changed. */
	assert_int_equal(test_mem_stats(e).write_requests, writes);
	assert_int_equal(folio_mapping_size(m), 64 * KIB);
	assert_int_equal(test_mapping_stats(m).direct_writes, 0);
	/* Zero length: nothing to do. */
	assert_int_equal(folio_mapping_write_direct(m, NULL, 0, 0, 0), 0);
	assert_int_equal(folio_mapping_read_direct(m, NULL, 0, 0), 0);
	/* At and past EOF a read is empty. */
	assert_int_equal(folio_mapping_read_direct(m, b, BS, 64 * KIB), 0);
	free(b);
	test_close(m, e);
}

/* ---- the fast path and the exclusive path ----------------------------- */

static void test_overwrite_fast_extend_exclusive(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = setup(&e, 64 * KIB, 0);
	unsigned char *b = abuf(2 * BS);
	fill(b, 2 * BS, 3);
	assert_int_equal(folio_mapping_write_direct(m, b, 2 * BS, 8 * KIB, 0),
			 2 * BS);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.direct_writes, 1);
	assert_int_equal(st.direct_fast_writes, 1);
	assert_int_equal(st.direct_exclusive, 0);
	assert_int_equal(st.folios, 0); /* no folio made */
	test_expect_store(e, b, 2 * BS, 8 * KIB);
	test_expect_read(m, b, 2 * BS, 8 * KIB);
	expect_direct(m, b, 2 * BS, 8 * KIB);
	/* Past EOF: exclusive, and EOF grows. */
	assert_int_equal(folio_mapping_write_direct(m, b, 2 * BS, 96 * KIB,
						    0),
			 2 * BS);
	st = test_mapping_stats(m);
	assert_int_equal(st.direct_exclusive, 1);
	assert_int_equal(folio_mapping_size(m), 96 * KIB + 2 * BS);
	unsigned char *z = calloc(1, 32 * KIB);
	test_expect_read(m, z, 32 * KIB, 64 * KIB); /* the gap reads zeros */
	expect_direct(m, b, 2 * BS, 96 * KIB);
	/* Straddling EOF: exclusive. */
	assert_int_equal(folio_mapping_write_direct(m, b, 2 * BS, 100 * KIB,
						    0),
			 2 * BS);
	assert_int_equal(test_mapping_stats(m).direct_exclusive, 2);
	assert_int_equal(folio_mapping_size(m), 108 * KIB);
	/* A direct read at EOF is short. */
	assert_int_equal(folio_mapping_read_direct(m, b, 2 * BS, 104 * KIB),
			 BS);
	free(z);
	free(b);
	test_close(m, e);
}

/* With map(): the first write asks map() under the exclusive lock, later
 * overwrites of the extent take the fast path with no map() call; a
 * truncate below the extent forgets it. */
static void test_extent_cache(void **state)
{
	(void)state;
	struct folio_engine *e;
	assert_int_equal(folio_engine_mem(&e, 1u << 22), 0);
	assert_int_equal(folio_engine_mem_set_map(e, 64 * KIB, true), 0);
	unsigned char *init = malloc(256 * KIB);
	fill(init, 256 * KIB, 0);
	assert_int_equal(folio_engine_mem_poke(e, init, 256 * KIB, 0), 0);
	struct folio_mapping *m = new_mapping(e, 256 * KIB, 0);
	unsigned char *b = abuf(4 * BS);
	fill(b, 4 * BS, 5);
	assert_int_equal(folio_mapping_write_direct(m, b, BS, 8 * KIB, 0), BS);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.direct_exclusive, 1);
	assert_int_equal(st.direct_map_calls, 1);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(folio_mapping_write_direct(m, b, BS,
							    (i % 14) * BS, 0),
				 BS);
	st = test_mapping_stats(m);
	assert_int_equal(st.direct_fast_writes, 8);
	assert_int_equal(st.direct_map_calls, 1);
	assert_int_equal(st.direct_exclusive, 1);
	/* Across two extents: cold second extent, exclusive, one map() per
	 * extent; then fast, one request per extent. */
	assert_int_equal(folio_mapping_write_direct(m, b, 4 * BS,
						    64 * KIB - 2 * BS, 0),
			 4 * BS);
	st = test_mapping_stats(m);
	assert_int_equal(st.direct_exclusive, 2);
	assert_int_equal(st.direct_map_calls, 3);
	assert_int_equal(folio_mapping_write_direct(m, b, 4 * BS,
						    64 * KIB - 2 * BS, 0),
			 4 * BS);
	assert_int_equal(test_mapping_stats(m).direct_fast_writes, 9);
	expect_direct(m, b, 4 * BS, 64 * KIB - 2 * BS);
	assert_int_equal(test_mem_stats(e).misdirected, 0);
	/* A truncate below the extent: it is forgotten. */
	assert_int_equal(folio_mapping_truncate(m, 4 * KIB), 0);
	assert_int_equal(folio_mapping_truncate(m, 256 * KIB), 0);
	assert_int_equal(folio_mapping_write_direct(m, b, BS, 8 * KIB, 0), BS);
	st = test_mapping_stats(m);
	assert_int_equal(st.direct_exclusive, 3);
	assert_int_equal(st.direct_map_calls, 4);
	/* DIRECT_EXCLUSIVE: every write maps. */
	struct folio_mapping *x =
		new_mapping(e, 256 * KIB, FOLIO_MAPPING_DIRECT_EXCLUSIVE);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(folio_mapping_write_direct(x, b, BS, 0, 0),
				 BS);
	st = test_mapping_stats(x);
	assert_int_equal(st.direct_fast_writes, 0);
	assert_int_equal(st.direct_exclusive, 3);
	assert_int_equal(st.direct_map_calls, 3);
	assert_int_equal(folio_mapping_free(x), 0);
	free(init);
	free(b);
	test_close(m, e);
}

/* ---- coherence --------------------------------------------------------- */

/* Dirty blocks inside the range are dropped unwritten; blocks outside
 * keep their state; clean copies inside are dropped. */
static void test_dirty_superseded(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = setup(&e, 64 * KIB, 0);
	unsigned char *buffered = malloc(16 * KIB);
	fill(buffered, 16 * KIB, 7);
	/* Blocks 0..3 dirty (one 16 KiB folio). */
	assert_int_equal(folio_mapping_write(m, buffered, 16 * KIB, 0),
			 16 * KIB);
	unsigned char *d = abuf(2 * BS);
	fill(d, 2 * BS, 8);
	uint64_t writes = test_mem_stats(e).write_bytes;
	assert_int_equal(folio_mapping_write_direct(m, d, 2 * BS, BS, 0),
			 2 * BS);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.dirty_bytes, 2 * BS);  /* blocks 0 and 3 */
	assert_int_equal(st.cached_bytes, 2 * BS); /* the others dropped */
	unsigned char want[16 * KIB];
	memcpy(want, buffered, sizeof(want));
	memcpy(want + BS, d, 2 * BS);
	test_expect_read(m, want, sizeof(want), 0);
	expect_direct(m, want, sizeof(want), 0);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	test_expect_store(e, want, sizeof(want), 0);
	/* The superseded blocks were never written: 2 direct + 2 written
	 * back (plus the read of blocks 1-2 the buffered read made is not a
	 * write). */
	assert_int_equal(test_mem_stats(e).write_bytes, writes + 4 * BS);
	free(d);
	free(buffered);
	test_close(m, e);
}

/* A folio under writeback in the range is waited for: its late write must
 * not land over the direct one. */
static void test_writeback_waited(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = setup(&e, 64 * KIB, 0);
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_POLL, 7), 0);
	unsigned char *buffered = malloc(16 * KIB);
	fill(buffered, 16 * KIB, 11);
	assert_int_equal(folio_mapping_write(m, buffered, 16 * KIB, 16 * KIB),
			 16 * KIB);
	/* Requests held by the engine until somebody polls. */
	struct folio_writeback_opts o = {.sz = sizeof(o)};
	assert_true(folio_mapping_writeback(m, &o) > 0);
	unsigned char *d = abuf(16 * KIB);
	fill(d, 16 * KIB, 12);
	assert_int_equal(folio_mapping_write_direct(m, d, 16 * KIB, 16 * KIB,
						    0),
			 16 * KIB);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	test_expect_store(e, d, 16 * KIB, 16 * KIB);
	test_expect_read(m, d, 16 * KIB, 16 * KIB);
	free(d);
	free(buffered);
	test_close(m, e);
}

/* A direct read writes back the dirty data it covers first. */
static void test_read_writes_back(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = setup(&e, 64 * KIB, 0);
	unsigned char *buffered = malloc(6000);
	fill(buffered, 6000, 13);
	assert_int_equal(folio_mapping_write(m, buffered, 6000, 5000), 6000);
	unsigned char want[16 * KIB];
	fill(want, sizeof(want), 0);
	memcpy(want + 5000, buffered, 6000);
	expect_direct(m, want, sizeof(want), 0);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.dirty_bytes, 0);
	assert_int_equal(st.direct_reads, 1);
	/* Past EOF in the last block: zeros, and the count stops at EOF. */
	assert_int_equal(folio_mapping_truncate(m, 20000), 0);
	unsigned char *got = abuf(8 * KIB);
	memset(got, 0xee, 8 * KIB);
	assert_int_equal(folio_mapping_read_direct(m, got, 8 * KIB, 16 * KIB),
			 20000 - 16 * KIB);
	for (size_t i = 20000 - 16 * KIB; i < BS; i++)
		assert_int_equal(got[i], 0);
	free(got);
	free(buffered);
	test_close(m, e);
}

/* Dirty data whose writeback fails stays in the cache: a direct read
 * returns it all the same, as a buffered read would. */
static void test_read_serves_unwritten_dirty(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = setup(&e, 64 * KIB, 0);
	unsigned char *buffered = malloc(BS);
	fill(buffered, BS, 17);
	assert_int_equal(folio_mapping_write(m, buffered, BS, 2 * BS), BS);
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_WRITE,
				    .error = -EIO};
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	unsigned char want[4 * BS];
	fill(want, sizeof(want), 0);
	memcpy(want + 2 * BS, buffered, BS);
	expect_direct(m, want + BS, 3 * BS, BS);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, BS);
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	free(buffered);
	test_close(m, e);
}

/* ---- durability and faults -------------------------------------------- */

static void test_durable_after_sync(void **state)
{
	(void)state;
	for (int dsync = 0; dsync < 2; dsync++) {
		struct folio_engine *e;
		struct folio_mapping *m = setup(&e, 64 * KIB, 0);
		assert_int_equal(folio_engine_mem_set_volatile(e, true), 0);
		unsigned char *d = abuf(4 * BS);
		fill(d, 4 * BS, 21);
		/* An overwrite and an extension. */
		assert_int_equal(folio_mapping_write_direct(
					 m, d, 2 * BS, BS,
					 dsync ? FOLIO_DIRECT_DSYNC : 0),
				 2 * BS);
		assert_int_equal(folio_mapping_write_direct(
					 m, d + 2 * BS, 2 * BS, 64 * KIB,
					 dsync ? FOLIO_DIRECT_DSYNC : 0),
				 2 * BS);
		if (!dsync) {
			/* Nothing is cached: the sync must flush all the
			 * same, for the direct writes. */
			uint64_t flushes = test_mem_stats(e).flushes;
			assert_int_equal(test_mapping_stats(m).folios, 0);
			assert_int_equal(folio_mapping_sync(m, NULL), 0);
			assert_true(test_mem_stats(e).flushes > flushes);
		}
		assert_int_equal(folio_engine_mem_power_cut(e, 0, 1), 0);
		unsigned char got[4 * BS];
		assert_int_equal(folio_engine_mem_peek_durable(e, got, 2 * BS,
							       BS),
				 0);
		assert_memory_equal(got, d, 2 * BS);
		assert_int_equal(folio_engine_mem_peek_durable(
					 e, got, 2 * BS, 64 * KIB),
				 0);
		assert_memory_equal(got, d + 2 * BS, 2 * BS);
		free(d);
		assert_int_equal(folio_mapping_free(m), 0);
		assert_int_equal(folio_engine_free(e), 0);
	}
}

static void test_failing_and_short(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m = setup(&e, 64 * KIB, 0);
	unsigned char *d = abuf(4 * BS);
	fill(d, 4 * BS, 31);
	folio_errseq_t cur = folio_mapping_err_cursor(m);
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_WRITE,
				    .count = 1,
				    .error = -EIO};
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(folio_mapping_write_direct(m, d, 4 * BS, 0, 0), -EIO);
	assert_int_equal(test_mapping_stats(m).errors, 1);
	assert_int_equal(folio_mapping_sync(m, &cur), -EIO);
	assert_int_equal(folio_mapping_sync(m, &cur), 0);
	f.error = 0;
	f.short_len = BS;
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(folio_mapping_write_direct(m, d, 4 * BS, 0, 0), BS);
	test_expect_store(e, d, BS, 0);
	/* A read failure is the read's error. */
	f.ops = FOLIO_MEM_OP_READ;
	f.short_len = 0;
	f.error = -ENXIO;
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(folio_mapping_read_direct(m, d, BS, 0), -ENXIO);
	/* DSYNC whose barrier fails. */
	f.ops = FOLIO_MEM_OP_FLUSH;
	f.error = -EIO;
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(folio_mapping_write_direct(m, d, BS, 0,
						    FOLIO_DIRECT_DSYNC),
			 -EIO);
	free(d);
	test_close(m, e);
}

/*
 * A truncate no flush covered yet is redone after a failed flush by a cut
 * at its size: a direct write above it (not in the cache, so never
 * written again) must have it flushed first, or the redo cuts it away.
 */
static void test_pending_truncate_settled(void **state)
{
	(void)state;
	for (int fast = 0; fast < 2; fast++) {
		struct folio_engine *e;
		struct folio_mapping *m = setup(&e, 64 * KIB, 0);
		assert_int_equal(folio_mapping_truncate(m, 16 * KIB), 0);
		if (fast) /* grow back: a pending cut below an overwrite */
			assert_int_equal(folio_mapping_truncate(m, 64 * KIB),
					 0);
		unsigned char *d = abuf(BS);
		fill(d, BS, 51);
		uint64_t flushes = test_mem_stats(e).flushes;
		assert_int_equal(folio_mapping_write_direct(m, d, BS, 32 * KIB,
							    0),
				 BS);
		assert_true(test_mem_stats(e).flushes > flushes);
		assert_int_equal(test_mapping_stats(m).direct_fast_writes,
				 (uint64_t)fast);
		struct folio_mem_fault f = {.sz = sizeof(f),
					    .ops = FOLIO_MEM_OP_FLUSH,
					    .count = 1,
					    .error = -EIO};
		assert_int_equal(folio_engine_mem_inject(e, &f), 0);
		assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
		assert_int_equal(folio_mapping_sync(m, NULL), 0);
		test_expect_store(e, d, BS, 32 * KIB);
		free(d);
		test_close(m, e);
	}
}

/*
 * A durable direct write above a pending truncate flushes to settle it,
 * then sends its own write and barrier; one of those flushes fails and
 * the device loses its volatile cache. When the settling flush was the
 * good one, the buffered blocks written back before it are durable; when
 * it failed, they were lost and must be written again (the next try at
 * settling does, and the write goes on). Either way the next good sync
 * leaves them durable. (The fuzz input
 * regress-direct-dsync-good-settle-flush-then-lost-barrier is the first
 * case; the harness once mistook it for a lost write.)
 */
/* A mapping over a mem engine with a volatile cache, holding w (n bytes,
 * filled from seed) at BS written back and not flushed: unstable. */
static struct folio_mapping *setup_unstable(struct folio_engine **e,
					    unsigned char *w, size_t n,
					    unsigned seed)
{
	struct folio_mapping *m = setup(e, 64 * KIB, 0);
	assert_int_equal(folio_engine_mem_set_volatile(*e, true), 0);
	fill(w, n, seed);
	assert_int_equal(folio_mapping_write(m, w, n, BS), (ssize_t)n);
	struct folio_writeback_opts wo = {.sz = sizeof(wo),
					  .flags = FOLIO_WB_WAIT};
	assert_int_equal(folio_mapping_writeback(m, &wo), (int64_t)n);
	assert_int_equal(test_mapping_stats(m).unstable_bytes, n);
	return m;
}

/* After a power cut the durable store holds want (n bytes) at BS. */
static void expect_durable_at_bs(struct folio_engine *e,
				 const unsigned char *want, size_t n)
{
	assert_int_equal(folio_engine_mem_power_cut(e, 0, 1), 0);
	unsigned char got[4 * BS];
	assert_true(n <= sizeof(got));
	assert_int_equal(folio_engine_mem_peek_durable(e, got, n, BS), 0);
	assert_memory_equal(got, want, n);
}

static void test_dsync_after_settle_flush_fails(void **state)
{
	(void)state;
	for (uint64_t good = 0; good < 2; good++) {
		struct folio_engine *e;
		unsigned char w[2 * BS];
		struct folio_mapping *m = setup_unstable(&e, w, sizeof(w), 61);
		unsigned char *d = abuf(sizeof(w));
		assert_int_equal(folio_mapping_read_direct(m, d, sizeof(w), BS),
				 (ssize_t)sizeof(w));
		test_expect_store(e, w, sizeof(w), BS);
		assert_int_equal(folio_mapping_truncate(m, 32 * KIB), 0);
		struct folio_mem_fault f = {.sz = sizeof(f),
					    .ops = FOLIO_MEM_OP_FLUSH,
					    .skip = good,
					    .count = 1,
					    .error = -ENOSPC,
					    .flags = FOLIO_MEM_FAULT_LOSE};
		assert_int_equal(folio_engine_mem_inject(e, &f), 0);
		uint64_t flushes = test_mem_stats(e).flushes;
		fill(d, BS, 62);
		/* A failed settling flush is retried before the write. */
		assert_int_equal(folio_mapping_write_direct(m, d, BS, 48 * KIB,
							    FOLIO_DIRECT_DSYNC),
				 good ? -ENOSPC : (ssize_t)BS);
		assert_true(test_mem_stats(e).flushes >= flushes + 2);
		/* The failure reaches the next sync: the settling flush's,
		 * or the failed barrier's (settled by the write itself). */
		assert_int_equal(folio_mapping_sync(m, NULL), -ENOSPC);
		assert_int_equal(folio_mapping_sync(m, NULL), 0);
		expect_durable_at_bs(e, w, sizeof(w));
		free(d);
		assert_int_equal(folio_mapping_free(m), 0);
		assert_int_equal(folio_engine_free(e), 0);
	}
}

/*
 * A DSYNC direct write whose barrier fails with a volatile cache that the
 * failure drops: what earlier writeback left unstable is gone from the
 * store, so it must be dirty again when the call returns, as after any
 * failed flush of the mapping, and the next sync writes it (found by the
 * fuzzer: it stayed unstable, the next sync found it lost and only the
 * one after wrote it).
 */
static void test_failed_barrier_redirties(void **state)
{
	(void)state;
	struct folio_engine *e;
	unsigned char w[2 * BS];
	struct folio_mapping *m = setup_unstable(&e, w, sizeof(w), 71);
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_FLUSH,
				    .count = 1,
				    .error = -ENOSPC,
				    .flags = FOLIO_MEM_FAULT_LOSE};
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	unsigned char *d = abuf(BS);
	fill(d, BS, 72);
	assert_int_equal(folio_mapping_write_direct(m, d, BS, 48 * KIB,
						    FOLIO_DIRECT_DSYNC),
			 -ENOSPC);
	struct folio_mapping_stats ms = test_mapping_stats(m);
	assert_int_equal(ms.dirty_bytes, sizeof(w));
	assert_int_equal(ms.unstable_bytes, 0);
	/* The next sync reports the failure and writes the blocks again. */
	assert_int_equal(folio_mapping_sync(m, NULL), -ENOSPC);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	expect_durable_at_bs(e, w, sizeof(w));
	free(d);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

/* The next write lands in the store and then fails with -ENOMEM (a lost
 * reply); with cut_fails, the truncate after it fails too. */
static void inject_landed_write(struct folio_engine *e, bool cut_fails)
{
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_WRITE,
				    .count = 1,
				    .error = -ENOMEM,
				    .flags = FOLIO_MEM_FAULT_APPLIED};
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	struct folio_mem_fault t = {.sz = sizeof(t),
				    .ops = FOLIO_MEM_OP_TRUNCATE,
				    .count = 1,
				    .error = -EIO};
	if (cut_fails)
		assert_int_equal(folio_engine_mem_inject(e, &t), 0);
}

/*
 * A direct write past EOF that the store applied but reported failed (a
 * remote store that lost the reply) grew the store all the same: the
 * library must cut it back to EOF, so that store and mapping end at the
 * same place (found by the fuzzer). When that cut fails too, it is owed:
 * the next sync redoes it before it can succeed.
 */
static void test_failed_extending_write_landed(void **state)
{
	(void)state;
	for (int cut_fails = 0; cut_fails < 2; cut_fails++) {
		struct folio_engine *e;
		struct folio_mapping *m = setup(&e, 16 * KIB, 0);
		unsigned char *d = abuf(8 * BS);
		fill(d, 8 * BS, 71);
		inject_landed_write(e, cut_fails);
		assert_int_equal(folio_mapping_write_direct(m, d, 8 * BS,
							    16 * KIB, 0),
				 -ENOMEM);
		assert_int_equal(folio_mapping_size(m), 16 * KIB);
		if (!cut_fails) {
			assert_int_equal(test_mem_stats(e).size, 16 * KIB);
		} else {
			/* The store still holds the write; reads past EOF
			 * must not see it. */
			assert_int_equal(test_mem_stats(e).size, 48 * KIB);
		}
		assert_true(folio_mapping_sync(m, NULL) < 0);
		assert_int_equal(folio_mapping_sync(m, NULL), 0);
		assert_int_equal(test_mem_stats(e).size, 16 * KIB);
		unsigned char init[16 * KIB];
		fill(init, sizeof(init), 0);
		test_expect_store(e, init, sizeof(init), 0);
		/* Growing EOF again shows zeros, not the lost write. */
		assert_int_equal(folio_mapping_truncate(m, 48 * KIB), 0);
		unsigned char zero[8 * BS] = {0};
		test_expect_read(m, zero, sizeof(zero), 16 * KIB);
		free(d);
		test_close(m, e);
	}
}

/*
 * The same under FOLIO_MAPPING_DROP_ON_ERROR, where no flush redoes a lost
 * truncate (a redo would cut what was written since, which that policy
 * keeps nothing of to write again): the failed cut is a failed write like
 * any other, reported once, and must not owe anything. It used to mark
 * the store stale from the old EOF for good: every later direct write
 * reaching past it failed with -EIO without any fault, and buffered reads
 * there read zeros instead of data written and synced since (found by
 * the fuzzer).
 */
static void test_failed_landed_cut_drop_on_error(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m =
		setup(&e, 16 * KIB, FOLIO_MAPPING_DROP_ON_ERROR);
	unsigned char *d = abuf(8 * BS);
	fill(d, 8 * BS, 73);
	inject_landed_write(e, true);
	assert_int_equal(folio_mapping_write_direct(m, d, 8 * BS, 16 * KIB, 0),
			 -ENOMEM);
	assert_int_equal(folio_mapping_size(m), 16 * KIB);
	/* Reported once, by the next sync. */
	assert_true(folio_mapping_sync(m, NULL) < 0);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	/* Writing past the old EOF works again, directly ... */
	fill(d, 8 * BS, 74);
	assert_int_equal(folio_mapping_write_direct(m, d, 8 * BS, 16 * KIB, 0),
			 (ssize_t)(8 * BS));
	expect_direct(m, d, 8 * BS, 16 * KIB);
	/* ... and through the cache: synced, dropped, read back. */
	fill(d, 8 * BS, 75);
	assert_int_equal(folio_mapping_write(m, d, 8 * BS, 16 * KIB),
			 (ssize_t)(8 * BS));
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0), 0);
	test_expect_read(m, d, 8 * BS, 16 * KIB);
	test_expect_store(e, d, 8 * BS, 16 * KIB);
	free(d);
	test_close(m, e);
}

/*
 * A flush of the engine fails (another mapping's sync) while a direct
 * write is in flight: the write may have been dropped, and the library
 * has no copy, so it fails with -EIO and records it. An engine of our own
 * holds the write until told.
 */
struct hold_engine {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct folio_io *held;
	bool fail_flush;
	unsigned char store[64 * 1024];
};

static int hold_submit(void *ctx, struct folio_io *io)
{
	struct hold_engine *h = ctx;
	if (io->pos + io->len > sizeof(h->store))
		return -EINVAL;
	size_t at = (size_t)io->pos;
	for (int i = 0; i < io->iovcnt; i++) {
		if (io->op == FOLIO_IO_WRITE)
			memcpy(h->store + at, io->iov[i].iov_base,
			       io->iov[i].iov_len);
		else
			memcpy(io->iov[i].iov_base, h->store + at,
			       io->iov[i].iov_len);
		at += io->iov[i].iov_len;
	}
	if (io->op == FOLIO_IO_READ) {
		folio_io_complete(io, (ssize_t)io->len);
		return 0;
	}
	pthread_mutex_lock(&h->lock);
	h->held = io;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

static int hold_flush(void *ctx)
{
	struct hold_engine *h = ctx;
	return h->fail_flush ? -EIO : 0;
}

static int hold_truncate(void *ctx, uint64_t size)
{
	(void)ctx;
	(void)size;
	return 0;
}

struct direct_job {
	struct folio_mapping *m;
	unsigned char *buf;
	ssize_t result;
};

static void *direct_job_run(void *arg)
{
	struct direct_job *j = arg;
	j->result = folio_mapping_write_direct(j->m, j->buf, BS, 0, 0);
	return NULL;
}

static void test_flush_failure_in_flight(void **state)
{
	(void)state;
	struct hold_engine *h = calloc(1, sizeof(*h));
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	struct folio_engine_ops ops = {.sz = sizeof(ops),
				       .submit = hold_submit,
				       .flush = hold_flush,
				       .truncate = hold_truncate};
	struct folio_engine *e;
	assert_int_equal(folio_engine_new(&e, &ops, h), 0);
	struct folio_mapping *m = new_mapping(e, 32 * KIB, 0);
	struct folio_mapping *other = new_mapping(e, 32 * KIB, 0);
	folio_errseq_t cur = folio_mapping_err_cursor(m);
	struct direct_job j = {.m = m, .buf = abuf(BS)};
	fill(j.buf, BS, 41);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, direct_job_run, &j), 0);
	pthread_mutex_lock(&h->lock);
	while (!h->held)
		pthread_cond_wait(&h->cond, &h->lock);
	struct folio_io *io = h->held;
	pthread_mutex_unlock(&h->lock);
	h->fail_flush = true;
	assert_int_equal(folio_mapping_sync(other, NULL), -EIO);
	h->fail_flush = false;
	folio_io_complete(io, (ssize_t)io->len);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(j.result, -EIO);
	assert_int_equal(folio_mapping_sync(m, &cur), -EIO);
	assert_int_equal(folio_mapping_sync(m, &cur), 0);
	/* The same write with no failure in flight succeeds. */
	h->held = NULL;
	assert_int_equal(pthread_create(&t, NULL, direct_job_run, &j), 0);
	pthread_mutex_lock(&h->lock);
	while (!h->held)
		pthread_cond_wait(&h->cond, &h->lock);
	io = h->held;
	pthread_mutex_unlock(&h->lock);
	folio_io_complete(io, (ssize_t)io->len);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(j.result, BS);
	assert_int_equal(folio_mapping_sync(m, &cur), 0);
	free(j.buf);
	assert_int_equal(folio_mapping_free(other), 0);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

/* ---- the model ----------------------------------------------------------- */

#define MODEL_SPAN (128 * KIB)

/*
 * Random buffered writes, direct writes, direct and buffered reads,
 * writeback, readahead, truncates, invalidates and syncs against a byte
 * array: both paths must always read what the array holds, and after a
 * sync that returned 0 a power cut keeps exactly that.
 */
static void model_run(uint64_t seed, unsigned ops, bool with_map)
{
	struct folio_engine *e;
	assert_int_equal(folio_engine_mem(&e, 1u << 22), 0);
	if (with_map)
		assert_int_equal(folio_engine_mem_set_map(e, 32 * KIB, true),
				 0);
	assert_int_equal(folio_engine_mem_set_volatile(e, true), 0);
	struct folio_mapping *m = new_mapping(e, 0, 0);
	unsigned char *model = calloc(1, MODEL_SPAN);
	unsigned char *buf = abuf(MODEL_SPAN);
	unsigned char *got = abuf(MODEL_SPAN);
	uint64_t eof = 0;
	for (unsigned op = 0; op < ops; op++) {
		unsigned kind = (unsigned)test_rand_below(&seed, 10);
		uint64_t pos = test_rand_below(&seed, MODEL_SPAN);
		uint64_t len = 1 + test_rand_below(&seed, MODEL_SPAN - pos);
		uint64_t bpos = pos & ~(uint64_t)(BS - 1);
		uint64_t blen = test_min_u64((len + BS - 1) & ~(uint64_t)(BS - 1),
					     MODEL_SPAN - bpos);
		switch (kind) {
		case 0:
		case 1:
			TEST_TRACE(op, "write %llu+%llu", (unsigned long long)pos,
				   (unsigned long long)len);
			fill(buf, len, op);
			assert_int_equal(folio_mapping_write(m, buf, len, pos),
					 (ssize_t)len);
			memcpy(model + pos, buf, len);
			eof = eof > pos + len ? eof : pos + len;
			break;
		case 2:
		case 3:
			TEST_TRACE(op, "write_direct %llu+%llu",
				   (unsigned long long)bpos,
				   (unsigned long long)blen);
			fill(buf, blen, op + 1000);
			assert_int_equal(folio_mapping_write_direct(
						 m, buf, blen, bpos,
						 kind == 3 ? FOLIO_DIRECT_DSYNC
							   : 0),
					 (ssize_t)blen);
			memcpy(model + bpos, buf, blen);
			eof = eof > bpos + blen ? eof : bpos + blen;
			break;
		case 4: {
			TEST_TRACE(op, "read_direct %llu+%llu",
				   (unsigned long long)bpos,
				   (unsigned long long)blen);
			uint64_t want = bpos >= eof ? 0
				      : test_min_u64(blen, eof - bpos);
			assert_int_equal(folio_mapping_read_direct(m, got, blen,
								   bpos),
					 (ssize_t)want);
			assert_memory_equal(got, model + bpos, want);
			break;
		}
		case 5: {
			TEST_TRACE(op, "read %llu+%llu", (unsigned long long)pos,
				   (unsigned long long)len);
			uint64_t want = pos >= eof ? 0
				      : test_min_u64(len, eof - pos);
			assert_int_equal(folio_mapping_read(m, got, len, pos),
					 (ssize_t)want);
			assert_memory_equal(got, model + pos, want);
			break;
		}
		case 6: {
			TEST_TRACE(op, "writeback/readahead %llu+%llu",
				   (unsigned long long)pos,
				   (unsigned long long)len);
			struct folio_writeback_opts o = {.sz = sizeof(o),
							 .start = pos,
							 .end = pos + len};
			assert_true(folio_mapping_writeback(m, &o) >= 0);
			assert_int_equal(folio_mapping_readahead(m, bpos, blen),
					 0);
			break;
		}
		case 7:
			TEST_TRACE(op, "truncate %llu", (unsigned long long)pos);
			assert_int_equal(folio_mapping_truncate(m, pos), 0);
			if (pos < eof)
				memset(model + pos, 0, eof - pos);
			eof = pos;
			break;
		case 8:
			TEST_TRACE(op, "invalidate %llu+%llu",
				   (unsigned long long)pos,
				   (unsigned long long)len);
			/* Keeps dirty data: -EBUSY then. */
			{
				int r = folio_mapping_invalidate(m, pos, len, 0);
				assert_true(r == 0 || r == -EBUSY);
			}
			break;
		default: {
			TEST_TRACE(op, "sync + power cut check");
			assert_int_equal(folio_mapping_sync(m, NULL), 0);
			assert_int_equal(folio_engine_mem_peek_durable(e, got,
								       eof, 0),
					 0);
			assert_memory_equal(got, model, eof);
			break;
		}
		}
		assert_int_equal(folio_mapping_size(m), (int64_t)eof);
	}
	assert_int_equal(test_mem_stats(e).misdirected, 0);
	free(got);
	free(buf);
	free(model);
	test_close(m, e);
}

static void test_model(void **state)
{
	(void)state;
	uint64_t seed = test_seed("direct_model");
	unsigned rounds = test_iters(12, 3);
	for (unsigned i = 0; i < rounds; i++) {
		uint64_t s = seed + i;
		printf("# direct model seed %llu (FOLIO_TEST_SEED=%llu)\n",
		       (unsigned long long)s, (unsigned long long)seed);
		model_run(s, test_iters(400, 80), i % 2);
	}
}

/* ---- threads --------------------------------------------------------------- */

#define T_BLOCKS 32u      /* blocks each writer owns */
#define T_WRITERS 4u      /* 2 direct, 2 buffered */
#define T_SPAN (T_WRITERS * T_BLOCKS * BS)

struct race {
	struct folio_mapping *m;
	atomic_bool stop;
	atomic_uint failures;
};

/* A block tagged with its owner and version in every 8 bytes, so a torn
 * block (two versions) or a stale one shows. */
static void tag_block(unsigned char *p, uint32_t owner, uint32_t version)
{
	for (size_t i = 0; i < BS; i += 8) {
		memcpy(p + i, &owner, 4);
		memcpy(p + i + 4, &version, 4);
	}
}

static bool block_is(const unsigned char *p, uint32_t owner,
		     uint32_t *version)
{
	uint32_t o, v;
	memcpy(&o, p, 4);
	memcpy(&v, p + 4, 4);
	if (o != owner && !(o == 0 && v == 0))
		return false;
	for (size_t i = 8; i < BS; i += 8)
		if (memcmp(p + i, p, 8))
			return false;
	*version = v;
	return true;
}

struct writer {
	struct race *r;
	uint32_t id;
	bool direct;
	uint32_t version[T_BLOCKS];
	uint64_t seed;
};

static void *writer_run(void *arg)
{
	struct writer *w = arg;
	struct folio_mapping *m = w->r->m;
	unsigned char *b = abuf(2 * BS);
	unsigned iters = test_iters(1500, 200);
	for (unsigned i = 0; i < iters; i++) {
		unsigned blk = (unsigned)test_rand_below(&w->seed, T_BLOCKS);
		uint64_t pos = ((uint64_t)w->id * T_BLOCKS + blk) * BS;
		uint32_t v = ++w->version[blk];
		tag_block(b, w->id + 1, v);
		ssize_t n = w->direct
			? folio_mapping_write_direct(m, b, BS, pos, 0)
			: folio_mapping_write(m, b, BS, pos);
		uint32_t got;
		/* Only this thread writes the block: both paths must read
		 * exactly this version now. */
		bool ok = n == BS &&
			  folio_mapping_read(m, b, BS, pos) == BS &&
			  block_is(b, w->id + 1, &got) && got == v &&
			  folio_mapping_read_direct(m, b + BS, BS, pos) == BS &&
			  block_is(b + BS, w->id + 1, &got) && got == v;
		if (!ok)
			atomic_fetch_add(&w->r->failures, 1);
	}
	free(b);
	return NULL;
}

/* Writeback, readahead, invalidate and truncates past the owned span,
 * over and over; every block read whole from the cache is untorn. */
static void *churn_run(void *arg)
{
	struct race *r = arg;
	unsigned char *b = abuf(T_SPAN);
	uint64_t seed = 77;
	while (!atomic_load(&r->stop)) {
		struct folio_writeback_opts o = {.sz = sizeof(o)};
		(void)folio_mapping_writeback(r->m, &o);
		(void)folio_mapping_readahead(r->m, 0, T_SPAN);
		(void)folio_mapping_invalidate(r->m, 0, T_SPAN, 0);
		uint64_t tail = T_SPAN + test_rand_below(&seed, 8) * BS;
		(void)folio_mapping_truncate(r->m, tail);
		if (folio_mapping_read(r->m, b, T_SPAN, 0) == (ssize_t)T_SPAN) {
			for (unsigned i = 0; i < T_SPAN / BS; i++) {
				uint32_t v;
				if (!block_is(b + (size_t)i * BS,
					      i / T_BLOCKS + 1, &v))
					atomic_fetch_add(&r->failures, 1);
			}
		}
		if (test_rand_below(&seed, 4) == 0)
			(void)folio_mapping_sync(r->m, NULL);
	}
	free(b);
	return NULL;
}

static void test_threads_race(void **state)
{
	(void)state;
	struct folio_engine *e;
	assert_int_equal(folio_engine_mem(&e, 1u << 22), 0);
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_THREAD,
						   test_seed("direct_race")),
			 0);
	struct race r = {.m = new_mapping(e, T_SPAN, 0)};
	struct writer w[T_WRITERS];
	pthread_t t[T_WRITERS + 1];
	for (unsigned i = 0; i < T_WRITERS; i++) {
		w[i] = (struct writer){.r = &r, .id = i, .direct = i < 2,
				       .seed = 1000 + i};
		assert_int_equal(pthread_create(&t[i], NULL, writer_run, &w[i]),
				 0);
	}
	assert_int_equal(pthread_create(&t[T_WRITERS], NULL, churn_run, &r),
			 0);
	for (unsigned i = 0; i < T_WRITERS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	atomic_store(&r.stop, true);
	assert_int_equal(pthread_join(t[T_WRITERS], NULL), 0);
	assert_int_equal(atomic_load(&r.failures), 0);
	/* The store ends up with every block's last version. */
	assert_int_equal(folio_mapping_sync(r.m, NULL), 0);
	unsigned char *b = malloc(BS);
	for (unsigned i = 0; i < T_WRITERS; i++) {
		for (unsigned k = 0; k < T_BLOCKS; k++) {
			uint32_t v;
			uint64_t pos = ((uint64_t)i * T_BLOCKS + k) * BS;
			assert_int_equal(folio_engine_mem_peek(e, b, BS, pos),
					 0);
			assert_true(block_is(b, i + 1, &v));
			assert_int_equal(v, w[i].version[k]);
		}
	}
	struct folio_mapping_stats st = test_mapping_stats(r.m);
	assert_true(st.direct_fast_writes > 0);
	free(b);
	test_close(r.m, e);
}

/* Direct overwrites of one mapping, all on the fast path at once (TSan
 * checks the shared-lock path); each thread's blocks read back as
 * written. */
static void *fast_run(void *arg)
{
	struct writer *w = arg;
	struct folio_mapping *m = w->r->m;
	unsigned char *b = abuf(BS);
	unsigned iters = test_iters(2000, 300);
	for (unsigned i = 0; i < iters; i++) {
		unsigned blk = (unsigned)test_rand_below(&w->seed, T_BLOCKS);
		uint64_t pos = ((uint64_t)w->id * T_BLOCKS + blk) * BS;
		uint32_t v = ++w->version[blk], got;
		tag_block(b, w->id + 1, v);
		if (folio_mapping_write_direct(m, b, BS, pos, 0) != BS ||
		    folio_mapping_read_direct(m, b, BS, pos) != BS ||
		    !block_is(b, w->id + 1, &got) || got != v)
			atomic_fetch_add(&w->r->failures, 1);
	}
	free(b);
	return NULL;
}

static void test_threads_fast_path(void **state)
{
	(void)state;
	struct folio_engine *e;
	assert_int_equal(folio_engine_mem(&e, 1u << 22), 0);
	assert_int_equal(folio_engine_mem_set_map(e, T_SPAN, true), 0);
	unsigned char *init = calloc(1, T_SPAN);
	assert_int_equal(folio_engine_mem_poke(e, init, T_SPAN, 0), 0);
	free(init);
	struct race r = {.m = new_mapping(e, T_SPAN, 0)};
	/* Warm the extent cache: the one exclusive write. */
	unsigned char *b = abuf(BS);
	tag_block(b, 0, 0);
	assert_int_equal(folio_mapping_write_direct(r.m, b, BS, 0, 0), BS);
	free(b);
	struct writer w[T_WRITERS];
	pthread_t t[T_WRITERS];
	for (unsigned i = 0; i < T_WRITERS; i++) {
		w[i] = (struct writer){.r = &r, .id = i, .seed = 50 + i};
		assert_int_equal(pthread_create(&t[i], NULL, fast_run, &w[i]),
				 0);
	}
	for (unsigned i = 0; i < T_WRITERS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	assert_int_equal(atomic_load(&r.failures), 0);
	struct folio_mapping_stats st = test_mapping_stats(r.m);
	assert_int_equal(st.direct_exclusive, 1);
	assert_int_equal(st.direct_map_calls, 1);
	assert_int_equal(st.direct_fast_writes, st.direct_writes - 1);
	test_close(r.m, e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_args),
		cmocka_unit_test(test_overwrite_fast_extend_exclusive),
		cmocka_unit_test(test_extent_cache),
		cmocka_unit_test(test_dirty_superseded),
		cmocka_unit_test(test_writeback_waited),
		cmocka_unit_test(test_read_writes_back),
		cmocka_unit_test(test_read_serves_unwritten_dirty),
		cmocka_unit_test(test_durable_after_sync),
		cmocka_unit_test(test_failing_and_short),
		cmocka_unit_test(test_pending_truncate_settled),
		cmocka_unit_test(test_dsync_after_settle_flush_fails),
		cmocka_unit_test(test_failed_barrier_redirties),
		cmocka_unit_test(test_failed_extending_write_landed),
		cmocka_unit_test(test_failed_landed_cut_drop_on_error),
		cmocka_unit_test(test_flush_failure_in_flight),
		cmocka_unit_test(test_model),
		cmocka_unit_test(test_threads_race),
		cmocka_unit_test(test_threads_fast_path),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
