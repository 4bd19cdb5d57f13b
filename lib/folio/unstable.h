/* SPDX-License-Identifier: MIT */
/*
 * Unstable blocks of a folio (the rest of its per-block state is in
 * blocks.c). Inline: a written-back folio is marked unstable by its
 * write's completion and settled after the flush, once each, and each
 * call cost about as much as its work.
 */
#ifndef FOLIO_FOLIO_UNSTABLE_H
#define FOLIO_FOLIO_UNSTABLE_H

#include "bitmap/bitmap.h"
#include "folio/folio.h"

/*
 * Unstable blocks: bytes a completed write put in the backing store that
 * no flush has yet made durable. They are clean, but the cache must keep
 * them until a flush that began after their write completed succeeds,
 * and make them dirty again when a flush fails. `gen` is the mapping's
 * flush generation read when the write completed; `failures` the engine's
 * count of failed flushes read when it was submitted: a flush that failed
 * after that may have dropped it, even if it completed later and a later
 * flush succeeded.
 *
 * Unstable state changes on the completion and flush paths only, never on
 * the write fast path, so one-block folios take the state lock here too:
 * the flag and the generation must change together.
 */

/* folio_stabilize() results. */
#define FOLIO_STABLE_LEFT 1 /* unstable blocks remain (a later flush's) */
#define FOLIO_STABLE_LOST 2 /* nothing changed: a write behind them was
			      * submitted before a failed flush the caller's
			      * `failures` counts, and must be made dirty */

/* The state-map halves of folio_mark_unstable() and
 * unstable_clear_all_locked() for folios whose state spans several words
 * (blocks.c): out of line, so that the one-word path every small folio
 * takes keeps its registers. Caller holds the state lock. */
size_t unstable_mark_map_locked(struct folio *f, size_t first, size_t end);
size_t unstable_clear_map_locked(struct folio *f);

/* a before b, modulo 2^32 (the stamps keep the low 32 bits). */
static inline bool stamp_before(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) < 0;
}

/* Mark the blocks touched by [off, off+len) unstable; *newly (may be
 * NULL) gets the blocks that were not unstable before. Returns
 * FOLIO_BECAME_UNSTABLE or 0. For a write's completion, while WRITEBACK
 * keeps the folio's state map its own (see lib/folio/map.c). */
static inline int folio_mark_unstable(struct folio *f, size_t off,
				      size_t len, uint64_t gen,
				      uint64_t failures, size_t *newly)
{
	size_t unused;
	if (!newly)
		newly = &unused;
	*newly = 0;
	if (folio_check_range(f, off, len) || !len)
		return 0;
	int ret = 0;
	spin_lock(&f->state_lock);
	if (!folio_single_block(f)) {
		size_t n = folio_nblocks(f), first, end;
		folio_blocks_outward(f, off, len, &first, &end);
		if (3 * n <= 64) {
			/* The whole state in one word (up to 21 blocks):
			 * every completion of a small folio's write. */
			uint64_t m = ((UINT64_C(1) << (end - first)) - 1)
				     << (2 * n + first);
			uint64_t was = f->state[0], fresh = m & ~was;
			f->state[0] = was | m;
			*newly = fresh == m ? end - first
					    : bitmap_weight64(fresh);
		} else {
			*newly = unstable_mark_map_locked(f, first, end);
		}
	}
	unsigned old = atomic_fetch_or_explicit(&f->flags, FOLIO_F_UNSTABLE,
						memory_order_acq_rel);
	if (!(old & FOLIO_F_UNSTABLE)) {
		ret = FOLIO_BECAME_UNSTABLE;
		if (folio_single_block(f))
			*newly = 1;
		f->unstable_gen = (uint32_t)gen;
		f->unstable_failures = (uint32_t)failures;
	} else {
		if (stamp_before(f->unstable_gen, (uint32_t)gen))
			f->unstable_gen = (uint32_t)gen;
		if (stamp_before((uint32_t)failures, f->unstable_failures))
			f->unstable_failures = (uint32_t)failures;
	}
	spin_unlock(&f->state_lock);
	return ret;
}

/* Drop every unstable bit and the flag; returns how many blocks were
 * unstable. Caller holds the state lock. Always inlined, into its four
 * callers too: every settled folio comes through here. */
static inline __attribute__((always_inline)) size_t
unstable_clear_all_locked(struct folio *f)
{
	size_t n = 1;
	if (!folio_single_block(f)) {
		size_t nb = folio_nblocks(f);
		if (3 * nb <= 64) {
			/* All three maps in one word, as in
			 * folio_mark_unstable(): every settle of a small
			 * folio. */
			uint64_t mask = ((UINT64_C(1) << nb) - 1) << (2 * nb);
			n = bitmap_weight64(f->state[0] & mask);
			f->state[0] &= ~mask;
		} else {
			n = unstable_clear_map_locked(f);
		}
	}
	unsigned old = atomic_fetch_and_explicit(&f->flags, ~FOLIO_F_UNSTABLE,
						 memory_order_release);
	return (old & FOLIO_F_UNSTABLE) ? n : 0;
}

/* A flush that began in generation `gen` succeeded, with `failures`
 * failed flushes of the engine counted before it began and none while it
 * ran: forget the unstable blocks when every write behind them completed
 * in generation `gen` or earlier and was submitted with that count;
 * *released (may be NULL) gets how many were forgotten. Returns 0 when
 * none are left, else FOLIO_STABLE_LEFT or FOLIO_STABLE_LOST. */
static inline int folio_stabilize(struct folio *f, uint64_t gen,
				  uint64_t failures, size_t *released)
{
	size_t unused;
	if (!released)
		released = &unused;
	*released = 0;
	if (!folio_test_unstable(f))
		return 0;
	spin_lock(&f->state_lock);
	int ret;
	if (stamp_before(f->unstable_failures, (uint32_t)failures)) {
		/* In flight across a failed flush, which may have dropped
		 * it; the flush that succeeded since proves nothing. */
		ret = FOLIO_STABLE_LOST;
	} else {
		/* A write that completed after the flush began may not be
		 * covered by it: keep the whole folio for the next flush
		 * (one generation per folio keeps the header small; the
		 * cost is a later release). */
		if (!stamp_before((uint32_t)gen, f->unstable_gen))
			*released = unstable_clear_all_locked(f);
		ret = (folio_flags(f) & FOLIO_F_UNSTABLE) ? FOLIO_STABLE_LEFT
							 : 0;
	}
	spin_unlock(&f->state_lock);
	return ret;
}

#endif
