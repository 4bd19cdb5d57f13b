/* SPDX-License-Identifier: MIT */
/*
 * The folio layer as the layers above see it: struct folio, its flag
 * bits and the internal calls beside the public folio_* ones. Only
 * lib/folio/ touches the flag bits; the layers above go through the
 * functions here.
 */
#ifndef FOLIO_FOLIO_H
#define FOLIO_FOLIO_H

#include <string.h>
#include <time.h>

#include "base/base.h"
#include "base/epoch.h"
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
#define FOLIO_F_READAHEAD 0x100u /* reaching it starts the next window */
#define FOLIO_F_RA_UNREAD 0x200u /* brought in by readahead, not yet read */
#define FOLIO_F_MAP_SHARED 0x400u /* the state map is one of the two shared
				   * ones of a clean, stable folio (all or
				   * nothing uptodate: see lib/folio/map.c) */

/*
 * The version (bits 12..31 of the flags word): an optimistic reader's
 * proof that nothing it can see changed while it copied (see
 * folio_read_begin()). The folio lock is the odd state of a seqcount:
 * every change of data or of state a reader looks at (uptodate, removed)
 * is made under it, and every unlock adds FOLIO_SEQ_ONE in the same
 * atomic operation that clears LOCKED. Bit 11 stays free for flags.
 */
#define FOLIO_SEQ_SHIFT 12
#define FOLIO_SEQ_ONE (1u << FOLIO_SEQ_SHIFT)
#define FOLIO_SEQ_MASK (~(FOLIO_SEQ_ONE - 1))

/*
 * Header is 64 bytes on LP64; the per-block state map follows: bits [0, N)
 * uptodate, [N, 2N) dirty, [2N, 3N) unstable (written, not yet flushed).
 * With N == 1 there is no map at all and the UPTODATE/DIRTY/UNSTABLE
 * flags are the state. Up to FOLIO_MAP_INLINE_MAX blocks the map is in
 * the same allocation (state[]); above, state[0] points to it (see
 * folio_state_map()), so that a wholly uptodate, clean and stable folio
 * can share one read-only map instead of keeping 3 bits per block
 * (folio_compact_state()). N follows from the two shifts, which leaves
 * room in the first word for what a cache of folios (the pool) keeps
 * per folio without growing the header.
 */
struct folio {
	atomic_uint flags;
	atomic_uint refcount;
	spinlock_t state_lock;
	uint8_t size_shift;
	uint8_t block_shift;
	/* Owned by folio_note_access() and friends below: an access count,
	 * one flag of the cache's and the hint pins. */
	_Atomic uint8_t cache_bits;
	/* The cache's handle for this folio (its queue node); the folio
	 * layer never reads it. 0: none. */
	uint32_t cache_node;
	uint64_t pos;
	unsigned char *data;
	/* Write I/O accounting with a bias (see writeback.c). */
	atomic_llong wb_pending;
	/* The mapping that indexes this folio (NULL for bare folios). */
	struct folio_mapping *mapping;
	union {
		struct {
			/* While the folio has unstable blocks, under
			 * state_lock (see folio_mark_unstable(); the flush
			 * generations: doc/design.md, "Concurrency"): the
			 * newest flush generation in which a write of them
			 * completed, and the oldest engine flush-failure
			 * count one of them was submitted under; both the
			 * low 32 bits, compared modulo 2^32. */
			uint32_t unstable_gen, unstable_failures;
			/* What write_begin() prepared: write_end() accepts
			 * nothing else. Valid while FOLIO_F_WRITE_BEGIN is
			 * set (under the folio lock). */
			uint32_t begin_off, begin_len;
		};
		/* Once the last reference is gone: the header waits here
		 * for a grace period (folio_put()). No lock-free lookup
		 * reads these bytes, only refcount and flags. */
		struct epoch_entry retire;
	};
	uint64_t state[];
};

static inline size_t folio_nblocks(const struct folio *f)
{
	return (size_t)1 << (f->size_shift - f->block_shift);
}

/* The most blocks whose map stays inside the header: 32 blocks (128 KiB
 * of 4 KiB blocks) take 12 bytes there, less than a pointer and an
 * object of their own. */
#define FOLIO_MAP_INLINE_MAX 32u

static inline bool folio_map_outside(const struct folio *f)
{
	/* As nblocks > FOLIO_MAP_INLINE_MAX, without the shift. */
	return f->size_shift - f->block_shift >
	       __builtin_ctz(FOLIO_MAP_INLINE_MAX);
}

/* Does the folio point at a shared (read-only) state map? Only a hint
 * without state_lock, which the flag and the map change under. */
static inline bool folio_map_shared(const struct folio *f)
{
	return atomic_load_explicit(&f->flags, memory_order_relaxed) &
	       FOLIO_F_MAP_SHARED;
}

/* The per-block state map of a multi-block folio. Read and written
 * under state_lock only: outside maps change place under it. */
static inline uint64_t *folio_state_map(struct folio *f)
{
	return folio_map_outside(f) ? (uint64_t *)(uintptr_t)f->state[0]
				    : f->state;
}

/* Blocks [*first, *end) touched by [off, off+len) (len > 0): outward
 * rounding. */
static inline void folio_blocks_outward(const struct folio *f, size_t off,
					size_t len, size_t *first, size_t *end)
{
	*first = off >> f->block_shift;
	*end = ((off + len - 1) >> f->block_shift) + 1;
}

/* One block: no bitmap, the flags are the state. */
static inline bool folio_single_block(const struct folio *f)
{
	return f->size_shift == f->block_shift;
}

/* Bytes of the folio's header, with its state map when that is inside
 * (constant over the folio's life). */
size_t folio_metadata_bytes(const struct folio *f);

/*
 * Outside state maps (folios of more than FOLIO_MAP_INLINE_MAX blocks).
 *
 * folio_compact_state(): once a folio is wholly uptodate, clean, stable
 * and not under writeback, give its map back and point at the shared
 * read-only one (a cache of large folios read from the store keeps a
 * 72-byte header per folio instead of 3 more bits per block). Returns the
 * bytes given back (0: kept). Refused for a folio under writeback: its
 * completion must be able to mark blocks unstable or dirty without
 * allocating. Callers hold the folio lock, as every writer does from
 * folio_own_state() to marking its blocks dirty, so no map goes while a
 * writer relies on having one.
 *
 * folio_own_state(): give a folio with the shared map a map of its own
 * again (a copy of the shared state); 0, or -ENOMEM with nothing
 * changed. A writer calls it before it changes the folio's data, so that
 * marking the bytes dirty afterwards cannot fail; the state functions
 * that change a shared map call it themselves.
 *
 * folio_outside_map_bytes(): the outside maps of every folio in the
 * process, in bytes (the allocator's object sizes).
 */
size_t folio_compact_state(struct folio *f);
int folio_own_state_slow(struct folio *f);
size_t folio_outside_map_bytes(void);
/*
 * folio_forget_shared(): a folio with the shared map holds only clean,
 * stable copies; make none of its blocks uptodate, with the other shared
 * map (nothing uptodate), allocating nothing. For a caller that must mark
 * blocks not uptodate and could not get a map of the folio's own (a
 * direct write over cached blocks, out of memory); the folio lock held.
 * Returns true when done, false when the map was the folio's own.
 * A fill of the whole folio later shares the uptodate map again; one of
 * part of it takes a map of its own (or fails with -ENOMEM).
 */
bool folio_forget_shared(struct folio *f);
/* blocks.c's whole fill of a folio with the shared "nothing uptodate"
 * map: the shared "all uptodate" one instead. State lock held. */
void folio_share_uptodate_locked(struct folio *f);
/* folio_alloc() and the last put's: a new folio's outside map, all zero
 * (nothing uptodate), 0 or -ENOMEM; giving it back with the folio (the
 * shared one stays). */
int folio_map_init(struct folio *f);
void folio_map_release(struct folio *f);
/* Tests: the next this many outside map allocations fail as out of
 * memory would (the library never sets it). */
extern _Atomic unsigned folio_map_fail_next;

/* A writer's look before it copies into a folio it holds locked: wholly
 * uptodate, with a state map of its own, so there is nothing to prepare
 * (one load of the flags where asking each would take two). */
static inline bool folio_ready_for_write(const struct folio *f)
{
	return (atomic_load_explicit(&f->flags, memory_order_relaxed) &
		(FOLIO_F_UPTODATE | FOLIO_F_MAP_SHARED)) == FOLIO_F_UPTODATE;
}

static inline int folio_own_state(struct folio *f)
{
	return folio_map_shared(f) ? folio_own_state_slow(f) : 0;
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

/*
 * Counted state changes for callers that keep byte totals of dirty and
 * unstable data (the pool): each reports, in blocks, exactly what it
 * changed, from the same pass over the bitmap.
 *
 * folio_set_dirty_uptodate() / folio_set_dirty() returning in *newly the
 * blocks that were clean before.
 */
int folio_dirty_counted(struct folio *f, size_t off, size_t len,
			bool uptodate, size_t *newly);
/* folio_clear_dirty(); returns the blocks that were dirty (0 on bad
 * input). */
size_t folio_clear_dirty_counted(struct folio *f, size_t off, size_t len);

/* The folio leaves its mapping: under one lock, count its dirty and
 * unstable blocks and clear them, so that nothing done to it afterwards
 * (a flush settling, through a reference taken earlier) changes a count
 * it no longer belongs to. */
void folio_drain(struct folio *f, size_t *dirty, size_t *unstable);

/* Number of uptodate, dirty and unstable blocks (statistics). */
void folio_count_blocks(struct folio *f, size_t *uptodate, size_t *dirty,
			size_t *unstable);

/* Marking blocks unstable and settling them: folio/unstable.h (inline,
 * once per written folio). */
#define FOLIO_BECAME_UNSTABLE 4 /* internal: the folio had no unstable block */
/* A flush failed: every unstable block becomes dirty again. *unstable
 * gets the blocks that were unstable, *newly_dirty those of them that
 * were not dirty already (both may be NULL). Returns FOLIO_BECAME_DIRTY
 * when the folio was clean before, else 0. */
int folio_redirty_unstable(struct folio *f, size_t *unstable,
			   size_t *newly_dirty);
/* Forget the unstable state of blocks wholly inside [off, off+len) (the
 * data is gone: truncated or discarded). Returns how many were unstable. */
size_t folio_forget_unstable(struct folio *f, size_t off, size_t len);

static inline unsigned folio_flags(const struct folio *f)
{
	return atomic_load_explicit(&((struct folio *)f)->flags,
				    memory_order_acquire);
}

/* Wake everyone sleeping on the flags word (folio_clear_flag_wake() saw
 * and cleared WAITERS). */
void folio_wake_waiters(struct folio *f);

/*
 * Flags word helpers. Waking is folded into clearing: whoever clears a bit
 * that someone may sleep on clears WAITERS with it, in the same atomic
 * operation, and wakes everyone; sleepers that still cannot proceed set
 * WAITERS again. One operation, because once an unlock is done the folio
 * may be reclaimed and freed at once: nothing may read it afterwards.
 * Inline, with only the wake out of line: every unlock pays this.
 */
static inline void folio_clear_flag_wake(struct folio *f, unsigned bit)
{
	if (atomic_fetch_and_explicit(&f->flags, ~(bit | FOLIO_F_WAITERS),
				      memory_order_acq_rel) &
	    FOLIO_F_WAITERS)
		folio_wake_waiters(f);
}

/*
 * The seqcount's barriers and its racy copy. An optimistic reader's copy
 * races with writers by design and with the allocator once the folio's
 * data is freed: its result is used only when the version says nothing
 * changed. Checkers must not see it: under ThreadSanitizer and
 * AddressSanitizer the copy is a function they do not instrument
 * (folio_copy_racy_slow()), and under valgrind's memcheck its error
 * reporting is off for the copy. Everything else (the flags, the wrap
 * count) is a real atomic, which ThreadSanitizer checks. On x86 loads
 * stay in order and a locked RMW orders everything, so the barriers are
 * the compiler's only (TSan, which does not model standalone fences and
 * which gcc refuses them under, then sees none); elsewhere they are real
 * fences.
 */
#if defined(__SANITIZE_THREAD__)
#define FOLIO_RACY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FOLIO_RACY_TSAN 1
#endif
#endif
#if defined(FOLIO_RACY_TSAN) || defined(__SANITIZE_ADDRESS__)
#define FOLIO_RACY_CHECKED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FOLIO_RACY_CHECKED 1
#endif
#endif

#if defined(__x86_64__) || defined(__i386__)
/* The lock's locked RMW is a full barrier already: nothing to add. */
#define folio_seq_fence_release() ((void)0)
#ifdef FOLIO_RACY_CHECKED
#define folio_seq_fence_acquire() atomic_signal_fence(memory_order_acquire)
#else
#define folio_seq_fence_acquire() atomic_thread_fence(memory_order_acquire)
#endif
#else
#define folio_seq_fence_release() atomic_thread_fence(memory_order_release)
#define folio_seq_fence_acquire() atomic_thread_fence(memory_order_acquire)
#endif

#ifdef FOLIO_RACY_CHECKED
void folio_copy_racy_slow(void *dst, const void *src, size_t n);

static inline void folio_copy_racy(void *dst, const void *src, size_t n)
{
	folio_copy_racy_slow(dst, src, n);
}
#else
/* The copy to use: memcpy() once known that no checker watches, the
 * memcheck-quiet copy under memcheck, and until the first copy found out,
 * the function that finds out (folio.c). Through a pointer rather than a
 * test of a flag: the hot read calls memcpy() with no test and no PLT
 * stub. */
typedef void *(*folio_copy_fn)(void *dst, const void *src, size_t n);
extern HIDDEN _Atomic(folio_copy_fn) folio_copy_racy_fn;

static inline void folio_copy_racy(void *dst, const void *src, size_t n)
{
	atomic_load_explicit(&folio_copy_racy_fn, memory_order_relaxed)(
		dst, src, n);
}
#endif

/* Bumped (release) by an unlock about to wrap a folio's version, while
 * it still holds the lock: an optimistic reader compares it before and
 * after, so no read spans a full turn of a 20-bit version. Once per 2^20
 * unlocks of one folio: the line stays read-mostly. */
extern HIDDEN atomic_uint folio_seq_wraps;
void folio_seq_wrap(void);

/* Inline twins of public calls, for internal callers that hold a valid
 * folio: the fast paths cost a few instructions per call less without
 * the public functions' argument checks and calls. Each public one
 * checks its arguments and calls its twin (folio.c): folio_bytes() of
 * folio_size(), folio_all_uptodate() of folio_test_uptodate(),
 * folio_lock_nowait() of folio_trylock(), folio_unlock_held() of
 * folio_unlock(), folio_flag_dirty() of folio_test_dirty(),
 * folio_flag_writeback() of folio_test_writeback(),
 * folio_trystart_writeback() of folio_start_writeback() and
 * folio_end_writeback_held() of folio_end_writeback(). */
static inline size_t folio_bytes(const struct folio *f)
{
	return (size_t)1 << f->size_shift;
}

static inline bool folio_all_uptodate(const struct folio *f)
{
	return folio_flags(f) & FOLIO_F_UPTODATE;
}

/* A one-block folio whose block is dirty and uptodate (for such a folio
 * the flags are the block's state). */
static inline bool folio_single_dirty_uptodate(const struct folio *f)
{
	return folio_single_block(f) &&
	       (folio_flags(f) & (FOLIO_F_DIRTY | FOLIO_F_UPTODATE)) ==
		       (FOLIO_F_DIRTY | FOLIO_F_UPTODATE);
}

/* Atomically set `bit` if it is clear; true when this call set it. An OR
 * that finds the bit set changes nothing, so one fetch-or (a single
 * bit-test-and-set) does what a CAS loop would; the plain load first
 * leaves a busy folio's line unwritten. */
static inline bool folio_try_set_flag(struct folio *f, unsigned bit)
{
	if (atomic_load_explicit(&f->flags, memory_order_relaxed) & bit)
		return false;
	return !(atomic_fetch_or_explicit(&f->flags, bit,
					  memory_order_acquire) &
		 bit);
}

/* Take the lock without waiting. The release fence orders the LOCKED
 * store before the holder's data stores (an optimistic reader that saw
 * one of them then sees LOCKED or a newer version: the seqcount's
 * write-side barrier; none on x86, where the locked RMW is one). */
static inline bool folio_lock_nowait(struct folio *f)
{
	if (!folio_try_set_flag(f, FOLIO_F_LOCKED))
		return false;
	folio_seq_fence_release();
	return true;
}

/* Unlock a folio whose lock the caller holds, bumping its version (see
 * FOLIO_SEQ_SHIFT), waking sleepers: one compare-and-swap, as nothing
 * may read the folio after its unlock. A lock write_begin() took ends
 * here whoever releases it. */
static inline void folio_unlock_held(struct folio *f)
{
	unsigned v = atomic_load_explicit(&f->flags, memory_order_relaxed);
	/* The version's bits all set: this unlock wraps it. Checked once:
	 * a failed CAS below can only have seen other bits change (the
	 * version moves only under the lock, which is ours). */
	if (__builtin_expect(v >= FOLIO_SEQ_MASK, 0))
		folio_seq_wrap();
	while (!atomic_compare_exchange_weak_explicit(
		&f->flags, &v,
		(v & ~(FOLIO_F_LOCKED | FOLIO_F_WRITE_BEGIN | FOLIO_F_WAITERS)) +
			FOLIO_SEQ_ONE,
		memory_order_acq_rel, memory_order_relaxed))
		;
	if (v & FOLIO_F_WAITERS)
		folio_wake_waiters(f);
}

/* Unlock for a holder that changed neither the folio's data nor what an
 * optimistic reader checks (uptodate, REMOVED): no version bump, so no
 * reader copying meanwhile retries, and the unlock costs what it did
 * before versions. Writeback's pass (it takes dirty runs and starts
 * writeback) and readers under the lock. When in doubt, unlock_held. */
static inline void folio_unlock_unchanged(struct folio *f)
{
	folio_clear_flag_wake(f, FOLIO_F_LOCKED | FOLIO_F_WRITE_BEGIN);
}

/*
 * Optimistic reads (doc/design.md, "Optimistic reads"): the seqcount
 * read side over the flags word, with no write to the folio.
 *
 *	struct folio_seq s;
 *	if (folio_read_begin(f, &s)) {
 *		folio_copy_racy(dst, f->data + off, n);
 *		if (folio_read_valid(f, &s)) -> the copy is one state of f
 *	}
 *
 * The caller keeps f's header and data mapped for the whole sequence (an
 * epoch section, or a reference); the data may still be freed and
 * reused meanwhile, which the REMOVED bit and the version reveal.
 * folio_read_begin() is false when the folio is locked, removed, not
 * wholly uptodate or carries a readahead mark: the locked path decides
 * those (a mark is taken under the lock, readahead.c).
 */
struct folio_seq {
	unsigned flags, wraps;
};

static inline bool folio_read_begin(const struct folio *f,
				    struct folio_seq *s)
{
	/* Acquire: an unlock about to wrap bumped the count holding the
	 * lock, so a reader seeing the bump sees the lock or later. */
	s->wraps = atomic_load_explicit(&folio_seq_wraps, memory_order_acquire);
	s->flags = folio_flags(f);
	return (s->flags & (FOLIO_F_LOCKED | FOLIO_F_REMOVED | FOLIO_F_UPTODATE |
			    FOLIO_F_READAHEAD | FOLIO_F_RA_UNREAD)) ==
	       FOLIO_F_UPTODATE;
}

static inline bool folio_read_valid(const struct folio *f,
				    const struct folio_seq *s)
{
	/* The copy's loads come before the flags load (the seqcount's
	 * read-side barrier), and that load acquires the unlock it reads
	 * from, so a wrap it follows is seen in the count. */
	folio_seq_fence_acquire();
	unsigned now = folio_flags(f);
	unsigned keep = FOLIO_SEQ_MASK | FOLIO_F_LOCKED | FOLIO_F_REMOVED |
			FOLIO_F_UPTODATE;
	return !((now ^ s->flags) & keep) &&
	       atomic_load_explicit(&folio_seq_wraps, memory_order_relaxed) ==
		       s->wraps;
}

/* The writeback pass checks these for every folio it visits. */
static inline bool folio_flag_dirty(const struct folio *f)
{
	return folio_flags(f) & FOLIO_F_DIRTY;
}

static inline bool folio_flag_writeback(const struct folio *f)
{
	return folio_flags(f) & FOLIO_F_WRITEBACK;
}

/* Set WRITEBACK (false: it was set already); clear the WRITEBACK the
 * caller set, waking its waiters. */
static inline bool folio_trystart_writeback(struct folio *f)
{
	return folio_try_set_flag(f, FOLIO_F_WRITEBACK);
}

static inline void folio_end_writeback_held(struct folio *f)
{
	folio_clear_flag_wake(f, FOLIO_F_WRITEBACK);
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

/*
 * Readahead's two marks (mapping/readahead.c). Both are hints set under
 * the folio lock and taken with one atomic operation, so that of several
 * readers reaching a folio at once exactly one starts the next window and
 * one counts the hit; neither decides anything about the folio's data.
 */
static inline void folio_set_ra_marks(struct folio *f, bool trigger,
				      bool unread)
{
	unsigned bits = (trigger ? FOLIO_F_READAHEAD : 0u) |
			(unread ? FOLIO_F_RA_UNREAD : 0u);
	if (bits)
		atomic_fetch_or(&f->flags, bits);
}

/* Take the marks named by `trigger` and `unread`: returns those of
 * them that were set (as bits: 1 trigger, 2 unread). */
#define FOLIO_RA_TRIGGER 1u
#define FOLIO_RA_UNREAD 2u
static inline unsigned folio_take_ra_marks(struct folio *f, unsigned which)
{
	unsigned bits = ((which & FOLIO_RA_TRIGGER) ? FOLIO_F_READAHEAD : 0u) |
			((which & FOLIO_RA_UNREAD) ? FOLIO_F_RA_UNREAD : 0u);
	/* A load first: most folios a reader touches carry neither mark,
	 * and a read-modify-write would dirty their header line. */
	if (!(folio_flags(f) & bits))
		return 0;
	unsigned old = atomic_fetch_and(&f->flags, ~bits) & bits;
	return ((old & FOLIO_F_READAHEAD) ? FOLIO_RA_TRIGGER : 0u) |
	       ((old & FOLIO_F_RA_UNREAD) ? FOLIO_RA_UNREAD : 0u);
}

static inline bool folio_test_ra_unread(const struct folio *f)
{
	return folio_flags(f) & FOLIO_F_RA_UNREAD;
}

/*
 * What a cache of folios keeps in the folio (struct folio.cache_bits), so
 * that a cache hit writes nothing but the folio's own header line:
 *  - an access count, 0..3, raised by hits and lowered or reset by the
 *    cache's eviction scan;
 *  - one flag of the cache's own (the pool: "in the main queue");
 *  - hint pins: references that a thread's lookup hint holds (see
 *    the mapping layer's lookup.c). They keep the folio's memory alive
 *    but do not make it "referenced": folio_unpinned_refs() leaves them
 *    out, so a cache may still evict a folio that some idle thread merely
 *    remembers.
 * Every change is one atomic operation on the byte.
 */
#define FOLIO_ACCESS_MAX 3u

/* A hit: raise the access count (saturating). */
static inline void folio_note_access(struct folio *f)
{
	uint8_t v = atomic_load_explicit(&f->cache_bits, memory_order_relaxed);
	while ((v & FOLIO_ACCESS_MAX) != FOLIO_ACCESS_MAX &&
	       !atomic_compare_exchange_weak_explicit(&f->cache_bits, &v,
						      (uint8_t)(v + 1),
						      memory_order_relaxed,
						      memory_order_relaxed))
		;
}

static inline unsigned folio_access_count(const struct folio *f)
{
	return atomic_load_explicit(&((struct folio *)f)->cache_bits,
				    memory_order_relaxed) &
	       FOLIO_ACCESS_MAX;
}

/* Lower the access count by one (0 stays 0); returns the count before. */
unsigned folio_access_lower(struct folio *f);
/* Reset the access count to 0; returns the count before. */
unsigned folio_access_reset(struct folio *f);
/* The cache's flag. */
bool folio_cache_flag(const struct folio *f);
void folio_set_cache_flag(struct folio *f, bool on);

/* Take a reference for a lookup hint: a pin when there is room for one
 * (true), else a plain reference (false), which folio_hint_put() must be
 * told about. */
bool folio_hint_get(struct folio *f);
/* The same for a reference the caller already holds, which becomes the
 * hint's. */
bool folio_hint_adopt(struct folio *f);
void folio_hint_put(struct folio *f, bool pinned);
/* References other than hint pins. */
unsigned folio_unpinned_refs(const struct folio *f);

/*
 * References for lock-free lookups (the kernel's speculative page cache
 * references). A lookup that found f inside an epoch section may take a
 * reference only with folio_try_get(), which fails when the folio is
 * dying (its last reference is gone; the header outlives it until the
 * grace period) or frozen; it then rechecks that f is still where it
 * found it.
 *
 * A remover that must know nobody but itself uses f (the pool's
 * reclaim) freezes the count instead of reading it: folio_ref_freeze()
 * succeeds only when exactly `unpinned` references other than hint pins
 * are held, and no folio_try_get() succeeds until folio_ref_unfreeze().
 * Plain references (folio_get(), folio_put(), hint pins) still work on a
 * frozen count.
 */
/* Above any real count: a folio has far fewer than 2^31 references. */
#define FOLIO_REF_FROZEN 0x80000000u

/* Inline: every lock-free lookup that hits takes it. */
static inline bool folio_try_get(struct folio *f)
{
	unsigned r = atomic_load_explicit(&f->refcount, memory_order_relaxed);
	do {
		if (!r || (r & FOLIO_REF_FROZEN))
			return false;
	} while (!atomic_compare_exchange_weak_explicit(
		&f->refcount, &r, r + 1, memory_order_acquire,
		memory_order_relaxed));
	return true;
}

/*
 * folio_get() and folio_put() for the library's own paths, inline: a
 * written-back folio takes and drops four references, a cached read one
 * or two, and the exported functions cost a call each. NULL is ignored,
 * as by the exported ones, which are these.
 */
HIDDEN void folio_free_unreferenced(struct folio *f);

static inline struct folio *folio_ref(struct folio *f)
{
	if (f)
		atomic_fetch_add_explicit(&f->refcount, 1, memory_order_relaxed);
	return f;
}

static inline void folio_unref(struct folio *f)
{
	if (f && atomic_fetch_sub_explicit(&f->refcount, 1,
					   memory_order_acq_rel) == 1)
		folio_free_unreferenced(f);
}

bool folio_ref_freeze(struct folio *f, unsigned unpinned);
void folio_ref_unfreeze(struct folio *f);

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

/* Sleep until the folio is unlocked or `timeout` passes (NULL: no
 * limit); whether it was unlocked. The lock may be taken again at once. */
static inline bool folio_wait_unlocked_for(struct folio *f,
					   const struct timespec *timeout)
{
	return folio_wait_flag_clear_for(f, FOLIO_F_LOCKED, timeout);
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
