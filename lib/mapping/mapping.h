/* SPDX-License-Identifier: MIT */
/*
 * The mapping (the cache of one object): struct folio_mapping, the rules
 * of its locks, and inlines on its fields. Each module of the layer has
 * its own header for its interface: cache.h (the cache a mapping may
 * belong to, and accounting), lookup.h (finding and creating folios, the
 * per-thread hint), tags.h (index iteration and tags), remove.h (removal
 * and reclaim), wait.h (lock and writeback waits), fill.h (read requests
 * filling folios), request.h (building engine requests), readahead.h,
 * writeback.h, commit.h (flushes and unstable data), errseq.h and
 * direct.h (direct I/O). The public calls are in lifecycle.c, lookup.c,
 * read.c, write.c, readahead.c, truncate.c, writeback.c, errseq.c,
 * stats.c and direct.c.
 *
 * Locks. A mapping's locks, the one lock order of the library and what
 * each mechanism protects are in doc/design.md, "Concurrency"; the
 * comment on each group of fields below names the lock that guards it.
 * io_lock is shared for reads, writes, writeback and direct overwrites,
 * exclusive for truncate, invalidate and other direct writes (direct.c).
 * The reasons that shape the code here: completions of engine requests
 * take only index_lock and state locks, so waiting for I/O holding a
 * folio lock or io_lock cannot deadlock; folios leave the index under
 * their folio lock and index_lock exclusive, also in the pool's reclaim,
 * which takes no io_lock, so whoever locks a folio found in the index
 * holds a reference and checks that it is still there before using it
 * (mapping_grab() does both); lookups of one position take no lock at
 * all (base/epoch.h).
 */
#ifndef FOLIO_MAPPING_H
#define FOLIO_MAPPING_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/brlock.h"
#include "base/spinlock.h"
#include "index/index.h"
#include "mapping/extents.h"
#include "engine/engine.h"
#include "folio/folio.h"
#include "mapping/ra_state.h"

struct mapping_cache;


/*
 * Each group of fields names the lock or rule that guards it; the lock
 * order and what each lock protects are in doc/design.md, "Concurrency".
 */
struct folio_mapping {
	/* Fixed at creation: read with no lock. */
	struct folio_engine *engine;
	unsigned block_shift;
	unsigned min_shift; /* index key = pos >> min_shift */
	unsigned max_shift;
	unsigned flags;
	/* Unique per mapping ever created: a thread's lookup hint names
	 * the mapping by it, so a hint is never taken for a later mapping
	 * at the same address. */
	uint64_t id;
	/* The cache this mapping belongs to (NULL: unbounded). */
	struct mapping_cache *cache;

	/* The mapping's locks, and the index that index_lock guards
	 * (single-folio lookups walk it lock-free, see above). */
	struct brlock io_lock;
	pthread_rwlock_t index_lock;
	struct index_tree index;

	/* Sizes: atomics. Writers raise EOF with a CAS under io_lock
	 * shared; truncate and invalidate set them under io_lock
	 * exclusive; completions raise `backing` with a CAS. */
	struct {
		_Atomic uint64_t eof;
		/* Store bytes from here on cannot be trusted: a failed
		 * flush lost a truncate and redoing it failed too, so the
		 * store may still hold what the truncate cut. Reads
		 * zero-fill there (what the object holds there that the
		 * store lacks is all cached, dirty) until a redo succeeds.
		 * UINT64_MAX: the store is good. */
		_Atomic uint64_t stale_from;
		/* The backing object's size as far as this mapping knows:
		 * the size it was opened with, raised by completed writes,
		 * set by truncate. Where an invalidated tail leaves EOF
		 * (truncate.c). */
		_Atomic uint64_t backing;
		/* How far the store may reach past `backing`: a failed
		 * write may have landed (a remote store that lost the
		 * reply), so a discard lowering EOF below this cuts the
		 * store (truncate.c). 0: the store's size is known. */
		_Atomic uint64_t landed_maybe;
	} size;

	/* Membership of the cache: `member` is the cache's own state, under
	 * the cache's locks (lib/pool/); `dirty_since` (atomic, CAS from 0)
	 * is when the mapping last went from clean to dirty
	 * (CLOCK_MONOTONIC ns; 0: clean, as far as the cache's flushers
	 * know). */
	struct {
		void *member;
		_Atomic uint64_t dirty_since;
	} in_cache;

	/* Error sequence (errseq.c): atomics, no lock. `seq`'s low bit
	 * says "seen", the rest counts errors; the errno of the latest
	 * error is kept beside it; `own_cursor` serves
	 * folio_mapping_sync(m, NULL) from any number of threads. */
	struct {
		_Atomic uint64_t seq;
		atomic_int last_error;
		_Atomic folio_errseq_t own_cursor;
	} err;

	/* Flushes (commit.c). Lock: commit.lock, a leaf, for the resize
	 * fields; failures_seen belongs to the flush role's holder; the
	 * atomics are read without a lock. */
	struct {
		/* A write completing in generation G is covered by a flush
		 * that starts after the generation moved past G. Moved on
		 * by the flush role's holder, read by completions without
		 * a lock. */
		_Atomic uint64_t flush_gen;
		/* The engine's flush_failures as of this mapping's last
		 * settled flush (held while a flush runs). */
		uint64_t failures_seen;
		pthread_mutex_t lock;
		/* The flush role, no lock: COMMIT_ROLE_* bits in a futex
		 * word whose upper bits count releases, so a thread that
		 * saw it taken sleeps until it changes. Flush rounds are
		 * started by the role's holder only; rounds_finished
		 * moves on when it hands the role back. */
		atomic_uint role;
		_Atomic uint64_t rounds_started, rounds_finished;
		/* Syncs of this mapping under way: with more than one, a
		 * flush round they share beats a durable write for one. */
		atomic_uint syncers;
		/* How long the last engine flush took (ns): the longest a
		 * round waits for other syncs' writes in flight. */
		_Atomic uint64_t flush_ns;
		/* Engine truncates no flush has covered yet: a flush that
		 * fails may have lost them too (a volatile disk cache), so
		 * they are redone. `low` is the smallest size cut to since
		 * the last covering flush, `gen` the newest truncate's flush
		 * generation. */
		bool resize_pending;
		atomic_bool resize_hint; /* resize_pending, read lock-free */
		uint64_t resize_low, resize_gen;
		/* A failed flush's redo of the pending resize failed too:
		 * the store may still hold bytes a truncate cut, so the
		 * next flush redoes it first and cannot succeed without. */
		bool redo_owed;
		/* The durable write of the sync holding the flush role:
		 * the flush generation its barrier covers, and its outcome
		 * (1: not durable, e.g. short; 0: durable; <0: it
		 * failed). */
		_Atomic uint64_t durable_gen;
		_Atomic int64_t durable_result;
		atomic_bool durable_failed; /* the request itself failed */
	} commit;

	/* Writeback (writeback.c): atomics, no lock. */
	struct {
		/* Write requests in flight: free refuses while there are
		 * any. A futex count (base/futex.h): a flush round may sleep
		 * until it drains (commit.c). */
		atomic_uint inflight;
		/* Completed writes whose bytes were put back dirty without
		 * an error of their own: the rest of a short write, and a
		 * write a failed flush may have dropped while it was in
		 * flight. A sync repeats its pass while this moves: such a
		 * block may go dirty while the sync waits for it, after its
		 * pass went by, and no error in the sequence tells the sync
		 * (the failed flush recorded its own before), so it would
		 * report success for a block it never wrote. */
		_Atomic uint64_t rewrites;
	} wb;

	/* Readahead (readahead.c): see struct mapping_ra for its lock. */
	struct mapping_ra ra;

	struct mapping_extents direct; /* extents.h: lock and use */
	/* Statistics (folio_mapping_stats(), stats.c): relaxed atomics, no
	 * lock. */
	struct {
		/* Bytes the callers wrote and read, counted on every call:
		 * striped per thread like io_lock, so threads on disjoint
		 * folios do not share a written cache line. */
		struct {
			_Alignas(BRLOCK_LINE) _Atomic uint64_t written;
			_Atomic uint64_t read;
			/* Lookups that found their folio: the cache's hit
			 * count (cache.h), here beside the byte counts that
			 * the same calls write. */
			_Atomic uint64_t hits;
		} io_bytes[BRLOCK_STRIPES];
		_Atomic uint64_t read_requests, read_bytes;
		_Atomic uint64_t wb_requests, wb_bytes, wb_merges;
		_Atomic uint64_t map_calls, retries, errors, flushes;
		_Atomic uint64_t readahead_bytes, readahead_hits;
		_Atomic uint64_t readahead_wasted;
		_Atomic uint64_t direct_writes, direct_fast_writes;
		_Atomic uint64_t direct_reads, direct_map_calls;
		_Atomic uint64_t direct_exclusive;
	} stats;
};

static inline void stat_add(_Atomic uint64_t *counter, uint64_t v)
{
	atomic_fetch_add_explicit(counter, v, memory_order_relaxed);
}

/* A lookup found its folio (see mapping_count_lookup_at()). */
static inline void mapping_count_hit(struct folio_mapping *m, unsigned stripe)
{
	stat_add(&m->stats.io_bytes[stripe].hits, 1);
}

/* The hits counted so far (relaxed: a statistic). */
uint64_t mapping_lookup_hits(const struct folio_mapping *m);

static inline uint64_t mapping_key(const struct folio_mapping *m,
				   uint64_t pos)
{
	return pos >> m->min_shift;
}

static inline unsigned mapping_folio_order(const struct folio_mapping *m,
				      const struct folio *f)
{
	return f->size_shift - m->min_shift;
}

static inline uint64_t mapping_eof(struct folio_mapping *m)
{
	return atomic_load_explicit(&m->size.eof, memory_order_acquire);
}

/* Raise one of the sizes to at least @end (completions race: a CAS). */
static inline void mapping_size_raise(_Atomic uint64_t *size, uint64_t end)
{
	uint64_t cur = atomic_load(size);
	while (cur < end && !atomic_compare_exchange_weak(size, &cur, end))
		;
}

/* Where reads stop taking bytes from the store and zero-fill: EOF, or
 * below it while the store is known to be stale there. */
static inline uint64_t mapping_read_end(struct folio_mapping *m)
{
	return MIN(mapping_eof(m),
		   atomic_load_explicit(&m->size.stale_from,
					memory_order_acquire));
}

/* mapping_grow_eof() once EOF was seen below `end`. */
void mapping_raise_eof(struct folio_mapping *m, uint64_t end);

/* Raise EOF to at least `end` (concurrent writers race benignly).
 * Inline: a write inside the object, the common case, only loads. */
static inline void mapping_grow_eof(struct folio_mapping *m, uint64_t end)
{
	if (atomic_load_explicit(&m->size.eof, memory_order_relaxed) < end)
		mapping_raise_eof(m, end);
}

/* n blocks of f, in bytes, as a signed change of a count. */
static inline int64_t mapping_block_bytes(const struct folio *f, size_t n)
{
	return (int64_t)((uint64_t)n << f->block_shift);
}

/* Arguments of the public read and write calls: 0, -EINVAL or -EFBIG. */
static inline int mapping_check_io_args(struct folio_mapping *m,
					const void *buf, size_t len,
					uint64_t pos)
{
	/* Apart, and buf marked unlikely: compilers otherwise compute the
	 * three tests branch-free on every call. */
	if (!m || (__builtin_expect(!buf, 0) && len))
		return -EINVAL;
	if (pos >= FOLIO_MAX_POS || len > FOLIO_MAX_POS - pos)
		return -EFBIG;
	return 0;
}


#endif
