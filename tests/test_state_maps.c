/* SPDX-License-Identifier: MIT */
/*
 * Per-block state maps kept outside the folio header (lib/folio/map.c),
 * through the mapping layer: a read that completes a large folio gives
 * its map back, a write takes one again before it copies (and fails with
 * -ENOMEM, changing nothing, when it cannot), a direct write over such a
 * folio takes one to mark blocks invalid or, failing that, forgets all of
 * the folio's (clean) contents; threads filling, writing, invalidating and syncing 2 MiB folios
 * end with the store and the cache right. White-box: the folio layer's
 * byte count and its allocation failure hook.
 */
#include <errno.h>
#include <pthread.h>
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
#include "folio/folio.h"
#include "test_util.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)
#define FS (2 * MIB)       /* folio size */
#define BS ((size_t)4096)  /* block size */
#define NF 4u              /* folios in the store */
#define MAPB (3 * (FS / BS) / 8) /* one folio's outside map */

static void pattern(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed * 37 + i * 11 + (i >> 12));
}

/* A mem engine holding NF folios of pattern 0 (copied to *model when
 * given), and a mapping of 2 MiB folios over it. */
static struct folio_mapping *big_mapping(struct folio_engine **e,
					 unsigned char *model)
{
	unsigned char *init = malloc(NF * FS);
	assert_non_null(init);
	pattern(init, NF * FS, 0);
	assert_int_equal(folio_engine_mem(e, NF * FS), 0);
	assert_int_equal(folio_engine_mem_poke(*e, init, NF * FS, 0), 0);
	if (model)
		memcpy(model, init, NF * FS);
	free(init);
	struct folio_mapping_opts o = {.sz = sizeof(o),
				       .block_size = BS,
				       .min_folio_size = FS,
				       .max_folio_size = FS,
				       .size = NF * FS,
				       .engine = *e};
	struct folio_mapping *m;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	return m;
}

/* Reads give maps back; writes take them again, or fail cleanly. */
static void test_reads_compact_writes_own(void **state)
{
	(void)state;
	size_t b0 = folio_outside_map_bytes();
	struct folio_engine *e;
	unsigned char *model = malloc(NF * FS), blk[BS];
	assert_non_null(model);
	struct folio_mapping *m = big_mapping(&e, model);
	test_expect_read(m, model, NF * FS, 0);
	/* Every folio the reads completed keeps no map of its own. */
	assert_int_equal(folio_outside_map_bytes(), b0);

	pattern(blk, BS, 1);
	assert_int_equal(folio_mapping_write(m, blk, BS, MIB), (ssize_t)BS);
	memcpy(model + MIB, blk, BS);
	assert_int_equal(folio_outside_map_bytes(), b0 + MAPB);
	test_expect_read(m, model, NF * FS, 0);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	test_expect_store(e, model, NF * FS, 0);

	/* No map to be had (the fast path tries, then the ordinary one):
	 * the write fails before it changes a byte. */
	pattern(blk, BS, 2);
	atomic_store(&folio_map_fail_next, 2);
	assert_int_equal(folio_mapping_write(m, blk, BS, FS + 3 * BS),
			 -ENOMEM);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, 0);
	test_expect_read(m, model, NF * FS, 0);
	/* A write from a folio with a map into one without stops there. */
	unsigned char two[2 * BS];
	pattern(two, sizeof(two), 3);
	atomic_store(&folio_map_fail_next, 2);
	assert_int_equal(folio_mapping_write(m, two, sizeof(two), FS - BS),
			 (ssize_t)BS);
	memcpy(model + FS - BS, two, BS);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, BS);
	test_expect_read(m, model, NF * FS, 0);
	/* With memory again, both go through. */
	assert_int_equal(folio_mapping_write(m, blk, BS, FS + 3 * BS),
			 (ssize_t)BS);
	memcpy(model + FS + 3 * BS, blk, BS);
	assert_int_equal(folio_mapping_write(m, two, sizeof(two), FS - BS),
			 (ssize_t)sizeof(two));
	memcpy(model + FS - BS, two, sizeof(two));
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	test_expect_store(e, model, NF * FS, 0);
	test_expect_read(m, model, NF * FS, 0);
	test_close(m, e);
	assert_int_equal(folio_outside_map_bytes(), b0);
	free(model);
}

/* write_begin() takes the map too: what it hands out can be committed. */
static void test_write_begin_owns(void **state)
{
	(void)state;
	struct folio_engine *e;
	unsigned char *model = malloc(NF * FS);
	assert_non_null(model);
	struct folio_mapping *m = big_mapping(&e, model);
	test_expect_read(m, model, FS, 0);
	struct folio *f;
	atomic_store(&folio_map_fail_next, 1);
	assert_int_equal(folio_mapping_write_begin(m, 5 * BS, BS, &f),
			 -ENOMEM);
	assert_int_equal(folio_mapping_write_begin(m, 5 * BS, BS, &f),
			 (ssize_t)BS);
	pattern(model + 5 * BS, BS, 4);
	memcpy((unsigned char *)folio_data(f) + 5 * BS, model + 5 * BS, BS);
	assert_int_equal(folio_mapping_write_end(m, f, 5 * BS, BS),
			 (ssize_t)BS);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	test_expect_store(e, model, NF * FS, 0);
	test_close(m, e);
	free(model);
}

/*
 * A direct write over cached folios whose maps were given back: the
 * blocks it replaces stop being uptodate (the map comes back for that),
 * or, with no memory for a map, none of the clean folio's blocks stays
 * uptodate; either way buffered reads see the new bytes.
 */
static void test_direct_over_compacted(void **state)
{
	(void)state;
	size_t b0 = folio_outside_map_bytes();
	struct folio_engine *e;
	unsigned char *model = malloc(NF * FS);
	assert_non_null(model);
	struct folio_mapping *m = big_mapping(&e, model);
	test_expect_read(m, model, NF * FS, 0);
	uint64_t cached = test_mapping_stats(m).cached_bytes;

	unsigned char *buf = aligned_alloc(FOLIO_ENGINE_DIRECT_ALIGN, BS);
	assert_non_null(buf);
	pattern(buf, BS, 5);
	assert_int_equal(folio_mapping_write_direct(m, buf, BS, 7 * BS, 0),
			 (ssize_t)BS);
	memcpy(model + 7 * BS, buf, BS);
	/* The folio stays, less the block that is not valid any more. */
	assert_int_equal(folio_outside_map_bytes(), b0 + MAPB);
	assert_int_equal(test_mapping_stats(m).cached_bytes, cached - BS);
	test_expect_read(m, model, NF * FS, 0);
	/* Read back in, the block completed the folio again. */
	assert_int_equal(folio_outside_map_bytes(), b0);

	pattern(buf, BS, 6);
	atomic_store(&folio_map_fail_next, 1);
	assert_int_equal(folio_mapping_write_direct(m, buf, BS, FS + BS, 0),
			 (ssize_t)BS);
	memcpy(model + FS + BS, buf, BS);
	/* With no map to mark the block, all of the (clean) folio was
	 * forgotten: nothing stale is left to read. */
	assert_int_equal(test_mapping_stats(m).cached_bytes, cached - FS);
	test_expect_read(m, model, NF * FS, 0);
	test_expect_store(e, model, NF * FS, 0);
	free(buf);
	test_close(m, e);
	free(model);
}

/*
 * Threads: a writer overwrites random blocks of the first two folios and
 * syncs, an invalidator drops clean folios and reads everything back in
 * (each completed fill gives its map back, while the writer takes maps
 * again), a direct writer replaces blocks of the last folio. Each checks
 * what it alone owns; at the end the store and the cache hold the model.
 */
struct maps_ctx {
	struct folio_mapping *m;
	unsigned char *model;
	atomic_bool stop;
	uint64_t seed;
	unsigned iters;
	int bad;
};

static void *writer_main(void *p)
{
	struct maps_ctx *c = p;
	uint64_t seed = c->seed;
	unsigned char blk[BS];
	for (unsigned i = 0; i < c->iters; i++) {
		uint64_t pos = test_rand_below(&seed, 2 * FS / BS) * BS;
		pattern(blk, BS, (unsigned)test_rand(&seed));
		if (folio_mapping_write(c->m, blk, BS, pos) != (ssize_t)BS)
			c->bad++;
		memcpy(c->model + pos, blk, BS);
		if (!test_rand_below(&seed, 8) &&
		    folio_mapping_sync(c->m, NULL))
			c->bad++;
	}
	atomic_store(&c->stop, true);
	return NULL;
}

static void *refill_main(void *p)
{
	struct maps_ctx *c = p;
	unsigned char *buf = malloc(NF * FS);
	assert_non_null(buf);
	while (!atomic_load(&c->stop)) {
		/* Dirty folios stay (-EBUSY); the clean ones go. */
		int r = folio_mapping_invalidate(c->m, 0, 0, 0);
		if (r && r != -EBUSY)
			c->bad++;
		if (folio_mapping_read(c->m, buf, NF * FS, 0) !=
		    (ssize_t)(NF * FS))
			c->bad++;
	}
	free(buf);
	return NULL;
}

static void *direct_main(void *p)
{
	struct maps_ctx *c = p;
	uint64_t seed = c->seed ^ 0xd1ec7;
	unsigned char *buf = aligned_alloc(FOLIO_ENGINE_DIRECT_ALIGN, BS);
	assert_non_null(buf);
	while (!atomic_load(&c->stop)) {
		uint64_t pos = (NF - 1) * FS +
			       test_rand_below(&seed, FS / BS) * BS;
		pattern(buf, BS, (unsigned)test_rand(&seed));
		if (folio_mapping_write_direct(c->m, buf, BS, pos, 0) !=
		    (ssize_t)BS)
			c->bad++;
		memcpy(c->model + pos, buf, BS);
	}
	free(buf);
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	size_t b0 = folio_outside_map_bytes();
	struct folio_engine *e;
	struct maps_ctx c = {.seed = test_seed("state_maps threads"),
			     .iters = test_iters(3000, 300)};
	c.model = malloc(NF * FS);
	assert_non_null(c.model);
	c.m = big_mapping(&e, c.model);
	atomic_init(&c.stop, false);
	pthread_t w, r, d;
	assert_int_equal(pthread_create(&r, NULL, refill_main, &c), 0);
	assert_int_equal(pthread_create(&d, NULL, direct_main, &c), 0);
	assert_int_equal(pthread_create(&w, NULL, writer_main, &c), 0);
	assert_int_equal(pthread_join(w, NULL), 0);
	assert_int_equal(pthread_join(r, NULL), 0);
	assert_int_equal(pthread_join(d, NULL), 0);
	assert_int_equal(c.bad, 0);
	assert_int_equal(folio_mapping_sync(c.m, NULL), 0);
	test_expect_store(e, c.model, NF * FS, 0);
	test_expect_read(c.m, c.model, NF * FS, 0);
	test_close(c.m, e);
	assert_int_equal(folio_outside_map_bytes(), b0);
	free(c.model);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reads_compact_writes_own),
		cmocka_unit_test(test_write_begin_owns),
		cmocka_unit_test(test_direct_over_compacted),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
