/* SPDX-License-Identifier: MIT */
/*
 * Dirty control and waiting for room: writer throttling (the kernel's
 * balance_dirty_pages in spirit), the flusher threads, and what an
 * allocating writer does when the pool is full.
 *
 * Thresholds bound dirty + writeback bytes (what is not clean yet), as
 * the kernel's do: writers above dirty_limit are then paced by write
 * completions, not by how fast requests can be queued. Unstable bytes
 * (written, not flushed) are left to the memory side: they cost a flush,
 * not a write, and the pool flushes when they hold room it needs.
 *
 * Nothing here is called holding a mapping lock (the mapping layer lets
 * go of io_lock before it throttles or reserves), so writing back and
 * flushing any member is safe: a flush that fails may take that
 * mapping's io_lock exclusively to redo a truncate.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "alloc/alloc.h"
#include "pool/pool.h"
#include "mapping/cache.h"
#include "mapping/commit.h"
#include "mapping/request.h"
#include "mapping/tags.h"
#include "mapping/wait.h"
#include "mapping/writeback.h"

/* What one flusher step writes: one default request. */
#define FLUSH_CHUNK ((uint64_t)RQ_DEFAULT_MAX_BYTES)
/* A waiter gives up after this many rounds in which nothing in the pool
 * changed (no folio freed, no write completed, no flush succeeded) while
 * no write was in flight, each waiting up to WAIT_NS for others: then
 * nothing it could wait for is left (write errors keep data dirty, or
 * every folio is held). A slow engine never makes it give up: its
 * requests in flight will complete. */
#define STALL_ROUNDS 16u
#define WAIT_NS 10000000u
/* A throttled writer whose flushers took no step in this many rounds
 * sets flushers_stuck. */
#define IDLE_ROUNDS 10u

/* Sleep until the events counter moves past `mark` or `ns` pass. */
static void wait_progress(struct folio_pool *p, uint64_t mark, uint64_t ns)
{
	struct timespec t = base_deadline_ts(ns);
	pthread_mutex_lock(&p->lock);
	while (atomic_load(&p->events) == mark &&
	       pthread_cond_timedwait(&p->progress_cond, &p->lock, &t) == 0)
		;
	pthread_mutex_unlock(&p->lock);
}

/* Did a round that began at `mark` change nothing, with nothing in
 * flight that still could? */
static bool stalled(struct folio_pool *p, uint64_t mark)
{
	return atomic_load(&p->events) == mark && pool_sum_writeback(p) <= 0;
}

void pool_op_progress(struct mapping_cache *c)
{
	struct folio_pool *p = pool_of(c);
	atomic_fetch_add(&p->events, 1);
	pthread_mutex_lock(&p->lock);
	pthread_cond_broadcast(&p->progress_cond);
	pthread_mutex_unlock(&p->lock);
}

void pool_op_kick(struct mapping_cache *c)
{
	struct folio_pool *p = pool_of(c);
	if (!p->nflushers || atomic_exchange(&p->kicked, true))
		return;
	pthread_mutex_lock(&p->lock);
	pthread_cond_broadcast(&p->flusher_cond);
	pthread_mutex_unlock(&p->lock);
}

/*
 * Wait for writes in flight anywhere in the pool to end, or for others'
 * progress when none are: what a waiter does when it has nothing to
 * start. Waiting on the folios drives engines that complete only when
 * polled (their wait()), so requests someone submitted without waiting
 * cannot hold a waiter for good.
 */
static void wait_for_others(struct folio_pool *p, uint64_t mark)
{
	if (pool_sum_writeback(p) <= 0) {
		wait_progress(p, mark, WAIT_NS);
		return;
	}
	size_t n;
	struct pool_member **v = pool_members_get(p, &n);
	for (size_t i = 0; i < n; i++)
		if (mapping_any_tagged(v[i]->m, INDEX_TAG_WRITEBACK))
			mapping_wait_range_writeback(v[i]->m, 0, FOLIO_MAX_POS);
	pool_members_put(p, v, n);
}

static int by_dirty_age(const void *a, const void *b)
{
	/* A member whose age is unknown (0) goes last. */
	const struct pool_member *ma = *(struct pool_member *const *)a;
	const struct pool_member *mb = *(struct pool_member *const *)b;
	uint64_t x = atomic_load(&ma->m->in_cache.dirty_since);
	uint64_t y = atomic_load(&mb->m->in_cache.dirty_since);
	x = x ? x : UINT64_MAX;
	y = y ? y : UINT64_MAX;
	return x < y ? -1 : x > y;
}

/* Write back about `bytes` of dirty data, from the mapping whose dirty
 * data is oldest on, in position order within each, and wait for it.
 * Returns the bytes submitted. */
static uint64_t writeback_oldest(struct folio_pool *p, uint64_t bytes)
{
	size_t n;
	struct pool_member **v = pool_members_get(p, &n);
	if (n > 1)
		qsort(v, n, sizeof(*v), by_dirty_age);
	uint64_t done = 0;
	for (size_t i = 0; i < n && done < bytes; i++) {
		if (!mapping_any_tagged(v[i]->m, INDEX_TAG_DIRTY))
			continue;
		uint64_t cursor = 0;
		int64_t r = mapping_writeback_chunk(v[i]->m, &cursor,
						    bytes - done);
		if (r > 0)
			done += (uint64_t)r;
	}
	pool_members_put(p, v, n);
	return done;
}

unsigned pool_flush_unstable(struct folio_pool *p)
{
	size_t n;
	struct pool_member **v = pool_members_get(p, &n);
	unsigned flushed = 0;
	for (size_t i = 0; i < n; i++) {
		if (!mapping_any_tagged(v[i]->m, INDEX_TAG_UNSTABLE))
			continue;
		/* Its error, if any, is recorded for the mapping's next
		 * sync; failed, the data is dirty again and written anew. */
		mapping_commit(v[i]->m);
		atomic_fetch_add(&p->stats.flushes, 1);
		flushed++;
	}
	pool_members_put(p, v, n);
	return flushed;
}

int pool_op_reserve(struct mapping_cache *c, struct folio_mapping *m,
		    size_t bytes)
{
	(void)m;
	struct folio_pool *p = pool_of(c);
	uint64_t t0 = base_now_ns();
	atomic_fetch_add(&p->stats.memory_waits, 1);
	atomic_fetch_add(&c->waiters, 1);
	int r = 0;
	unsigned stalls = 0;
	for (;;) {
		uint64_t mark = atomic_load(&p->events);
		if (!pool_charge_scan(p, bytes, pool_full_scan(p)))
			break;
		/* Room held by clean but unstable folios comes free with a
		 * flush; room held by dirty ones with writeback first (and
		 * a flush in the next round). */
		bool acted = false;
		if (pool_sum_unstable(p) > 0 && pool_flush_unstable(p)) {
			acted = true;
			if (!pool_charge_scan(p, bytes, pool_full_scan(p)))
				break;
		}
		if (pool_sum_dirty(p) > 0 &&
		    writeback_oldest(p, MAX((uint64_t)bytes, FLUSH_CHUNK)))
			acted = true;
		/* Nothing to start: others' I/O or locks hold the room. */
		if (!acted)
			wait_for_others(p, mark);
		if (!stalled(p, mark)) {
			stalls = 0;
		} else if (++stalls == STALL_ROUNDS) {
			r = -ENOMEM;
			break;
		}
	}
	atomic_fetch_sub(&c->waiters, 1);
	atomic_fetch_add(&p->stats.memory_wait_ns, base_now_ns() - t0);
	return r;
}

void pool_op_balance(struct mapping_cache *c, struct folio_mapping *m)
{
	(void)m;
	struct folio_pool *p = pool_of(c);
	int64_t limit = (int64_t)c->dirty_limit;
	int64_t total = mapping_cache_dirty_total(c);
	if (total < limit) {
		if (total >= (int64_t)c->dirty_background)
			pool_op_kick(c);
		return;
	}
	uint64_t t0 = base_now_ns();
	atomic_fetch_add(&p->stats.throttle_waits, 1);
	atomic_fetch_add(&c->waiters, 1);
	unsigned stalls = 0, idle = 0;
	for (;;) {
		/* With flushers the writer waits for them, woken by
		 * completions. Without, or while they take no step (not
		 * scheduled on a loaded machine, or stuck in a slow flush),
		 * it writes back itself, oldest first, down to halfway
		 * between the thresholds, so that it does not stop again at
		 * once. */
		bool self = !p->nflushers || atomic_load(&p->flushers_stuck);
		int64_t target =
			self ? ((int64_t)c->dirty_background + limit) / 2
			     : limit;
		if (mapping_cache_dirty_total(c) < target)
			break;
		uint64_t mark = atomic_load(&p->events);
		uint64_t steps = atomic_load(&p->stats.flusher_passes);
		if (!self) {
			pool_op_kick(c);
			wait_progress(p, mark, WAIT_NS);
			/* Writes someone submitted without waiting, to an
			 * engine that completes only when polled, would
			 * hold the writer (and the flushers, which skip
			 * folios under writeback) for good. */
			if (atomic_load(&p->events) == mark &&
			    pool_sum_writeback(p) > 0)
				wait_for_others(p, mark);
		} else if (!writeback_oldest(p, FLUSH_CHUNK)) {
			wait_for_others(p, mark);
		}
		bool flushed = atomic_load(&p->stats.flusher_passes) != steps;
		if (flushed)
			idle = 0;
		else if (++idle == IDLE_ROUNDS)
			atomic_store(&p->flushers_stuck, true);
		/* An engine that keeps failing must not hold writers for
		 * good: the data stays dirty, nothing is lost. Flushers
		 * that took no step said nothing about the engine. */
		if (!stalled(p, mark))
			stalls = 0;
		else if ((self || flushed) && ++stalls == STALL_ROUNDS)
			break;
	}
	atomic_fetch_sub(&c->waiters, 1);
	atomic_fetch_add(&p->stats.throttle_ns, base_now_ns() - t0);
}

/* ---- flusher threads --------------------------------------------------- */

/*
 * The member a flusher should write next, or NULL: members whose dirty
 * data expired, or any dirty member while dirty + writeback bytes are at
 * or above the background threshold. Round robin: a member visited in
 * this round comes after every one that was not; among those, the
 * oldest dirty data first. One flusher per member at a time. Caller
 * holds p->lock.
 */
static struct pool_member *flusher_pick(struct folio_pool *p, uint64_t now)
{
	bool background = mapping_cache_dirty_total(&p->cache) >=
			  (int64_t)p->cache.dirty_background;
	struct pool_member *best = NULL;
	uint64_t best_since = 0;
	bool best_seen = true;
	for (struct pool_member *mb = p->members.next; mb != &p->members;
	     mb = mb->next) {
		if (mb->quiesced || mb->flushing)
			continue;
		uint64_t since = atomic_load(&mb->m->in_cache.dirty_since);
		if (!since || (!background && now - since < p->expire_ns))
			continue;
		bool seen = mb->visited >= p->flush_round;
		if (!best || (best_seen && !seen) ||
		    (best_seen == seen && since < best_since)) {
			best = mb;
			best_since = since;
			best_seen = seen;
		}
	}
	if (best) {
		if (best_seen)
			p->flush_round++; /* everyone had a turn */
		best->visited = p->flush_round;
	}
	return best;
}

/* After a flusher pass over the whole of m: the age of what is left. A
 * writer that dirtied a folio meanwhile found the age set and left it;
 * looking at the tags again after clearing it keeps that data dated. */
static void pass_done(struct folio_mapping *m, uint64_t pass_start)
{
	uint64_t since = atomic_load(&m->in_cache.dirty_since);
	if (mapping_any_tagged(m, INDEX_TAG_DIRTY)) {
		/* Older data was written by this pass, unless a busy folio
		 * was skipped: then it is dated as of the pass. */
		if (since && since < pass_start)
			atomic_compare_exchange_strong(
				&m->in_cache.dirty_since, &since, pass_start);
		return;
	}
	if (atomic_compare_exchange_strong(&m->in_cache.dirty_since, &since,
					   0) &&
	    mapping_any_tagged(m, INDEX_TAG_DIRTY)) {
		uint64_t zero = 0;
		atomic_compare_exchange_strong(&m->in_cache.dirty_since, &zero,
					       base_now_ns());
	}
}

static void *flusher_main(void *arg)
{
	struct folio_pool *p = arg;
	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		uint64_t now = base_now_ns();
		struct pool_member *mb = flusher_pick(p, now);
		if (!mb) {
			atomic_store(&p->kicked, false);
			/* Idle: spares of the allocator still age out when
			 * nothing allocates (outside p->lock: unmapping
			 * waits for a grace period). */
			pthread_mutex_unlock(&p->lock);
			alloc_decay();
			pthread_mutex_lock(&p->lock);
			struct timespec t =
				base_deadline_ts(p->flusher_period_ns);
			if (!p->stop && !atomic_load(&p->kicked))
				pthread_cond_timedwait(&p->flusher_cond,
						       &p->lock, &t);
			continue;
		}
		mb->flushing = true;
		pool_member_get_locked(p, mb);
		uint64_t cursor = mb->cursor;
		if (!cursor)
			mb->pass_start = now;
		uint64_t pass_start = mb->pass_start;
		pthread_mutex_unlock(&p->lock);

		/* One request at a time: the mapping's writers wait at most
		 * for the folio being taken, truncate for one request. */
		int64_t n =
			mapping_writeback_chunk(mb->m, &cursor, FLUSH_CHUNK);
		/* Nothing written because what is dirty is under writeback
		 * already: wait for that (driving a polled engine) rather
		 * than pick the member again at once. */
		if (n == 0 && mapping_any_tagged(mb->m, INDEX_TAG_WRITEBACK))
			mapping_wait_range_writeback(mb->m, 0, FOLIO_MAX_POS);
		/* Written data stays in memory until flushed: flush when it
		 * holds as much as dirty data may before the flushers start,
		 * or when someone waits for room. */
		int64_t unstable = pool_sum_unstable(p);
		if (unstable > 0 &&
		    (unstable >= (int64_t)p->cache.dirty_background ||
		     atomic_load(&p->cache.waiters)) &&
		    mapping_any_tagged(mb->m, INDEX_TAG_UNSTABLE)) {
			mapping_commit(mb->m);
			atomic_fetch_add(&p->stats.flushes, 1);
		}
		if (!cursor)
			pass_done(mb->m, pass_start);
		atomic_fetch_add(&p->stats.flusher_passes, 1);
		if (atomic_load_explicit(&p->flushers_stuck,
					 memory_order_relaxed))
			atomic_store(&p->flushers_stuck, false);
		if (n > 0)
			atomic_fetch_add(&p->stats.flusher_bytes, (uint64_t)n);

		pthread_mutex_lock(&p->lock);
		mb->cursor = cursor;
		mb->flushing = false;
		pool_member_put_locked(p, mb);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int pool_flushers_start(struct folio_pool *p)
{
	if (!p->nflushers)
		return 0;
	p->threads = calloc(p->nflushers, sizeof(*p->threads));
	if (!p->threads)
		return -ENOMEM;
	for (unsigned i = 0; i < p->nflushers; i++) {
		int r = pthread_create(&p->threads[i], NULL, flusher_main, p);
		if (r) {
			p->nflushers = i;
			pool_flushers_stop(p);
			return -r;
		}
	}
	return 0;
}

void pool_flushers_stop(struct folio_pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->flusher_cond);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nflushers; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	p->threads = NULL;
}
