/* SPDX-License-Identifier: MIT */
/*
 * The pool (layer 5): a byte budget of folio memory shared by mappings,
 * S3-FIFO reclaim of clean folios, dirty thresholds, writer throttling
 * and flusher threads. The mapping layer reaches it only through
 * struct mapping_cache (mapping/cache.h), which the pool embeds first.
 *
 * Modules: pool.c (life cycle, options, members, statistics, shrink),
 * reclaim.c (the queues, the ghost table, charging and reclaim), dirty.c
 * (throttling, waiting for room, flusher threads).
 *
 * Locking: doc/design.md, "Concurrency", has the lock order and what
 * each lock protects. pool->lock is a leaf (folio state is read with
 * atomics only), so pool hooks and completions may take it under any
 * mapping lock. A member's `users` count, raised under pool->lock, keeps
 * a mapping from being freed while reclaim or a flusher uses it without
 * holding any of its locks (folio_mapping_free() quiesces first).
 */
#ifndef FOLIO_POOL_POOL_H
#define FOLIO_POOL_POOL_H

#include <pthread.h>

#include "mapping/cache.h"

/* Node 0 is "none"; nodes 1 and 2 are the heads of the small and main
 * queues (circular lists), so linking never tests for an empty list. */
#define NODE_NONE 0u
#define NODE_SMALL 1u
#define NODE_MAIN 2u
#define NODE_FIRST_FREE 3u
/* prev and next of a node a reclaimer took off its queue. */
#define NODE_CLAIMED UINT32_MAX

/* One folio in a queue. folio NULL: the folio left its mapping while a
 * reclaimer held the node; the reclaimer frees it. */
struct pool_node {
	struct folio *folio;
	uint32_t prev, next;
};

struct pool_queue {
	uint32_t head; /* NODE_SMALL or NODE_MAIN */
	uint64_t bytes, count;
};

/*
 * Recently evicted keys (mapping id, folio position), S3-FIFO's ghost
 * queue: a set-associative table of hashes stamped with an insertion
 * sequence number. A key is present while fewer insertions than the
 * queues hold folios came after it, which is the ghost FIFO's length in
 * the paper, without a list.
 */
struct pool_ghost_slot {
	uint64_t hash; /* 0: empty */
	uint64_t seq;
};

struct pool_ghost {
	struct pool_ghost_slot *slots;
	size_t mask; /* slots - 1; buckets of GHOST_WAYS */
	uint64_t seq;
};

#define GHOST_WAYS 4u

/* The pool's state of one mapping. */
struct pool_member {
	struct folio_mapping *m;
	struct pool_member *prev, *next;
	/* Pool threads working on m (reclaimers, flushers, waiters); while
	 * `quiesced` no new one starts and free waits for none to be left. */
	unsigned users;
	bool quiesced;
	bool flushing;        /* a flusher is on it: one at a time */
	uint64_t cursor;      /* where the flushers continue (position) */
	uint64_t pass_start;  /* when the flushers' pass from 0 began (ns) */
	uint64_t visited;     /* flusher round it was last visited in */
};

struct folio_pool {
	struct mapping_cache cache; /* first: the mapping layer's view */

	uint64_t budget;
	uint64_t expire_ns, expire_ms;
	uint64_t flusher_period_ns;
	uint64_t small_target; /* bytes the small queue may hold */
	unsigned nflushers;
	unsigned flags;

	/* Charged folio bytes (the budget counts these) and the metadata of
	 * those folios (headers and bitmaps). */
	_Atomic uint64_t charged;
	_Atomic uint64_t folio_meta;
	/* Bumped on every progress() and removed(): waiters tell a round
	 * that changed something from one that did not. */
	_Atomic uint64_t events;

	pthread_mutex_t lock;
	pthread_cond_t progress_cond; /* memory or dirty data went down */
	pthread_cond_t flusher_cond;  /* work for the flushers */
	pthread_cond_t member_cond;   /* a quiesced member's users left */

	/* Under lock. */
	struct pool_node *nodes;
	uint32_t nodes_cap, nodes_used, free_node;
	struct pool_queue small, main;
	struct pool_ghost ghost;
	struct pool_member members; /* list head */
	unsigned nmembers;
	uint64_t flush_round;
	bool stop;

	atomic_bool kicked; /* flushers were asked to look */
	/* A throttled writer saw no flusher step for a while: writers
	 * write back themselves until a flusher ends a step. */
	atomic_bool flushers_stuck;
	pthread_t *threads;

	struct {
		_Atomic uint64_t ghost_hits, reclaimed_bytes, reclaimed_folios;
		_Atomic uint64_t throttle_waits, throttle_ns;
		_Atomic uint64_t memory_waits, memory_wait_ns;
		_Atomic uint64_t flusher_passes, flusher_bytes, flushes;
		/* Lookup hits of mappings that left (the members count
		 * their own, mapping_lookup_hits()); under lock. */
		uint64_t hits_of_gone;
	} stats;
};

static inline struct folio_pool *pool_of(struct mapping_cache *c)
{
	return (struct folio_pool *)(void *)c;
}

static inline struct pool_member *member_of(struct folio_mapping *m)
{
	return m->in_cache.member;
}

/* Sum of one field of the striped counters (may lag a moment). */
int64_t pool_sum_dirty(struct folio_pool *p);
int64_t pool_sum_writeback(struct folio_pool *p);
int64_t pool_sum_unstable(struct folio_pool *p);

/* One user more or less on a member. */
void pool_member_get_locked(struct folio_pool *p, struct pool_member *mb);
void pool_member_put_locked(struct folio_pool *p, struct pool_member *mb);

/* The members as they are now, each with a user taken (lock not held);
 * release them with pool_members_put(). NULL with *n 0 when there are none or
 * memory is short. */
struct pool_member **pool_members_get(struct folio_pool *p, size_t *n);
void pool_members_put(struct folio_pool *p, struct pool_member **v, size_t n);

/* ---- reclaim.c -------------------------------------------------------- */

int pool_queues_init(struct folio_pool *p);
void pool_queues_destroy(struct folio_pool *p);
size_t pool_queue_meta_bytes_locked(struct folio_pool *p);

/* Reclaim until `want` bytes left the pool or `scan` folios were looked
 * at without success. Takes only trylocks and index locks: callable
 * holding io_lock shared and folio locks. Returns the bytes freed. */
uint64_t pool_reclaim(struct folio_pool *p, uint64_t want, unsigned scan);
/* Queue rotations that let every folio be looked at once (and main
 * queue folios lose their access count): a scan limit for callers that
 * may wait anyway. */
unsigned pool_full_scan(struct folio_pool *p);
/* Charge `bytes` if the budget has room, reclaiming up to `scan` folios
 * for it; 0 or MAPPING_CACHE_FULL. */
int pool_charge_scan(struct folio_pool *p, uint64_t bytes, unsigned scan);

extern const struct mapping_cache_ops pool_cache_ops;
int pool_op_charge(struct mapping_cache *c, struct folio_mapping *m,
		   size_t bytes);
void pool_op_uncharge(struct mapping_cache *c, size_t bytes);
void pool_op_added(struct mapping_cache *c, struct folio_mapping *m,
		   struct folio *f);
void pool_op_removed(struct mapping_cache *c, struct folio_mapping *m,
		     struct folio *f);

/* ---- dirty.c ---------------------------------------------------------- */

int pool_flushers_start(struct folio_pool *p);
void pool_flushers_stop(struct folio_pool *p);
/* Flush the engines of members holding unstable data; returns how many
 * flushes ran. No lock held. */
unsigned pool_flush_unstable(struct folio_pool *p);

int pool_op_reserve(struct mapping_cache *c, struct folio_mapping *m,
		    size_t bytes);
void pool_op_kick(struct mapping_cache *c);
void pool_op_balance(struct mapping_cache *c, struct folio_mapping *m);
void pool_op_progress(struct mapping_cache *c);

#endif
