/* SPDX-License-Identifier: MIT */
/*
 * Per-block uptodate, dirty and unstable state. Bits [0, N) of the state
 * map (folio_state_map()) say which blocks are uptodate, bits [N, 2N)
 * which are dirty, bits [2N, 3N) which were written but not yet flushed.
 * Every map access happens under f->state_lock; the UPTODATE, DIRTY and
 * UNSTABLE flags summarise the map and change only under the same lock,
 * so a lock-free reader of the flags never sees them disagree with a
 * completed update. A one-block folio has no map: its flags are its
 * state and change by atomic operations. A shared map (map.c) is never
 * written: what would change it takes a map of its own first, and what
 * finds nothing to change (no dirty or unstable bit, by the flags) does
 * not write.
 */
#include "bitmap/bitmap.h"
#include "folio/folio.h"
#include "folio/unstable.h"

enum { UPD_UPTODATE = 1, UPD_DIRTY = 2 };

/* Blocks wholly inside [off, off+len): inward rounding (may be empty). */
static inline void blocks_inward(const struct folio *f, size_t off,
				 size_t len, size_t *first, size_t *end)
{
	size_t mask = ((size_t)1 << f->block_shift) - 1;
	*first = (off + mask) >> f->block_shift;
	*end = (off + len) >> f->block_shift;
	if (*end < *first)
		*end = *first;
}

static inline bool test_bit(const uint64_t *map, size_t i)
{
	return (map[i / BITMAP_WORD_BITS] >> (i % BITMAP_WORD_BITS)) & 1;
}

static inline unsigned load_flags(struct folio *f)
{
	return atomic_load_explicit(&f->flags, memory_order_relaxed);
}

/*
 * Take state_lock with a state map of the folio's own (not the shared
 * one), for a change of it: 0, or -ENOMEM with the lock not held and
 * nothing changed. The map is owned again outside the lock; a compaction
 * that came in between makes this go round again.
 */
static inline int lock_own_map(struct folio *f)
{
	for (;;) {
		int r = folio_own_state(f);
		if (r)
			return r;
		spin_lock(&f->state_lock);
		if (!folio_map_shared(f))
			return 0;
		spin_unlock(&f->state_lock);
	}
}

/* The shared map of nothing uptodate (folio_forget_shared()). */
static inline bool shares_empty_map(struct folio *f)
{
	return (load_flags(f) & (FOLIO_F_MAP_SHARED | FOLIO_F_UPTODATE)) ==
	       FOLIO_F_MAP_SHARED;
}

static int update_single(struct folio *f, unsigned what, size_t *newly)
{
	unsigned bits = ((what & UPD_UPTODATE) ? FOLIO_F_UPTODATE : 0) |
			((what & UPD_DIRTY) ? FOLIO_F_DIRTY : 0);
	unsigned old = atomic_fetch_or_explicit(&f->flags, bits,
						memory_order_acq_rel);
	int ret = 0;
	if ((bits & FOLIO_F_DIRTY) && !(old & FOLIO_F_DIRTY)) {
		ret |= FOLIO_BECAME_DIRTY;
		*newly = 1;
	}
	if ((bits & FOLIO_F_UPTODATE) && !(old & FOLIO_F_UPTODATE))
		ret |= FOLIO_BECAME_UPTODATE;
	return ret;
}

/*
 * The one place blocks become uptodate and/or dirty. The write fast path
 * (both bits) costs one lock round trip, and skips the uptodate bitmap
 * entirely when the folio is already wholly uptodate. Whether this call
 * completed the folio is decided under the lock, so exactly one caller
 * publishes UPTODATE.
 */
/* Inlined into each caller, so the constant `what` and `newly` fold away:
 * this is the write fast path (a call and the generic checks cost a
 * fifth of folio_set_dirty_uptodate()). */
static inline __attribute__((always_inline)) int
folio_update(struct folio *f, size_t off, size_t len, unsigned what,
	     size_t *newly)
{
	size_t unused;
	bool count = newly;
	if (!newly)
		newly = &unused;
	*newly = 0;
	int ret = folio_check_range(f, off, len);
	if (ret || !len)
		return ret;
	if (folio_single_block(f))
		return update_single(f, what, newly);

	size_t n = folio_nblocks(f), first, end;
	folio_blocks_outward(f, off, len, &first, &end);

	/* Making blocks dirty changes a shared map (all clean). */
	if ((what & UPD_DIRTY) && (ret = lock_own_map(f)))
		return ret;
	if (!(what & UPD_DIRTY)) {
		spin_lock(&f->state_lock);
		/* A fill of a folio sharing the empty map shares the
		 * uptodate one when it covers all of it, else needs a map
		 * of its own. */
		while (shares_empty_map(f)) {
			if (first == 0 && end == n) {
				folio_share_uptodate_locked(f);
				spin_unlock(&f->state_lock);
				return FOLIO_BECAME_UPTODATE;
			}
			spin_unlock(&f->state_lock);
			if ((ret = folio_own_state(f)))
				return ret;
			spin_lock(&f->state_lock);
		}
	}
	uint64_t *map = folio_state_map(f);
	unsigned flags = load_flags(f);
	if ((what & UPD_UPTODATE) && !(flags & FOLIO_F_UPTODATE)) {
		bitmap_set_range(map, first, end);
		/* [first, end) was just set, so only the rest can be
		 * missing, and a missing block is usually right next to the
		 * range: the next one for a forward writer, the previous one
		 * for a backward writer. Looking there first keeps a write
		 * O(1); scanning from block 0 every time re-read everything
		 * written so far (twice the cost of a sequential 512 B write
		 * into a 2 MiB folio). */
		if ((end == n || test_bit(map, end)) &&
		    (first == 0 || test_bit(map, first - 1)) &&
		    bitmap_all_set(map, end, n) &&
		    bitmap_all_set(map, 0, first)) {
			atomic_fetch_or_explicit(&f->flags, FOLIO_F_UPTODATE,
						 memory_order_release);
			ret |= FOLIO_BECAME_UPTODATE;
		}
	}
	if (what & UPD_DIRTY) {
		/* Counting costs a popcount per word: only for callers
		 * that keep dirty totals. */
		if (count)
			*newly = bitmap_set_range_count(map, n + first,
							n + end);
		else
			bitmap_set_range(map, n + first, n + end);
		if (!(flags & FOLIO_F_DIRTY)) {
			atomic_fetch_or_explicit(&f->flags, FOLIO_F_DIRTY,
						 memory_order_release);
			ret |= FOLIO_BECAME_DIRTY;
		}
	}
	spin_unlock(&f->state_lock);
	return ret;
}

int folio_set_uptodate(struct folio *f, size_t off, size_t len)
{
	return folio_update(f, off, len, UPD_UPTODATE, NULL);
}

int folio_set_dirty(struct folio *f, size_t off, size_t len)
{
	return folio_update(f, off, len, UPD_DIRTY, NULL);
}

int folio_set_dirty_uptodate(struct folio *f, size_t off, size_t len)
{
	return folio_update(f, off, len, UPD_UPTODATE | UPD_DIRTY, NULL);
}

int folio_dirty_counted(struct folio *f, size_t off, size_t len,
			bool uptodate, size_t *newly)
{
	return folio_update(f, off, len,
			    UPD_DIRTY | (uptodate ? UPD_UPTODATE : 0), newly);
}

/* Keeps the DIRTY flag equal to "any dirty bit" after bits were
 * cleared. */
static void recompute_dirty_flag_locked(struct folio *f, size_t n)
{
	if (!bitmap_any_set(folio_state_map(f), n, 2 * n))
		atomic_fetch_and_explicit(&f->flags, ~FOLIO_F_DIRTY,
					  memory_order_release);
}

/*
 * Argument checks and inward rounding shared by the clear operations:
 * returns 1 with [*first, *end) non-empty, 0 when there is nothing to
 * clear, or a negative errno.
 */
static int check_round_inward(struct folio *f, size_t off, size_t len,
			      size_t *first, size_t *end)
{
	int ret = folio_check_range(f, off, len);
	if (ret || !len)
		return ret;
	blocks_inward(f, off, len, first, end);
	return *first < *end;
}

/* Clear the dirty bits of the blocks wholly inside [off, off+len); 0 or
 * a negative errno, *cleared gets how many were dirty. */
static int clear_dirty(struct folio *f, size_t off, size_t len,
		       size_t *cleared)
{
	size_t first, end;
	*cleared = 0;
	int ret = check_round_inward(f, off, len, &first, &end);
	if (ret <= 0)
		return ret;
	if (folio_single_block(f)) {
		unsigned old = atomic_fetch_and_explicit(
			&f->flags, ~FOLIO_F_DIRTY, memory_order_release);
		*cleared = (old & FOLIO_F_DIRTY) ? 1 : 0;
		return 0;
	}
	size_t n = folio_nblocks(f);
	spin_lock(&f->state_lock);
	if (load_flags(f) & FOLIO_F_DIRTY) {
		*cleared = bitmap_clear_range_count(folio_state_map(f),
						    n + first, n + end);
		recompute_dirty_flag_locked(f, n);
	}
	spin_unlock(&f->state_lock);
	return 0;
}

int folio_clear_dirty(struct folio *f, size_t off, size_t len)
{
	size_t cleared;
	return clear_dirty(f, off, len, &cleared);
}

size_t folio_clear_dirty_counted(struct folio *f, size_t off, size_t len)
{
	size_t cleared;
	clear_dirty(f, off, len, &cleared);
	return cleared;
}

int folio_clear_uptodate(struct folio *f, size_t off, size_t len)
{
	size_t first, end;
	int ret = check_round_inward(f, off, len, &first, &end);
	if (ret <= 0)
		return ret;
	if (folio_single_block(f)) {
		/* A dirty block is the only copy of its data: keep it. */
		unsigned v = load_flags(f);
		while (!(v & FOLIO_F_DIRTY) &&
		       !atomic_compare_exchange_weak_explicit(
			       &f->flags, &v, v & ~FOLIO_F_UPTODATE,
			       memory_order_acq_rel, memory_order_relaxed))
			;
		return 0;
	}
	size_t n = folio_nblocks(f);
	/* Nothing uptodate to clear: no need for a map of its own. */
	if (shares_empty_map(f))
		return 0;
	ret = lock_own_map(f);
	if (ret)
		return ret;
	uint64_t *map = folio_state_map(f);
	/* Clear uptodate on each run of clean blocks in [first, end). */
	size_t b = first;
	while (b < end) {
		size_t clean = bitmap_next_clear(map, n + b, n + end) - n;
		if (clean >= end)
			break;
		size_t stop = bitmap_next_set(map, n + clean, n + end) - n;
		bitmap_clear_range(map, clean, stop);
		atomic_fetch_and_explicit(&f->flags, ~FOLIO_F_UPTODATE,
					  memory_order_release);
		b = stop;
	}
	spin_unlock(&f->state_lock);
	return 0;
}

/* Shared body of the range predicates: "any block dirty" when `dirty`,
 * otherwise "all blocks uptodate". */
static int range_query(struct folio *f, size_t off, size_t len, bool dirty)
{
	int ret = folio_check_range(f, off, len);
	if (ret)
		return ret;
	if (!len)
		return dirty ? 0 : 1;
	unsigned flags = atomic_load_explicit(&f->flags, memory_order_acquire);
	if (!dirty && (flags & FOLIO_F_UPTODATE))
		return 1;
	if (dirty && !(flags & FOLIO_F_DIRTY))
		return 0;
	if (folio_single_block(f))
		return dirty ? 1 : 0;

	size_t n = folio_nblocks(f), first, end;
	folio_blocks_outward(f, off, len, &first, &end);
	spin_lock(&f->state_lock);
	const uint64_t *map = folio_state_map(f);
	bool r = dirty ? bitmap_any_set(map, n + first, n + end)
		       : bitmap_all_set(map, first, end);
	spin_unlock(&f->state_lock);
	return r ? 1 : 0;
}

int folio_is_uptodate(struct folio *f, size_t off, size_t len)
{
	return range_query(f, off, len, false);
}

int folio_is_dirty(struct folio *f, size_t off, size_t len)
{
	return range_query(f, off, len, true);
}

/*
 * Next run at or after the block holding *off of dirty blocks (`dirty`) or
 * of blocks that are not uptodate (!`dirty`): one body for next_dirty and
 * next_missing, and the flags answer the common "none" case lock-free.
 */
static ssize_t next_run(struct folio *f, size_t *off, bool dirty)
{
	if (!f || !off)
		return -EINVAL;
	size_t size = (size_t)1 << f->size_shift;
	if (*off > size)
		return -ERANGE;
	if (*off == size)
		return 0;
	unsigned flags = atomic_load_explicit(&f->flags, memory_order_acquire);
	if (dirty ? !(flags & FOLIO_F_DIRTY) : (flags & FOLIO_F_UPTODATE))
		return 0;
	size_t first = *off >> f->block_shift;
	if (folio_single_block(f)) {
		*off = 0;
		return (ssize_t)size;
	}

	size_t n = folio_nblocks(f), base = dirty ? n : 0, s, e;
	spin_lock(&f->state_lock);
	const uint64_t *map = folio_state_map(f);
	if (dirty) {
		s = bitmap_next_set(map, base + first, base + n);
		e = bitmap_next_clear(map, s, base + n);
	} else {
		s = bitmap_next_clear(map, first, n);
		e = bitmap_next_set(map, s, n);
	}
	spin_unlock(&f->state_lock);
	if (s == base + n)
		return 0;
	*off = (s - base) << f->block_shift;
	return (ssize_t)((e - s) << f->block_shift);
}

ssize_t folio_next_dirty(struct folio *f, size_t *off)
{
	return next_run(f, off, true);
}

ssize_t folio_next_missing(struct folio *f, size_t *off)
{
	return next_run(f, off, false);
}

/*
 * folio_take_dirty_from() for a folio whose dirty bits [n, 2n) all lie in
 * its first state word (up to 32 blocks: a 64 KiB folio of 4 KiB blocks),
 * from bit b on: whole runs found with ctz instead of a bit scan each,
 * cleared with one store.
 */
static size_t take_dirty_word_locked(struct folio *f, size_t n, size_t b,
				     struct folio_range *runs, size_t max_runs)
{
	uint64_t w = f->state[0];
	/* Bits [b, 2n) only: 2 <= 2n <= 64, and n <= b <= 2n (b == 64:
	 * none), so both shifts stay below 64. */
	uint64_t below = ~UINT64_C(0) >> (64 - 2 * n);
	/* -(2^b): bits b and up, 0 for b == 64. */
	uint64_t from = -(UINT64_C(1) << (b - 1) << 1);
	uint64_t d = w & below & from;
	uint64_t gone = 0;
	size_t taken = 0;
	while (d && taken < max_runs) {
		unsigned s = (unsigned)__builtin_ctzll(d);
		/* s >= n >= 1, so d >> s is never all ones. */
		unsigned len = (unsigned)__builtin_ctzll(~(d >> s));
		uint64_t run = ((UINT64_C(1) << len) - 1) << s;
		gone |= run;
		d &= ~run;
		runs[taken].off = (s - n) << f->block_shift;
		runs[taken].len = (size_t)len << f->block_shift;
		taken++;
	}
	w &= ~gone;
	f->state[0] = w;
	uint64_t dirty_bits = below & ~UINT64_C(0) << n;
	if (!(w & dirty_bits))
		atomic_fetch_and_explicit(&f->flags, ~FOLIO_F_DIRTY,
					  memory_order_release);
	return taken;
}

/* folio_take_dirty_from() for a folio whose dirty bits span several
 * words: out of line, so that the one-word path of every small folio
 * saves and restores none of the registers this loop needs. */
static __attribute__((noinline)) int
take_dirty_bitmap(struct folio *f, size_t n, size_t b,
		  struct folio_range *runs, size_t max_runs)
{
	size_t taken = 0;
	spin_lock(&f->state_lock);
	/* A shared map has no dirty bit: this finds none, writes nothing. */
	uint64_t *map = folio_state_map(f);
	while (taken < max_runs) {
		size_t s = bitmap_next_set(map, b, 2 * n);
		if (s == 2 * n)
			break;
		size_t e = bitmap_next_clear(map, s, 2 * n);
		bitmap_clear_range(map, s, e);
		runs[taken].off = (s - n) << f->block_shift;
		runs[taken].len = (e - s) << f->block_shift;
		taken++;
		b = e;
	}
	recompute_dirty_flag_locked(f, n);
	spin_unlock(&f->state_lock);
	return (int)taken;
}

int folio_take_dirty_from(struct folio *f, size_t from,
			  struct folio_range *runs, size_t max_runs)
{
	if (!(atomic_load_explicit(&f->flags, memory_order_acquire) &
	      FOLIO_F_DIRTY))
		return 0;
	if (folio_single_block(f)) {
		if (from)
			return 0;
		unsigned old = atomic_fetch_and_explicit(
			&f->flags, ~FOLIO_F_DIRTY, memory_order_acq_rel);
		if (!(old & FOLIO_F_DIRTY))
			return 0;
		runs[0].off = 0;
		runs[0].len = (size_t)1 << f->size_shift;
		return 1;
	}

	size_t n = folio_nblocks(f);
	size_t b = n + MIN(from >> f->block_shift, n);
	if (2 * n > 64)
		return take_dirty_bitmap(f, n, b, runs, max_runs);
	spin_lock(&f->state_lock);
	size_t taken = take_dirty_word_locked(f, n, b, runs, max_runs);
	spin_unlock(&f->state_lock);
	return (int)taken;
}

int folio_take_dirty(struct folio *f, struct folio_range *runs,
		     size_t max_runs)
{
	if (!f || !runs || !max_runs)
		return -EINVAL;
	return folio_take_dirty_from(f, 0, runs, max_runs);
}

void folio_count_blocks(struct folio *f, size_t *uptodate, size_t *dirty,
			size_t *unstable)
{
	if (folio_single_block(f)) {
		unsigned flags = atomic_load(&f->flags);
		*uptodate = (flags & FOLIO_F_UPTODATE) ? 1 : 0;
		*dirty = (flags & FOLIO_F_DIRTY) ? 1 : 0;
		*unstable = (flags & FOLIO_F_UNSTABLE) ? 1 : 0;
		return;
	}
	size_t n = folio_nblocks(f);
	spin_lock(&f->state_lock);
	const uint64_t *map = folio_state_map(f);
	*uptodate = bitmap_count(map, 0, n);
	*dirty = bitmap_count(map, n, 2 * n);
	*unstable = bitmap_count(map, 2 * n, 3 * n);
	spin_unlock(&f->state_lock);
}

void folio_drain(struct folio *f, size_t *dirty, size_t *unstable)
{
	spin_lock(&f->state_lock);
	unsigned old = atomic_fetch_and_explicit(
		&f->flags, ~(FOLIO_F_DIRTY | FOLIO_F_UNSTABLE),
		memory_order_acq_rel);
	if (folio_single_block(f)) {
		*dirty = (old & FOLIO_F_DIRTY) ? 1 : 0;
		*unstable = (old & FOLIO_F_UNSTABLE) ? 1 : 0;
	} else if (old & FOLIO_F_MAP_SHARED) {
		*dirty = *unstable = 0;
	} else {
		size_t n = folio_nblocks(f);
		uint64_t *map = folio_state_map(f);
		*dirty = bitmap_clear_range_count(map, n, 2 * n);
		*unstable = bitmap_clear_range_count(map, 2 * n, 3 * n);
	}
	spin_unlock(&f->state_lock);
}

int folio_redirty_unstable(struct folio *f, size_t *unstable,
			   size_t *newly_dirty)
{
	size_t u0, d0;
	if (!unstable)
		unstable = &u0;
	if (!newly_dirty)
		newly_dirty = &d0;
	*unstable = *newly_dirty = 0;
	if (!folio_test_unstable(f))
		return 0;
	spin_lock(&f->state_lock);
	unsigned flags = load_flags(f);
	if (!(flags & FOLIO_F_UNSTABLE)) {
		spin_unlock(&f->state_lock);
		return 0;
	}
	if (!folio_single_block(f)) {
		/* Unstable blocks: the map is the folio's own. */
		size_t n = folio_nblocks(f), b = 2 * n;
		uint64_t *map = folio_state_map(f);
		while ((b = bitmap_next_set(map, b, 3 * n)) < 3 * n) {
			size_t e = bitmap_next_clear(map, b, 3 * n);
			*newly_dirty +=
				bitmap_set_range_count(map, b - n, e - n);
			b = e;
		}
	} else if (!(flags & FOLIO_F_DIRTY)) {
		*newly_dirty = 1;
	}
	*unstable = unstable_clear_all_locked(f);
	unsigned old = atomic_fetch_or_explicit(&f->flags, FOLIO_F_DIRTY,
						memory_order_acq_rel);
	spin_unlock(&f->state_lock);
	return (old & FOLIO_F_DIRTY) ? 0 : FOLIO_BECAME_DIRTY;
}

size_t unstable_mark_map_locked(struct folio *f, size_t first, size_t end)
{
	/* Under writeback: the map is the folio's own (map.c). */
	size_t n = folio_nblocks(f);
	return bitmap_set_range_count(folio_state_map(f), 2 * n + first,
				      2 * n + end);
}

size_t unstable_clear_map_locked(struct folio *f)
{
	/* Without UNSTABLE the map may be the shared one: nothing to do. */
	if (!(load_flags(f) & FOLIO_F_UNSTABLE))
		return 0;
	size_t n = folio_nblocks(f);
	return bitmap_clear_range_count(folio_state_map(f), 2 * n, 3 * n);
}

size_t folio_forget_unstable(struct folio *f, size_t off, size_t len)
{
	size_t first, end, gone = 0;
	if (!folio_test_unstable(f) ||
	    check_round_inward(f, off, len, &first, &end) <= 0)
		return 0;
	spin_lock(&f->state_lock);
	if (folio_single_block(f)) {
		gone = unstable_clear_all_locked(f);
	} else if (load_flags(f) & FOLIO_F_UNSTABLE) {
		/* Looked at again under the lock: a settle may have
		 * released the blocks, and compaction the map, since. */
		size_t n = folio_nblocks(f);
		uint64_t *map = folio_state_map(f);
		gone = bitmap_clear_range_count(map, 2 * n + first,
						2 * n + end);
		if (!bitmap_any_set(map, 2 * n, 3 * n))
			unstable_clear_all_locked(f);
	}
	spin_unlock(&f->state_lock);
	return gone;
}
