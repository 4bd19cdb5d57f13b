/* SPDX-License-Identifier: MIT */
#include "bitmap/bitmap.h"

/* Mask of bits [lo, 64) and [0, hi) of one word; hi == 0 means all 64. */
static inline uint64_t mask_from(size_t lo)
{
	return ~UINT64_C(0) << (lo % BITMAP_WORD_BITS);
}

static inline uint64_t mask_below(size_t hi)
{
	size_t r = hi % BITMAP_WORD_BITS;
	return r ? (UINT64_C(1) << r) - 1 : ~UINT64_C(0);
}

/*
 * Set and clear share one shape (partial first word, whole middle words,
 * partial last word); the op is a compile-time constant after inlining, so
 * one body serves both without a branch per word.
 */
enum range_op { OP_SET, OP_CLEAR };

/* One word: apply the op to the bits of m, return how many changed. */
static inline size_t apply_word(uint64_t *w, uint64_t m, enum range_op op)
{
	uint64_t old = *w;
	uint64_t changed = op == OP_SET ? ~old & m : old & m;
	*w = op == OP_SET ? old | m : old & ~m;
	return bitmap_weight64(changed);
}

static inline size_t apply(uint64_t *map, size_t start, size_t end,
			   enum range_op op)
{
	if (start >= end)
		return 0;
	size_t first = start / BITMAP_WORD_BITS;
	size_t last = (end - 1) / BITMAP_WORD_BITS;
	uint64_t head = mask_from(start);
	uint64_t tail = mask_below(end);

	if (first == last) {
		/* One word, usually all bits changing or none: the count is
		 * then known without counting. */
		uint64_t m = head & tail, old = map[first];
		uint64_t changed = op == OP_SET ? ~old & m : old & m;
		map[first] = op == OP_SET ? old | m : old & ~m;
		return changed == m ? end - start : bitmap_weight64(changed);
	}
	size_t n = apply_word(&map[first], head, op);
	for (size_t w = first + 1; w < last; w++)
		n += apply_word(&map[w], ~UINT64_C(0), op);
	return n + apply_word(&map[last], tail, op);
}

void bitmap_set_range(uint64_t *map, size_t start, size_t end)
{
	apply(map, start, end, OP_SET);
}

void bitmap_clear_range(uint64_t *map, size_t start, size_t end)
{
	apply(map, start, end, OP_CLEAR);
}

size_t bitmap_set_range_count(uint64_t *map, size_t start, size_t end)
{
	return apply(map, start, end, OP_SET);
}

size_t bitmap_clear_range_count(uint64_t *map, size_t start, size_t end)
{
	return apply(map, start, end, OP_CLEAR);
}

/*
 * Find the first bit in [start, end) whose value is `want`. Inverting each
 * word when looking for clear bits turns both searches into a search for
 * set bits.
 */
static inline size_t find(const uint64_t *map, size_t start, size_t end,
			  bool want)
{
	if (start >= end)
		return end;
	uint64_t flip = want ? 0 : ~UINT64_C(0);
	size_t w = start / BITMAP_WORD_BITS;
	size_t last = (end - 1) / BITMAP_WORD_BITS;
	uint64_t word = (map[w] ^ flip) & mask_from(start);

	for (;;) {
		if (w == last)
			word &= mask_below(end);
		if (word) {
			size_t bit = w * BITMAP_WORD_BITS +
				     (size_t)__builtin_ctzll(word);
			return bit;
		}
		if (w == last)
			return end;
		w++;
		word = map[w] ^ flip;
	}
}

size_t bitmap_next_set(const uint64_t *map, size_t start, size_t end)
{
	return find(map, start, end, true);
}

size_t bitmap_next_clear(const uint64_t *map, size_t start, size_t end)
{
	return find(map, start, end, false);
}

bool bitmap_any_set(const uint64_t *map, size_t start, size_t end)
{
	return find(map, start, end, true) < end;
}

bool bitmap_all_set(const uint64_t *map, size_t start, size_t end)
{
	return find(map, start, end, false) >= end;
}

size_t bitmap_count(const uint64_t *map, size_t start, size_t end)
{
	if (start >= end)
		return 0;
	size_t first = start / BITMAP_WORD_BITS;
	size_t last = (end - 1) / BITMAP_WORD_BITS;
	size_t n = 0;

	for (size_t w = first; w <= last; w++) {
		uint64_t word = map[w];
		if (w == first)
			word &= mask_from(start);
		if (w == last)
			word &= mask_below(end);
		n += (size_t)__builtin_popcountll(word);
	}
	return n;
}
