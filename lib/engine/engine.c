/* SPDX-License-Identifier: MIT */
/*
 * The engine object, request completion and waiting for groups of
 * requests. Built-in engines live in lib/engines/.
 */
#include <stdlib.h>
#include <string.h>

#include "base/futex.h"
#include "engine/engine.h"

/* Every callback up to and including truncate is required. */
#define OPS_REQUIRED_SZ SIZEOF_THROUGH(struct folio_engine_ops, truncate)

int engine_create(struct folio_engine **out,
		  const struct folio_engine_ops *ops, void *ctx,
		  enum engine_kind kind)
{
	if (!out || !ops)
		return -EINVAL;
	int r = sized_check(ops, ops->sz, OPS_REQUIRED_SZ, sizeof(*ops));
	if (r)
		return r;
	if (!ops->submit || !ops->flush || !ops->truncate)
		return -EINVAL;
	if (OPTS_GET(ops, caps, 0) &
	    ~(uint64_t)(FOLIO_ENGINE_CAP_DURABLE | FOLIO_ENGINE_CAP_WAITED))
		return -EINVAL;
	struct folio_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	if (pthread_mutex_init(&e->flush_lock, NULL)) {
		free(e);
		return -ENOMEM;
	}
	/* Copy only what the caller's struct has; newer fields stay NULL. */
	memcpy(&e->ops, ops, MIN(ops->sz, sizeof(e->ops)));
	e->ops.sz = sizeof(e->ops);
	e->ctx = ctx;
	e->kind = kind;
	atomic_init(&e->users, 0);
	*out = e;
	return 0;
}

int folio_engine_new(struct folio_engine **out,
		     const struct folio_engine_ops *ops, void *ctx)
{
	return engine_create(out, ops, ctx, ENGINE_USER);
}

int folio_engine_free(struct folio_engine *e)
{
	if (!e)
		return 0;
	if (atomic_load(&e->users))
		return -EBUSY;
	if (e->ops.destroy)
		e->ops.destroy(e->ctx);
	pthread_mutex_destroy(&e->flush_lock);
	free(e);
	return 0;
}

/* engine_wait_until()'s callbacks for a futex count (futex.h). */
static bool count_drained(void *count)
{
	return futex_count_drained(count);
}

static void count_sleep(void *count, const struct timespec *t)
{
	futex_count_sleep(count, t);
}

/*
 * Durable writes against flushes. A durable write's barrier is a flush
 * the engine runs on its own, and its failure is counted only when the
 * write completes: a flush that succeeds meanwhile (the failed barrier
 * took the store's error, or the engine's cache with it) must not be
 * trusted before that count. So every durable write is counted in flight
 * under the current parity, and a flush that succeeded flips the parity
 * and waits for the old one to drain: every barrier that could have run
 * before it returned has then completed and counted its failure. The
 * count-then-recheck on submission (as in epoch.h) keeps a write that
 * saw the old parity from slipping past a flip it did not see. The
 * parities among the other mechanisms: doc/design.md, "Concurrency".
 */
int engine_submit_durable(struct folio_engine *e, struct folio_io *io)
{
	struct engine_io *rq = container_of(io, struct engine_io, io);
	rq->barrier_untrusted = false;
	rq->barrier_error = 0;
	for (;;) {
		unsigned p = atomic_load(&e->barrier_parity) & 1;
		atomic_fetch_add(&e->barriers[p], 1);
		if ((atomic_load(&e->barrier_parity) & 1) == p) {
			rq->barrier_parity = p;
			break;
		}
		futex_count_put(&e->barriers[p]);
	}
	rq->barrier_engine = e;
	int r = engine_result(e->ops.submit(e->ctx, io));
	if (r) {
		/* Refused: no barrier ran. */
		rq->barrier_engine = NULL;
		futex_count_put(&e->barriers[rq->barrier_parity]);
	}
	return r;
}

int engine_flush(struct folio_engine *e)
{
	pthread_mutex_lock(&e->flush_lock);
	atomic_fetch_add(&e->flush_seq, 1);
	int r = engine_result(e->ops.flush(e->ctx));
	if (r)
		atomic_fetch_add(&e->flush_failures, 1);
	atomic_fetch_add(&e->flush_seq, 1);
	if (!r) {
		unsigned old = atomic_fetch_xor(&e->barrier_parity, 1) & 1;
		atomic_uint *count = &e->barriers[old];
		/* The engine's wait() reaps for engines that need it; its
		 * error is the waits' own, not this flush's. */
		(void)engine_wait_until(e, count_drained, count_sleep, count);
		atomic_fetch_and(count, ~FUTEX_COUNT_SLEEPER);
	}
	pthread_mutex_unlock(&e->flush_lock);
	return r;
}

void *folio_engine_ctx(const struct folio_engine *e)
{
	return e ? e->ctx : NULL;
}

/* A durable write completed: the in-flight side of engine_flush(), then
 * the request's own completion. Out of line and ending in the call, so
 * that folio_io_complete() is two tail calls and saves no registers. */
static __attribute__((noinline)) void
barrier_complete(struct engine_io *rq, ssize_t result)
{
	struct folio_engine *e = rq->barrier_engine;
	/* A failed durable write may have failed in its barrier, which may
	 * have dropped what the engine held, whoever wrote it, exactly as a
	 * failed flush(). Counted before it leaves the in-flight count, so
	 * a flush waiting for it sees it. */
	if (result < 0 || rq->barrier_error)
		atomic_fetch_add(&e->flush_failures, 1);
	/*
	 * The other way round: a flush() running now may have failed and
	 * dropped what the engine held before this barrier ran (which then
	 * found nothing to fail on), and counts that only when it returns.
	 * Once no flush runs, every one that could have has counted, and
	 * the mapping compares the count.
	 */
	else if (atomic_load(&e->flush_seq) & 1)
		rq->barrier_untrusted = true;
	futex_count_put(&e->barriers[rq->barrier_parity]);
	rq->end_io(rq, result);
}

void folio_io_complete(struct folio_io *io, ssize_t result)
{
	if (!io)
		return;
	struct engine_io *rq = container_of(io, struct engine_io, io);
	if (rq->barrier_engine)
		barrier_complete(rq, result);
	else
		rq->end_io(rq, result);
}

void folio_io_complete_durable(struct folio_io *io, ssize_t result,
			       int barrier)
{
	if (!io)
		return;
	/* Only a full transfer is followed by a barrier; anything else is
	 * an ordinary completion. A positive barrier is a confused engine:
	 * a failure, as engine_result() makes of any callback's. */
	if ((io->flags & FOLIO_IO_DURABLE) && result == (ssize_t)io->len &&
	    barrier) {
		int err = engine_result(barrier);
		container_of(io, struct engine_io, io)->barrier_error =
			(int16_t)(err < -4095 ? -EIO : err);
	}
	folio_io_complete(io, result);
}

void io_group_init(struct io_group *g)
{
	atomic_init(&g->pending, 1);
	atomic_init(&g->error, 0);
}

void io_group_add(struct io_group *g)
{
	atomic_fetch_add_explicit(&g->pending, 1, memory_order_relaxed);
}

void io_group_done(struct io_group *g, int error)
{
	if (error) {
		int none = 0;
		atomic_compare_exchange_strong(&g->error, &none, error);
	}
	/* Only a waiter that went to sleep needs the system call; most
	 * waits end with the waiter reaping the last completion itself. */
	futex_count_put(&g->pending);
}

/* Longest pause between wait() calls of an engine whose wait() fails. */
#define ENGINE_WAIT_ERROR_MAX_NS 10000000L

int engine_wait_until(struct folio_engine *e, bool (*done)(void *arg),
		      void (*sleep)(void *arg, const struct timespec *t),
		      void *arg)
{
	struct timespec pause = {0, ENGINE_POLL_BACKOFF_NS};
	const struct timespec recheck = {0, ENGINE_IDLE_RECHECK_NS};
	int err = 0;
	while (!done(arg)) {
		if (!e->ops.wait) {
			sleep(arg, NULL);
			continue;
		}
		int r = e->ops.wait(e->ctx);
		if (r == FOLIO_ENGINE_WAIT_IDLE) {
			/* Its requests complete without it: no polling, bar
			 * a rare look for what entered a ring since. */
			if (!done(arg))
				sleep(arg, &recheck);
			continue;
		}
		r = engine_result(r);
		if (r) {
			/* Report it, but keep waiting: the requests point
			 * into folio memory and the waiter's stack, so
			 * nobody may leave before they completed. Slow the
			 * retries down instead of spinning on a broken
			 * wait(). */
			if (!err)
				err = r;
			pause.tv_nsec = MIN(pause.tv_nsec * 2,
					    ENGINE_WAIT_ERROR_MAX_NS);
		}
		if (!done(arg))
			sleep(arg, &pause);
	}
	return err;
}

int io_group_wait(struct io_group *g, struct folio_engine *e)
{
	futex_count_put(&g->pending); /* the submitter's bias */
	int werr = engine_wait_until(e, count_drained, count_sleep,
				     &g->pending);
	int err = atomic_load(&g->error);
	return err ? err : werr;
}
