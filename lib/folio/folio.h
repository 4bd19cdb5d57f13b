/* SPDX-License-Identifier: MIT */
/*
 * The folio layer as the layers above see it: struct folio, its flag
 * bits and the internal calls beside the public folio_* ones. Only
 * lib/folio/ touches the flag bits; the layers above go through the
 * functions here.
 */
#ifndef FOLIO_FOLIO_H
#define FOLIO_FOLIO_H

#include <time.h>

#include "base/base.h"
#include "base/spinlock.h"

/* Folio flag bits (struct folio.flags). */
#define FOLIO_F_UPTODATE 0x01u
#define FOLIO_F_DIRTY 0x02u
#define FOLIO_F_WRITEBACK 0x04u
#define FOLIO_F_LOCKED 0x08u
#define FOLIO_F_WAITERS 0x10u  /* someone sleeps on the flags word */
#define FOLIO_F_REMOVED 0x20u  /* no longer in its mapping's index */
#define FOLIO_F_UNSTABLE 0x40u /* some block is written but not yet flushed */
#define FOLIO_F_WRITE_BEGIN 0x80u /* LOCKED was taken by write_begin() */

/*
 * Header is 64 bytes on LP64; the per-block state follows in the same
 * allocation: bits [0, N) uptodate, [N, 2N) dirty, [2N, 3N) unstable
 * (written, not yet flushed). With N == 1 there is no bitmap at all and
 * the UPTODATE/DIRTY/UNSTABLE flags are the state.
 */
struct folio {
	atomic_uint flags;
	atomic_uint refcount;
	spinlock_t state_lock;
	uint8_t size_shift;
	uint8_t block_shift;
	uint16_t nblocks_minus1; /* N - 1: N = 4096 must fit */
	uint64_t pos;
	unsigned char *data;
	/* Write I/O accounting with a bias (see writeback.c). */
	atomic_llong wb_pending;
	/* The mapping that indexes this folio (NULL for bare folios). */
	struct folio_mapping *mapping;
	/* The newest flush epoch in which a write of this folio completed
	 * (see folio_mark_unstable()); under state_lock. */
	uint64_t unstable_epoch;
	/* What write_begin() prepared: write_end() accepts nothing else.
	 * Valid while FOLIO_F_WRITE_BEGIN is set (under the folio lock). */
	uint32_t begin_off, begin_len;
	uint64_t state[];
};

static inline size_t folio_nblocks(const struct folio *f)
{
	return (size_t)f->nblocks_minus1 + 1;
}

/* folio_new() without the zero-fill: the mapping fills (or reads) every
 * byte before it marks it uptodate, and zeroing a 2 MiB folio that a write
 * is about to overwrite would double the cost of large writes. */
int folio_alloc(struct folio **out, uint64_t pos, size_t size,
		size_t block_size, bool zero);

/* folio_take_dirty() of the runs at or after byte `from` only: writeback
 * resumes behind the runs it already queued, so bytes that a failed
 * inline completion put back are left for the next pass instead of being
 * taken (and failed) again forever. */
int folio_take_dirty_from(struct folio *f, size_t from,
			  struct folio_range *runs, size_t max_runs);

/* Number of uptodate, dirty and unstable blocks (statistics). */
void folio_count_blocks(struct folio *f, size_t *uptodate, size_t *dirty,
			size_t *unstable);

/*
 * Unstable blocks: bytes a completed write put in the backing store that
 * no flush has yet made durable. They are clean, but the cache must keep
 * them until a flush that began after their write completed succeeds,
 * and make them dirty again when a flush fails. `epoch` is the mapping's
 * flush epoch read when the write completed.
 */
#define FOLIO_BECAME_UNSTABLE 4 /* internal: the folio had no unstable block */
/* Mark the blocks touched by [off, off+len) unstable. Returns
 * FOLIO_BECAME_UNSTABLE or 0. */
int folio_mark_unstable(struct folio *f, size_t off, size_t len,
			uint64_t epoch);
/* A flush that began in `epoch` succeeded: forget the unstable blocks
 * when every write behind them completed in `epoch` or earlier. Returns
 * whether the folio still has unstable blocks. */
bool folio_stabilize(struct folio *f, uint64_t epoch);
/* A flush failed: every unstable block becomes dirty again. Returns
 * FOLIO_BECAME_DIRTY when the folio was clean before, else 0. */
int folio_redirty_unstable(struct folio *f);
/* Forget the unstable state of blocks wholly inside [off, off+len) (the
 * data is gone: truncated or discarded). */
void folio_forget_unstable(struct folio *f, size_t off, size_t len);

static inline unsigned folio_flags(const struct folio *f)
{
	return atomic_load_explicit(&((struct folio *)f)->flags,
				    memory_order_acquire);
}

static inline bool folio_test_unstable(const struct folio *f)
{
	return folio_flags(f) & FOLIO_F_UNSTABLE;
}

/* Dirty, unstable, locked or under writeback: a folio a cache holding
 * nothing else would still have to keep or wait for. */
static inline bool folio_test_busy(const struct folio *f)
{
	return folio_flags(f) & (FOLIO_F_DIRTY | FOLIO_F_WRITEBACK |
				 FOLIO_F_LOCKED | FOLIO_F_UNSTABLE);
}

/* Left its mapping's index (set under the index's exclusive lock). */
static inline bool folio_test_removed(const struct folio *f)
{
	return folio_flags(f) & FOLIO_F_REMOVED;
}

static inline void folio_mark_removed(struct folio *f)
{
	atomic_fetch_or(&f->flags, FOLIO_F_REMOVED);
}

/* Record what write_begin() prepared, under the lock it took: only
 * write_end() of exactly that range may use the lock (folio_unlock()
 * forgets it). */
static inline void folio_mark_write_begin(struct folio *f, size_t off,
					  size_t len)
{
	f->begin_off = (uint32_t)off;
	f->begin_len = (uint32_t)len;
	atomic_fetch_or(&f->flags, FOLIO_F_WRITE_BEGIN);
}

/* Is the folio locked by a write_begin() and still in its mapping? */
static inline bool folio_test_write_begin(const struct folio *f)
{
	unsigned flags = folio_flags(f);
	return (flags & FOLIO_F_LOCKED) && (flags & FOLIO_F_WRITE_BEGIN) &&
	       !(flags & FOLIO_F_REMOVED);
}

/* Flags word helpers. Waking is folded into clearing: whoever clears a bit
 * that someone may sleep on clears WAITERS with it and wakes everyone;
 * sleepers that still cannot proceed set WAITERS again. */
void folio_clear_flag_wake(struct folio *f, unsigned bit);
void folio_wait_flag_clear(struct folio *f, unsigned bit);
/* As folio_wait_flag_clear() but gives up after `timeout` (NULL: never);
 * returns whether the bit is clear. */
bool folio_wait_flag_clear_for(struct folio *f, unsigned bit,
			       const struct timespec *timeout);

/* Sleep until writeback ends or `timeout` passes (NULL: no limit). */
static inline bool folio_wait_writeback_for(struct folio *f,
					    const struct timespec *timeout)
{
	return folio_wait_flag_clear_for(f, FOLIO_F_WRITEBACK, timeout);
}

/* Range checks shared by every public entry point. */
static inline int folio_check_range(const struct folio *f, size_t off,
				    size_t len)
{
	if (!f)
		return -EINVAL;
	size_t size = (size_t)1 << f->size_shift;
	if (off > size || len > size - off)
		return -ERANGE;
	return 0;
}

#endif
