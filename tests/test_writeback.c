/* SPDX-License-Identifier: MIT */
/*
 * Writeback unit tests: merging across folios, request limits, the map
 * cache, merge gaps, dirty range extraction, error policies, short writes,
 * flush errors, asynchronous completion, stable writes, truncation during
 * writeback, and the engines on real files.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "folio_state.h"
#include "folio_state_mem.h"
#include "test_util.h"

#define KIB 1024u
#define MIB (1024u * 1024u)

struct fixture {
	struct folio_engine *engine;
	struct folio_mapping *map;
};

static struct folio_mapping_opts opts_for(struct folio_engine *e,
					  size_t max_folio, unsigned flags)
{
	return (struct folio_mapping_opts){
		.sz = sizeof(struct folio_mapping_opts),
		.block_size = 4096,
		.max_folio_size = max_folio,
		.flags = flags,
		.engine = e,
	};
}

static int setup_flags(void **state, size_t max_folio, unsigned flags)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	assert_non_null(fx);
	assert_int_equal(folio_engine_mem(&fx->engine, 256 * MIB), 0);
	struct folio_mapping_opts o = opts_for(fx->engine, max_folio, flags);
	assert_int_equal(folio_mapping_new(&fx->map, &o), 0);
	*state = fx;
	return 0;
}

static int setup_64k(void **state)
{
	return setup_flags(state, 64 * KIB, 0);
}

static int setup_drop(void **state)
{
	return setup_flags(state, 64 * KIB, FOLIO_MAPPING_DROP_ON_ERROR);
}

static int setup_stable(void **state)
{
	return setup_flags(state, 64 * KIB, FOLIO_MAPPING_STABLE_WRITES);
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	folio_engine_mem_clear_faults(fx->engine);
	folio_engine_mem_set_mode(fx->engine, FOLIO_MEM_SYNC, 0);
	test_close(fx->map, fx->engine);
	free(fx);
	return 0;
}

/* The backing store holds exactly `want` over [0, len). */
static void assert_store(struct folio_engine *e, const unsigned char *want,
			 size_t len)
{
	unsigned char *got = malloc(len ? len : 1);
	assert_int_equal(folio_engine_mem_peek(e, got, len, 0), 0);
	assert_memory_equal(got, want, len);
	free(got);
}

static void test_bad_input(void **state)
{
	struct fixture *fx = *state;
	struct folio_writeback_opts o = {.sz = sizeof(o)};
	assert_int_equal(folio_mapping_writeback(NULL, &o), -EINVAL);
	o.sz = 8;
	assert_int_equal(folio_mapping_writeback(fx->map, &o), -EINVAL);
	o = (struct folio_writeback_opts){.sz = sizeof(o), .flags = 0x100};
	assert_int_equal(folio_mapping_writeback(fx->map, &o), -EINVAL);
	o = (struct folio_writeback_opts){.sz = sizeof(o), .start = 10,
					  .end = 5};
	assert_int_equal(folio_mapping_writeback(fx->map, &o), -EINVAL);
	o = (struct folio_writeback_opts){.sz = sizeof(o),
					  .max_segments = 4096};
	assert_int_equal(folio_mapping_writeback(fx->map, &o), -EINVAL);
	o = (struct folio_writeback_opts){.sz = sizeof(o), .max_request = 100};
	assert_int_equal(folio_mapping_writeback(fx->map, &o), -EINVAL);
	/* A request smaller than a block (4096 here) cannot carry one. */
	o = (struct folio_writeback_opts){.sz = sizeof(o), .max_request = 2048};
	assert_int_equal(folio_mapping_writeback(fx->map, &o), -EINVAL);
	o.max_request = 4096;
	assert_int_equal(folio_mapping_writeback(fx->map, &o), 0);
	/* A newer caller's larger struct: a non-zero unknown tail is -E2BIG. */
	struct {
		struct folio_writeback_opts o;
		uint64_t newer;
	} big = {.o = {.sz = sizeof(big)}, .newer = 1};
	assert_int_equal(folio_mapping_writeback(fx->map, &big.o), -E2BIG);
	big.newer = 0;
	assert_int_equal(folio_mapping_writeback(fx->map, &big.o), 0);
	assert_int_equal(folio_mapping_writeback(fx->map, NULL), 0);
	assert_int_equal(folio_mapping_sync(NULL, NULL), -EINVAL);
	assert_int_equal(folio_mapping_err_cursor(NULL), 0);
	assert_int_equal(folio_mapping_dirty_ranges(NULL, 0, 0, NULL, NULL),
			 -EINVAL);
	assert_int_equal(folio_mapping_dirty_ranges(fx->map, 0, 0, NULL, NULL),
			 -EINVAL);
}

/* Sequential 1 KiB writes over 64 MiB then sync: the dirty blocks of
 * 1024 folios merge into exactly 64 requests of 1 MiB. */
static void test_sequential_merge(void **state)
{
	struct fixture *fx = *state;
	unsigned char buf[KIB];
	size_t total = test_slow_env() ? 16 * MIB : 64 * MIB;
	for (size_t at = 0; at < total; at += KIB) {
		memset(buf, (int)(at >> 10), sizeof(buf));
		assert_int_equal(folio_mapping_write(fx->map, buf, KIB, at),
				 KIB);
	}
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	struct folio_mapping_stats st = test_mapping_stats(fx->map);
	assert_int_equal(st.wb_requests, total / MIB);
	assert_int_equal(st.wb_bytes, total);
	assert_int_equal(st.dirty_bytes, 0);
	struct folio_mem_stats es = test_mem_stats(fx->engine);
	assert_int_equal(es.write_requests, total / MIB);
	assert_int_equal(es.flushes, 1);
	assert_int_equal(es.size, total);
}

/* 4 KiB writes scattered over 64 KiB folios write back exactly the bytes
 * written: amplification 1.00. */
static void test_scattered_amplification(void **state)
{
	struct fixture *fx = *state;
	unsigned char *full = calloc(1, 16 * MIB), blk[4096];
	assert_int_equal(folio_mapping_truncate(fx->map, 16 * MIB), 0);
	uint64_t rng = 7;
	size_t writes = 0;
	for (int i = 0; i < 500; i++) {
		uint64_t pos = test_rand_below(&rng, 16 * MIB / 4096) * 4096;
		memset(blk, i + 1, sizeof(blk));
		assert_int_equal(folio_mapping_write(fx->map, blk, 4096, pos),
				 4096);
		memcpy(full + pos, blk, 4096);
		writes++;
	}
	struct folio_mapping_stats before = test_mapping_stats(fx->map);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	struct folio_mapping_stats st = test_mapping_stats(fx->map);
	/* Each distinct dirty block is written once. */
	assert_int_equal(st.wb_bytes, before.dirty_bytes);
	assert_true(st.wb_bytes <= writes * 4096);
	assert_store(fx->engine, full, 16 * MIB);

	/* Distinct blocks only: exactly 1.00. */
	struct folio_mapping_stats s0 = test_mapping_stats(fx->map);
	for (int i = 0; i < 256; i++) {
		uint64_t pos = (uint64_t)i * 65536 + 8192;
		assert_int_equal(folio_mapping_write(fx->map, blk, 4096, pos),
				 4096);
	}
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	st = test_mapping_stats(fx->map);
	assert_int_equal(st.wb_bytes - s0.wb_bytes,
			 st.bytes_written - s0.bytes_written);
	/* One single dirty 4 KiB block of a 64 KiB folio: one 4 KiB
	 * request. */
	assert_int_equal(st.wb_requests - s0.wb_requests, 256);
	free(full);
}

/* Whole-folio tracking (what caches without per-block state do): a 4 KiB
 * write into a cold 64 KiB folio reads the rest of the folio, and
 * writeback sends all 64 KiB: amplification 16. */
static void test_folio_dirty_tracking(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m;
	assert_int_equal(folio_engine_mem(&e, 16 * MIB), 0);
	unsigned char *orig = malloc(MIB), blk[4096];
	for (size_t i = 0; i < MIB; i++)
		orig[i] = (unsigned char)(i * 3);
	assert_int_equal(folio_engine_mem_poke(e, orig, MIB, 0), 0);
	struct folio_mapping_opts o = opts_for(e, 64 * KIB,
					      FOLIO_MAPPING_FOLIO_DIRTY);
	o.min_folio_size = 64 * KIB;
	o.size = MIB;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	memset(blk, 0xcd, sizeof(blk));
	for (int i = 0; i < 16; i++) {
		uint64_t pos = (uint64_t)i * 65536 + 4096 * (uint64_t)(i % 16);
		assert_int_equal(folio_mapping_write(m, blk, 4096, pos), 4096);
		memcpy(orig + pos, blk, 4096);
	}
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.read_bytes, 16 * 64 * KIB);
	assert_int_equal(st.dirty_bytes, 16 * 64 * KIB);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	st = test_mapping_stats(m);
	assert_int_equal(st.wb_bytes, 16 * st.bytes_written);
	assert_store(e, orig, MIB);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(orig);
}

/* Dirty runs that meet at a folio boundary become one request. */
static void test_merge_across_folios(void **state)
{
	struct fixture *fx = *state;
	unsigned char buf[64 * KIB];
	memset(buf, 3, sizeof(buf));
	/* The last block of folio 0 and the first of folio 1. */
	assert_int_equal(folio_mapping_write(fx->map, buf, 64 * KIB, 0),
			 64 * KIB);
	assert_int_equal(folio_mapping_write(fx->map, buf, 64 * KIB, 64 * KIB),
			 64 * KIB);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	struct folio_mapping_stats s0 = test_mapping_stats(fx->map);
	assert_int_equal(folio_mapping_write(fx->map, buf, 8192, 60 * KIB),
			 8192);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	struct folio_mapping_stats st = test_mapping_stats(fx->map);
	assert_int_equal(st.wb_requests - s0.wb_requests, 1);
	assert_int_equal(st.wb_bytes - s0.wb_bytes, 8192);
	assert_true(st.wb_merges > s0.wb_merges);
}

struct ranges {
	uint64_t pos[16], len[16];
	int n;
	int stop_after;
};

static int collect(uint64_t pos, uint64_t len, void *arg)
{
	struct ranges *r = arg;
	if (r->n < 16) {
		r->pos[r->n] = pos;
		r->len[r->n] = len;
	}
	r->n++;
	return r->stop_after && r->n >= r->stop_after ? 99 : 0;
}

/* A dirty_ranges callback may call into the mapping: here it writes each
 * range back itself through a sync of just that range's data. */
struct reentrant {
	struct folio_mapping *m;
	int calls;
};

static int write_range_back(uint64_t pos, uint64_t len, void *arg)
{
	struct reentrant *re = arg;
	unsigned char buf[8192];
	re->calls++;
	if (len > sizeof(buf) ||
	    folio_mapping_read(re->m, buf, len, pos) != (ssize_t)len)
		return -1;
	struct folio_writeback_opts o = {.sz = sizeof(o), .start = pos,
					 .end = pos + len,
					 .flags = FOLIO_WB_WAIT};
	return folio_mapping_writeback(re->m, &o) == (int64_t)len ? 0 : -2;
}

static void test_dirty_ranges_reentrant(void **state)
{
	struct fixture *fx = *state;
	unsigned char buf[4096];
	memset(buf, 8, sizeof(buf));
	assert_int_equal(folio_mapping_write(fx->map, buf, 4096, 0), 4096);
	assert_int_equal(folio_mapping_write(fx->map, buf, 4096, 200 * KIB),
			 4096);
	struct reentrant re = {fx->map, 0};
	assert_int_equal(folio_mapping_dirty_ranges(fx->map, 0, 0,
						    write_range_back, &re),
			 0);
	assert_int_equal(re.calls, 2);
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, 0);
}

static void test_dirty_ranges(void **state)
{
	struct fixture *fx = *state;
	unsigned char buf[3 * 4096];
	memset(buf, 1, sizeof(buf));
	assert_int_equal(folio_mapping_write(fx->map, buf, 100, 60 * KIB + 10),
			 100);
	assert_int_equal(folio_mapping_write(fx->map, buf, 5000, 64 * KIB), 5000);
	assert_int_equal(folio_mapping_write(fx->map, buf, 1, 200 * KIB), 1);
	struct ranges r = {0};
	assert_int_equal(folio_mapping_dirty_ranges(fx->map, 0, 0, collect, &r),
			 0);
	assert_int_equal(r.n, 2);
	/* Whole blocks, merged across the folio boundary at 64 KiB. */
	assert_int_equal(r.pos[0], 60 * KIB);
	assert_int_equal(r.len[0], 4096 + 8192);
	/* Clamped to EOF. */
	assert_int_equal(r.pos[1], 200 * KIB);
	assert_int_equal(r.len[1], 1);
	/* A sub-range is clipped to it. */
	r = (struct ranges){0};
	assert_int_equal(folio_mapping_dirty_ranges(fx->map, 62 * KIB,
						    66 * KIB, collect, &r),
			 0);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.pos[0], 62 * KIB);
	assert_int_equal(r.len[0], 4 * KIB);
	/* A callback's non-zero return stops and comes back. */
	r = (struct ranges){.stop_after = 1};
	assert_int_equal(folio_mapping_dirty_ranges(fx->map, 0, 0, collect, &r),
			 99);
	assert_int_equal(r.n, 1);
	/* Nothing was written. */
	assert_int_equal(test_mapping_stats(fx->map).wb_requests, 0);
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, 3 * 4096 + 4096);
}

static void test_limits_and_range(void **state)
{
	struct fixture *fx = *state;
	unsigned char *buf = calloc(1, 4 * MIB);
	assert_int_equal(folio_mapping_write(fx->map, buf, 4 * MIB, 0),
			 4 * MIB);
	/* Only [1 MiB, 2 MiB), in 64 KiB requests. */
	struct folio_writeback_opts o = {
		.sz = sizeof(o),
		.start = MIB,
		.end = 2 * MIB,
		.flags = FOLIO_WB_WAIT,
		.max_request = 64 * KIB,
	};
	assert_int_equal(folio_mapping_writeback(fx->map, &o), MIB);
	struct folio_mapping_stats st = test_mapping_stats(fx->map);
	assert_int_equal(st.wb_requests, 16);
	assert_int_equal(st.dirty_bytes, 3 * MIB);
	/* Two segments per request at most. */
	o = (struct folio_writeback_opts){.sz = sizeof(o),
					  .end = MIB,
					  .flags = FOLIO_WB_WAIT,
					  .max_segments = 2};
	assert_int_equal(folio_mapping_writeback(fx->map, &o), MIB);
	st = test_mapping_stats(fx->map);
	assert_int_equal(st.wb_requests, 16 + 8);
	/* A budget stops after whole folios reach it. */
	o = (struct folio_writeback_opts){.sz = sizeof(o), .budget = 100 * KIB,
					  .flags = FOLIO_WB_WAIT};
	assert_int_equal(folio_mapping_writeback(fx->map, &o), 128 * KIB);
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, 2 * MIB - 128 * KIB);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, 0);
	free(buf);
}

static void test_merge_gap(void **state)
{
	struct fixture *fx = *state;
	unsigned char buf[64 * KIB];
	memset(buf, 9, sizeof(buf));
	assert_int_equal(folio_mapping_write(fx->map, buf, 64 * KIB, 0),
			 64 * KIB);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	/* Dirty blocks 0 and 2, block 1 clean and uptodate. */
	assert_int_equal(folio_mapping_write(fx->map, buf, 4096, 0), 4096);
	assert_int_equal(folio_mapping_write(fx->map, buf, 4096, 8192), 4096);
	struct folio_mapping_stats s0 = test_mapping_stats(fx->map);
	struct folio_writeback_opts o = {.sz = sizeof(o),
					 .flags = FOLIO_WB_WAIT};
	assert_int_equal(folio_mapping_writeback(fx->map, &o), 8192);
	struct folio_mapping_stats st = test_mapping_stats(fx->map);
	assert_int_equal(st.wb_requests - s0.wb_requests, 2);
	/* Again with a gap of one block allowed: one request of three. */
	assert_int_equal(folio_mapping_write(fx->map, buf, 4096, 0), 4096);
	assert_int_equal(folio_mapping_write(fx->map, buf, 4096, 8192), 4096);
	o.merge_gap = 4096;
	assert_int_equal(folio_mapping_writeback(fx->map, &o), 3 * 4096);
	struct folio_mapping_stats s2 = test_mapping_stats(fx->map);
	assert_int_equal(s2.wb_requests - st.wb_requests, 1);
	assert_int_equal(s2.wb_bytes - st.wb_bytes, 3 * 4096);
	assert_store(fx->engine, buf, 64 * KIB);
}

/* A mem engine with a map() of the given extent size, and a mapping. */
static void open_mapped(struct fixture *fx, uint64_t extent, bool scatter,
			size_t max_folio)
{
	assert_int_equal(folio_engine_mem(&fx->engine, 64 * MIB), 0);
	assert_int_equal(folio_engine_mem_set_map(fx->engine, extent, scatter),
			 0);
	struct folio_mapping_opts o = opts_for(fx->engine, max_folio, 0);
	assert_int_equal(folio_mapping_new(&fx->map, &o), 0);
}

static void close_mapped(struct fixture *fx)
{
	assert_int_equal(folio_mapping_free(fx->map), 0);
	assert_int_equal(folio_engine_free(fx->engine), 0);
}

/* An engine whose extents are 1 MiB gets one map() call per MiB. */
static void test_map_cache(void **state)
{
	(void)state;
	struct fixture fx;
	open_mapped(&fx, MIB, false, 2 * MIB);
	unsigned char *buf = malloc(8 * MIB);
	for (size_t i = 0; i < 8 * MIB; i++)
		buf[i] = (unsigned char)(i * 13 + (i >> 12));
	for (size_t at = 0; at < 8 * MIB; at += 64 * KIB)
		assert_int_equal(folio_mapping_write(fx.map, buf + at, 64 * KIB,
						     at),
				 64 * KIB);
	assert_int_equal(folio_mapping_sync(fx.map, NULL), 0);
	struct folio_mapping_stats st = test_mapping_stats(fx.map);
	assert_int_equal(st.map_calls, 8);
	assert_int_equal(test_mem_stats(fx.engine).map_calls, 8);
	assert_int_equal(test_mem_stats(fx.engine).misdirected, 0);
	assert_store(fx.engine, buf, 8 * MIB);
	close_mapped(&fx);

	/* Scattered placement: runs contiguous in the file but not on the
	 * device must not share a request; every byte lands right. */
	open_mapped(&fx, 256 * KIB, true, 64 * KIB);
	assert_int_equal(folio_mapping_write(fx.map, buf, 4 * MIB, 0), 4 * MIB);
	assert_int_equal(folio_mapping_sync(fx.map, NULL), 0);
	assert_int_equal(test_mem_stats(fx.engine).misdirected, 0);
	st = test_mapping_stats(fx.map);
	assert_int_equal(st.wb_requests, 16);
	assert_store(fx.engine, buf, 4 * MIB);
	/* Read back cold through the map too. */
	assert_int_equal(folio_mapping_invalidate(fx.map, 0, 0, 0), 0);
	unsigned char *got = malloc(4 * MIB);
	assert_int_equal(folio_mapping_read(fx.map, got, 4 * MIB, 0), 4 * MIB);
	assert_memory_equal(got, buf, 4 * MIB);
	assert_int_equal(test_mem_stats(fx.engine).misdirected, 0);
	close_mapped(&fx);
	free(got);
	free(buf);
}

/* A user engine whose map() reports holes and new extents: the flags must
 * reach the requests, and hole reads need no I/O. */
struct flag_engine {
	unsigned char store[1 << 20];
	uint32_t write_flags[64];
	int nwrites;
	int reads;
};

static int fe_map(void *ctx, uint64_t pos, uint64_t len,
		  struct folio_extent *ext)
{
	(void)ctx;
	(void)len;
	/* 64 KiB extents: even ones are holes, odd ones new. */
	ext->pos = pos & ~(uint64_t)0xffff;
	ext->len = 0x10000;
	ext->dev_pos = ext->pos;
	ext->flags = (pos >> 16) % 2 ? FOLIO_EXTENT_NEW : FOLIO_EXTENT_HOLE;
	return 0;
}

static int fe_submit(void *ctx, struct folio_io *io)
{
	struct flag_engine *fe = ctx;
	size_t at = io->dev_pos;
	for (int i = 0; i < io->iovcnt; i++) {
		if (io->op == FOLIO_IO_WRITE)
			memcpy(fe->store + at, io->iov[i].iov_base,
			       io->iov[i].iov_len);
		else
			memcpy(io->iov[i].iov_base, fe->store + at,
			       io->iov[i].iov_len);
		at += io->iov[i].iov_len;
	}
	if (io->op == FOLIO_IO_WRITE && fe->nwrites < 64)
		fe->write_flags[fe->nwrites++] = io->flags;
	if (io->op == FOLIO_IO_READ)
		fe->reads++;
	folio_io_complete(io, (ssize_t)io->len);
	return 0;
}

static int fe_flush(void *ctx)
{
	(void)ctx;
	return 0;
}

static int fe_truncate(void *ctx, uint64_t size)
{
	(void)ctx;
	(void)size;
	return 0;
}

static void test_extent_flags(void **state)
{
	(void)state;
	struct flag_engine *fe = calloc(1, sizeof(*fe));
	struct folio_engine_ops ops = {
		.sz = sizeof(ops),
		.submit = fe_submit,
		.flush = fe_flush,
		.truncate = fe_truncate,
		.map = fe_map,
	};
	struct folio_engine *e;
	assert_int_equal(folio_engine_new(&e, &ops, fe), 0);
	assert_ptr_equal(folio_engine_ctx(e), fe);
	struct folio_mapping *m;
	struct folio_mapping_opts o = opts_for(e, 64 * KIB, 0);
	o.size = 1 << 20;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	/* A read inside a hole is all zeros and costs no engine read. */
	memset(fe->store, 0x77, sizeof(fe->store));
	unsigned char buf[8192];
	assert_int_equal(folio_mapping_read(m, buf, 8192, 4096), 8192);
	for (int i = 0; i < 8192; i++)
		assert_int_equal(buf[i], 0);
	assert_int_equal(fe->reads, 0);
	/* Writes into a hole and into a new extent carry the flags. */
	memset(buf, 5, sizeof(buf));
	assert_int_equal(folio_mapping_write(m, buf, 4096, 0), 4096);
	assert_int_equal(folio_mapping_write(m, buf, 4096, 65536), 4096);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(fe->nwrites, 2);
	assert_int_equal(fe->write_flags[0], FOLIO_EXTENT_HOLE);
	assert_int_equal(fe->write_flags[1], FOLIO_EXTENT_NEW);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(fe);
}

/* Default policy: a failed write keeps the data dirty, each cursor sees
 * the error once, and a later successful sync returns 0. */
static void test_error_redirty(void **state)
{
	struct fixture *fx = *state;
	unsigned char buf[3 * 4096];
	memset(buf, 0x42, sizeof(buf));
	folio_errseq_t a = folio_mapping_err_cursor(fx->map);
	folio_errseq_t b = folio_mapping_err_cursor(fx->map);
	assert_int_equal(folio_mapping_write(fx->map, buf, sizeof(buf), 0),
			 sizeof(buf));
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_WRITE,
				    .count = 1,
				    .error = -EIO};
	assert_int_equal(folio_engine_mem_inject(fx->engine, &f), 0);
	assert_int_equal(folio_mapping_sync(fx->map, &a), -EIO);
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, sizeof(buf));
	assert_int_equal(test_mapping_stats(fx->map).errors, 1);
	/* Cursor b has not seen it yet; a has. */
	assert_int_equal(folio_mapping_sync(fx->map, &b), -EIO);
	/* The data went out with b's sync. */
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, 0);
	assert_int_equal(folio_mapping_sync(fx->map, &a), 0);
	assert_int_equal(folio_mapping_sync(fx->map, &b), 0);
	assert_store(fx->engine, buf, sizeof(buf));
	/* A cursor taken now sees nothing old. */
	folio_errseq_t c = folio_mapping_err_cursor(fx->map);
	assert_int_equal(folio_mapping_sync(fx->map, &c), 0);
	assert_int_equal(folio_mapping_free(fx->map), 0);
	fx->map = NULL;
}

/* An engine that fails every write inline, with one folio's dirty data in
 * several requests: each pass puts the failed runs back and moves on
 * (it once took them again forever). */
static void test_persistent_inline_failure(void **state)
{
	struct fixture *fx = *state;
	unsigned char buf[64 * KIB];
	memset(buf, 0x17, sizeof(buf));
	/* Two runs with a clean block between them, and a run longer than
	 * the request limit, all in one 64 KiB folio. */
	assert_int_equal(folio_mapping_write(fx->map, buf, 4096, 0), 4096);
	assert_int_equal(folio_mapping_write(fx->map, buf, 4096, 8192), 4096);
	assert_int_equal(folio_mapping_write(fx->map, buf, 32768, 16384),
			 32768);
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_WRITE,
				    .error = -EIO};
	assert_int_equal(folio_engine_mem_inject(fx->engine, &f), 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), -EIO);
	struct folio_writeback_opts o = {.sz = sizeof(o),
					 .max_request = 8192,
					 .flags = FOLIO_WB_WAIT};
	assert_int_equal(folio_mapping_writeback(fx->map, &o), 40960);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), -EIO);
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, 40960);
	assert_int_equal(folio_engine_mem_clear_faults(fx->engine), 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, 0);
	unsigned char want[64 * KIB] = {0};
	memset(want, 0x17, 4096);
	memset(want + 8192, 0x17, 4096);
	memset(want + 16384, 0x17, 32768);
	assert_store(fx->engine, want, 16384 + 32768);
}

/* Only the failed request's bytes are put back. */
static void test_error_exact_range(void **state)
{
	struct fixture *fx = *state;
	unsigned char buf[64 * KIB];
	memset(buf, 1, sizeof(buf));
	for (int i = 0; i < 4; i++)
		assert_int_equal(folio_mapping_write(fx->map, buf, 4096,
						     (uint64_t)i * 3 * 4096),
				 4096);
	/* Fail only the request touching the third run. */
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_WRITE,
				    .pos = 6 * 4096,
				    .len = 4096,
				    .error = -ENOSPC};
	assert_int_equal(folio_engine_mem_inject(fx->engine, &f), 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), -ENOSPC);
	struct ranges r = {0};
	assert_int_equal(folio_mapping_dirty_ranges(fx->map, 0, 0, collect, &r),
			 0);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.pos[0], 6 * 4096);
	assert_int_equal(r.len[0], 4096);
	assert_int_equal(folio_engine_mem_clear_faults(fx->engine), 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, 0);
}

/* Drop policy: the failed blocks are cleaned and the error reported once. */
static void test_error_drop(void **state)
{
	struct fixture *fx = *state;
	unsigned char buf[4096];
	memset(buf, 0x42, sizeof(buf));
	assert_int_equal(folio_mapping_write(fx->map, buf, sizeof(buf), 0),
			 sizeof(buf));
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_WRITE,
				    .count = 1,
				    .error = -EIO};
	assert_int_equal(folio_engine_mem_inject(fx->engine, &f), 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), -EIO);
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	assert_int_equal(test_mem_stats(fx->engine).write_requests, 1);
}

/* Short writes: the rest goes out within the same sync. */
static void test_short_write(void **state)
{
	struct fixture *fx = *state;
	unsigned char buf[256 * KIB];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 7);
	assert_int_equal(folio_mapping_write(fx->map, buf, sizeof(buf), 0),
			 sizeof(buf));
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_WRITE,
				    .count = 3,
				    .short_len = 5000};
	assert_int_equal(folio_engine_mem_inject(fx->engine, &f), 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	assert_store(fx->engine, buf, sizeof(buf));
	assert_int_equal(test_mapping_stats(fx->map).retries, 3);
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, 0);

	/* An engine that only ever writes short: sync must not claim
	 * success, and nothing is lost. */
	buf[0] ^= 0xff;
	assert_int_equal(folio_mapping_write(fx->map, buf, 8192, 0), 8192);
	f = (struct folio_mem_fault){.sz = sizeof(f),
				     .ops = FOLIO_MEM_OP_WRITE,
				     .short_len = 1};
	assert_int_equal(folio_engine_mem_inject(fx->engine, &f), 0);
	int r = folio_mapping_sync(fx->map, NULL);
	assert_true(r < 0);
	assert_true(test_mapping_stats(fx->map).dirty_bytes > 0);
	assert_int_equal(folio_engine_mem_clear_faults(fx->engine), 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	assert_store(fx->engine, buf, sizeof(buf));
}

static void test_flush_error(void **state)
{
	struct fixture *fx = *state;
	unsigned char buf[100] = {1};
	assert_int_equal(folio_mapping_write(fx->map, buf, sizeof(buf), 0), 100);
	struct folio_mem_fault f = {.sz = sizeof(f),
				    .ops = FOLIO_MEM_OP_FLUSH,
				    .count = 1,
				    .error = -EROFS};
	assert_int_equal(folio_engine_mem_inject(fx->engine, &f), 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), -EROFS);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
}

static void async_roundtrip(struct fixture *fx, enum folio_mem_mode mode)
{
	assert_int_equal(folio_engine_mem_set_mode(fx->engine, mode, 99), 0);
	unsigned char *buf = malloc(4 * MIB);
	uint64_t rng = 5;
	for (size_t i = 0; i < 4 * MIB; i++)
		buf[i] = (unsigned char)test_rand(&rng);
	for (size_t at = 0; at < 4 * MIB; at += 4096 * 3)
		assert_int_equal(folio_mapping_write(fx->map, buf + at, 4096,
						     at),
				 4096);
	/* Several asynchronous passes in flight, then sync. */
	struct folio_writeback_opts o = {.sz = sizeof(o),
					 .max_request = 16 * KIB};
	assert_true(folio_mapping_writeback(fx->map, &o) > 0);
	for (size_t at = 4096; at < 4 * MIB; at += 4096 * 3)
		assert_int_equal(folio_mapping_write(fx->map, buf + at, 8192,
						     at),
				 8192);
	assert_true(folio_mapping_writeback(fx->map, &o) >= 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	assert_store(fx->engine, buf, 4 * MIB);
	/* The cache reads the same. */
	unsigned char *got = malloc(4 * MIB);
	assert_int_equal(folio_mapping_read(fx->map, got, 4 * MIB, 0),
			 4 * MIB);
	assert_memory_equal(got, buf, 4 * MIB);
	free(got);
	free(buf);
}

static void test_async_poll(void **state)
{
	async_roundtrip(*state, FOLIO_MEM_POLL);
}

static void test_async_thread(void **state)
{
	async_roundtrip(*state, FOLIO_MEM_THREAD);
}

/* With stable writes a write to a folio under writeback waits for it, so
 * the engine sees the old bytes and the new ones go out next time. */
static void test_stable_writes(void **state)
{
	struct fixture *fx = *state;
	unsigned char a[4096], b[4096];
	memset(a, 'a', sizeof(a));
	memset(b, 'b', sizeof(b));
	assert_int_equal(folio_mapping_write(fx->map, a, 4096, 0), 4096);
	assert_int_equal(folio_engine_mem_set_mode(fx->engine, FOLIO_MEM_POLL,
						   1),
			 0);
	assert_int_equal(folio_mapping_writeback(fx->map, NULL), 4096);
	struct folio *f;
	assert_int_equal(folio_mapping_lookup(fx->map, 0, &f), 0);
	assert_true(folio_test_writeback(f));
	/* The write drives the polled engine until the writeback ends. */
	assert_int_equal(folio_mapping_write(fx->map, b, 4096, 0), 4096);
	assert_false(folio_test_writeback(f));
	folio_put(f);
	assert_store(fx->engine, a, 4096);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	assert_store(fx->engine, b, 4096);
}

/* Without stable writes a write during writeback re-dirties the block. */
static void test_redirty_during_writeback(void **state)
{
	struct fixture *fx = *state;
	unsigned char a[4096], b[4096];
	memset(a, 'a', sizeof(a));
	memset(b, 'b', sizeof(b));
	assert_int_equal(folio_mapping_write(fx->map, a, 4096, 0), 4096);
	assert_int_equal(folio_engine_mem_set_mode(fx->engine, FOLIO_MEM_POLL,
						   1),
			 0);
	assert_int_equal(folio_mapping_writeback(fx->map, NULL), 4096);
	assert_int_equal(folio_mapping_write(fx->map, b, 4096, 0), 4096);
	assert_int_equal(test_mapping_stats(fx->map).dirty_bytes, 4096);
	/* A non-waiting pass skips the busy folio. */
	assert_int_equal(folio_mapping_writeback(fx->map, NULL), 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	assert_store(fx->engine, b, 4096);
	assert_int_equal(test_mem_stats(fx->engine).write_requests, 2);
}

static void test_truncate_during_writeback(void **state)
{
	struct fixture *fx = *state;
	unsigned char *buf = malloc(MIB);
	memset(buf, 'x', MIB);
	assert_int_equal(folio_mapping_write(fx->map, buf, MIB, 0), MIB);
	assert_int_equal(folio_engine_mem_set_mode(fx->engine,
						   FOLIO_MEM_THREAD, 3),
			 0);
	assert_int_equal(folio_mapping_writeback(fx->map, NULL), MIB);
	assert_int_equal(folio_mapping_truncate(fx->map, 100000), 0);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	struct folio_mem_stats es = test_mem_stats(fx->engine);
	assert_int_equal(es.size, 100000);
	assert_store(fx->engine, buf, 100000);
	unsigned char z[4096] = {0}, got[4096];
	assert_int_equal(folio_mapping_truncate(fx->map, MIB), 0);
	assert_int_equal(folio_mapping_read(fx->map, got, 4096, 200000), 4096);
	assert_memory_equal(got, z, 4096);
	free(buf);
}

/* The file-backed engines under writeback and sync. */
static void file_roundtrip(const char *dir, bool uring)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/folio-wb-XXXXXX", dir);
	int fd = mkstemp(path);
	if (fd < 0) {
		printf("# skipping %s: %s\n", dir, strerror(errno));
		return;
	}
	unlink(path);
	struct folio_engine *e;
	int r = uring ? folio_engine_uring(&e, fd, 64, 0)
		      : folio_engine_posix(&e, fd, 0);
	if (r) {
		printf("# skipping %s engine: %s\n", uring ? "uring" : "posix",
		       strerror(-r));
		close(fd);
		return;
	}
	struct folio_mapping *m;
	struct folio_mapping_opts o = opts_for(e, 64 * KIB, 0);
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	size_t size = 8 * MIB;
	unsigned char *model = calloc(1, size), *got = malloc(size);
	uint64_t rng = 11;
	for (int i = 0; i < 2000; i++) {
		size_t len = 1 + test_rand_below(&rng, 20000);
		uint64_t pos = test_rand_below(&rng, size - len);
		unsigned char b[20000];
		memset(b, i, len);
		assert_int_equal(folio_mapping_write(m, b, len, pos),
				 (ssize_t)len);
		memcpy(model + pos, b, len);
		if (i % 500 == 499)
			assert_int_equal(folio_mapping_sync(m, NULL), 0);
	}
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	int64_t eof = folio_mapping_size(m);
	struct stat sb;
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, eof);
	assert_int_equal(pread(fd, got, (size_t)eof, 0), eof);
	assert_memory_equal(got, model, (size_t)eof);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	close(fd);
	free(model);
	free(got);
}

/*
 * A new, unlinked file in @dir of @size bytes, opened with O_DIRECT (*fd)
 * and buffered (*plain, to check what the file holds), and an engine on
 * *fd: io_uring of @depth, or posix with @posix_flags. False, with
 * nothing left open, where the directory, O_DIRECT or the engine is
 * missing (the caller skips).
 */
static bool direct_file_engine(const char *dir, uint64_t size, bool uring,
			       unsigned depth, unsigned posix_flags, int *fd,
			       int *plain, struct folio_engine **e)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/folio-direct-XXXXXX", dir);
	*plain = mkstemp(path);
	if (*plain < 0)
		return false;
	assert_int_equal(ftruncate(*plain, (off_t)size), 0);
	*fd = open(path, O_RDWR | O_DIRECT);
	unlink(path);
	if (*fd < 0) {
		printf("# skipping O_DIRECT in %s: %s\n", dir, strerror(errno));
		close(*plain);
		return false;
	}
	int r = uring ? folio_engine_uring(e, *fd, depth, 0)
		      : folio_engine_posix(e, *fd, posix_flags);
	if (r) {
		printf("# skipping the %s engine: %s\n",
		       uring ? "uring" : "posix", strerror(-r));
		close(*fd);
		close(*plain);
		return false;
	}
	return true;
}

/* An O_DIRECT file whose size is not a multiple of a sector: the last
 * run of each sync ends mid-sector and must still reach the file. */
static void direct_roundtrip(const char *dir, bool uring)
{
	int fd, plain;
	struct folio_engine *e;
	if (!direct_file_engine(dir, 0, uring, 16, FOLIO_ENGINE_DIRECT, &fd,
				&plain, &e))
		return;
	struct folio_mapping *m;
	struct folio_mapping_opts o = opts_for(e, 64 * KIB, 0);
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	unsigned char model[20000] = {0}, got[20000];
	uint64_t rng = 3;
	size_t size = 0;
	for (int i = 0; i < 50; i++) {
		size_t len = 1 + test_rand_below(&rng, 3000);
		uint64_t pos = test_rand_below(&rng, sizeof(model) - len);
		unsigned char b[3000];
		memset(b, i + 1, len);
		assert_int_equal(folio_mapping_write(m, b, len, pos),
				 (ssize_t)len);
		memcpy(model + pos, b, len);
		if (pos + len > size)
			size = pos + len;
		if (i % 10 == 9)
			assert_int_equal(folio_mapping_sync(m, NULL), 0);
	}
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	struct stat sb;
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, (off_t)size);
	assert_int_equal(pread(plain, got, size, 0), (ssize_t)size);
	assert_memory_equal(got, model, size);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	close(fd);
	close(plain);
}

/*
 * Syncs of thousands of scattered blocks of an O_DIRECT file, where the
 * engines keep many requests in flight: the posix engine's workers send
 * them as kernel AIO batches, the io_uring engine reaps inside submit()
 * once its ring is full. Between syncs some blocks are written again and
 * some only partly, and after each the file must equal the model.
 */
static void scattered_syncs(const char *dir, bool uring)
{
	enum { SIZE = 16 * 1024 * 1024, BLK = 4096 };
	int fd, tmp;
	struct folio_engine *e;
	if (!direct_file_engine(dir, SIZE, uring, 32, 0, &fd, &tmp, &e))
		return;
	struct folio_mapping *m;
	struct folio_mapping_opts o = opts_for(e, 256 * KIB, 0);
	o.size = SIZE;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	unsigned char *model = calloc(1, SIZE), *got = malloc(SIZE);
	assert_non_null(model);
	assert_non_null(got);
	uint64_t rng = test_seed(uring ? "scatter_uring" : "scatter_posix");
	unsigned syncs = test_iters(4, 2), per = test_iters(2000, 300);
	for (unsigned s = 0; s < syncs; s++) {
		for (unsigned i = 0; i < per; i++) {
			uint64_t pos = test_rand_below(&rng, SIZE / BLK) * BLK;
			size_t len = BLK;
			if (test_rand(&rng) % 4 == 0) {
				/* Part of a block: the rest is read first. */
				pos += test_rand_below(&rng, BLK / 2);
				len = 1 + test_rand_below(&rng, BLK / 2);
			}
			unsigned char b[BLK];
			memset(b, (int)(s * 31 + i), len);
			assert_int_equal(folio_mapping_write(m, b, len, pos),
					 (ssize_t)len);
			memcpy(model + pos, b, len);
		}
		assert_int_equal(folio_mapping_sync(m, NULL), 0);
		assert_int_equal(pread(tmp, got, SIZE, 0), SIZE);
		assert_memory_equal(got, model, SIZE);
	}
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(model);
	free(got);
	close(fd);
	close(tmp);
}

static void test_direct_files(void **state)
{
	(void)state;
	direct_roundtrip("/var/tmp", false);
	direct_roundtrip("/dev/shm", false);
	direct_roundtrip("/var/tmp", true);
	scattered_syncs("/var/tmp", false);
	scattered_syncs("/var/tmp", true);
}

static void test_files(void **state)
{
	(void)state;
	file_roundtrip("/var/tmp", false);
	file_roundtrip("/dev/shm", false);
	if (!getenv("FOLIO_TEST_VALGRIND")) {
		file_roundtrip("/var/tmp", true);
		file_roundtrip("/dev/shm", true);
	}
}

int main(void)
{
#define T(fn, setup) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_bad_input, setup_64k),
		T(test_sequential_merge, setup_64k),
		T(test_scattered_amplification, setup_64k),
		cmocka_unit_test(test_folio_dirty_tracking),
		T(test_merge_across_folios, setup_64k),
		T(test_dirty_ranges, setup_64k),
		T(test_dirty_ranges_reentrant, setup_64k),
		T(test_limits_and_range, setup_64k),
		T(test_merge_gap, setup_64k),
		cmocka_unit_test(test_map_cache),
		cmocka_unit_test(test_extent_flags),
		T(test_error_redirty, setup_64k),
		T(test_error_exact_range, setup_64k),
		T(test_persistent_inline_failure, setup_64k),
		T(test_error_drop, setup_drop),
		T(test_short_write, setup_64k),
		T(test_flush_error, setup_64k),
		T(test_async_poll, setup_64k),
		T(test_async_thread, setup_64k),
		T(test_stable_writes, setup_stable),
		T(test_redirty_during_writeback, setup_64k),
		T(test_truncate_during_writeback, setup_64k),
		cmocka_unit_test(test_files),
		cmocka_unit_test(test_direct_files),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
