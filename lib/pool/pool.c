/* SPDX-License-Identifier: MIT */
/*
 * Pool life cycle, options, membership of mappings, statistics, shrink.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "pool/pool.h"
#include "mapping/cache.h"
#include "mapping/request.h"
#include "mapping/tags.h"

#define DEFAULT_EXPIRE_MS 30000u
#define KNOWN_FLAGS 0u

#define OPTS_MIN_SZ SIZEOF_THROUGH(struct folio_pool_opts, budget)

const struct mapping_cache_ops pool_cache_ops;

/* The options with defaults applied, or -errno with nothing allocated. */
static int parse_opts(const struct folio_pool_opts *in,
		      struct folio_pool_opts *o)
{
	if (!in)
		return -EINVAL;
	int r = sized_check(in, in->sz, OPTS_MIN_SZ, sizeof(*in));
	if (r)
		return r;
	memset(o, 0, sizeof(*o));
	memcpy(o, in, MIN(in->sz, sizeof(*o)));
	if (!o->budget || (o->flags & ~KNOWN_FLAGS))
		return -EINVAL;
	if (o->budget < FOLIO_MIN_BLOCK_SIZE || o->budget > FOLIO_MAX_POS ||
	    o->dirty_limit > o->budget ||
	    o->dirty_expire_ms > FOLIO_POOL_MAX_EXPIRE_MS ||
	    o->flusher_threads > FOLIO_POOL_MAX_FLUSHERS)
		return -ERANGE;
	if (!o->dirty_limit)
		o->dirty_limit = MAX(o->budget / 5, (uint64_t)1);
	if (o->dirty_background > o->dirty_limit)
		return -ERANGE;
	if (!o->dirty_background) {
		/* The kernel's rule when background would not be below the
		 * limit: half the limit. */
		o->dirty_background = o->budget / 10;
		if (o->dirty_background >= o->dirty_limit)
			o->dirty_background = o->dirty_limit / 2;
	}
	if (!o->dirty_expire_ms)
		o->dirty_expire_ms = DEFAULT_EXPIRE_MS;
	return 0;
}

/* Timed waits use CLOCK_MONOTONIC: a clock set back must not stretch a
 * throttled writer's pause or a flusher's period. */
static int cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t a;
	if (pthread_condattr_init(&a))
		return -ENOMEM;
	int r = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) ||
		pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
	return r ? -ENOMEM : 0;
}

int folio_pool_new(struct folio_pool **out, const struct folio_pool_opts *opts)
{
	if (!out)
		return -EINVAL;
	struct folio_pool_opts o;
	int r = parse_opts(opts, &o);
	if (r)
		return r;
	/* The striped counters are cache-line aligned, so the pool is. */
	size_t bytes = (sizeof(struct folio_pool) + BRLOCK_LINE - 1) &
		       ~(size_t)(BRLOCK_LINE - 1);
	struct folio_pool *p = aligned_alloc(BRLOCK_LINE, bytes);
	if (!p)
		return -ENOMEM;
	memset(p, 0, sizeof(*p));
	p->cache.ops = &pool_cache_ops;
	p->cache.dirty_background = o.dirty_background;
	p->cache.dirty_limit = o.dirty_limit;
	/* A thread looks at the thresholds every so many bytes it dirtied:
	 * 1/64 of the room between them keeps the overshoot of a few
	 * writers small, and never more than one default request (1 MiB)
	 * per writer. */
	p->cache.ratelimit = MIN(MAX(o.dirty_limit / 64, (uint64_t)4096),
				 (uint64_t)RQ_DEFAULT_MAX_BYTES);
	p->budget = o.budget;
	p->expire_ms = o.dirty_expire_ms;
	p->expire_ns = (uint64_t)o.dirty_expire_ms * 1000000u;
	p->flusher_period_ns = MIN(MAX(p->expire_ns / 2, (uint64_t)10000000),
				   (uint64_t)1000000000);
	p->small_target = MAX(o.budget / 10, (uint64_t)1);
	/* Two windows in flight (the one being read and the next) must
	 * fit in the small queue, or readahead evicts itself unread. */
	p->cache.readahead_max = MAX(p->small_target / 4, (uint64_t)4096);
	p->nflushers = o.flusher_threads;
	p->flags = o.flags;
	p->members.next = p->members.prev = &p->members;

	r = -ENOMEM;
	if (pthread_mutex_init(&p->lock, NULL))
		goto fail_free;
	if (cond_init_monotonic(&p->progress_cond))
		goto fail_lock;
	if (cond_init_monotonic(&p->flusher_cond))
		goto fail_progress;
	if (pthread_cond_init(&p->member_cond, NULL))
		goto fail_flusher;
	if (pool_queues_init(p))
		goto fail_member;
	r = pool_flushers_start(p);
	if (r)
		goto fail_queues;
	*out = p;
	return 0;

fail_queues:
	pool_queues_destroy(p);
fail_member:
	pthread_cond_destroy(&p->member_cond);
fail_flusher:
	pthread_cond_destroy(&p->flusher_cond);
fail_progress:
	pthread_cond_destroy(&p->progress_cond);
fail_lock:
	pthread_mutex_destroy(&p->lock);
fail_free:
	free(p);
	return r;
}

int folio_pool_free(struct folio_pool *p)
{
	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	bool busy = p->nmembers != 0;
	pthread_mutex_unlock(&p->lock);
	if (busy)
		return -EBUSY;
	pool_flushers_stop(p);
	pool_queues_destroy(p);
	pthread_cond_destroy(&p->member_cond);
	pthread_cond_destroy(&p->flusher_cond);
	pthread_cond_destroy(&p->progress_cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
	return 0;
}

/* ---- members ----------------------------------------------------------- */

void pool_member_get_locked(struct folio_pool *p, struct pool_member *mb)
{
	(void)p;
	mb->users++;
}

void pool_member_put_locked(struct folio_pool *p, struct pool_member *mb)
{
	if (!--mb->users && mb->quiesced)
		pthread_cond_broadcast(&p->member_cond);
}

struct pool_member **pool_members_get(struct folio_pool *p, size_t *n)
{
	pthread_mutex_lock(&p->lock);
	struct pool_member **v =
		p->nmembers ? malloc(p->nmembers * sizeof(*v)) : NULL;
	*n = 0;
	if (v) {
		for (struct pool_member *mb = p->members.next;
		     mb != &p->members; mb = mb->next) {
			if (mb->quiesced)
				continue;
			pool_member_get_locked(p, mb);
			v[(*n)++] = mb;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return v;
}

void pool_members_put(struct folio_pool *p, struct pool_member **v, size_t n)
{
	if (!v)
		return;
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < n; i++)
		pool_member_put_locked(p, v[i]);
	pthread_mutex_unlock(&p->lock);
	free(v);
}

static int pool_op_attach(struct mapping_cache *c, struct folio_mapping *m)
{
	struct folio_pool *p = pool_of(c);
	/* Every write needs room for one folio of the mapping's largest
	 * size; a budget below that could never be met. */
	if (((uint64_t)1 << m->max_shift) > p->budget)
		return -ERANGE;
	struct pool_member *mb = calloc(1, sizeof(*mb));
	if (!mb)
		return -ENOMEM;
	mb->m = m;
	m->in_cache.member = mb;
	pthread_mutex_lock(&p->lock);
	mb->next = &p->members;
	mb->prev = p->members.prev;
	p->members.prev->next = mb;
	p->members.prev = mb;
	p->nmembers++;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

static void pool_op_quiesce(struct mapping_cache *c, struct folio_mapping *m)
{
	struct folio_pool *p = pool_of(c);
	struct pool_member *mb = member_of(m);
	pthread_mutex_lock(&p->lock);
	mb->quiesced = true;
	while (mb->users)
		pthread_cond_wait(&p->member_cond, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

static void pool_op_unquiesce(struct mapping_cache *c,
			      struct folio_mapping *m)
{
	struct folio_pool *p = pool_of(c);
	pthread_mutex_lock(&p->lock);
	member_of(m)->quiesced = false;
	pthread_mutex_unlock(&p->lock);
}

static void pool_op_detach(struct mapping_cache *c, struct folio_mapping *m)
{
	struct folio_pool *p = pool_of(c);
	struct pool_member *mb = member_of(m);
	pthread_mutex_lock(&p->lock);
	mb->prev->next = mb->next;
	mb->next->prev = mb->prev;
	p->nmembers--;
	p->stats.hits_of_gone += mapping_lookup_hits(m);
	pthread_mutex_unlock(&p->lock);
	m->in_cache.member = NULL;
	free(mb);
}

const struct mapping_cache_ops pool_cache_ops = {
	.attach = pool_op_attach,
	.quiesce = pool_op_quiesce,
	.unquiesce = pool_op_unquiesce,
	.detach = pool_op_detach,
	.charge = pool_op_charge,
	.uncharge = pool_op_uncharge,
	.reserve = pool_op_reserve,
	.added = pool_op_added,
	.removed = pool_op_removed,
	.kick = pool_op_kick,
	.balance = pool_op_balance,
	.progress = pool_op_progress,
};

/* ---- statistics and shrink --------------------------------------------- */

#define SUM_FIELD(name, field)                                             \
	int64_t name(struct folio_pool *p)                                 \
	{                                                                  \
		int64_t s = 0;                                             \
		for (unsigned i = 0; i < BRLOCK_STRIPES; i++)              \
			s += atomic_load_explicit(                         \
				&p->cache.stripe[i].field,                 \
				memory_order_relaxed);                     \
		return s;                                                  \
	}
SUM_FIELD(pool_sum_dirty, dirty)
SUM_FIELD(pool_sum_writeback, writeback)
SUM_FIELD(pool_sum_unstable, unstable)
#undef SUM_FIELD

static uint64_t nonneg(int64_t v)
{
	return v > 0 ? (uint64_t)v : 0;
}

int folio_pool_stats(struct folio_pool *p, struct folio_pool_stats *st)
{
	if (!p || !st)
		return -EINVAL;
	int r = sized_check(st, st->sz, sizeof(size_t), sizeof(*st));
	if (r)
		return r;
	struct folio_pool_stats s;
	memset(&s, 0, sizeof(s));
	s.sz = st->sz;
	s.budget = p->budget;
	s.dirty_background = p->cache.dirty_background;
	s.dirty_limit = p->cache.dirty_limit;
	s.dirty_expire_ms = p->expire_ms;
	s.flusher_threads = p->nflushers;
	s.cached_bytes = atomic_load(&p->charged);
	s.dirty_bytes = nonneg(pool_sum_dirty(p));
	s.writeback_bytes = nonneg(pool_sum_writeback(p));
	s.unstable_bytes = nonneg(pool_sum_unstable(p));
	for (unsigned i = 0; i < BRLOCK_STRIPES; i++)
		s.misses += atomic_load(&p->cache.stripe[i].misses);
#define LOAD(field) s.field = atomic_load(&p->stats.field)
	LOAD(ghost_hits);
	LOAD(reclaimed_bytes);
	LOAD(reclaimed_folios);
	LOAD(throttle_waits);
	LOAD(throttle_ns);
	LOAD(memory_waits);
	LOAD(memory_wait_ns);
	LOAD(flusher_passes);
	LOAD(flusher_bytes);
	LOAD(flushes);
#undef LOAD
	pthread_mutex_lock(&p->lock);
	s.mappings = p->nmembers;
	/* Members leave only under the lock: each one's mapping is alive. */
	s.hits = p->stats.hits_of_gone;
	for (struct pool_member *mb = p->members.next; mb != &p->members;
	     mb = mb->next)
		s.hits += mapping_lookup_hits(mb->m);
	s.small_bytes = p->small.bytes;
	s.main_bytes = p->main.bytes;
	s.metadata_bytes = pool_queue_meta_bytes_locked(p) +
			   p->nmembers * sizeof(struct pool_member);
	pthread_mutex_unlock(&p->lock);
	/* Outside state maps, for the whole process like the allocator's
	 * figures below: the folio layer counts them as they come and go. */
	s.metadata_bytes += atomic_load(&p->folio_meta) +
			    folio_outside_map_bytes();
	/* Index nodes are read under each mapping's index lock, which may
	 * not be taken under the pool's. */
	size_t n;
	struct pool_member **v = pool_members_get(p, &n);
	for (size_t i = 0; i < n; i++)
		s.metadata_bytes += mapping_index_bytes(v[i]->m);
	pool_members_put(p, v, n);
	struct alloc_stats as;
	alloc_stats(&as);
	s.thread_cache_bytes = as.cached_data_bytes + as.cached_meta_bytes;
	s.allocator_bytes = as.header_bytes + as.slab_bytes -
			    as.slab_object_bytes + as.free_resident_bytes +
			    as.spare_chunks * ALLOC_CHUNK_SIZE;
	memcpy(st, &s, MIN(st->sz, sizeof(s)));
	st->sz = s.sz;
	return 0;
}

int64_t folio_pool_shrink(struct folio_pool *p, uint64_t bytes)
{
	if (!p)
		return -EINVAL;
	bytes = MIN(bytes, (uint64_t)INT64_MAX);
	if (!bytes)
		return 0;
	uint64_t freed = pool_reclaim(p, bytes, pool_full_scan(p));
	/* What is clean but unstable comes free with a flush. */
	if (freed < bytes && pool_sum_unstable(p) > 0 &&
	    pool_flush_unstable(p))
		freed += pool_reclaim(p, bytes - freed, pool_full_scan(p));
	/* The folios' memory goes back to the kernel now, not at the next
	 * time the allocator's free memory passes its bound. */
	alloc_trim();
	return (int64_t)freed;
}
