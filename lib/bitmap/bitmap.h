/* SPDX-License-Identifier: MIT */
/*
 * Word-at-a-time operations on bit ranges [start, end) of an array of
 * 64-bit words. Bit i lives in word i / 64 at position i % 64. Callers
 * guarantee start <= end and that the words exist; these are internal
 * helpers and do no argument checking of their own.
 */
#ifndef FOLIO_BITMAP_H
#define FOLIO_BITMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BITMAP_WORD_BITS 64u
#define BITMAP_WORDS(nbits) (((nbits) + BITMAP_WORD_BITS - 1) / BITMAP_WORD_BITS)

void bitmap_set_range(uint64_t *map, size_t start, size_t end);
void bitmap_clear_range(uint64_t *map, size_t start, size_t end);
/* As set/clear, returning how many bits changed: the callers that keep
 * byte counts of dirty and unstable blocks learn the exact change from the
 * same word pass. */
size_t bitmap_set_range_count(uint64_t *map, size_t start, size_t end);
size_t bitmap_clear_range_count(uint64_t *map, size_t start, size_t end);
bool bitmap_all_set(const uint64_t *map, size_t start, size_t end);
bool bitmap_any_set(const uint64_t *map, size_t start, size_t end);
/* Index of the first set (clear) bit in [start, end), or end if none. */
size_t bitmap_next_set(const uint64_t *map, size_t start, size_t end);
size_t bitmap_next_clear(const uint64_t *map, size_t start, size_t end);
/* Number of set bits in [start, end). */
size_t bitmap_count(const uint64_t *map, size_t start, size_t end);

/*
 * Set bits of one word. Without -mpopcnt, __builtin_popcountll is a
 * library call of about twenty instructions; the words block state
 * counts look at usually hold one run of set bits (the blocks one write
 * covered), whose length two bit scans give.
 */
static inline size_t bitmap_weight64(uint64_t x)
{
	if (!x)
		return 0;
	uint64_t run = x >> __builtin_ctzll(x);
	if (!(run & (run + 1)))
		return run == ~UINT64_C(0) ? BITMAP_WORD_BITS
					   : (size_t)__builtin_ctzll(~run);
	return (size_t)__builtin_popcountll(x);
}

#endif
