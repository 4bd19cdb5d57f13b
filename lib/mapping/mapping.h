/* SPDX-License-Identifier: MIT */
/*
 * The mapping (the cache of one object) as seen by its modules:
 * mapping.c (life cycle, folio lookup/creation, tags, stats), rw.c (buffered
 * read and write), readahead.c (sequential stream detection and reads
 * started without waiting), truncate.c (truncate, invalidate), request.c (building
 * engine requests), writeback.c, commit.c (flushes and unstable data) and
 * errseq.c (error reporting).
 *
 * Lock order, outermost first:
 *   io_lock (brlock: shared for read/write/writeback, exclusive for
 *            truncate and invalidate, which change which folios exist
 *            beyond what a reader or writer could observe mid-call)
 *   folio LOCKED bits, in ascending position order
 *   index_lock (rwlock around the radix tree; tags are set under the
 *               shared side with atomics, cleared under the exclusive side;
 *               lookups of one folio take neither side, see below)
 *   folio state spinlock
 * commit.lock guards only the bookkeeping of flushes and pending resizes;
 * nothing else is taken while it is held.
 * Completions of engine requests take only index_lock and state locks, so
 * waiting for I/O while holding a folio lock or io_lock cannot deadlock.
 *
 * Folios leave the index under their folio lock and index_lock held
 * exclusively: truncate and invalidate (with io_lock exclusive too), and
 * the cache a mapping may belong to (the pool), which reclaims clean
 * folios without io_lock at all (see mapping_reclaim_folio()). So a
 * pointer that io_lock shared used to keep valid is now kept valid by a
 * reference, and whoever locks a folio found in the index checks that it
 * is still there (FOLIO_REMOVED is set under both locks) before using it:
 * mapping_find_or_create_locked() does both.
 *
 * Lookups of the folio at one position take no lock (mapping_lookup(),
 * mapping_trylock_cached()): inside an epoch section (base/epoch.h) they
 * walk the index, which publishes nodes and entries with release stores
 * and frees nodes after a grace period, and take a reference with
 * folio_try_get() (or the folio lock) followed by a check that the folio
 * is still there. A folio's header outlives its last reference by a grace
 * period (its data does not). The pool's reclaim freezes the count
 * (folio_ref_freeze()) under index_lock exclusive, so "nobody but the
 * index and me" cannot turn false between its check and the removal.
 * Iterations, tag changes and removals still use index_lock. A cache's
 * locks come after
 * every lock above (they are leaves), and nobody waits for cache memory
 * or dirty throttling while holding io_lock or a folio lock.
 */
#ifndef FOLIO_MAPPING_H
#define FOLIO_MAPPING_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/brlock.h"
#include "base/spinlock.h"
#include "index/index.h"
#include "engine/engine.h"
#include "folio/folio.h"

struct folio_mapping;

/*
 * A cache shared by mappings: the interface the mapping layer calls and
 * the pool (lib/pool/, the layer above) implements, so that the mapping
 * never depends on the pool. A pool embeds struct mapping_cache first;
 * struct folio_pool * converts to it.
 *
 * Byte counts of dirty, writeback and unstable data, and hit and miss
 * counts, are striped per thread (brlock_thread_stripe()) so that writers of
 * disjoint folios share no written line; a stripe may go negative, the
 * sum is exact.
 */
struct mapping_cache_stripe {
	_Alignas(BRLOCK_LINE) _Atomic int64_t dirty;
	_Atomic int64_t writeback;
	_Atomic int64_t unstable;
	_Atomic uint64_t hits, misses;
};

struct mapping_cache;

struct mapping_cache_ops {
	/* A new mapping joins (its geometry must fit): 0 or -errno. */
	int (*attach)(struct mapping_cache *c, struct folio_mapping *m);
	/* Before free: the cache's own threads stop using m and quiesce()
	 * returns when none does; unquiesce() undoes it (free refused),
	 * detach() ends the membership. */
	void (*quiesce)(struct mapping_cache *c, struct folio_mapping *m);
	void (*unquiesce)(struct mapping_cache *c, struct folio_mapping *m);
	void (*detach)(struct mapping_cache *c, struct folio_mapping *m);
	/* Charge `bytes` for a new folio of m without sleeping, reclaiming
	 * what can be reclaimed at once (trylocks only). 0 or
	 * MAPPING_CACHE_FULL.
	 * The caller may hold io_lock shared and folio locks of m. */
	int (*charge)(struct mapping_cache *c, struct folio_mapping *m,
		      size_t bytes);
	void (*uncharge)(struct mapping_cache *c, size_t bytes);
	/* Sleep until `bytes` are charged (0), or -ENOMEM when nothing can
	 * make room. Called holding no lock of any mapping. */
	int (*reserve)(struct mapping_cache *c, struct folio_mapping *m,
		       size_t bytes);
	/* A charged folio entered m's index (it is locked by the caller);
	 * a folio left it (its charge goes back). */
	void (*added)(struct mapping_cache *c, struct folio_mapping *m,
		      struct folio *f);
	void (*removed)(struct mapping_cache *c, struct folio_mapping *m,
			struct folio *f);
	/* Dirty data passed a threshold: wake the cache's flushers (any
	 * context, never sleeps); throttle the writer (no lock held). */
	void (*kick)(struct mapping_cache *c);
	void (*balance)(struct mapping_cache *c, struct folio_mapping *m);
	/* Memory or dirty data went down: wake whoever waits for that. */
	void (*progress)(struct mapping_cache *c);
};

/* charge() could not find room without waiting. */
#define MAPPING_CACHE_FULL (-EAGAIN)

struct mapping_cache {
	const struct mapping_cache_ops *ops;
	/* Thresholds on dirty + writeback bytes (the pool's options), and
	 * how many bytes a thread dirties between two looks at them. */
	uint64_t dirty_background, dirty_limit, ratelimit;
	/* Largest readahead window of its mappings (0: no limit): what
	 * the cache can hold unread without evicting it before use. */
	uint64_t readahead_max;
	/* Threads sleeping until memory or dirty data goes down: wakers
	 * call progress() only when there are some. */
	atomic_uint waiters;
	struct mapping_cache_stripe stripe[BRLOCK_STRIPES];
};

/*
 * Readahead state (readahead.c): a few sequential streams, each a reader
 * moving forward contiguously or at a fixed stride, and the window last
 * started for it. Small and under one spinlock: it is touched once per
 * read call and once per window.
 */
#define MAPPING_RA_STREAMS 4

struct mapping_ra_stream {
	uint64_t prev;      /* start of the stream's last read */
	uint64_t next;      /* where a contiguous read would continue */
	uint64_t stride;    /* distance between its last two reads; 0: none */
	uint64_t win_start; /* the latest window: [win_start, win_end) */
	uint64_t win_end;
	uint64_t used;      /* clock of its last read, for replacement */
	unsigned seq;       /* reads in a row that continued it */
	bool live;
};

struct mapping_ra {
	spinlock_t lock;
	uint64_t clock;
	struct mapping_ra_stream s[MAPPING_RA_STREAMS];
};

struct folio_mapping {
	struct folio_engine *engine;
	unsigned block_shift;
	unsigned min_shift; /* index key = pos >> min_shift */
	unsigned max_shift;
	unsigned flags;

	struct brlock io_lock;
	pthread_rwlock_t index_lock;
	struct index_tree index;

	_Atomic uint64_t size; /* EOF */
	/* Store bytes from here on cannot be trusted: a failed flush lost
	 * a truncate and redoing it failed too, so the store may still
	 * hold what the truncate cut. Reads zero-fill there (what the
	 * object holds there that the store lacks is all cached, dirty)
	 * until a redo succeeds. UINT64_MAX: the store is good. */
	_Atomic uint64_t stale_from;
	/* The backing object's size as far as this mapping knows: the size
	 * it was opened with, raised by completed writes, set by truncate.
	 * Where an invalidated tail leaves EOF (truncate.c). */
	_Atomic uint64_t backing_size;

	/* Unique per mapping ever created: a thread's lookup hint names
	 * the mapping by it, so a hint is never taken for a later mapping
	 * at the same address. */
	uint64_t id;

	/* The cache this mapping belongs to (NULL: unbounded), the cache's
	 * own per-mapping state, and when the mapping last went from clean
	 * to dirty (CLOCK_MONOTONIC ns; 0: clean, as far as the cache's
	 * flushers know). */
	struct mapping_cache *cache;
	void *cache_member;
	_Atomic uint64_t dirty_since;

	/* Error sequence (writeback.c): the low bit says "seen", the rest
	 * counts errors; the errno of the latest error is kept beside it. */
	_Atomic uint64_t errseq;
	atomic_int last_error;

	/* For folio_mapping_sync(m, NULL), from any number of threads. */
	_Atomic folio_errseq_t own_cursor;

	/* Flushes (commit.c). A write completing in epoch E is covered by a
	 * flush that starts after the epoch moved past E. */
	_Atomic uint64_t flush_epoch;
	/* The engine's flush_failures as of this mapping's last settled
	 * flush (commit.lock held while a flush runs). */
	uint64_t failures_seen;
	struct {
		pthread_mutex_t lock;
		pthread_cond_t done_cond;
		bool running;
		uint64_t started, finished; /* flush generations */
		/* Engine truncates no flush has covered yet: a flush that
		 * fails may have lost them too (a volatile disk cache), so
		 * they are redone. `low` is the smallest size cut to since
		 * the last covering flush, `epoch` the newest truncate's. */
		bool resize_pending;
		uint64_t resize_low, resize_epoch;
		/* A failed flush's redo of the pending resize failed too:
		 * the store may still hold bytes a truncate cut, so the
		 * next flush redoes it first and cannot succeed without. */
		bool redo_owed;
		/* The durable write of the sync holding the flush role:
		 * the epoch its barrier covers, and its outcome (1: not
		 * durable, e.g. short; 0: durable; <0: it failed). */
		_Atomic uint64_t durable_epoch;
		_Atomic int64_t durable_result;
		atomic_bool durable_failed; /* the request itself failed */
	} commit;

	/* Write requests in flight: free refuses while there are any. */
	atomic_uint wb_inflight;
	/* Readahead batches whose requests are in flight: free, truncate
	 * and invalidate wait for them (readahead.c). */
	atomic_uint ra_inflight;
	uint64_t ra_max; /* largest window, bytes */
	struct mapping_ra ra;
	/* Completed writes whose bytes were put back dirty without an error
	 * of their own: the rest of a short write, and a write a failed
	 * flush may have dropped while it was in flight. A sync repeats its
	 * pass while this moves: such a block may go dirty while the sync
	 * waits for it, after its pass went by, and no error in the
	 * sequence tells the sync (the failed flush recorded its own
	 * before), so it would report success for a block it never wrote. */
	_Atomic uint64_t rewrites;

	/* Bytes the callers wrote and read, counted on every call: striped
	 * per thread like io_lock, so threads on disjoint folios do not
	 * share a written cache line. */
	struct {
		_Alignas(BRLOCK_LINE) _Atomic uint64_t written;
		_Atomic uint64_t read;
	} io_bytes[BRLOCK_STRIPES];

	struct {
		_Atomic uint64_t read_requests, read_bytes;
		_Atomic uint64_t wb_requests, wb_bytes, wb_merges;
		_Atomic uint64_t map_calls, retries, errors, flushes;
		_Atomic uint64_t readahead_bytes, readahead_hits;
		_Atomic uint64_t readahead_wasted;
	} stats;
};

static inline void stat_add(_Atomic uint64_t *counter, uint64_t v)
{
	atomic_fetch_add_explicit(counter, v, memory_order_relaxed);
}

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
	return atomic_load_explicit(&m->size, memory_order_acquire);
}

/* Where reads stop taking bytes from the store and zero-fill: EOF, or
 * below it while the store is known to be stale there. */
static inline uint64_t mapping_read_end(struct folio_mapping *m)
{
	return MIN(mapping_eof(m),
		   atomic_load_explicit(&m->stale_from, memory_order_acquire));
}

/* mapping_grow_eof() once EOF was seen below `end`. */
void mapping_raise_eof(struct folio_mapping *m, uint64_t end);

/* Raise EOF to at least `end` (concurrent writers race benignly).
 * Inline: a write inside the object, the common case, only loads. */
static inline void mapping_grow_eof(struct folio_mapping *m, uint64_t end)
{
	if (atomic_load_explicit(&m->size, memory_order_relaxed) < end)
		mapping_raise_eof(m, end);
}

/* The cached folio holding pos, referenced, or NULL. Lock-free in the
 * common case (see mapping.c). */
struct folio *mapping_lookup(struct folio_mapping *m, uint64_t pos);

/* Test hook: called inside the lock-free lookups' epoch section between
 * finding a folio and taking its reference, so a test can hold the
 * section open while removers and reclaimers run. NULL: none. */
extern void (*_Atomic mapping_test_lookup_delay)(void);

/* Bytes a call has charged to m's cache ahead of the folios it is about
 * to create (mapping_cache_reserve()), and the size of the folio it could not
 * charge last. */
struct mapping_cache_credit {
	uint64_t bytes;
	size_t need;
};

/* A lookup of m's cache hit or missed (m->cache is set). */
static inline void mapping_count_lookup(struct folio_mapping *m, bool hit)
{
	struct mapping_cache_stripe *s =
		&m->cache->stripe[brlock_thread_stripe()];
	atomic_fetch_add_explicit(hit ? &s->hits : &s->misses, 1,
				  memory_order_relaxed);
}

/*
 * The last folio this thread found, with a pinned reference
 * (folio_hint_get()), and the id of its mapping. The reference keeps the
 * memory valid however the folio left its mapping meanwhile; the thread
 * drops it when it moves to another folio, frees the mapping, or exits
 * (a pthread key's destructor, mapping.c). Here so that the fast paths
 * can check it inline.
 */
struct mapping_hint {
	uint64_t id; /* 0: no hint (mapping ids start at 1) */
	/* The folio's position and size (fixed while its header lives),
	 * so that checking the hint reads nothing but this thread's own
	 * line. */
	uint64_t pos;
	size_t size;
	struct folio *folio;
	bool pinned;
	bool registered; /* the key is set, so the destructor runs */
};
extern _Thread_local struct mapping_hint mapping_hint TLS_FAST;

/* Is the thread's hint m's folio holding pos? Then *f gets it and *off
 * where pos is in it. */
static inline bool mapping_hint_holding(const struct folio_mapping *m,
					uint64_t pos, struct folio **f,
					size_t *off)
{
	uint64_t o = pos - mapping_hint.pos;
	if (mapping_hint.id != m->id || o >= mapping_hint.size)
		return false;
	*f = mapping_hint.folio;
	*off = (size_t)o;
	return true;
}

/*
 * The cached folio holding pos, locked without waiting, or NULL when it
 * is not cached or someone else holds its lock: the read and write fast
 * paths, which then take the ordinary one. Counts a cache hit like
 * mapping_find_or_create_locked() and never creates or charges. A folio
 * found in the index becomes the thread's hint only with `sequential`
 * (the caller's next access is likely in it too: a random one would pay
 * for moving the hint and never use it) or on the first use of a folio
 * read ahead. Caller holds io_lock shared. Looks in the index: callers
 * first try the hint (mapping_hint_holding(), mapping_trylock_hint()),
 * which most small sequential steps hit without a call.
 */
struct folio *mapping_trylock_cached(struct folio_mapping *m, uint64_t pos,
				     bool sequential);

/* mapping_trylock_cached() of the hint f that mapping_hint_holding() gave:
 * the reference the hint pins keeps f valid, REMOVED under its lock says
 * whether it is still m's. */
static inline struct folio *mapping_trylock_hint(struct folio_mapping *m,
						 struct folio *f)
{
	if (!folio_lock_nowait(f))
		return NULL;
	if (folio_test_removed(f)) {
		folio_release(f);
		return NULL;
	}
	if (m->cache)
		mapping_count_lookup(m, true);
	return f;
}

/* The engine may have lost what f's unstable blocks hold (a failed
 * flush): make them dirty again, with tags and counts (commit.c). */
void mapping_unstable_lost(struct folio_mapping *m, struct folio *f);

/*
 * The folio holding pos, locked and still in the index, created when
 * absent (see create_folio() for its size; a new folio is inserted
 * locked). The caller holds io_lock shared and may hold locks of folios
 * below pos. The folio stays valid while the caller holds its lock: it
 * can leave the index only under that lock.
 *
 * Repeated hits on one folio are served from a per-thread hint that
 * holds a pinned reference (folio_hint_get()): it keeps the folio's
 * memory alive between calls without counting as a user of it, so a
 * cache may still reclaim the folio; the REMOVED check after locking
 * catches that. Only lookups that go to the index raise the folio's
 * access count: a reader or writer moving through one folio in small
 * steps counts as one access, so a one-pass scan does not look hot.
 *
 * A new folio of a mapping in a cache is charged first, from `credit`
 * when it holds enough, else by charge(). NULL with *err: -ENOMEM, or
 * MAPPING_CACHE_FULL with credit->need set: drop every lock,
 * mapping_cache_reserve() and call again.
 */
struct folio *mapping_find_or_create_locked(
	struct folio_mapping *m, uint64_t pos, size_t len_hint,
	struct mapping_cache_credit *credit, int *err);

/*
 * For readahead, which must never wait: the folio holding pos, referenced,
 * created (charged, inserted locked) when absent, else locked only when
 * that needs no waiting. *locked says whether the caller holds its lock
 * (then it is still in the index), *created whether it is new. NULL with
 * *err: MAPPING_CACHE_FULL (nothing reclaimable at once) or -ENOMEM. No
 * access, hit or miss is counted and the thread's hint is left alone: a
 * folio read ahead is not a use of it.
 */
struct folio *mapping_grab_nowait(struct folio_mapping *m, uint64_t pos,
				  size_t len_hint, bool *locked,
				  bool *created, int *err);

/*
 * Lock a folio of m. Its lock may be held by a read whose completion
 * nobody waits for (readahead), which a polled engine delivers only when
 * someone calls its wait(): so the waiter drives the engine instead of
 * only sleeping.
 */
void mapping_lock_folio(struct folio_mapping *m, struct folio *f);

/* Sleep (holding no lock) until credit->need bytes are charged to m's
 * cache and add them to the credit. 0 or -ENOMEM. */
int mapping_cache_reserve(struct folio_mapping *m,
			  struct mapping_cache_credit *credit);
/* Give back what is left of a call's credit. Inline: it ends every
 * cached read and write, mostly with nothing to return. */
static inline void mapping_cache_credit_return(struct folio_mapping *m,
					       struct mapping_cache_credit *cr)
{
	if (m->cache && cr->bytes)
		m->cache->ops->uncharge(m->cache, (size_t)cr->bytes);
	cr->bytes = 0;
}

/* Drop the calling thread's lookup hint when it names m. */
void mapping_drop_hint(struct folio_mapping *m);

/* n blocks of f, in bytes, as a signed change of a count. */
static inline int64_t mapping_block_bytes(const struct folio *f, size_t n)
{
	return (int64_t)((uint64_t)n << f->block_shift);
}

/* Count dirty, writeback and unstable byte changes in m's cache. */
static inline void mapping_cache_account(struct folio_mapping *m, int64_t dirty,
				 int64_t writeback, int64_t unstable)
{
	struct mapping_cache *c = m->cache;
	if (!c)
		return;
	struct mapping_cache_stripe *s = &c->stripe[brlock_thread_stripe()];
	if (dirty)
		atomic_fetch_add_explicit(&s->dirty, dirty,
					  memory_order_relaxed);
	if (writeback)
		atomic_fetch_add_explicit(&s->writeback, writeback,
					  memory_order_relaxed);
	if (unstable)
		atomic_fetch_add_explicit(&s->unstable, unstable,
					  memory_order_relaxed);
}

/* Dirty plus writeback bytes of a cache: what its thresholds bound. */
static inline int64_t mapping_cache_dirty_total(struct mapping_cache *c)
{
	int64_t sum = 0;
	for (unsigned i = 0; i < BRLOCK_STRIPES; i++)
		sum += atomic_load_explicit(&c->stripe[i].dirty,
					    memory_order_relaxed) +
		       atomic_load_explicit(&c->stripe[i].writeback,
					    memory_order_relaxed);
	return sum;
}

/* Memory or dirty data of m's cache went down. */
static inline void mapping_cache_progress(struct folio_mapping *m)
{
	struct mapping_cache *c = m->cache;
	if (c && atomic_load(&c->waiters))
		c->ops->progress(c);
}

/*
 * Try to reclaim f, a folio of m the caller holds a reference to: when
 * it can be locked without waiting and is clean, stable, not under
 * writeback and used by nobody but the index and the caller (hint pins
 * aside), it leaves the index. Needs neither io_lock nor any other lock
 * of m: the folio lock and index_lock exclusive are what every user of
 * an indexed folio synchronizes with. The caller may hold io_lock shared
 * and folio locks of any mapping (only trylocks are taken here besides
 * index_lock, under which nobody waits). Returns the folio bytes freed
 * from the index (0: kept).
 */
size_t mapping_reclaim_folio(struct folio_mapping *m, struct folio *f);

/* Does any folio of m carry `tag` (INDEX_TAG_*)? A hint: it may be
 * stale by the time the caller acts on it. Stale index bits do not make it
 * true (it confirms with a find, and prunes them when nothing is found). */
bool mapping_any_tagged(struct folio_mapping *m, unsigned tag);
/* Bytes of index nodes m uses (metadata statistics). */
size_t mapping_index_bytes(struct folio_mapping *m);

/*
 * One flusher step: write back the dirty folios of m from *cursor on,
 * submitting at most `max_bytes` (whole folios; 0: no limit), and wait
 * for those requests after io_lock is released; busy folios are left
 * for later. *cursor moves past the last folio taken, or to 0 when the
 * end of the mapping was reached. Returns the bytes submitted.
 */
int64_t mapping_writeback_chunk(struct folio_mapping *m, uint64_t *cursor,
				uint64_t max_bytes);

/*
 * Iteration: the next folio at or after *key (only folios carrying `tag`
 * unless it is INDEX_NO_TAG), referenced, with *key moved past it; NULL at
 * the end of [*key, last]. The index may change between calls.
 */
#define INDEX_NO_TAG (-1)
struct folio *mapping_next_folio(struct folio_mapping *m, uint64_t *key,
				 uint64_t last, int tag);

/*
 * mapping_next_folio() for up to `max` folios carrying `tag`, each
 * referenced, with the index node holding it (for the *_at calls below).
 * Returns how many; 0 at the end of [*key, last].
 */
unsigned mapping_next_tagged_batch(struct folio_mapping *m, uint64_t *key,
				   uint64_t last, unsigned tag,
				   struct index_hit *hits, unsigned max);

/*
 * Tag changes of a folio through the index node holding it, with no index
 * lock in the common case: the caller guarantees the folio stays in the
 * index meanwhile (it holds the folio lock and saw it not REMOVED, or the
 * folio is under writeback, which truncate, invalidate and reclaim wait
 * for). Setting falls back to mapping_tag_set() when the node's ancestors
 * may lack the tag. Dropping clears the folio's own bit and re-sets it if
 * `still` says the state came back; bits above may stay set until
 * mapping_tags_prune() (finds skip them at a small cost).
 */
void mapping_tag_set(struct folio_mapping *m, struct folio *f, unsigned tag);
static inline void mapping_tag_set_at(struct folio_mapping *m,
				      struct folio *f, struct index_node *node,
				      unsigned tag)
{
	if (!index_tag_set_fast(node, mapping_key(m, f->pos),
				mapping_folio_order(m, f), tag))
		mapping_tag_set(m, f, tag);
}

static inline void mapping_tag_drop_at(struct folio_mapping *m,
				       struct folio *f,
				       struct index_node *node, unsigned tag,
				       bool (*still)(const struct folio *))
{
	index_tag_drop(node, mapping_key(m, f->pos), mapping_folio_order(m, f),
		       tag);
	/* After the drop: a setter that made the state come back before
	 * it is seen here, one that made it come back after sets the tag
	 * after the drop (index_tag_drop()). */
	if (still && still(f))
		mapping_tag_set_at(m, f, node, tag);
}
/* Clear stale tag bits (tags in mask) over keys [first, last]: one
 * exclusive index_lock acquisition for what drops left behind. */
void mapping_tags_prune(struct folio_mapping *m, uint64_t first,
			uint64_t last, unsigned mask);

/* Tag the folio dirty in the index, after a state change returned
 * FOLIO_BECAME_DIRTY. */
void mapping_tag_dirty(struct folio_mapping *m, struct folio *f);

/* Set or clear one index tag of a folio. Clearing re-checks the folio's
 * state under the exclusive index lock (`still` says whether the state
 * the tag stands for came back meanwhile), before the clear and again
 * after it, since a lock-free setter (mapping_tag_set_at()) may set its
 * bit between the two: a racing setter's tag is never lost. */
void mapping_tag_set(struct folio_mapping *m, struct folio *f, unsigned tag);
void mapping_tag_clear_unless(struct folio_mapping *m, struct folio *f,
			      unsigned tag, bool (*still)(const struct folio *));

/* ---- flushes and unstable data (commit.c) ---------------------------- */

int mapping_commit_init(struct folio_mapping *m);
void mapping_commit_destroy(struct folio_mapping *m);

/* The engine's truncate() to `size` succeeded: unstable like a write until
 * a flush covers it. Caller holds io_lock exclusively. */
void mapping_resize_unstable(struct folio_mapping *m, uint64_t size);

/* The first `len` bytes of a write request's segment `s` (its folio, the
 * index node holding it, see mapping_tag_set_at(), and its offset)
 * completed: they are unstable until a flush covering `epoch` succeeds
 * (mapping_unstable_epoch()); `failures` is the engine's failed-flush
 * count read at the request's submission. Five arguments: all in
 * registers, for every segment of every completion. */
struct rq_seg;
void mapping_mark_unstable(struct folio_mapping *m, const struct rq_seg *s,
			   size_t len, uint64_t epoch, uint64_t failures);

/* mapping_unstable_epoch() (below) for a durable write: records its
 * outcome for the sync that sent it. */
struct mapping_io;
uint64_t mapping_durable_epoch(struct folio_mapping *m,
			       const struct mapping_io *io, ssize_t result);

/*
 * A sync's durable write (doc/design.md, "Durable writes"). `wanted`: the
 * sync may send one (the engine takes them, the mapping keeps unstable
 * data). mapping_durable_begin() is called with the pass's only request
 * built and not yet submitted: it takes the mapping's flush role when
 * that is free and nothing but writes needs covering (no resize pending,
 * no engine flush failure unaccounted for), moves the flush epoch on as
 * a flush would, and returns true: the caller marks the request
 * FOLIO_IO_DURABLE. One per sync.
 */
struct mapping_durable {
	bool wanted;
	bool taken;
	uint64_t gen, epoch, failures;
};
bool mapping_durable_begin(struct folio_mapping *m, struct mapping_durable *d);

/*
 * The end of a sync: with a durable write taken, settle it as the flush
 * it was (success releases what its barrier covered; failure makes every
 * unstable block dirty and records the error), then run a real flush for
 * anything it could not cover (a short write, other writes that
 * completed meanwhile, a resize); release the role. Without one,
 * mapping_commit().
 */
void mapping_commit_sync(struct folio_mapping *m, struct mapping_durable *d);

/*
 * Make every write that completed before the call durable: run the
 * engine's flush() (or wait for one that another thread started after
 * the call), then release the unstable blocks it covers, or on failure
 * make every unstable block dirty again and record the error. Flushes of
 * one mapping run one at a time, and a thread arriving while one runs
 * shares the next. Returns 0 or the flush's error.
 */
int mapping_commit(struct folio_mapping *m);

/* ---- error sequence (errseq.c) --------------------------------------- */

/* Record an error. Call it before waking anyone who waits for the
 * operation that failed. */
void errseq_record(struct folio_mapping *m, int err);
/* Report an error recorded before once more, to every cursor, without
 * counting it again in the statistics: what it did reached more data
 * since (see settle_flush()). */
void errseq_report_again(struct folio_mapping *m, int err);
/* End of a sync that read the sequence as `begin` when it started:
 * report an error the cursor (NULL: the mapping's shared one) has not
 * seen, or one recorded since `begin`, advancing the cursor; 0 if
 * neither. */
int errseq_check_advance(struct folio_mapping *m, folio_errseq_t *cursor,
			 folio_errseq_t begin);

/* Remove a folio from the index and drop the index's reference; any
 * dirty or unstable state it still had goes with it. Caller holds the
 * folio lock (and has checked it is not REMOVED already). */
void mapping_remove_folio(struct folio_mapping *m, struct folio *f);

/* Sleep until the folio's writeback ends, driving a polled engine.
 * Returns 0 or the error the engine's wait() returned meanwhile. */
int mapping_wait_writeback(struct folio_mapping *m, struct folio *f);

/* Sleep until every folio in [start, end) that is under writeback now has
 * finished it (folios that start writeback later are not waited for).
 * Returns 0 or the first error of the engine's wait(). */
int mapping_wait_range_writeback(struct folio_mapping *m, uint64_t start,
				 uint64_t end);

/* Zero the bytes of [off, off+len) of f that lie at or past EOF. */
void mapping_zero_past_eof(struct folio_mapping *m, struct folio *f,
			   size_t off, size_t len, uint64_t eof);

/* ---- readahead (readahead.c) --------------------------------------- */

/* Largest window when the caller sets none. */
#define MAPPING_RA_DEFAULT_MAX ((uint64_t)2 << 20)

void mapping_readahead_init(struct folio_mapping *m, uint64_t max);

/*
 * A read of [pos, pos+len) (len already clamped to EOF) is about to run,
 * holding io_lock shared and no folio lock: learn from it which streams
 * there are and, when it continues one beyond its window, start the next
 * window at pos without waiting for it (the read then waits for those
 * folios like for any locked folio).
 */
void mapping_readahead_on_read(struct folio_mapping *m, uint64_t pos,
			       size_t len);

/*
 * A reader reached f (locked by it or not; io_lock shared held): count a
 * first read of a folio readahead brought in, and when f carries the
 * readahead mark of a live stream's latest window, start that stream's
 * next window without waiting. Never sleeps on a folio lock.
 */
void mapping_readahead_reached(struct folio_mapping *m, struct folio *f);

/* Wait until no readahead request of m is in flight. The caller holds
 * io_lock exclusively (or is free()), so none can start meanwhile. */
void mapping_readahead_drain(struct folio_mapping *m);

/* f left m's index: what readahead brought into it unread was wasted. */
void mapping_readahead_forget(struct folio_mapping *m, struct folio *f);

/* ---- requests (request.c) ------------------------------------------ */

/* Request limits when the caller sets none. */
#define RQ_DEFAULT_MAX_BYTES ((size_t)1 << 20)
#define RQ_DEFAULT_MAX_SEGS 256u

struct rq_seg {
	struct folio *folio;
	struct index_node *node; /* holding the folio (writeback) */
	size_t off;
	size_t len;
};

/* A request as the mapping tracks it. */
struct mapping_io {
	struct engine_io base;
	struct folio_mapping *m;
	struct io_group *group; /* woken at completion, or NULL */
	struct mapping_io *next; /* the builder's list of submitted requests */
	ssize_t result;
	/* The engine's flush_failures when a write was submitted: a flush
	 * failing while it is in flight may have dropped its data. */
	uint64_t flush_failures;
	unsigned nsegs;
	unsigned cap;      /* room in iov[] and segs[] */
	unsigned max_segs; /* the builder's limit */
	struct rq_seg *segs;
	struct iovec iov[];
};

/*
 * The epoch a write request that completed with `result` marks its bytes
 * unstable in: the current one, or for a durable write (FOLIO_IO_DURABLE)
 * the one its own barrier covers when that barrier succeeded. Call it
 * once per request, first thing in its completion. Inline: every
 * writeback completion asks, and only a sync's one durable write needs
 * more than a load.
 */
static inline uint64_t mapping_unstable_epoch(struct folio_mapping *m,
					      const struct mapping_io *io,
					      ssize_t result)
{
	if (io->base.io.flags & FOLIO_IO_DURABLE)
		return mapping_durable_epoch(m, io, result);
	return atomic_load_explicit(&m->flush_epoch, memory_order_acquire);
}

/* Last extent returned by the engine's map(), so consecutive runs inside
 * one extent cost no callback. */
struct map_cache {
	bool valid;
	struct folio_extent ext;
};

struct rq_builder {
	struct folio_mapping *m;
	enum folio_io_op op;
	size_t max_bytes;
	unsigned max_segs;
	size_t merge_gap;
	void (*end_io)(struct engine_io *rq, ssize_t result);
	struct io_group *group;
	struct map_cache map;
	/* The index node of the folio being added (writeback: its
	 * completion changes tags through it), else NULL. */
	struct index_node *node;
	struct mapping_io *cur;
	/* Submitted requests, when the caller keeps them (reads): it walks
	 * and frees them after the group completes. */
	bool keep;
	struct mapping_io *submitted;
	uint64_t submitted_bytes;
	unsigned submitted_count;
	uint64_t added; /* bytes of folio runs queued for I/O so far */
	int error; /* first submission or map error */
};

void rqb_init(struct rq_builder *b, struct folio_mapping *m,
	      enum folio_io_op op, struct io_group *group,
	      void (*end_io)(struct engine_io *, ssize_t));

/*
 * Add folio bytes [off, off+len) to the request being built, starting a
 * new request when the run is not contiguous with it in file and device
 * position or would break a limit. For reads, runs in a hole extent are
 * zero-filled in place and need no I/O. Returns 0 or a negative errno
 * (map() failure, -ENOMEM); on error the run was not added.
 */
int rqb_add(struct rq_builder *b, struct folio *f, size_t off, size_t len);

/* Submit the request being built, if any. */
void rqb_submit(struct rq_builder *b);

/* Finish the batch (submit + unplug the engine). */
void rqb_finish(struct rq_builder *b);

void mapping_io_free(struct mapping_io *io);

/* ---- reads (rw.c), shared with readahead ------------------------------ */

/* The outcome of a read request as a mapping counts it: 0, or the error
 * (a short read is -EIO); io->result is set and the stats counted. */
int mapping_read_result(struct mapping_io *io, ssize_t result);

/*
 * Reads of a list are done (io->result set): for each that succeeded zero
 * what lies past `eof` and, with `mark`, set its blocks uptodate (when
 * `err` says some read of the batch failed, only the blocks successful
 * reads wholly cover). Frees the requests.
 */
void mapping_settle_reads(struct folio_mapping *m, struct mapping_io *list,
			  uint64_t eof, bool mark, int err);

/* Queue the not-uptodate blocks touched by [off, off+len) of f. */
int mapping_queue_missing(struct rq_builder *b, struct folio *f, size_t off,
			  size_t len);

/* Resolve pos through the engine's map() (identity without one). On
 * return [pos, pos + *avail) is device-contiguous at *dev with *flags. */
int mapping_map_extent(struct folio_mapping *m, struct map_cache *mc,
		       uint64_t pos, uint64_t len, uint64_t *dev,
		       uint64_t *avail, uint32_t *flags);

#endif
