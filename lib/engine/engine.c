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
#define OPS_REQUIRED_SZ \
	(offsetof(struct folio_engine_ops, truncate) + \
	 sizeof(((struct folio_engine_ops *)0)->truncate))

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
	if (ops->sz >= SIZEOF_THROUGH(struct folio_engine_ops, caps) &&
	    (ops->caps & ~(uint64_t)FOLIO_ENGINE_CAP_DURABLE))
		return -EINVAL;
	struct folio_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
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
	free(e);
	return 0;
}

void *folio_engine_ctx(const struct folio_engine *e)
{
	return e ? e->ctx : NULL;
}

void folio_io_complete(struct folio_io *io, ssize_t result)
{
	if (!io)
		return;
	struct engine_io *rq = container_of(io, struct engine_io, io);
	rq->end_io(rq, result);
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
	unsigned old = atomic_fetch_sub_explicit(&g->pending, 1,
						 memory_order_acq_rel);
	if (old == (IO_GROUP_SLEEPER | 1u))
		futex_wake_all(&g->pending);
}

/* Longest pause between wait() calls of an engine whose wait() fails. */
#define ENGINE_WAIT_ERROR_MAX_NS 10000000L

int engine_wait_until(struct folio_engine *e, bool (*done)(void *arg),
		      void (*sleep)(void *arg, const struct timespec *t),
		      void *arg)
{
	struct timespec pause = {0, ENGINE_POLL_BACKOFF_NS};
	int err = 0;
	while (!done(arg)) {
		if (!e->ops.wait) {
			sleep(arg, NULL);
			continue;
		}
		int r = engine_result(e->ops.wait(e->ctx));
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

static bool group_done(void *arg)
{
	struct io_group *g = arg;
	return !(atomic_load_explicit(&g->pending, memory_order_acquire) &
		 ~IO_GROUP_SLEEPER);
}

static void group_sleep(void *arg, const struct timespec *t)
{
	struct io_group *g = arg;
	/* The mark and the count share one word, so the last completion
	 * either sees the mark or leaves a count of zero for the futex to
	 * refuse the sleep on. */
	unsigned v = atomic_fetch_or_explicit(&g->pending, IO_GROUP_SLEEPER,
					      memory_order_acq_rel) |
		     IO_GROUP_SLEEPER;
	if (v != IO_GROUP_SLEEPER)
		futex_wait_for(&g->pending, v, t);
}

int io_group_wait(struct io_group *g, struct folio_engine *e)
{
	atomic_fetch_sub_explicit(&g->pending, 1, memory_order_acq_rel);
	int werr = engine_wait_until(e, group_done, group_sleep, g);
	int err = atomic_load(&g->error);
	return err ? err : werr;
}
