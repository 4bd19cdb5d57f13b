/* SPDX-License-Identifier: MIT */
/*
 * Mapping life cycle: creation with its options, free, size and EOF.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "base/futex.h"
#include "mapping/cache.h"
#include "mapping/commit.h"
#include "mapping/lookup.h"
#include "mapping/readahead.h"

#define DEFAULT_BLOCK_SIZE 4096u
#define KNOWN_FLAGS \
	(FOLIO_MAPPING_STABLE_WRITES | FOLIO_MAPPING_DROP_ON_ERROR | \
	 FOLIO_MAPPING_FOLIO_DIRTY | FOLIO_MAPPING_NO_READAHEAD | \
	 FOLIO_MAPPING_DIRECT_EXCLUSIVE)

/* Mapping ids are never reused, so a thread's cached folio pointer can
 * never be mistaken for one of a later mapping at the same address. */
static _Atomic uint64_t next_mapping_id = 1;

/* Fields a caller's options struct must have (everything up to engine). */
#define OPTS_MIN_SZ SIZEOF_THROUGH(struct folio_mapping_opts, engine)

static bool size_ok(size_t v, size_t lo, size_t hi)
{
	return is_pow2(v) && v >= lo && v <= hi;
}

int folio_mapping_new(struct folio_mapping **out,
		      const struct folio_mapping_opts *opts)
{
	if (!out || !opts)
		return -EINVAL;
	int r = sized_check(opts, opts->sz, OPTS_MIN_SZ, sizeof(*opts));
	if (r)
		return r;
	if (!opts->engine)
		return -EINVAL;
	size_t bs = opts->block_size ? opts->block_size : DEFAULT_BLOCK_SIZE;
	size_t min = opts->min_folio_size ? opts->min_folio_size : bs;
	size_t max = opts->max_folio_size ? opts->max_folio_size
					  : FOLIO_MAX_SIZE;
	if (!size_ok(bs, FOLIO_MIN_BLOCK_SIZE, FOLIO_MAX_BLOCK_SIZE) ||
	    !size_ok(min, bs, FOLIO_MAX_SIZE) ||
	    !size_ok(max, min, FOLIO_MAX_SIZE) ||
	    opts->size > FOLIO_MAX_POS || (opts->flags & ~KNOWN_FLAGS))
		return -EINVAL;
	size_t ra_max = OPTS_GET(opts, readahead_max, 0);
	if (ra_max % bs || ra_max > FOLIO_MAPPING_MAX_READAHEAD)
		return -EINVAL;
	/* A pool embeds its mapping_cache first (lib/pool/pool.h). */
	struct mapping_cache *cache =
		(struct mapping_cache *)(void *)OPTS_GET(opts, pool, NULL);

	/* The io_lock stripes are cache-line aligned, so the mapping is. */
	size_t bytes = (sizeof(struct folio_mapping) + BRLOCK_LINE - 1) &
		       ~(size_t)(BRLOCK_LINE - 1);
	struct folio_mapping *m = aligned_alloc(BRLOCK_LINE, bytes);
	if (!m)
		return -ENOMEM;
	memset(m, 0, sizeof(*m));
	if (brlock_init(&m->io_lock)) {
		free(m);
		return -ENOMEM;
	}
	if (pthread_rwlock_init(&m->index_lock, NULL)) {
		brlock_destroy(&m->io_lock);
		free(m);
		return -ENOMEM;
	}
	if (mapping_commit_init(m)) {
		pthread_rwlock_destroy(&m->index_lock);
		brlock_destroy(&m->io_lock);
		free(m);
		return -ENOMEM;
	}
	index_init(&m->index);
	(void)index_set_lockless(&m->index); /* malloc's nodes: cannot fail */
	m->engine = opts->engine;
	m->block_shift = ilog2_u64(bs);
	m->min_shift = ilog2_u64(min);
	m->max_shift = ilog2_u64(max);
	m->flags = opts->flags;
	atomic_init(&m->size.eof, opts->size);
	atomic_init(&m->size.stale_from, UINT64_MAX);
	atomic_init(&m->size.backing, opts->size);
	atomic_init(&m->size.landed_maybe, 0);
	atomic_init(&m->commit.flush_gen, 1);
	m->commit.failures_seen = atomic_load(&opts->engine->flush_failures);
	m->id = atomic_fetch_add(&next_mapping_id, 1);
	atomic_init(&m->in_cache.dirty_since, 0);
	if (cache) {
		/* The geometry is known now, which is what the pool checks
		 * against its budget. */
		r = cache->ops->attach(cache, m);
		if (r) {
			mapping_commit_destroy(m);
			pthread_rwlock_destroy(&m->index_lock);
			brlock_destroy(&m->io_lock);
			free(m);
			return r;
		}
		m->cache = cache;
	}
	if (!ra_max) {
		/* At least as far as the kernel reads ahead on the engine's
		 * device (engine.h, readahead_hint). */
		uint64_t hint = MIN(opts->engine->readahead_hint,
				    (uint64_t)FOLIO_MAPPING_MAX_READAHEAD);
		ra_max = (size_t)MAX(hint & ~((uint64_t)bs - 1),
				     MAPPING_RA_DEFAULT_MAX);
	}
	mapping_readahead_init(m, ra_max);
	atomic_fetch_add(&opts->engine->users, 1);
	*out = m;
	return 0;
}

/* Does any folio still hold data the store may lack (dirty, or written
 * but not flushed), or I/O, or a write_begin() without its write_end()? */
static bool mapping_busy(struct folio_mapping *m)
{
	bool busy = false;
	pthread_rwlock_rdlock(&m->index_lock);
	uint64_t key = 0;
	unsigned order;
	struct folio *f;
	while (!busy && (f = index_find(&m->index, &key, UINT64_MAX, &order))) {
		busy = folio_test_busy(f);
		key += UINT64_C(1) << order;
		if (!key)
			break;
	}
	pthread_rwlock_unlock(&m->index_lock);
	if (busy)
		return true;
	/* No folio is under writeback, yet a completion may still be
	 * running: the last folio's writeback ends (waking a sync that may
	 * then call free) before the completion frees its request and drops
	 * wb_inflight. It touches the mapping until then and is about to
	 * finish, so wait rather than fail. */
	while (!futex_count_drained(&m->wb.inflight))
		sched_yield();
	return false;
}

int folio_mapping_free(struct folio_mapping *m)
{
	if (!m)
		return 0;
	/* Readahead holds folios locked until its reads complete, which a
	 * polled engine needs someone to drive. */
	mapping_readahead_drain(m);
	struct mapping_cache *c = m->cache;
	/* The cache's reclaimers and flushers reach m without io_lock, and
	 * a flusher inside a writeback of m holds io_lock shared: they are
	 * sent away before io_lock is taken, and a folio they held locked
	 * cannot make m look busy. */
	if (c)
		c->ops->quiesce(c, m);
	brlock_write_lock(&m->io_lock);
	if (mapping_busy(m)) {
		brlock_write_unlock(&m->io_lock);
		if (c)
			c->ops->unquiesce(c, m);
		return -EBUSY;
	}
	mapping_drop_hint(m);
	uint64_t key = 0;
	unsigned order;
	struct folio *f;
	while ((f = index_find(&m->index, &key, UINT64_MAX, &order))) {
		index_remove(&m->index, key, order);
		/* Another thread's hint may still pin it: it finds the
		 * folio gone, not a folio of a mapping that is gone. */
		folio_mark_removed(f);
		if (c)
			c->ops->removed(c, m, f);
		f->mapping = NULL;
		folio_unref(f);
	}
	index_destroy(&m->index);
	brlock_write_unlock(&m->io_lock);
	if (c)
		c->ops->detach(c, m);
	brlock_destroy(&m->io_lock);
	pthread_rwlock_destroy(&m->index_lock);
	mapping_commit_destroy(m);
	atomic_fetch_sub(&m->engine->users, 1);
	free(m);
	/* Headers of the folios and nodes this mapping retired come back
	 * now rather than with some later batch: a program that frees its
	 * last mapping holds no memory of it (leak checkers included). */
	epoch_barrier();
	return 0;
}

int64_t folio_mapping_size(const struct folio_mapping *m)
{
	if (!m)
		return -EINVAL;
	return (int64_t)atomic_load(&((struct folio_mapping *)m)->size.eof);
}

void mapping_raise_eof(struct folio_mapping *m, uint64_t end)
{
	uint64_t cur = atomic_load_explicit(&m->size.eof, memory_order_relaxed);
	while (cur < end &&
	       !atomic_compare_exchange_weak_explicit(&m->size.eof, &cur, end,
						      memory_order_release,
						      memory_order_relaxed))
		;
}
