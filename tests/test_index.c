/* SPDX-License-Identifier: MIT */
/*
 * White-box tests of lib/index/index.c.
 *
 * The core is a randomized model test: a sorted array of (first, order,
 * entry, tags) records is the reference, and every index answer (insert
 * errors, lookups, whole find/find_tagged sequences over random windows,
 * tags) must match it. Keys are drawn from narrow regions so that inserts
 * of mixed orders collide often, and the regions sit at key 0, around
 * 2^30, just below 2^53 (file positions near 2^62 with 512-byte folios)
 * and at the very top of the key space. index_verify() checks the
 * structural invariants (presence words, tag summaries, canonical height,
 * counts) along the way.
 *
 * Entries are fake pointers (the index never dereferences them) except in
 * the threaded test, whose readers check what they find against the entry.
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
#include <time.h>

#include <cmocka.h>

#include "index/index.h"
#include "test_util.h"

#define SPAN(order) (UINT64_C(1) << (order))

static void *fake(uint64_t n)
{
	return (void *)(uintptr_t)((n + 1) << 4);
}

/* Without index_tag_drop() no stale bit can exist: the strict check. */
static void check_verify(const struct index_tree *idx)
{
	int err = index_verify_pruned(idx);
	if (err)
		fail_msg("index_verify_pruned failed at index.c line %d", -err);
}

/* With drops: the invariants that always hold. */
static void check_verify_loose(const struct index_tree *idx)
{
	int err = index_verify(idx);
	if (err)
		fail_msg("index_verify failed at index.c line %d", -err);
}

/* ---- fixed cases ------------------------------------------------------ */

static void test_empty(void **state)
{
	struct index_tree idx;
	uint64_t key = 0;
	unsigned order = 99;

	index_init(&idx);
	assert_null(index_lookup(&idx, 0));
	assert_null(index_lookup(&idx, UINT64_MAX));
	assert_null(index_find(&idx, &key, UINT64_MAX, &order));
	assert_null(index_find_tagged(&idx, &key, UINT64_MAX,
				      INDEX_TAG_DIRTY, &order));
	assert_int_equal(key, 0);
	assert_int_equal(order, 99);
	assert_null(index_remove(&idx, 0, 0));
	assert_int_equal(index_tag_set(&idx, 0, 0, INDEX_TAG_DIRTY), -ENOENT);
	assert_int_equal(index_tag_clear(&idx, 0, 0, INDEX_TAG_DIRTY), -ENOENT);
	assert_false(index_tag_get(&idx, 0, INDEX_TAG_DIRTY));
	assert_false(index_any_tagged(&idx, INDEX_TAG_DIRTY));
	assert_false(index_any_tagged(&idx, INDEX_TAG_WRITEBACK));
	assert_int_equal(index_count(&idx), 0);
	assert_int_equal(index_node_count(&idx), 0);
	check_verify(&idx);
	index_destroy(&idx);
	index_destroy(&idx); /* idempotent on an empty index */
}

static void test_bad_input(void **state)
{
	struct index_tree idx;
	index_init(&idx);

	assert_int_equal(index_insert(&idx, 0, 0, NULL), -EINVAL);
	assert_int_equal(index_insert(&idx, 0, 0, (void *)(uintptr_t)0x1001),
			 -EINVAL);
	assert_int_equal(index_insert(&idx, 0, 0, (void *)(uintptr_t)0x1002),
			 -EINVAL);
	assert_int_equal(index_insert(&idx, 0, 0, (void *)(uintptr_t)0x1003),
			 -EINVAL);
	assert_int_equal(index_insert(&idx, 0, INDEX_MAX_ORDER + 1, fake(1)),
			 -EINVAL);
	assert_int_equal(index_insert(&idx, 1, 1, fake(1)), -EINVAL);
	assert_int_equal(index_insert(&idx, 4096 + 512, 10, fake(1)), -EINVAL);
	/* The exclusive end must fit in 64 bits. */
	assert_int_equal(index_insert(&idx, UINT64_MAX, 0, fake(1)), -EINVAL);
	assert_int_equal(index_insert(&idx, UINT64_MAX - SPAN(20) + 1, 20,
				      fake(1)), -EINVAL);
	assert_int_equal(index_count(&idx), 0);
	assert_int_equal(index_node_count(&idx), 0);

	assert_int_equal(index_insert(&idx, 64, 6, fake(1)), 0);
	assert_int_equal(index_tag_set(&idx, 64, 6, INDEX_TAG_COUNT), -EINVAL);
	assert_int_equal(index_tag_set(&idx, 65, 6, INDEX_TAG_DIRTY), -EINVAL);
	assert_int_equal(index_tag_set(&idx, 64, 21, INDEX_TAG_DIRTY), -EINVAL);
	assert_int_equal(index_tag_clear(&idx, 64, 6, INDEX_TAG_COUNT), -EINVAL);
	assert_false(index_tag_get(&idx, 64, INDEX_TAG_COUNT));
	assert_false(index_any_tagged(&idx, INDEX_TAG_COUNT));
	uint64_t key = 0;
	assert_null(index_find_tagged(&idx, &key, UINT64_MAX, INDEX_TAG_COUNT,
				      NULL));
	assert_null(index_remove(&idx, 64, 21));
	assert_null(index_remove(&idx, 65, 0));
	/* find with key > last finds nothing, even inside an entry. */
	key = 100;
	assert_null(index_find(&idx, &key, 99, NULL));
	check_verify(&idx);
	index_destroy(&idx);
}

static void test_edges(void **state)
{
	struct index_tree idx;
	uint64_t key;
	unsigned order;
	const uint64_t k53 = UINT64_C(1) << 53;

	index_init(&idx);
	assert_int_equal(index_insert(&idx, 0, 0, fake(0)), 0);
	assert_int_equal(index_node_count(&idx), 1);
	assert_ptr_equal(index_lookup(&idx, 0), fake(0));
	assert_null(index_lookup(&idx, 1));
	assert_int_equal(index_insert(&idx, 0, 0, fake(9)), -EEXIST);
	assert_int_equal(index_insert(&idx, 0, 5, fake(9)), -EEXIST);

	/* Order 20 near the top of a 2^53 key space and at the very top. */
	assert_int_equal(index_insert(&idx, k53 - SPAN(20), 20, fake(1)), 0);
	assert_int_equal(index_insert(&idx, UINT64_MAX - 2 * SPAN(20) + 1, 20,
				      fake(2)), 0);
	assert_int_equal(index_insert(&idx, UINT64_MAX - 1, 0, fake(3)), 0);
	assert_int_equal(index_insert(&idx, UINT64_MAX - 3, 1, fake(4)), 0);
	assert_int_equal(index_insert(&idx, k53 - 1, 0, fake(9)), -EEXIST);
	assert_int_equal(index_insert(&idx, k53 - SPAN(12), 12, fake(9)),
			 -EEXIST);
	assert_int_equal(index_insert(&idx, k53 - SPAN(21), 20, fake(5)), 0);
	assert_int_equal(index_insert(&idx, k53, 0, fake(6)), 0);
	check_verify(&idx);

	assert_ptr_equal(index_lookup(&idx, k53 - 1), fake(1));
	assert_ptr_equal(index_lookup(&idx, k53 - SPAN(20)), fake(1));
	assert_ptr_equal(index_lookup(&idx, k53 - SPAN(20) - 1), fake(5));
	assert_ptr_equal(index_lookup(&idx, k53 - SPAN(21)), fake(5));
	assert_null(index_lookup(&idx, k53 - SPAN(21) - 1));
	assert_ptr_equal(index_lookup(&idx, k53), fake(6));
	assert_null(index_lookup(&idx, k53 + 1));
	assert_ptr_equal(index_lookup(&idx, UINT64_MAX - 1), fake(3));
	assert_null(index_lookup(&idx, UINT64_MAX));
	assert_ptr_equal(index_lookup(&idx, UINT64_MAX - 2), fake(4));
	assert_null(index_lookup(&idx, UINT64_MAX - 4));
	assert_ptr_equal(index_lookup(&idx, UINT64_MAX - SPAN(20)), fake(2));
	assert_null(index_lookup(&idx, UINT64_MAX - SPAN(20) + 1));
	assert_ptr_equal(index_lookup(&idx, UINT64_MAX - 2 * SPAN(20) + 1),
			 fake(2));

	/* find from the middle of an entry reports the whole entry. */
	key = k53 - 12345;
	assert_ptr_equal(index_find(&idx, &key, k53 - 12345, &order), fake(1));
	assert_int_equal(key, k53 - SPAN(20));
	assert_int_equal(order, 20);
	key = UINT64_MAX - 2;
	assert_ptr_equal(index_find(&idx, &key, UINT64_MAX, &order), fake(4));
	assert_int_equal(key, UINT64_MAX - 3);
	assert_int_equal(order, 1);
	key += SPAN(order);
	assert_ptr_equal(index_find(&idx, &key, UINT64_MAX, &order), fake(3));
	assert_int_equal(key, UINT64_MAX - 1);
	assert_int_equal(order, 0);
	key += SPAN(order);
	assert_int_equal(key, UINT64_MAX);
	assert_null(index_find(&idx, &key, UINT64_MAX, &order));

	/* Tags at both ends of the key space. */
	assert_int_equal(index_tag_set(&idx, UINT64_MAX - 1, 0,
				       INDEX_TAG_WRITEBACK), 0);
	assert_int_equal(index_tag_set(&idx, 0, 0, INDEX_TAG_WRITEBACK), 0);
	assert_int_equal(index_tag_set(&idx, k53 - SPAN(20), 20,
				       INDEX_TAG_DIRTY), 0);
	assert_true(index_tag_get(&idx, k53 - 1, INDEX_TAG_DIRTY));
	assert_false(index_tag_get(&idx, k53 - 1, INDEX_TAG_WRITEBACK));
	assert_false(index_tag_get(&idx, k53, INDEX_TAG_DIRTY));
	key = 1;
	assert_ptr_equal(index_find_tagged(&idx, &key, UINT64_MAX,
					   INDEX_TAG_WRITEBACK, &order),
			 fake(3));
	assert_int_equal(key, UINT64_MAX - 1);
	key = 0;
	assert_ptr_equal(index_find_tagged(&idx, &key, UINT64_MAX,
					   INDEX_TAG_WRITEBACK, &order),
			 fake(0));
	key = k53 - 77;
	assert_ptr_equal(index_find_tagged(&idx, &key, k53 - 77,
					   INDEX_TAG_DIRTY, &order), fake(1));
	assert_int_equal(key, k53 - SPAN(20));
	check_verify(&idx);

	assert_int_equal(index_count(&idx), 7);
	assert_ptr_equal(index_remove(&idx, UINT64_MAX - 1, 0), fake(3));
	assert_ptr_equal(index_remove(&idx, UINT64_MAX - 3, 1), fake(4));
	assert_ptr_equal(index_remove(&idx, UINT64_MAX - 2 * SPAN(20) + 1, 20),
			 fake(2));
	check_verify(&idx);
	/* The top entries are gone: the root came down to cover 2^53. */
	assert_int_equal(idx.shift, 48);
	assert_false(index_tag_get(&idx, UINT64_MAX - 1, INDEX_TAG_WRITEBACK));
	assert_true(index_any_tagged(&idx, INDEX_TAG_WRITEBACK));
	assert_ptr_equal(index_remove(&idx, 0, 0), fake(0));
	assert_false(index_any_tagged(&idx, INDEX_TAG_WRITEBACK));
	assert_true(index_any_tagged(&idx, INDEX_TAG_DIRTY));
	assert_int_equal(index_tag_clear(&idx, k53 - SPAN(20), 20,
					 INDEX_TAG_DIRTY), 0);
	assert_false(index_any_tagged(&idx, INDEX_TAG_DIRTY));
	check_verify(&idx);
	index_destroy(&idx);
	assert_int_equal(index_node_count(&idx), 0);
}

/* Entries stored in the root itself, growth above them, and shrinking. */
/*
 * One entry pointer stored at several ranges of one node, next to each
 * other and inside each other's alignment: an entry's size and first slot
 * come from the node's sibling word, never from comparing pointers, so
 * each range keeps its own order through finds, tags, lookups and a
 * remove of its neighbour.
 */
static void test_same_entry_twice(void **state)
{
	(void)state;
	struct index_tree idx;
	index_init(&idx);
	void *e = fake(7);
	/* Slots [0,2) [2,4) [4,8) [8,9) [16,32) [32,64) of one leaf. */
	static const struct {
		uint64_t first;
		unsigned order;
	} r[] = {{0, 1}, {2, 1}, {4, 2}, {8, 0}, {16, 4}, {32, 5}};
	enum { NR = sizeof(r) / sizeof(r[0]) };
	for (unsigned k = 0; k < NR; k++)
		assert_int_equal(index_insert(&idx, r[k].first, r[k].order, e),
				 0);
	check_verify(&idx);
	assert_int_equal(index_tag_set(&idx, 2, 1, INDEX_TAG_DIRTY), 0);
	for (int pass = 0; pass < 2; pass++) {
		uint64_t key = 0;
		unsigned order, k = pass;
		while (index_find(&idx, &key, 63, &order)) {
			assert_true(k < NR);
			assert_int_equal(key, r[k].first);
			assert_int_equal(order, r[k].order);
			key += UINT64_C(1) << order;
			k++;
		}
		assert_int_equal(k, NR);
		for (uint64_t key2 = 0; key2 < 64; key2++) {
			bool covered = key2 < 9 || key2 >= 16;
			bool gone = pass && key2 < 2;
			assert_ptr_equal(index_lookup(&idx, key2),
					 covered && !gone ? e : NULL);
			/* A find from inside a range reports the range. */
			uint64_t at = key2;
			if (covered && !gone) {
				assert_ptr_equal(index_find(&idx, &at, 63,
							    &order), e);
				assert_true(at <= key2 &&
					    key2 < at + (UINT64_C(1) << order));
			}
		}
		key = 0;
		assert_ptr_equal(index_find_tagged(&idx, &key, 63,
						   INDEX_TAG_DIRTY, &order), e);
		assert_int_equal(key, 2);
		assert_int_equal(order, 1);
		/* Second pass: without the first range. */
		if (!pass) {
			assert_ptr_equal(index_remove(&idx, 0, 1), e);
			check_verify(&idx);
			assert_null(index_remove(&idx, 2, 2)); /* not a range */
		}
	}
	for (unsigned k = 1; k < NR; k++)
		assert_ptr_equal(index_remove(&idx, r[k].first, r[k].order), e);
	assert_int_equal(index_count(&idx), 0);
	index_destroy(&idx);
}

static void test_root_level_growth_shrink(void **state)
{
	struct index_tree idx;
	uint64_t key;
	unsigned order;

	index_init(&idx);
	assert_int_equal(index_insert(&idx, 5, 0, fake(0)), 0);
	assert_int_equal(idx.shift, 0);
	assert_int_equal(index_node_count(&idx), 1);
	/* Ranges above the root that contain it conflict before growing. */
	assert_int_equal(index_insert(&idx, 0, 6, fake(9)), -EEXIST);
	assert_int_equal(index_insert(&idx, 0, 13, fake(9)), -EEXIST);
	assert_int_equal(index_insert(&idx, 0, 20, fake(9)), -EEXIST);
	assert_int_equal(idx.shift, 0);
	assert_int_equal(index_node_count(&idx), 1);
	check_verify(&idx);
	/* Order 6 needs level 6: the tree grows and the entry lands in the
	 * new root's slot 1. */
	assert_int_equal(index_insert(&idx, 64, 6, fake(1)), 0);
	assert_int_equal(idx.shift, 6);
	assert_int_equal(index_node_count(&idx), 2);
	/* 32 slots of the root for one order-11 entry. */
	assert_int_equal(index_insert(&idx, 2048, 11, fake(2)), 0);
	assert_int_equal(index_node_count(&idx), 2);
	assert_int_equal(index_insert(&idx, 0, 6, fake(9)), -EEXIST);
	assert_int_equal(index_insert(&idx, 0, 11, fake(9)), -EEXIST);
	assert_int_equal(index_insert(&idx, 3000, 0, fake(9)), -EEXIST);
	assert_int_equal(index_insert(&idx, 2048 + 1024, 10, fake(9)), -EEXIST);
	assert_int_equal(index_insert(&idx, 1024, 10, fake(3)), 0);
	check_verify(&idx);
	assert_ptr_equal(index_lookup(&idx, 4095), fake(2));
	assert_ptr_equal(index_lookup(&idx, 1024 + 700), fake(3));
	assert_ptr_equal(index_lookup(&idx, 127), fake(1));
	assert_null(index_lookup(&idx, 4096));
	assert_null(index_lookup(&idx, 4));

	/* Tags on multi-slot root entries. */
	assert_int_equal(index_tag_set(&idx, 2048, 11, INDEX_TAG_DIRTY), 0);
	assert_true(index_tag_get(&idx, 2048 + 999, INDEX_TAG_DIRTY));
	key = 3000;
	assert_ptr_equal(index_find_tagged(&idx, &key, 3000, INDEX_TAG_DIRTY,
					   &order), fake(2));
	assert_int_equal(key, 2048);
	assert_int_equal(order, 11);
	key = 0;
	assert_ptr_equal(index_find_tagged(&idx, &key, UINT64_MAX,
					   INDEX_TAG_DIRTY, &order), fake(2));

	/* A wrong order or a key inside is not "the entry at that range". */
	assert_null(index_remove(&idx, 2048, 10));
	assert_null(index_remove(&idx, 2048, 12));
	assert_null(index_remove(&idx, 2048 + 1024, 10));
	assert_null(index_remove(&idx, 64, 0));
	assert_null(index_remove(&idx, 4, 0));
	assert_null(index_remove(&idx, 0, 6));
	assert_null(index_remove(&idx, 1u << 20, 0));
	assert_null(index_remove(&idx, UINT64_MAX - 1, 0));
	assert_int_equal(index_tag_set(&idx, 2048, 10, INDEX_TAG_DIRTY),
			 -ENOENT);
	assert_int_equal(index_count(&idx), 4);
	check_verify(&idx);

	/* A far key lifts the root several levels... */
	assert_int_equal(index_insert(&idx, UINT64_C(1) << 40, 3, fake(4)), 0);
	assert_int_equal(idx.shift, 36);
	check_verify(&idx);
	assert_ptr_equal(index_lookup(&idx, (UINT64_C(1) << 40) + 7), fake(4));
	assert_ptr_equal(index_lookup(&idx, 5), fake(0));
	/* ...and removing it brings it back down. */
	assert_ptr_equal(index_remove(&idx, UINT64_C(1) << 40, 3), fake(4));
	assert_int_equal(idx.shift, 6);
	assert_int_equal(index_node_count(&idx), 2);
	check_verify(&idx);

	assert_ptr_equal(index_remove(&idx, 2048, 11), fake(2));
	assert_false(index_any_tagged(&idx, INDEX_TAG_DIRTY));
	assert_ptr_equal(index_remove(&idx, 64, 6), fake(1));
	assert_ptr_equal(index_remove(&idx, 1024, 10), fake(3));
	/* Only the leaf under slot 0 is left: it becomes the root. */
	assert_int_equal(idx.shift, 0);
	assert_int_equal(index_node_count(&idx), 1);
	check_verify(&idx);
	assert_ptr_equal(index_remove(&idx, 5, 0), fake(0));
	assert_int_equal(index_node_count(&idx), 0);
	assert_null(idx.root);
	check_verify(&idx);

	/* A first insert far away builds the whole chain at once. */
	assert_int_equal(index_insert(&idx, UINT64_C(1) << 52, 0, fake(5)), 0);
	assert_int_equal(idx.shift, 48);
	assert_int_equal(index_node_count(&idx), 9);
	assert_int_equal(index_insert(&idx, 0, 20, fake(6)), 0);
	check_verify(&idx);
	assert_ptr_equal(index_lookup(&idx, SPAN(20) - 1), fake(6));
	index_destroy(&idx);
}

/* A node allocator whose n-th allocation from when *countdown is set to
 * n fails (and the countdown stops); 0 never fails. */
static void *failing_alloc(void *arg)
{
	unsigned *countdown = arg;
	if (*countdown && --*countdown == 0)
		return NULL;
	void *p;
	return posix_memalign(&p, INDEX_NODE_ALIGN, INDEX_NODE_BYTES) ? NULL : p;
}

static void failing_free(void *node, void *arg)
{
	(void)arg;
	free(node);
}

/* Every allocation of an insert can fail; nothing may change when it does. */
static void test_enomem(void **state)
{
	static const struct {
		uint64_t first;
		unsigned order;
	} cases[] = {
		{ 0, 0 },                        /* empty tree: whole chain */
		{ UINT64_C(1) << 50, 0 },        /* growth + new path */
		{ (UINT64_C(1) << 50) + 64, 0 }, /* a new leaf only */
		{ UINT64_C(1) << 30, 20 },       /* new branch to level 18 */
		{ UINT64_MAX - 1, 0 },           /* growth to level 60 */
		{ 4096, 12 },                    /* level 12 under the root */
	};
	unsigned countdown = 0;
	const struct index_allocator failing = {
		.alloc = failing_alloc,
		.free = failing_free,
		.arg = &countdown,
	};
	struct index_tree idx;

	index_init_alloc(&idx, &failing);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		size_t nodes = index_node_count(&idx);
		unsigned shift = idx.shift;
		unsigned fail;
		int err = -ENOMEM;

		for (fail = 1; err == -ENOMEM; fail++) {
			countdown = fail;
			err = index_insert(&idx, cases[c].first, cases[c].order,
					   fake(c));
			if (err == -ENOMEM) {
				assert_int_equal(index_node_count(&idx), nodes);
				assert_int_equal(idx.shift, shift);
				assert_int_equal(index_count(&idx), c);
				assert_null(index_lookup(&idx, cases[c].first));
				check_verify(&idx);
			}
		}
		countdown = 0;
		assert_int_equal(err, 0);
		/* fail - 2 allocations succeeded before the one that failed
		 * last time; the successful run used exactly that many. */
		assert_int_equal(index_node_count(&idx) - nodes, fail - 2);
		assert_ptr_equal(index_lookup(&idx, cases[c].first), fake(c));
		check_verify(&idx);
	}
	index_destroy(&idx);
}

static struct index_place place_of(const struct index_tree *idx,
				   uint64_t first, unsigned order);

/* Lock-free drops leave stale bits above, which only cost finds time
 * until a prune; lock-free sets go through `up` or fall back. */
static void test_drop_prune(void **state)
{
	struct index_tree idx;
	uint64_t k1 = 5, k2 = (UINT64_C(1) << 18) + 7; /* separate subtrees */
	index_init(&idx);
	assert_int_equal(index_insert(&idx, k1, 0, fake(1)), 0);
	assert_int_equal(index_insert(&idx, k2, 0, fake(2)), 0);
	struct index_place n1 = place_of(&idx, k1, 0);
	struct index_place n2 = place_of(&idx, k2, 0);
	assert_ptr_not_equal(n1.node, n2.node);

	/* Nothing above n2 carries DIRTY yet: the fast set must say so. */
	assert_false(index_tag_set_fast(n2, INDEX_TAG_DIRTY));
	assert_int_equal(index_tag_set(&idx, k2, 0, INDEX_TAG_DIRTY), 0);
	check_verify(&idx);
	/* Now it is a single RMW. */
	index_tag_drop(n2, INDEX_TAG_DIRTY);
	assert_true(index_tag_set_fast(n2, INDEX_TAG_DIRTY));
	assert_true(index_tag_get(&idx, k2, INDEX_TAG_DIRTY));
	check_verify(&idx);

	index_tag_drop(n2, INDEX_TAG_DIRTY);
	index_tag_drop(n1, INDEX_TAG_DIRTY); /* was not set */
	assert_false(index_tag_get(&idx, k2, INDEX_TAG_DIRTY));
	uint64_t key = 0;
	assert_null(index_find_tagged(&idx, &key, UINT64_MAX, INDEX_TAG_DIRTY,
				      NULL));
	/* Stale: the root still says DIRTY, the strict check sees it. */
	assert_true(index_any_tagged(&idx, INDEX_TAG_DIRTY));
	check_verify_loose(&idx);
	assert_int_not_equal(index_verify_pruned(&idx), 0);

	/* A prune of another range or tag leaves them; of this one, not. */
	index_tag_prune(&idx, 0, (UINT64_C(1) << 18) - 1, 1u << INDEX_TAG_DIRTY);
	index_tag_prune(&idx, 0, UINT64_MAX, 1u << INDEX_TAG_WRITEBACK);
	assert_true(index_any_tagged(&idx, INDEX_TAG_DIRTY));
	index_tag_prune(&idx, k2, k2, 1u << INDEX_TAG_DIRTY);
	check_verify(&idx);
	assert_false(index_any_tagged(&idx, INDEX_TAG_DIRTY));
	/* The prune took `up` away: the next fast set falls back. */
	assert_false(index_tag_set_fast(n2, INDEX_TAG_DIRTY));
	assert_int_equal(index_tag_set(&idx, k2, 0, INDEX_TAG_DIRTY), 0);
	check_verify(&idx);

	/* Removing the other entry prunes on its way up, keeping n2's. */
	assert_ptr_equal(index_remove(&idx, k1, 0), fake(1));
	check_verify(&idx);
	assert_true(index_tag_get(&idx, k2, INDEX_TAG_DIRTY));
	assert_ptr_equal(index_remove(&idx, k2, 0), fake(2));
	check_verify(&idx);
	assert_null(idx.root);
	index_destroy(&idx);
}

/* ---- randomized model test -------------------------------------------- */

struct rec {
	uint64_t first;
	unsigned order;
	unsigned tags;
	void *entry;
};

struct model {
	struct rec *r;
	size_t n, cap;
};

static uint64_t rec_last(const struct rec *r)
{
	return r->first + (SPAN(r->order) - 1);
}

/* Index of the last record with first <= key, or -1. */
static long model_floor(const struct model *m, uint64_t key)
{
	long lo = 0, hi = (long)m->n - 1, ans = -1;
	while (lo <= hi) {
		long mid = lo + (hi - lo) / 2;
		if (m->r[mid].first <= key) {
			ans = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return ans;
}

static long model_covering(const struct model *m, uint64_t key)
{
	long i = model_floor(m, key);
	return i >= 0 && rec_last(&m->r[i]) >= key ? i : -1;
}

static bool model_overlaps(const struct model *m, uint64_t a, uint64_t b)
{
	long i = model_floor(m, b);
	return i >= 0 && rec_last(&m->r[i]) >= a;
}

static long model_exact(const struct model *m, uint64_t first,
			unsigned order)
{
	long i = model_floor(m, first);
	return i >= 0 && m->r[i].first == first && m->r[i].order == order ? i
									  : -1;
}

static void model_insert(struct model *m, const struct rec *r)
{
	if (m->n == m->cap) {
		m->cap = m->cap ? 2 * m->cap : 256;
		m->r = realloc(m->r, m->cap * sizeof(*m->r));
		assert_non_null(m->r);
	}
	size_t at = (size_t)(model_floor(m, r->first) + 1);
	memmove(&m->r[at + 1], &m->r[at], (m->n - at) * sizeof(*m->r));
	m->r[at] = *r;
	m->n++;
}

static void model_delete(struct model *m, size_t i)
{
	memmove(&m->r[i], &m->r[i + 1], (m->n - i - 1) * sizeof(*m->r));
	m->n--;
}

static const uint64_t region_base[] = {
	0,
	UINT64_C(1) << 30,
	(UINT64_C(1) << 53) - (UINT64_C(1) << 16),
	UINT64_MAX - (UINT64_C(1) << 16) + 1,
};
#define NREGIONS (sizeof(region_base) / sizeof(region_base[0]))
#define REGION_KEYS (UINT64_C(1) << 16)

static uint64_t rand_key(uint64_t *rng)
{
	uint64_t base = region_base[test_rand_below(rng, NREGIONS)];
	/* A few keys just outside the regions too. */
	if (test_rand_below(rng, 50) == 0)
		return base - 1 - test_rand_below(rng, 100);
	return base + test_rand_below(rng, REGION_KEYS);
}

static unsigned rand_order(uint64_t *rng)
{
	uint64_t r = test_rand_below(rng, 100);
	if (r < 55)
		return (unsigned)test_rand_below(rng, 4);
	if (r < 90)
		return 4 + (unsigned)test_rand_below(rng, 5);
	return 9 + (unsigned)test_rand_below(rng, 4);
}

static void check_window(const struct index_tree *idx, const struct model *m,
			 uint64_t start, uint64_t last, int tag)
{
	uint64_t key = start;
	long i = model_floor(m, start);
	if (i < 0 || rec_last(&m->r[i]) < start)
		i++;
	for (;;) {
		/* Next model record in the window carrying the tag. */
		while (i < (long)m->n && m->r[i].first <= last && tag >= 0 &&
		       !(m->r[i].tags & (1u << tag)))
			i++;
		bool more = i < (long)m->n && m->r[i].first <= last &&
			    key <= last;
		unsigned order = 99;
		uint64_t k = key;
		void *e = tag < 0 ? index_find(idx, &k, last, &order)
				  : index_find_tagged(idx, &k, last,
						      (unsigned)tag, &order);
		if (!more) {
			if (e)
				fail_msg("window [%llu, %llu] tag %d: extra "
					 "entry at %llu",
					 (unsigned long long)start,
					 (unsigned long long)last, tag,
					 (unsigned long long)k);
			assert_int_equal(k, key);
			return;
		}
		assert_ptr_equal(e, m->r[i].entry);
		assert_int_equal(k, m->r[i].first);
		assert_int_equal(order, m->r[i].order);
		key = k + SPAN(order);
		i++;
		if (key > last || key == 0)
			return;
	}
}

/* Where the entry [first, first + 2^order) sits, from a batch find of
 * every entry. */
static struct index_place place_of(const struct index_tree *idx,
				   uint64_t first, unsigned order)
{
	struct index_hit h;
	uint64_t key = first;
	assert_int_equal(index_find_tagged_batch(idx, &key, first, -1, &h, 1),
			 1);
	assert_int_equal(h.first, first);
	assert_int_equal(h.order, order);
	/* The entry's bits in its node: what its tag changes touch. */
	assert_int_equal(h.at.mask, index_entry_mask(first, order));
	return h.at;
}

/* Batch finds of up to `max` must return what single finds return. */
static void check_batch(const struct index_tree *idx, uint64_t start,
			uint64_t last, int tag, unsigned max)
{
	struct index_hit h[8];
	uint64_t bkey = start, skey = start;
	for (;;) {
		unsigned n = index_find_tagged_batch(idx, &bkey, last, tag, h,
						     max);
		assert_true(n <= max);
		for (unsigned i = 0; i < n; i++) {
			unsigned order;
			void *e = tag < 0 ? index_find(idx, &skey, last, &order)
					  : index_find_tagged(idx, &skey, last,
							      (unsigned)tag,
							      &order);
			assert_ptr_equal(h[i].entry, e);
			assert_int_equal(h[i].first, skey);
			assert_int_equal(h[i].order, order);
			skey += SPAN(order);
		}
		if (!n) {
			unsigned order;
			void *e = skey > last || (skey == 0 && start) ? NULL
				  : tag < 0 ? index_find(idx, &skey, last, &order)
				  : index_find_tagged(idx, &skey, last,
						      (unsigned)tag, &order);
			assert_null(e);
			return;
		}
		if (bkey == 0 || bkey > last)
			return;
		assert_int_equal(bkey, skey);
	}
}

static void test_model(void **state)
{
	uint64_t rng = test_seed("index_model");
	unsigned ops = test_iters(200000, 15000);
	struct model m = { 0 };
	struct index_tree idx;
	uint64_t serial = 0;
	unsigned counts[8] = { 0 };

	index_init(&idx);
	for (unsigned op = 0; op < ops; op++) {
		uint64_t r = test_rand_below(&rng, 100);
		if (r < 35) {
			/* Insert, often overlapping. */
			unsigned order = rand_order(&rng);
			uint64_t first = rand_key(&rng) & ~(SPAN(order) - 1);
			struct rec rc = { first, order, 0, fake(serial++) };
			int want;
			if (first > UINT64_MAX - SPAN(order))
				want = -EINVAL;
			else if (model_overlaps(&m, first, rec_last(&rc)))
				want = -EEXIST;
			else
				want = 0;
			int got = index_insert(&idx, first, order, rc.entry);
			if (got != want)
				fail_msg("insert %llu order %u: got %d want %d",
					 (unsigned long long)first, order, got,
					 want);
			if (!got)
				model_insert(&m, &rc);
			counts[want == 0 ? 0 : want == -EEXIST ? 1 : 2]++;
		} else if (r < 50) {
			uint64_t first;
			unsigned order;
			if (m.n && test_rand_below(&rng, 10) < 7) {
				size_t i = test_rand_below(&rng, m.n);
				first = m.r[i].first;
				order = m.r[i].order;
				/* Sometimes the right start, wrong order. */
				if (test_rand_below(&rng, 5) == 0 && order)
					order--;
			} else {
				order = rand_order(&rng);
				first = rand_key(&rng) & ~(SPAN(order) - 1);
			}
			long i = model_exact(&m, first, order);
			void *got = index_remove(&idx, first, order);
			if (i < 0) {
				assert_null(got);
			} else {
				assert_ptr_equal(got, m.r[i].entry);
				model_delete(&m, (size_t)i);
				counts[3]++;
			}
		} else if (r < 65) {
			for (unsigned k = 0; k < 20; k++) {
				uint64_t key = rand_key(&rng);
				long i = model_covering(&m, key);
				void *got = index_lookup(&idx, key);
				assert_ptr_equal(got, i < 0 ? NULL : m.r[i].entry);
				for (unsigned t = 0; t < INDEX_TAG_COUNT; t++) {
					bool want = i >= 0 &&
						    (m.r[i].tags & (1u << t));
					assert_int_equal(
						index_tag_get(&idx, key, t),
						want);
				}
			}
		} else if (r < 73) {
			uint64_t start = rand_key(&rng);
			uint64_t last;
			switch (test_rand_below(&rng, 4)) {
			case 0:
				last = start;
				break;
			case 1:
				last = start + test_rand_below(&rng, 5000);
				break;
			case 2:
				last = start + test_rand_below(&rng, 1u << 17);
				break;
			default:
				last = UINT64_MAX;
				break;
			}
			if (last < start)
				last = UINT64_MAX;
			int tag = (int)test_rand_below(&rng,
						       INDEX_TAG_COUNT + 1) - 1;
			check_window(&idx, &m, start, last, tag);
			check_batch(&idx, start, last, tag,
				    1 + (unsigned)test_rand_below(&rng, 8));
			counts[4]++;
		} else if (r < 88) {
			if (!m.n)
				continue;
			size_t i = test_rand_below(&rng, m.n);
			unsigned t = (unsigned)test_rand_below(&rng,
							       INDEX_TAG_COUNT);
			struct rec *rc = &m.r[i];
			/* Half through the node, as writeback does. */
			if (test_rand_below(&rng, 2) ||
			    !index_tag_set_fast(place_of(&idx, rc->first,
							 rc->order),
						t))
				assert_int_equal(index_tag_set(&idx, rc->first,
							       rc->order, t),
						 0);
			rc->tags |= 1u << t;
			counts[5]++;
		} else if (r < 97) {
			if (!m.n)
				continue;
			size_t i = test_rand_below(&rng, m.n);
			unsigned t = (unsigned)test_rand_below(&rng,
							       INDEX_TAG_COUNT);
			struct rec *rc = &m.r[i];
			if (test_rand_below(&rng, 2)) {
				assert_int_equal(index_tag_clear(&idx, rc->first,
								 rc->order, t),
						 0);
			} else {
				index_tag_drop(place_of(&idx, rc->first,
							rc->order),
					       t);
				counts[7]++;
			}
			rc->tags &= ~(1u << t);
			counts[6]++;
		} else {
			/* Tag calls on ranges that are not an entry. */
			unsigned order = rand_order(&rng);
			uint64_t first = rand_key(&rng) & ~(SPAN(order) - 1);
			if (first > UINT64_MAX - SPAN(order) ||
			    model_exact(&m, first, order) >= 0)
				continue;
			assert_int_equal(index_tag_set(&idx, first, order, 0),
					 -ENOENT);
			assert_int_equal(index_tag_clear(&idx, first, order, 1),
					 -ENOENT);
		}
		if (op % 97 == 0) {
			/* Prune part of the key space: what stays tagged
			 * must still be found. */
			uint64_t a = rand_key(&rng);
			uint64_t z = a + test_rand_below(&rng, 1u << 14);
			index_tag_prune(&idx, a, z < a ? UINT64_MAX : z,
					(unsigned)test_rand_below(&rng, 8));
			check_verify_loose(&idx);
		}
		if (op % 512 == 0 || op == ops - 1) {
			check_verify_loose(&idx);
			bool pruned = test_rand_below(&rng, 2);
			if (pruned) {
				index_tag_prune(&idx, 0, UINT64_MAX,
						(1u << INDEX_TAG_COUNT) - 1);
				check_verify(&idx);
			}
			assert_int_equal(index_count(&idx), m.n);
			for (unsigned t = 0; t < INDEX_TAG_COUNT; t++) {
				bool any = false;
				for (size_t i = 0; i < m.n; i++)
					any |= (m.r[i].tags >> t) & 1;
				/* Stale bits may say yes until pruned. */
				if (pruned || any)
					assert_int_equal(
						index_any_tagged(&idx, t), any);
				check_window(&idx, &m, 0, UINT64_MAX, (int)t);
			}
			check_window(&idx, &m, 0, UINT64_MAX, -1);
		}
	}
	printf("# model: %u inserted, %u EEXIST, %u EINVAL, %u removed, "
	       "%u windows, %u tag sets, %u tag clears (%u drops); %zu "
	       "entries, %zu nodes at the end\n",
	       counts[0], counts[1], counts[2], counts[3], counts[4],
	       counts[5], counts[6], counts[7], m.n, index_node_count(&idx));
	assert_true(counts[0] > 100 && counts[1] > 100 && counts[7] > 100);

	/* Drain in random order; the tree must vanish. */
	while (m.n) {
		size_t i = test_rand_below(&rng, m.n);
		assert_ptr_equal(index_remove(&idx, m.r[i].first, m.r[i].order),
				 m.r[i].entry);
		model_delete(&m, i);
		if (m.n % 256 == 0)
			check_verify_loose(&idx);
	}
	assert_int_equal(index_node_count(&idx), 0);
	assert_null(idx.root);
	free(m.r);
	index_destroy(&idx);
}

/* ---- threads ---------------------------------------------------------- */

/*
 * The mapping's locking: readers and taggers under the read lock, a
 * writer that inserts, removes and clears tags under the write lock.
 * Workers count failures instead of asserting (cmocka is not
 * thread-safe); the main thread checks the counts.
 */
struct tentry {
	uint64_t first;
	unsigned order;
	bool present; /* changed under the write lock */
};

#define T_ENTRIES 2048u
#define T_READERS 3
#define T_TAGGERS 2
#define T_LOCKLESS 2

struct tshared {
	struct index_tree idx;
	pthread_rwlock_t lock;
	struct tentry ent[T_ENTRIES];
	atomic_uint errors;
	atomic_bool stop;
	unsigned iters;
	uint64_t seed;
};

/* An empty index and its lock; returns the test's random state. */
static uint64_t tshared_init(struct tshared *s, const char *name,
			     unsigned iters)
{
	assert_non_null(s);
	s->seed = test_seed(name);
	s->iters = iters;
	index_init(&s->idx);
	/* glibc's default rwlock prefers readers; with readers looping the
	 * writer would never get in. */
	pthread_rwlockattr_t attr;
	pthread_rwlockattr_init(&attr);
	pthread_rwlockattr_setkind_np(&attr,
		PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	assert_int_equal(pthread_rwlock_init(&s->lock, &attr), 0);
	pthread_rwlockattr_destroy(&attr);
	return s->seed;
}

static void terr(struct tshared *s, const char *what)
{
	if (atomic_fetch_add(&s->errors, 1) < 5)
		fprintf(stderr, "thread check failed: %s\n", what);
}

static bool covers(const struct tentry *e, uint64_t key)
{
	return key >= e->first && key - e->first < SPAN(e->order);
}

static void *reader(void *arg)
{
	struct tshared *s = arg;
	uint64_t rng = s->seed ^ (uint64_t)(uintptr_t)&rng;
	const uint64_t keys = T_ENTRIES * 64;

	while (!atomic_load(&s->stop)) {
		pthread_rwlock_rdlock(&s->lock);
		for (unsigned k = 0; k < 64; k++) {
			uint64_t key = test_rand_below(&rng, keys);
			struct tentry *e = index_lookup(&s->idx, key);
			if (e && !covers(e, key))
				terr(s, "lookup returned a wrong entry");
		}
		unsigned tag = (unsigned)test_rand_below(&rng, INDEX_TAG_COUNT);
		uint64_t key = test_rand_below(&rng, keys);
		uint64_t prev_end = 0;
		unsigned order;
		for (unsigned k = 0; k < 200; k++) {
			struct tentry *e = index_find_tagged(&s->idx, &key,
							     keys - 1, tag,
							     &order);
			if (!e)
				break;
			if (e->first != key || e->order != order ||
			    key < prev_end)
				terr(s, "find_tagged out of order");
			/* Tags are only cleared under the write lock. */
			if (!index_tag_get(&s->idx, key, tag))
				terr(s, "found tagged entry lost its tag");
			key += SPAN(order);
			prev_end = key;
		}
		pthread_rwlock_unlock(&s->lock);
	}
	return NULL;
}

/* Lookups with no lock at all, against the same writer: every answer is
 * NULL or an entry that covers the key (the lookup's contract; the
 * entries here are never freed, nodes are, after grace periods). */
static void *lockless_reader(void *arg)
{
	struct tshared *s = arg;
	uint64_t rng = s->seed ^ (uint64_t)(uintptr_t)&rng;
	const uint64_t keys = T_ENTRIES * 64;

	while (!atomic_load(&s->stop)) {
		unsigned ep = epoch_read_enter();
		for (unsigned k = 0; k < 64; k++) {
			uint64_t key = test_rand_below(&rng, keys);
			struct tentry *e = index_lookup(&s->idx, key);
			if (e && (e < s->ent || e >= s->ent + T_ENTRIES))
				terr(s, "lock-free lookup: not an entry");
		}
		epoch_read_exit(ep);
	}
	return NULL;
}

static void *tagger(void *arg)
{
	struct tshared *s = arg;
	uint64_t rng = s->seed ^ (uint64_t)(uintptr_t)&rng;

	for (unsigned it = 0; it < s->iters; it++) {
		struct tentry *e = &s->ent[test_rand_below(&rng, T_ENTRIES)];
		unsigned tag = (unsigned)test_rand_below(&rng, INDEX_TAG_COUNT);
		pthread_rwlock_rdlock(&s->lock);
		int err = index_tag_set(&s->idx, e->first, e->order, tag);
		if (err != (e->present ? 0 : -ENOENT))
			terr(s, "tag_set result");
		if (!err) {
			/* Our own tag is visible to us at once. */
			uint64_t key = e->first + SPAN(e->order) - 1;
			unsigned order;
			if (!index_tag_get(&s->idx, key, tag))
				terr(s, "tag_get after tag_set");
			if (index_find_tagged(&s->idx, &key, key, tag,
					      &order) != e ||
			    key != e->first)
				terr(s, "find_tagged after tag_set");
			if (!index_any_tagged(&s->idx, tag))
				terr(s, "any_tagged after tag_set");
		}
		pthread_rwlock_unlock(&s->lock);
	}
	return NULL;
}

static void *writer(void *arg)
{
	struct tshared *s = arg;
	uint64_t rng = s->seed * 3 + 1;

	for (unsigned it = 0; it < s->iters; it++) {
		struct tentry *e = &s->ent[test_rand_below(&rng, T_ENTRIES)];
		pthread_rwlock_wrlock(&s->lock);
		switch (test_rand_below(&rng, 3)) {
		case 0:
			if (e->present) {
				if (index_remove(&s->idx, e->first, e->order) != e)
					terr(s, "remove");
			} else if (index_insert(&s->idx, e->first, e->order,
						e)) {
				terr(s, "insert");
			}
			e->present = !e->present;
			break;
		default: {
			unsigned tag = (unsigned)test_rand_below(
				&rng, INDEX_TAG_COUNT);
			int err = index_tag_clear(&s->idx, e->first, e->order,
						  tag);
			if (err != (e->present ? 0 : -ENOENT))
				terr(s, "tag_clear");
			break;
		}
		}
		pthread_rwlock_unlock(&s->lock);
	}
	return NULL;
}

/*
 * Lock-free tag changes beside the exclusive side: each "owner" thread
 * sets and drops a tag on its own entries, which nobody removes, through
 * their nodes; the writer inserts and removes the other entries of the
 * same nodes and prunes, which is what clears bits above them. A set that
 * returned must be found from the root, whatever the writer does.
 */
#define T_OWNERS 1
/* Few leaves, so that the writer's prunes often meet an owner's set. */
#define LF_ENTRIES 16u

struct lf_arg {
	struct tshared *s;
	unsigned id;
	struct index_place *at; /* of owned entry 4k at [k] */
	/* [k]: odd while its tag is set and not dropped; every set and
	 * drop moves it on, so a writer that reads the same odd value
	 * before and after a look knows the tag stayed set in between. */
	atomic_uint *seq;
};

static bool lf_owned(unsigned i)
{
	return i % 4 == 0; /* entry i belongs to owner (i / 4) % T_OWNERS */
}

static void *lf_owner(void *arg)
{
	struct lf_arg *a = arg;
	struct tshared *s = a->s;
	uint64_t rng = s->seed ^ (a->id + 1) * 0x9e3779b97f4a7c15u;
	const unsigned tag = INDEX_TAG_UNSTABLE;

	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		unsigned k = (unsigned)test_rand_below(&rng, LF_ENTRIES / 4);
		if (k % T_OWNERS != a->id)
			continue;
		struct tentry *e = &s->ent[k * 4];
		/* No lock: the entry stays, so its node does. */
		struct index_place at = a->at[k];
		if (!index_tag_set_fast(at, tag)) {
			pthread_rwlock_rdlock(&s->lock);
			index_tag_set(&s->idx, e->first, e->order, tag);
			pthread_rwlock_unlock(&s->lock);
		}
		/* Set and complete: the writer checks it is found. */
		if (!(atomic_load(&a->seq[k]) & 1))
			atomic_fetch_add(&a->seq[k], 1);
		/* Mostly dropped again, so leaves go stale and the
		 * writer's prunes race with the next set. */
		if (test_rand_below(&rng, 8)) {
			atomic_fetch_add(&a->seq[k], 1);
			index_tag_drop(at, tag);
		}
	}
	return NULL;
}

static void *lf_writer(void *arg)
{
	struct lf_arg *a = arg;
	struct tshared *s = a->s;
	uint64_t rng = s->seed * 5 + 3;

	while (!atomic_load(&s->stop)) {
		unsigned i = (unsigned)test_rand_below(&rng, LF_ENTRIES + 2);
		struct tentry *e = &s->ent[i];
		pthread_rwlock_wrlock(&s->lock);
		if (i >= LF_ENTRIES) {
			/* A leaf of its own, or a key far up that grows the
			 * root and lowers it again: nodes are unlinked (in a
			 * lockless index, retired) beside the owners'. */
			if (e->present ? index_remove(&s->idx, e->first,
						      e->order) != e
				       : index_insert(&s->idx, e->first,
						      e->order, e) != 0)
				terr(s, "far insert or remove");
			e->present = !e->present;
		} else if (test_rand_below(&rng, 2)) {
			/* The leaf of entry i, where owners' bits come and
			 * go: every owned entry there whose set completed
			 * (and stays) must still be found from the root.
			 * No index_verify() here: an owner's set that saw
			 * `up` clear has its bit below a clear parent bit
			 * until it gets the read lock. */
			uint64_t lo = e->first & ~UINT64_C(63);
			index_tag_prune(&s->idx, lo, lo + 63,
					1u << INDEX_TAG_UNSTABLE);
			for (unsigned k = i / 8 * 2; k < i / 8 * 2 + 2; k++) {
				struct tentry *o = &s->ent[k * 4];
				unsigned before = atomic_load(&a->seq[k]);
				if ((before & 1) &&
				    !index_tag_get(&s->idx, o->first,
						   INDEX_TAG_UNSTABLE) &&
				    atomic_load(&a->seq[k]) == before)
					terr(s, "completed set lost by prune");
			}
		} else if (lf_owned(i)) {
			/* Owned entries stay. */
		} else if (e->present) {
			if (index_remove(&s->idx, e->first, e->order) != e)
				terr(s, "remove");
			e->present = false;
		} else {
			if (index_insert(&s->idx, e->first, e->order, e))
				terr(s, "insert");
			e->present = true;
		}
		pthread_rwlock_unlock(&s->lock);
	}
	return NULL;
}

static void run_threads_lockfree(bool lockless)
{
	struct tshared *s = calloc(1, sizeof(*s));
	pthread_t ow[T_OWNERS], wr;
	struct lf_arg args[T_OWNERS];

	/* Runs for a fixed time: the races it looks for need the threads
	 * to overlap, however slow the build. */
	uint64_t rng = tshared_init(s, "index_threads_lockfree", 0);
	if (lockless)
		assert_int_equal(index_set_lockless(&s->idx), 0);
	for (unsigned i = 0; i < LF_ENTRIES; i++) {
		/* Eight entries of orders 0..2 per 64 keys: owned and other
		 * entries share leaves. */
		unsigned order = (unsigned)test_rand_below(&rng, 3);
		s->ent[i].order = order;
		s->ent[i].first = (uint64_t)(i / 8) * 64 + (i % 8) * 8;
		s->ent[i].present = lf_owned(i) || test_rand_below(&rng, 2);
		if (s->ent[i].present)
			assert_int_equal(index_insert(&s->idx, s->ent[i].first,
						      order, &s->ent[i]), 0);
	}
	s->ent[LF_ENTRIES] = (struct tentry){.first = 4096, .order = 0};
	s->ent[LF_ENTRIES + 1] = (struct tentry){.first = UINT64_C(1) << 40,
						 .order = 3};
	struct index_place places[LF_ENTRIES / 4];
	for (unsigned i = 0; i < LF_ENTRIES; i += 4)
		places[i / 4] = place_of(&s->idx, s->ent[i].first,
					 s->ent[i].order);
	static atomic_uint seq[LF_ENTRIES / 4];
	for (unsigned k = 0; k < LF_ENTRIES / 4; k++)
		atomic_store(&seq[k], 0); /* from an earlier run */
	struct lf_arg warg = {s, 0, places, seq};
	assert_int_equal(pthread_create(&wr, NULL, lf_writer, &warg), 0);
	for (unsigned i = 0; i < T_OWNERS; i++) {
		args[i] = (struct lf_arg){s, i, places, seq};
		assert_int_equal(pthread_create(&ow[i], NULL, lf_owner,
						&args[i]), 0);
	}
	struct timespec run = {2, 0};
	nanosleep(&run, NULL);
	atomic_store(&s->stop, true);
	for (unsigned i = 0; i < T_OWNERS; i++)
		pthread_join(ow[i], NULL);
	pthread_join(wr, NULL);

	assert_int_equal(atomic_load(&s->errors), 0);
	check_verify_loose(&s->idx);
	index_tag_prune(&s->idx, 0, UINT64_MAX, (1u << INDEX_TAG_COUNT) - 1);
	check_verify(&s->idx);
	index_destroy(&s->idx);
	epoch_barrier();
	pthread_rwlock_destroy(&s->lock);
	free(s);
}

static void test_threads_lockfree(void **state)
{
	(void)state;
	run_threads_lockfree(false);
}

/* The same on a lockless index, whose unlinked nodes carry their retire
 * link in the presence and tag words: the owners' lock-free tag calls
 * must never reach such a node (under ASan a write there corrupts the
 * retire list or lands in freed memory). */
static void test_threads_lockfree_lockless(void **state)
{
	(void)state;
	run_threads_lockfree(true);
}

static void run_threads(bool lockless)
{
	struct tshared *s = calloc(1, sizeof(*s));
	pthread_t rd[T_READERS], lf[T_LOCKLESS], tg[T_TAGGERS], wr;

	uint64_t rng = tshared_init(s, "index_threads", test_iters(40000, 2000));
	if (lockless)
		assert_int_equal(index_set_lockless(&s->idx), 0);
	for (unsigned i = 0; i < T_ENTRIES; i++) {
		/* One entry per 64 keys, of orders 0..6, at varying offsets so
		 * leaves and level-6 slots are both exercised. */
		unsigned order = (unsigned)test_rand_below(&rng, 7);
		s->ent[i].order = order;
		s->ent[i].first = (uint64_t)i * 64 +
				  (test_rand_below(&rng, 64) & ~(SPAN(order) - 1));
		s->ent[i].present = test_rand_below(&rng, 4) != 0;
		if (s->ent[i].present)
			assert_int_equal(index_insert(&s->idx, s->ent[i].first,
						      order, &s->ent[i]), 0);
	}

	for (int i = 0; i < T_READERS; i++)
		assert_int_equal(pthread_create(&rd[i], NULL, reader, s), 0);
	for (int i = 0; lockless && i < T_LOCKLESS; i++)
		assert_int_equal(pthread_create(&lf[i], NULL, lockless_reader,
						s), 0);
	for (int i = 0; i < T_TAGGERS; i++)
		assert_int_equal(pthread_create(&tg[i], NULL, tagger, s), 0);
	assert_int_equal(pthread_create(&wr, NULL, writer, s), 0);
	for (int i = 0; i < T_TAGGERS; i++)
		pthread_join(tg[i], NULL);
	pthread_join(wr, NULL);
	atomic_store(&s->stop, true);
	for (int i = 0; i < T_READERS; i++)
		pthread_join(rd[i], NULL);
	for (int i = 0; lockless && i < T_LOCKLESS; i++)
		pthread_join(lf[i], NULL);

	assert_int_equal(atomic_load(&s->errors), 0);
	check_verify(&s->idx);
	size_t n = 0;
	for (unsigned i = 0; i < T_ENTRIES; i++) {
		n += s->ent[i].present;
		assert_ptr_equal(index_lookup(&s->idx, s->ent[i].first),
				 s->ent[i].present ? &s->ent[i] : NULL);
	}
	assert_int_equal(index_count(&s->idx), n);
	index_destroy(&s->idx);
	/* The retired nodes go now, not at some later test's retire. */
	epoch_barrier();
	pthread_rwlock_destroy(&s->lock);
	free(s);
}

/* The child node a slot of n holds (white-box). */
static const struct index_node *slot_node_of(const struct index_node *n,
					     unsigned i)
{
	uintptr_t v = n->slots[i];
	assert_int_equal(v & 3, 1);
	return (const struct index_node *)(v - 1);
}

static void test_threads(void **state)
{
	(void)state;
	run_threads(false);
}

/* A lockless index frees an unlinked node only after a grace period: a
 * lookup that was inside it may still read its slots (under ASan a node
 * freed at once is a use after free here). */
static void test_lockless_frees_after_grace(void **state)
{
	(void)state;
	struct index_tree idx;
	index_init(&idx);
	assert_int_equal(index_set_lockless(&idx), 0);
	assert_int_equal(index_insert(&idx, 1000, 0, fake(1)), 0);
	assert_int_equal(index_insert(&idx, 2000, 0, fake(2)), 0);
	assert_int_equal(idx.shift, 6);
	const struct index_node *root = idx.root;
	const struct index_node *leaf = slot_node_of(root, 1000 >> 6);
	assert_ptr_equal(index_remove(&idx, 1000, 0), fake(1));
	/* The leaf left the tree, its memory did not. */
	assert_int_equal(__atomic_load_n(&leaf->slots[1000 & 63],
					 __ATOMIC_ACQUIRE), 0);
	assert_ptr_equal(index_remove(&idx, 2000, 0), fake(2));
	assert_null(idx.root);
	assert_int_equal(__atomic_load_n(&root->slots[2000 >> 6],
					 __ATOMIC_ACQUIRE), 0);
	index_destroy(&idx);
	epoch_barrier();

	/* An index with an allocator of its own cannot be lockless. */
	unsigned countdown = 0;
	const struct index_allocator own = {
		.alloc = failing_alloc, .free = failing_free, .arg = &countdown,
	};
	index_init_alloc(&idx, &own);
	assert_int_equal(index_set_lockless(&idx), -EINVAL);
	assert_false(idx.lockless);
}

/* The same with lookups that take no lock (the mapping's): under ASan a
 * node freed before a lookup left it is a use after free, under TSan a
 * slot store that is not a release is a race. */
static void test_threads_lockless(void **state)
{
	(void)state;
	run_threads(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_edges),
		cmocka_unit_test(test_same_entry_twice),
		cmocka_unit_test(test_root_level_growth_shrink),
		cmocka_unit_test(test_enomem),
		cmocka_unit_test(test_drop_prune),
		cmocka_unit_test(test_model),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_threads_lockless),
		cmocka_unit_test(test_lockless_frees_after_grace),
		cmocka_unit_test(test_threads_lockfree),
		cmocka_unit_test(test_threads_lockfree_lockless),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
