/* SPDX-License-Identifier: MIT */
/*
 * The engine layer: the engine object, the library-side request wrapper,
 * groups of requests and waiting for them. Built-in engines are plug-ins
 * in lib/engines/; the mapping layer submits through what is here.
 */
#ifndef FOLIO_ENGINE_H
#define FOLIO_ENGINE_H

#include <pthread.h>
#include <time.h>

#include "base/base.h"

enum engine_kind {
	ENGINE_USER = 0,
	ENGINE_POSIX,
	ENGINE_URING,
	ENGINE_MEM,
	ENGINE_NBD,
};

struct folio_engine {
	struct folio_engine_ops ops;
	void *ctx;
	enum engine_kind kind;
	/* How far the device behind the engine reads ahead for the kernel,
	 * in bytes (0: unknown). A mapping's readahead windows grow at least
	 * this far unless its opts say otherwise: an O_DIRECT engine then
	 * keeps as much in flight as the kernel's own readahead would. */
	uint64_t readahead_hint;
	atomic_uint users; /* mappings attached */
	/* Flushes that failed: the engine may have dropped any write it
	 * held, whichever mapping's flush it was (see commit.c). */
	_Atomic uint64_t flush_failures;
	/* Held across a flush and the count of its failure. A flush that
	 * fails may drop writes another mapping's flush then finds gone and
	 * reports as flushed; that mapping trusts its success only if no
	 * failure was counted meanwhile, so the failure must be counted
	 * before any later flush can return. Its place in the lock order:
	 * doc/design.md, "Concurrency". */
	pthread_mutex_t flush_lock;
	/* Durable writes in flight, each counted under the parity that was
	 * current when it was submitted (see engine_flush()): futex counts
	 * (base/futex.h) a flush sleeps on. */
	atomic_uint barrier_parity;
	atomic_uint barriers[2];
	/* Odd while a flush() runs and its failure is not yet counted: a
	 * barrier that completes then cannot know whether that flush lost
	 * what it had just made durable (see folio_io_complete()). */
	atomic_uint flush_seq;
};

/* Allocate an engine of a built-in kind (the kind lets kind-specific calls
 * such as folio_engine_mem_inject() refuse other engines). */
int engine_create(struct folio_engine **out,
		  const struct folio_engine_ops *ops, void *ctx,
		  enum engine_kind kind);

/*
 * What the library makes of an engine callback's return: the callbacks
 * return 0 or a negative errno, and a positive value (a broken or
 * confused engine) must not pass for success nor leak out as a byte
 * count, so it becomes -EIO.
 */
static inline int engine_result(int r)
{
	return r > 0 ? -EIO : r;
}

/* engine_submit() (below) for a durable write: counted in flight until
 * it completes (see engine_flush()). */
int engine_submit_durable(struct folio_engine *e, struct folio_io *io);

/* The engine's flush, one at a time per engine (see flush_lock). */
int engine_flush(struct folio_engine *e);

/* Does the engine take FOLIO_IO_DURABLE writes? */
static inline bool engine_has_durable(const struct folio_engine *e)
{
	return e->ops.caps & FOLIO_ENGINE_CAP_DURABLE;
}

/* FOLIO_IO_WAITED for a request its submitter waits for next, when the
 * engine takes the hint, else 0. */
static inline uint32_t engine_waited_flag(const struct folio_engine *e)
{
	return e->ops.caps & FOLIO_ENGINE_CAP_WAITED ? FOLIO_IO_WAITED : 0;
}

static inline int engine_truncate(struct folio_engine *e, uint64_t size)
{
	return engine_result(e->ops.truncate(e->ctx, size));
}

/*
 * Library-side wrapper of every request. The engine sees only `io`;
 * folio_io_complete() finds the wrapper and calls end_io.
 */
struct engine_io {
	struct folio_io io;
	void (*end_io)(struct engine_io *rq, ssize_t result);
	/* A durable write's engine and the parity it is counted under
	 * (engine_submit_durable()); NULL for every other request, which
	 * must start zeroed, as the mapping's requests do (io_alloc()). */
	struct folio_engine *barrier_engine;
	unsigned barrier_parity;
	/* Set by folio_io_complete() on a durable write that completed in
	 * full while a flush() ran: its barrier's success proves nothing,
	 * so the write counts as written, not as durable. */
	bool barrier_untrusted;
	/* A durable write whose data reached the store in full but whose
	 * barrier failed (folio_io_complete_durable()): the barrier's
	 * negative errno, else 0. The bytes count as written (the store
	 * holds them, and its size grew), the failure as a failed flush.
	 * 16 bits (errno values are small) fit the padding after
	 * barrier_untrusted: the request, zeroed per submission, stays
	 * as large as it was. */
	int16_t barrier_error;
};

/* Submit a library request (an engine_io). Inline: every request comes
 * here, and only a sync's durable write needs more than the call. */
static inline int engine_submit(struct folio_engine *e, struct folio_io *io)
{
	if (io->flags & FOLIO_IO_DURABLE)
		return engine_submit_durable(e, io);
	return engine_result(e->ops.submit(e->ctx, io));
}

/*
 * A group of requests someone waits for. Each submitted request adds one;
 * io_group_done() subtracts one and wakes the waiter at zero. The bias of
 * one held by the submitter keeps the count from reaching zero before the
 * last request is submitted.
 */
struct io_group {
	atomic_uint pending; /* a futex count (base/futex.h) */
	atomic_int error; /* first error seen, 0 if none */
};

void io_group_init(struct io_group *g);
void io_group_add(struct io_group *g);
void io_group_done(struct io_group *g, int error);
/* Drop the submitter's bias and wait for every request, driving the
 * engine's wait() when it has one. Returns the first request error, else
 * wait()'s error, else 0. */
int io_group_wait(struct io_group *g, struct folio_engine *e);

/*
 * Sleep until done(arg), where whoever makes it true wakes the sleeper
 * that sleep(arg, timeout) puts to sleep (timeout NULL: no limit). A
 * polled engine is driven through its wait(); as wait() returns at once
 * when the engine has nothing in flight (the last request may still be
 * being built elsewhere), the loop then sleeps briefly instead of
 * spinning. Returns 0, or the first error wait() returned (the wait
 * still lasts until done(arg)).
 */
int engine_wait_until(struct folio_engine *e, bool (*done)(void *arg),
		      void (*sleep)(void *arg, const struct timespec *t),
		      void *arg);

/* How long a waiter driving a polled engine sleeps between wait() calls
 * that made no progress for it. */
#define ENGINE_POLL_BACKOFF_NS 100000

/* How long a waiter sleeps after wait() returned FOLIO_ENGINE_WAIT_IDLE
 * before it asks again, should no completion wake it: an engine that
 * found nothing to poll may see a request enter a ring just after
 * (uring_wait()). Long, because a timeout costs every wakeup on a VM:
 * measured here, a futex wait with a 100 us timeout woke 15-25 us later
 * than one without, with 1 ms 5-7 us later, with 10 ms no later. */
#define ENGINE_IDLE_RECHECK_NS 10000000

#endif
