/* SPDX-License-Identifier: MIT */
/*
 * Randomized model test of the mapping: random writes, reads, truncates,
 * invalidates, syncs and reopenings over the mem engine (sequential
 * readers too, so that readahead runs, once with completions from the
 * engine's thread), checked against a
 * plain byte array (the object's content) after every step. After a sync
 * the backing store must equal the model too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "folio_state.h"
#include "folio_state_mem.h"
#include "test_util.h"

#define SPACE (8u << 20) /* positions stay below this */
#define MAX_IO (3u << 20)

struct geometry {
	size_t block, min_folio, max_folio;
	unsigned flags;
	bool async; /* the mem engine completes from its thread */
};

struct model {
	unsigned char *bytes; /* SPACE bytes; past size always zero */
	uint64_t size;
};

struct world {
	uint64_t rng;
	struct model model;
	struct folio_engine *engine;
	struct folio_mapping *map;
	struct folio_mapping_opts opts;
	unsigned char *buf;
	unsigned char *check;
};

static void open_mapping(struct world *w)
{
	w->opts.size = w->model.size;
	assert_int_equal(folio_mapping_new(&w->map, &w->opts), 0);
}

static void reopen(struct world *w)
{
	assert_int_equal(folio_mapping_sync(w->map, NULL), 0);
	assert_int_equal(folio_mapping_free(w->map), 0);
	open_mapping(w);
}

/* Sizes: mostly small, sometimes up to MAX_IO, so both the per-block
 * edge logic and multi-folio paths get exercised. */
static size_t random_len(struct world *w)
{
	switch (test_rand_below(&w->rng, 4)) {
	case 0:
		return 1 + test_rand_below(&w->rng, 64);
	case 1:
		return 1 + test_rand_below(&w->rng, 16384);
	case 2:
		return 1 + test_rand_below(&w->rng, 256 << 10);
	default:
		return 1 + test_rand_below(&w->rng, MAX_IO);
	}
}

static uint64_t random_pos(struct world *w, size_t len)
{
	/* Favour positions near EOF, where the edge cases live. */
	uint64_t limit = SPACE - len;
	if (test_rand_below(&w->rng, 3) == 0 && w->model.size < limit) {
		uint64_t lo = w->model.size > 8192 ? w->model.size - 8192 : 0;
		return lo + test_rand_below(&w->rng, test_min_u64(limit, w->model.size + 8192) - lo + 1);
	}
	return test_rand_below(&w->rng, limit + 1);
}

static void do_write(struct world *w)
{
	size_t len = random_len(w);
	uint64_t pos = random_pos(w, len);
	for (size_t i = 0; i < len; i++)
		w->buf[i] = (unsigned char)test_rand(&w->rng);
	ssize_t r = folio_mapping_write(w->map, w->buf, len, pos);
	assert_int_equal(r, (ssize_t)len);
	memcpy(w->model.bytes + pos, w->buf, len);
	if (pos + len > w->model.size)
		w->model.size = pos + len;
}

static void read_check(struct world *w, size_t len, uint64_t pos)
{
	ssize_t r = folio_mapping_read(w->map, w->buf, len, pos);
	size_t want = pos >= w->model.size ? 0
		      : (size_t)test_min_u64(len, w->model.size - pos);
	assert_int_equal(r, (ssize_t)want);
	if (want && memcmp(w->buf, w->model.bytes + pos, want)) {
		for (size_t i = 0; i < want; i++)
			if (w->buf[i] != w->model.bytes[pos + i])
				fail_msg("read mismatch at %llu (+%zu): got %u want %u",
					 (unsigned long long)(pos + i), i,
					 w->buf[i], w->model.bytes[pos + i]);
	}
}

static void do_read(struct world *w)
{
	size_t len = random_len(w);
	read_check(w, len, random_pos(w, len));
}

/* A sequential reader: enough calls in a row to start readahead and
 * reach its marks; sometimes an explicit readahead first. */
static void do_stream(struct world *w)
{
	size_t len = 1 + test_rand_below(&w->rng, 32768);
	unsigned calls = 3 + (unsigned)test_rand_below(&w->rng, 60);
	uint64_t pos = random_pos(w, len * calls);
	if (test_rand_below(&w->rng, 4) == 0)
		assert_int_equal(folio_mapping_readahead(
					 w->map, pos,
					 test_rand_below(&w->rng, MAX_IO)),
				 0);
	for (unsigned i = 0; i < calls; i++, pos += len)
		read_check(w, len, pos);
}

static void do_truncate(struct world *w)
{
	uint64_t size = test_rand_below(&w->rng, 2) ? random_pos(w, 0)
						    : test_rand_below(&w->rng, SPACE);
	assert_int_equal(folio_mapping_truncate(w->map, size), 0);
	if (size < w->model.size)
		memset(w->model.bytes + size, 0, w->model.size - size);
	w->model.size = size;
}

static void do_invalidate(struct world *w)
{
	size_t len = random_len(w);
	uint64_t pos = random_pos(w, len);
	/* Without DISCARD nothing may be lost: only clean folios go. */
	int r = folio_mapping_invalidate(w->map, pos, len, 0);
	assert_true(r == 0 || r == -EBUSY);
}

static void check_store(struct world *w)
{
	struct folio_mem_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_engine_mem_stats(w->engine, &st), 0);
	assert_int_equal(st.size, w->model.size);
	for (uint64_t at = 0; at < w->model.size; at += MAX_IO) {
		size_t n = (size_t)test_min_u64(MAX_IO, w->model.size - at);
		assert_int_equal(folio_engine_mem_peek(w->engine, w->check, n,
						       at), 0);
		if (memcmp(w->check, w->model.bytes + at, n))
			fail_msg("backing store differs from model near %llu",
				 (unsigned long long)at);
	}
}

static void do_sync(struct world *w)
{
	assert_int_equal(folio_mapping_sync(w->map, NULL), 0);
	check_store(w);
}

static void run_geometry(const struct geometry *g, uint64_t seed,
			 unsigned steps)
{
	struct world w;
	memset(&w, 0, sizeof(w));
	w.rng = seed;
	w.model.bytes = calloc(1, SPACE);
	w.buf = malloc(MAX_IO);
	w.check = malloc(MAX_IO);
	assert_non_null(w.model.bytes);
	assert_non_null(w.buf);
	assert_non_null(w.check);
	assert_int_equal(folio_engine_mem(&w.engine, SPACE), 0);
	w.opts = (struct folio_mapping_opts){
		.sz = sizeof(w.opts),
		.block_size = g->block,
		.min_folio_size = g->min_folio,
		.max_folio_size = g->max_folio,
		.flags = g->flags,
		.engine = w.engine,
	};
	if (g->async)
		assert_int_equal(folio_engine_mem_set_mode(
					 w.engine, FOLIO_MEM_THREAD, seed),
				 0);
	open_mapping(&w);

	for (unsigned i = 0; i < steps; i++) {
		unsigned op = (unsigned)test_rand_below(&w.rng, 100);
		if (op < 40)
			do_write(&w);
		else if (op < 68)
			do_read(&w);
		else if (op < 75)
			do_stream(&w);
		else if (op < 83)
			do_truncate(&w);
		else if (op < 90)
			do_invalidate(&w);
		else if (op < 97)
			do_sync(&w);
		else
			reopen(&w);
		assert_int_equal(folio_mapping_size(w.map),
				 (int64_t)w.model.size);
	}
	do_sync(&w);
	/* Everything cached must also read back right from a cold cache. */
	reopen(&w);
	for (uint64_t at = 0; at < w.model.size; at += MAX_IO) {
		size_t n = (size_t)test_min_u64(MAX_IO, w.model.size - at);
		assert_int_equal(folio_mapping_read(w.map, w.buf, n, at),
				 (ssize_t)n);
		assert_memory_equal(w.buf, w.model.bytes + at, n);
	}
	assert_int_equal(folio_mapping_free(w.map), 0);
	if (g->async)
		assert_int_equal(folio_engine_mem_set_mode(w.engine,
							   FOLIO_MEM_SYNC, 0),
				 0);
	assert_int_equal(folio_engine_free(w.engine), 0);
	free(w.model.bytes);
	free(w.buf);
	free(w.check);
}

static const struct geometry geometries[] = {
	{512, 512, 4096, 0, false},
	{512, 512, 2u << 20, 0, false},
	{4096, 4096, 4096, 0, false},
	{4096, 4096, 64u << 10, 0, false},
	{4096, 4096, 2u << 20, 0, false},
	{4096, 16384, 2u << 20, 0, false},
	{65536, 65536, 65536, 0, false},
	{65536, 65536, 2u << 20, 0, false},
	{4096, 4096, 64u << 10, FOLIO_MAPPING_FOLIO_DIRTY, false},
	{512, 4096, 2u << 20, FOLIO_MAPPING_STABLE_WRITES, false},
	{4096, 4096, 2u << 20, 0, true},
	{4096, 4096, 64u << 10, FOLIO_MAPPING_NO_READAHEAD, true},
};

static void test_model(void **state)
{
	(void)state;
	uint64_t seed = test_seed("mapping_model");
	unsigned steps = test_iters(600, 60);
	for (size_t i = 0; i < sizeof(geometries) / sizeof(geometries[0]);
	     i++) {
		const struct geometry *g = &geometries[i];
		printf("# geometry block %zu min %zu max %zu flags %#x%s\n",
		       g->block, g->min_folio, g->max_folio, g->flags,
		       g->async ? " async" : "");
		run_geometry(g, seed + i, steps);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
