/* SPDX-License-Identifier: MIT */
/*
 * White-box tests of lib/bitmap.c against a bit-by-bit reference.
 *
 * Small maps (1..200 bits) are checked for every (start, end) pair. The
 * reference answers for [start, end) are built one bit at a time while `end`
 * grows, so the exhaustive sweep costs O(nbits^2) per map instead of
 * O(nbits^3) and stays fast enough for valgrind.
 *
 * Every map is allocated with exactly BITMAP_WORDS(nbits) words so that
 * valgrind/ASan catch any access past the last word, and the unused high
 * bits of the last word hold the opposite of the map's contents so that a
 * query looking past `end` (or an update spilling past it) gives a wrong
 * answer instead of a lucky right one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bitmap/bitmap.h"
#include "test_util.h"

#define SMALL_MAX_BITS 200u
#define LARGE_BITS 4096u

static uint64_t rng;

static bool ref_get(const uint64_t *map, size_t i)
{
	return (map[i / 64] >> (i % 64)) & 1;
}

static void ref_put(uint64_t *map, size_t i, bool v)
{
	uint64_t bit = UINT64_C(1) << (i % 64);
	if (v)
		map[i / 64] |= bit;
	else
		map[i / 64] &= ~bit;
}

enum pattern {
	PAT_ZERO,
	PAT_ONE,
	PAT_RANDOM,  /* about half the bits set */
	PAT_SPARSE,  /* about 1 in 64 set: long runs of clear bits */
	PAT_DENSE,   /* about 63 in 64 set: long runs of set bits */
	PAT_COUNT,
};

static const char *const pattern_name[PAT_COUNT] = {
	"zero", "one", "random", "sparse", "dense",
};

static void fill(uint64_t *map, size_t nbits, enum pattern p)
{
	size_t words = BITMAP_WORDS(nbits);
	size_t ones = 0;
	for (size_t i = 0; i < nbits; i++) {
		bool v;
		switch (p) {
		case PAT_ZERO: v = false; break;
		case PAT_ONE: v = true; break;
		case PAT_RANDOM: v = test_rand(&rng) & 1; break;
		case PAT_SPARSE: v = test_rand_below(&rng, 64) == 0; break;
		default: v = test_rand_below(&rng, 64) != 0; break;
		}
		ref_put(map, i, v);
		ones += v;
	}
	/* Poison the slack bits of the last word with the majority's
	 * opposite, so that reading them changes a query's answer. */
	bool slack = ones * 2 < nbits;
	for (size_t i = nbits; i < words * 64; i++)
		ref_put(map, i, slack);
}

static uint64_t *alloc_map(size_t nbits)
{
	uint64_t *m = malloc(BITMAP_WORDS(nbits) * sizeof(uint64_t));
	assert_non_null(m);
	return m;
}

/* Which functions a sweep checks; one cmocka test per group keeps a
 * failure report pointing at the function that broke. */
enum {
	CHK_SET = 1,
	CHK_CLEAR = 2,
	CHK_ALL_ANY = 4,
	CHK_NEXT = 8,
	CHK_COUNT = 16,
};

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		if (!(cond)) {                                            \
			print_error(__VA_ARGS__);                         \
			fail();                                           \
		}                                                         \
	} while (0)

/*
 * Checks every selected function on [start, end) for every
 * 0 <= start <= end <= nbits of `init`.
 */
static void sweep(const uint64_t *init, size_t nbits, unsigned checks,
		  const char *what)
{
	size_t words = BITMAP_WORDS(nbits);
	size_t bytes = words * sizeof(uint64_t);
	uint64_t *work = alloc_map(nbits);
	uint64_t *exp_set = alloc_map(nbits);
	uint64_t *exp_clear = alloc_map(nbits);

	for (size_t start = 0; start <= nbits; start++) {
		memcpy(exp_set, init, bytes);
		memcpy(exp_clear, init, bytes);
		size_t count = 0;
		size_t first_set = SIZE_MAX, first_clear = SIZE_MAX;

		for (size_t end = start;; end++) {
			/* Reference answers for [start, end). */
			size_t ref_next_set = first_set == SIZE_MAX ? end : first_set;
			size_t ref_next_clear =
				first_clear == SIZE_MAX ? end : first_clear;

			if (checks & CHK_SET) {
				memcpy(work, init, bytes);
				bitmap_set_range(work, start, end);
				CHECK(!memcmp(work, exp_set, bytes),
				      "set_range(%zu, %zu) on %zu-bit %s map\n",
				      start, end, nbits, what);
			}
			if (checks & CHK_CLEAR) {
				memcpy(work, init, bytes);
				bitmap_clear_range(work, start, end);
				CHECK(!memcmp(work, exp_clear, bytes),
				      "clear_range(%zu, %zu) on %zu-bit %s map\n",
				      start, end, nbits, what);
			}
			if (checks & CHK_ALL_ANY) {
				bool all = bitmap_all_set(init, start, end);
				bool any = bitmap_any_set(init, start, end);
				CHECK(all == (first_clear == SIZE_MAX),
				      "all_set(%zu, %zu) = %d on %zu-bit %s map\n",
				      start, end, all, nbits, what);
				CHECK(any == (first_set != SIZE_MAX),
				      "any_set(%zu, %zu) = %d on %zu-bit %s map\n",
				      start, end, any, nbits, what);
			}
			if (checks & CHK_NEXT) {
				size_t s = bitmap_next_set(init, start, end);
				size_t c = bitmap_next_clear(init, start, end);
				CHECK(s == ref_next_set,
				      "next_set(%zu, %zu) = %zu, want %zu on "
				      "%zu-bit %s map\n",
				      start, end, s, ref_next_set, nbits, what);
				CHECK(c == ref_next_clear,
				      "next_clear(%zu, %zu) = %zu, want %zu on "
				      "%zu-bit %s map\n",
				      start, end, c, ref_next_clear, nbits, what);
			}
			if (checks & CHK_COUNT) {
				size_t n = bitmap_count(init, start, end);
				CHECK(n == count,
				      "count(%zu, %zu) = %zu, want %zu on %zu-bit "
				      "%s map\n",
				      start, end, n, count, nbits, what);
			}

			if (end == nbits)
				break;
			/* Grow the range by bit `end`. */
			if (ref_get(init, end)) {
				count++;
				if (first_set == SIZE_MAX)
					first_set = end;
			} else if (first_clear == SIZE_MAX) {
				first_clear = end;
			}
			ref_put(exp_set, end, true);
			ref_put(exp_clear, end, false);
		}
	}
	free(work);
	free(exp_set);
	free(exp_clear);
}

static void sweep_small_maps(unsigned checks)
{
	rng = test_seed("bitmap small maps");
	for (size_t nbits = 1; nbits <= SMALL_MAX_BITS; nbits++) {
		uint64_t *init = alloc_map(nbits);
		for (unsigned p = 0; p < PAT_COUNT; p++) {
			/* Under valgrind each size gets the two uniform maps
			 * and one of the three random ones, in turn. */
			if (test_slow_env() && p >= PAT_RANDOM &&
			    p != PAT_RANDOM + nbits % 3)
				continue;
			fill(init, nbits, (enum pattern)p);
			sweep(init, nbits, checks, pattern_name[p]);
		}
		free(init);
	}
}

static void test_small_set_range(void **state)
{
	(void)state;
	sweep_small_maps(CHK_SET);
}

static void test_small_clear_range(void **state)
{
	(void)state;
	sweep_small_maps(CHK_CLEAR);
}

static void test_small_all_any(void **state)
{
	(void)state;
	sweep_small_maps(CHK_ALL_ANY);
}

static void test_small_next(void **state)
{
	(void)state;
	sweep_small_maps(CHK_NEXT);
}

static void test_small_count(void **state)
{
	(void)state;
	sweep_small_maps(CHK_COUNT);
}

/* A range endpoint biased towards word boundaries, where the partial
 * head/tail masks and the word loop meet. */
static size_t pick_point(size_t nbits)
{
	switch (test_rand_below(&rng, 3)) {
	case 0:
		return (size_t)test_rand_below(&rng, nbits + 1);
	default: {
		size_t w = (size_t)test_rand_below(&rng, nbits / 64 + 1) * 64;
		size_t p = w + (size_t)test_rand_below(&rng, 5) - 2;
		if (p > nbits) /* also catches wrap-around below 0 */
			p = w > nbits ? nbits : w;
		return p;
	}
	}
}

/* Reference-checks every function on one [start, end) of a large map. */
static void check_large_range(const uint64_t *init, size_t nbits,
			      size_t start, size_t end, const char *what)
{
	size_t words = BITMAP_WORDS(nbits);
	size_t bytes = words * sizeof(uint64_t);
	uint64_t *work = alloc_map(nbits);
	uint64_t *exp = alloc_map(nbits);

	size_t count = 0, first_set = end, first_clear = end;
	for (size_t i = start; i < end; i++) {
		if (ref_get(init, i)) {
			count++;
			if (first_set == end)
				first_set = i;
		} else if (first_clear == end) {
			first_clear = i;
		}
	}

	memcpy(work, init, bytes);
	memcpy(exp, init, bytes);
	bitmap_set_range(work, start, end);
	for (size_t i = start; i < end; i++)
		ref_put(exp, i, true);
	CHECK(!memcmp(work, exp, bytes), "set_range(%zu, %zu) on %s map\n",
	      start, end, what);

	memcpy(work, init, bytes);
	memcpy(exp, init, bytes);
	bitmap_clear_range(work, start, end);
	for (size_t i = start; i < end; i++)
		ref_put(exp, i, false);
	CHECK(!memcmp(work, exp, bytes), "clear_range(%zu, %zu) on %s map\n",
	      start, end, what);

	CHECK(bitmap_next_set(init, start, end) == first_set,
	      "next_set(%zu, %zu) on %s map\n", start, end, what);
	CHECK(bitmap_next_clear(init, start, end) == first_clear,
	      "next_clear(%zu, %zu) on %s map\n", start, end, what);
	CHECK(bitmap_all_set(init, start, end) == (first_clear == end),
	      "all_set(%zu, %zu) on %s map\n", start, end, what);
	CHECK(bitmap_any_set(init, start, end) == (first_set != end),
	      "any_set(%zu, %zu) on %s map\n", start, end, what);
	CHECK(bitmap_count(init, start, end) == count,
	      "count(%zu, %zu) on %s map\n", start, end, what);
	free(work);
	free(exp);
}

static void test_large_random_ranges(void **state)
{
	(void)state;
	rng = test_seed("bitmap large maps");
	uint64_t *init = alloc_map(LARGE_BITS);
	unsigned ranges = test_iters(4000, 400);

	for (unsigned i = 0; i < ranges; i++) {
		/* A fresh map now and then: each pattern gets many ranges. */
		enum pattern p = (enum pattern)((i / 50) % PAT_COUNT);
		if (i % 50 == 0)
			fill(init, LARGE_BITS, p);
		size_t a = pick_point(LARGE_BITS), b = pick_point(LARGE_BITS);
		if (a > b) {
			size_t t = a;
			a = b;
			b = t;
		}
		check_large_range(init, LARGE_BITS, a, b, pattern_name[p]);
	}
	/* The whole map and its empty ends, which random picks rarely hit. */
	for (unsigned p = 0; p < PAT_COUNT; p++) {
		fill(init, LARGE_BITS, (enum pattern)p);
		check_large_range(init, LARGE_BITS, 0, LARGE_BITS,
				  pattern_name[p]);
		check_large_range(init, LARGE_BITS, 0, 0, pattern_name[p]);
		check_large_range(init, LARGE_BITS, LARGE_BITS, LARGE_BITS,
				  pattern_name[p]);
	}
	free(init);
}

/*
 * A search that must cross many whole words: the answer is the only
 * opposite bit, placed at every position of a 4096-bit map in turn.
 */
static void test_large_single_bit(void **state)
{
	(void)state;
	uint64_t *zeros = alloc_map(LARGE_BITS);
	uint64_t *ones = alloc_map(LARGE_BITS);
	size_t step = test_iters(1, 7);

	for (size_t i = 0; i < LARGE_BITS; i += step) {
		memset(zeros, 0, LARGE_BITS / 8);
		memset(ones, 0xff, LARGE_BITS / 8);
		ref_put(zeros, i, true);
		ref_put(ones, i, false);
		assert_int_equal(bitmap_next_set(zeros, 0, LARGE_BITS), i);
		assert_int_equal(bitmap_next_clear(ones, 0, LARGE_BITS), i);
		assert_int_equal(bitmap_next_set(zeros, i + 1, LARGE_BITS),
				 LARGE_BITS);
		assert_int_equal(bitmap_next_clear(ones, i + 1, LARGE_BITS),
				 LARGE_BITS);
		/* A range ending right at the bit must not see it. */
		assert_int_equal(bitmap_next_set(zeros, 0, i), i);
		assert_false(bitmap_any_set(zeros, 0, i));
		assert_true(bitmap_all_set(ones, 0, i));
		assert_true(bitmap_any_set(zeros, i, i + 1));
		assert_false(bitmap_all_set(ones, 0, LARGE_BITS));
		assert_int_equal(bitmap_count(zeros, 0, LARGE_BITS), 1);
		assert_int_equal(bitmap_count(ones, 0, LARGE_BITS),
				 LARGE_BITS - 1);
		assert_int_equal(bitmap_count(zeros, i, LARGE_BITS), 1);
		assert_int_equal(bitmap_count(zeros, i + 1, LARGE_BITS), 0);
	}
	free(zeros);
	free(ones);
}

/* A word's weight, with its run shortcut: every single run of every
 * length at every position, and words of two runs and more. */
static void test_weight64(void **state)
{
	(void)state;
	assert_int_equal(bitmap_weight64(0), 0);
	assert_int_equal(bitmap_weight64(~UINT64_C(0)), 64);
	for (unsigned len = 1; len <= 64; len++) {
		uint64_t run = len == 64 ? ~UINT64_C(0)
					 : (UINT64_C(1) << len) - 1;
		for (unsigned at = 0; at + len <= 64; at++) {
			uint64_t w = run << at;
			assert_int_equal(bitmap_weight64(w), len);
			/* A second run (or bit) apart from the first. */
			if (at >= 2) {
				assert_int_equal(bitmap_weight64(w | 1), len + 1);
				assert_int_equal(bitmap_weight64(w | 3), len + 2);
			}
		}
	}
	uint64_t seed = 42;
	for (int i = 0; i < 10000; i++) {
		seed = seed * 6364136223846793005u + 1442695040888963407u;
		assert_int_equal(bitmap_weight64(seed),
				 (size_t)__builtin_popcountll(seed));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_small_set_range),
		cmocka_unit_test(test_small_clear_range),
		cmocka_unit_test(test_small_all_any),
		cmocka_unit_test(test_small_next),
		cmocka_unit_test(test_small_count),
		cmocka_unit_test(test_large_random_ranges),
		cmocka_unit_test(test_large_single_bit),
		cmocka_unit_test(test_weight64),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
