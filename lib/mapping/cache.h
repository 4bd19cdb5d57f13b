/* SPDX-License-Identifier: MIT */
/*
 * The cache a mapping may belong to (the pool, lib/pool/, implements it),
 * and the accounting of a mapping's folios and bytes in it: charges,
 * credits, dirty/writeback/unstable byte counts, hits and misses.
 * mapping_cache_reserve() is in cache.c; the rest is inline.
 */
#ifndef FOLIO_MAPPING_CACHE_H
#define FOLIO_MAPPING_CACHE_H

#include "mapping/mapping.h"

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
	_Atomic uint64_t misses;
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

/* Bytes a call has charged to m's cache ahead of the folios it is about
 * to create (mapping_cache_reserve()), and the size of the folio it could not
 * charge last. */
struct mapping_cache_credit {
	uint64_t bytes;
	size_t need;
};

/* A lookup of m's cache hit or missed (m->cache is set), counted in
 * the calling thread's stripe, which the _at form takes from a caller
 * that has it already (brlock_thread_stripe()). A hit is counted in the
 * mapping's own stripe, the line a read writes its byte count to anyway
 * (mapping_count_hit()); the cache adds them up when asked
 * (mapping_lookup_hits()). */
static inline void mapping_count_lookup_at(struct folio_mapping *m, bool hit,
					   unsigned stripe)
{
	if (hit)
		mapping_count_hit(m, stripe);
	else
		atomic_fetch_add_explicit(&m->cache->stripe[stripe].misses, 1,
					  memory_order_relaxed);
}

static inline void mapping_count_lookup(struct folio_mapping *m, bool hit)
{
	mapping_count_lookup_at(m, hit, brlock_thread_stripe());
}

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

#endif
