/* SPDX-License-Identifier: MIT */
/*
 * Randomized model test of writeback: random writes, reads, truncates,
 * asynchronous writeback passes with random limits, syncs and reopenings
 * over the mem engine in every completion mode, with injected write errors
 * and short writes. Two models: the object's content (what reads return)
 * and, after every sync that returns 0, the backing store, which must then
 * equal it. Two error cursors check that each failure is reported exactly
 * once to each of them, and that nothing is lost once the faults stop.
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

#define SPACE (4u << 20)
#define MAX_IO (512u << 10)

struct cursor {
	folio_errseq_t seq;
	uint64_t errors_seen; /* mapping error count when it last synced */
};

struct world {
	uint64_t rng;
	unsigned char *model, *buf, *check;
	uint64_t size;
	struct folio_engine *engine;
	struct folio_mapping *map;
	struct folio_mapping_opts opts;
	struct cursor a, b;
	bool faults_on;
};

static uint64_t mapping_errors(struct world *w)
{
	struct folio_mapping_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_mapping_stats(w->map, &st), 0);
	return st.errors;
}

static void check_store(struct world *w)
{
	struct folio_mem_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_engine_mem_stats(w->engine, &st), 0);
	assert_int_equal(st.size, w->size);
	for (uint64_t at = 0; at < w->size; at += MAX_IO) {
		size_t n = (size_t)test_min_u64(MAX_IO, w->size - at);
		assert_int_equal(folio_engine_mem_peek(w->engine, w->check, n,
						       at), 0);
		if (memcmp(w->check, w->model + at, n))
			fail_msg("store differs from model near %llu",
				 (unsigned long long)at);
	}
}

/*
 * Sync through one cursor. It must report an error exactly when a write
 * request failed since this cursor last synced; when it returns 0 the
 * store must hold the model.
 */
static int sync_cursor(struct world *w, struct cursor *c)
{
	int r = folio_mapping_sync(w->map, &c->seq);
	uint64_t errors = mapping_errors(w);
	if (errors != c->errors_seen) {
		if (r >= 0)
			fail_msg("sync returned %d after %llu new errors", r,
				 (unsigned long long)(errors - c->errors_seen));
	} else if (r != 0) {
		fail_msg("sync returned %d with no new error", r);
	}
	c->errors_seen = errors;
	if (r == 0)
		check_store(w);
	return r;
}

/* With the faults off, every cursor converges to 0 and nothing is lost. */
static void settle(struct world *w)
{
	assert_int_equal(folio_engine_mem_clear_faults(w->engine), 0);
	w->faults_on = false;
	sync_cursor(w, &w->a);
	sync_cursor(w, &w->b);
	assert_int_equal(sync_cursor(w, &w->a), 0);
	assert_int_equal(sync_cursor(w, &w->b), 0);
}

static size_t random_len(struct world *w)
{
	switch (test_rand_below(&w->rng, 3)) {
	case 0:
		return 1 + test_rand_below(&w->rng, 100);
	case 1:
		return 1 + test_rand_below(&w->rng, 20000);
	default:
		return 1 + test_rand_below(&w->rng, MAX_IO);
	}
}

static void do_write(struct world *w)
{
	size_t len = random_len(w);
	uint64_t pos = test_rand_below(&w->rng, SPACE - len + 1);
	for (size_t i = 0; i < len; i++)
		w->buf[i] = (unsigned char)test_rand(&w->rng);
	assert_int_equal(folio_mapping_write(w->map, w->buf, len, pos),
			 (ssize_t)len);
	memcpy(w->model + pos, w->buf, len);
	if (pos + len > w->size)
		w->size = pos + len;
}

static void do_read(struct world *w)
{
	size_t len = random_len(w);
	uint64_t pos = test_rand_below(&w->rng, SPACE - len + 1);
	size_t want = pos >= w->size ? 0
		      : (size_t)test_min_u64(len, w->size - pos);
	assert_int_equal(folio_mapping_read(w->map, w->buf, len, pos),
			 (ssize_t)want);
	if (want && memcmp(w->buf, w->model + pos, want))
		fail_msg("read differs from model at [%llu, +%zu)",
			 (unsigned long long)pos, want);
}

static void do_truncate(struct world *w)
{
	uint64_t size = test_rand_below(&w->rng, SPACE);
	assert_int_equal(folio_mapping_truncate(w->map, size), 0);
	if (size < w->size)
		memset(w->model + size, 0, w->size - size);
	w->size = size;
}

static void do_writeback(struct world *w)
{
	struct folio_writeback_opts o = {.sz = sizeof(o)};
	if (test_rand_below(&w->rng, 2)) {
		o.start = test_rand_below(&w->rng, SPACE);
		o.end = o.start + 1 + test_rand_below(&w->rng, SPACE);
	}
	o.flags = test_rand_below(&w->rng, 4) ? 0 : FOLIO_WB_WAIT;
	o.budget = test_rand_below(&w->rng, 3) ? 0 : 1 + test_rand_below(&w->rng, 1 << 20);
	o.max_request = test_rand_below(&w->rng, 2) ? 0 : 4096 << test_rand_below(&w->rng, 8);
	o.max_segments = (unsigned)test_rand_below(&w->rng, 5);
	o.merge_gap = test_rand_below(&w->rng, 3) ? 0 : 4096 * test_rand_below(&w->rng, 4);
	assert_true(folio_mapping_writeback(w->map, &o) >= 0);
}

static void do_faults(struct world *w)
{
	assert_int_equal(folio_engine_mem_clear_faults(w->engine), 0);
	struct folio_mem_fault f = {.sz = sizeof(f), .ops = FOLIO_MEM_OP_WRITE};
	f.skip = test_rand_below(&w->rng, 4);
	/* Mostly a few failures; sometimes one that lasts until settle(). */
	f.count = test_rand_below(&w->rng, 8) ? 1 + test_rand_below(&w->rng, 3)
					      : 0;
	if (test_rand_below(&w->rng, 2)) {
		f.pos = test_rand_below(&w->rng, SPACE);
		f.len = 1 + test_rand_below(&w->rng, SPACE / 4);
	}
	if (test_rand_below(&w->rng, 2))
		f.error = test_rand_below(&w->rng, 2) ? -EIO : -ENOSPC;
	else
		f.short_len = 1 + test_rand_below(&w->rng, 8192);
	assert_int_equal(folio_engine_mem_inject(w->engine, &f), 0);
	w->faults_on = true;
}

static void do_reopen(struct world *w)
{
	settle(w);
	assert_int_equal(folio_mapping_free(w->map), 0);
	w->opts.size = w->size;
	assert_int_equal(folio_mapping_new(&w->map, &w->opts), 0);
	/* A new mapping's own cursor starts fresh. */
	w->a.seq = folio_mapping_err_cursor(w->map);
	w->b.seq = folio_mapping_err_cursor(w->map);
	w->a.errors_seen = w->b.errors_seen = 0;
}

static void run(uint64_t seed, enum folio_mem_mode mode, size_t max_folio,
		unsigned flags, unsigned steps)
{
	struct world w;
	memset(&w, 0, sizeof(w));
	w.rng = seed;
	w.model = calloc(1, SPACE);
	w.buf = malloc(MAX_IO);
	w.check = malloc(MAX_IO);
	assert_int_equal(folio_engine_mem(&w.engine, SPACE), 0);
	assert_int_equal(folio_engine_mem_set_mode(w.engine, mode, seed), 0);
	w.opts = (struct folio_mapping_opts){
		.sz = sizeof(w.opts),
		.block_size = 4096,
		.max_folio_size = max_folio,
		.flags = flags,
		.engine = w.engine,
	};
	assert_int_equal(folio_mapping_new(&w.map, &w.opts), 0);
	w.a.seq = folio_mapping_err_cursor(w.map);
	w.b.seq = folio_mapping_err_cursor(w.map);

	for (unsigned i = 0; i < steps; i++) {
		unsigned op = (unsigned)test_rand_below(&w.rng, 100);
		if (op < 35)
			do_write(&w);
		else if (op < 55)
			do_read(&w);
		else if (op < 62)
			do_truncate(&w);
		else if (op < 77)
			do_writeback(&w);
		else if (op < 85)
			sync_cursor(&w, &w.a);
		else if (op < 88)
			sync_cursor(&w, &w.b);
		else if (op < 95)
			do_faults(&w);
		else if (op < 97)
			settle(&w);
		else
			do_reopen(&w);
		assert_int_equal(folio_mapping_size(w.map), (int64_t)w.size);
	}
	settle(&w);
	assert_int_equal(folio_mapping_free(w.map), 0);
	assert_int_equal(folio_engine_free(w.engine), 0);
	free(w.model);
	free(w.buf);
	free(w.check);
}

static void test_model(void **state)
{
	(void)state;
	uint64_t seed = test_seed("writeback_model");
	unsigned steps = test_iters(500, 60);
	static const struct {
		enum folio_mem_mode mode;
		size_t max_folio;
		unsigned flags;
	} variants[] = {
		{FOLIO_MEM_SYNC, 64 << 10, 0},
		{FOLIO_MEM_SYNC, 2 << 20, 0},
		{FOLIO_MEM_POLL, 64 << 10, 0},
		{FOLIO_MEM_POLL, 2 << 20, FOLIO_MAPPING_STABLE_WRITES},
		{FOLIO_MEM_THREAD, 16 << 10, 0},
		{FOLIO_MEM_THREAD, 64 << 10, FOLIO_MAPPING_STABLE_WRITES},
		{FOLIO_MEM_SYNC, 64 << 10, FOLIO_MAPPING_FOLIO_DIRTY},
	};
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
		printf("# variant %zu: mode %d, max folio %zu, flags %#x\n", i,
		       (int)variants[i].mode, variants[i].max_folio,
		       variants[i].flags);
		run(seed + i, variants[i].mode, variants[i].max_folio,
		    variants[i].flags, steps);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
