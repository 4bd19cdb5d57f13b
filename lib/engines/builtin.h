/* SPDX-License-Identifier: MIT */
/*
 * Request checks and iovec helpers shared by the built-in engines
 * (posix, io_uring, mem). A user's engine sees the same requests and may
 * need the same checks, but these are not API.
 */
#ifndef FOLIO_ENGINES_BUILTIN_H
#define FOLIO_ENGINES_BUILTIN_H

#include <pthread.h>
#include <sys/uio.h>
#include <time.h>

#include "engine/engine.h"

/* Sanity check of a request handed to a built-in engine: a known op, an
 * iovec array whose lengths add up to len, and a range below
 * FOLIO_MAX_POS in file and device position (so offsets fit off_t and
 * results fit ssize_t). */
#define ENGINE_IO_FLAGS \
	(FOLIO_EXTENT_HOLE | FOLIO_EXTENT_NEW | FOLIO_IO_DURABLE | \
	 FOLIO_IO_WAITED)

static inline int engine_check_io(const struct folio_io *io)
{
	if (!io || (io->op != FOLIO_IO_READ && io->op != FOLIO_IO_WRITE) ||
	    (io->flags & ~(uint32_t)ENGINE_IO_FLAGS) ||
	    (io->op == FOLIO_IO_READ && (io->flags & FOLIO_IO_DURABLE)) ||
	    io->iovcnt < 0 || (io->iovcnt && !io->iov) ||
	    io->pos > FOLIO_MAX_POS || io->len > FOLIO_MAX_POS - io->pos ||
	    io->dev_pos > FOLIO_MAX_POS ||
	    io->len > FOLIO_MAX_POS - io->dev_pos)
		return -EINVAL;
	size_t sum = 0;
	for (int i = 0; i < io->iovcnt; i++) {
		size_t l = io->iov[i].iov_len;
		if ((l && !io->iov[i].iov_base) || l > io->len - sum)
			return -EINVAL;
		sum += l;
	}
	return sum == io->len ? 0 : -EINVAL;
}

static inline bool engine_io_durable(const struct folio_io *io)
{
	return io->flags & FOLIO_IO_DURABLE;
}

/*
 * Complete a request whose transfer gave @res and whose barrier gave
 * @barrier (0 unless a durable write's barrier ran, after a full
 * transfer, and failed): the library must learn that such bytes are in
 * the store though not durable (folio_io_complete_durable()).
 */
static inline void engine_complete(struct folio_io *io, ssize_t res,
				   int barrier)
{
	if (barrier)
		folio_io_complete_durable(io, res, barrier);
	else
		folio_io_complete(io, res);
}

/* O_DIRECT rule: device position, length and every segment's base and
 * length are multiples of @align. */
static inline bool engine_io_aligned(const struct folio_io *io, size_t align)
{
	if ((io->dev_pos | io->len) & (align - 1))
		return false;
	for (int i = 0; i < io->iovcnt; i++)
		if (((uintptr_t)io->iov[i].iov_base | io->iov[i].iov_len) &
		    (align - 1))
			return false;
	return true;
}

/* Zero bytes [from, to) of the data an iovec array describes (a read that
 * met end of file). */
static inline void engine_iov_zero(const struct iovec *iov, int cnt,
				   size_t from, size_t to)
{
	size_t at = 0;
	for (int i = 0; i < cnt && at < to; i++) {
		size_t l = iov[i].iov_len, s = MAX(from, at), e = MIN(to, at + l);
		if (s < e)
			memset((char *)iov[i].iov_base + (s - at), 0, e - s);
		at += l;
	}
}

/* Describe the data of @iov from byte @skip on in at most @max entries of
 * @dst, leaving @iov untouched (it belongs to the caller). Returns the
 * number of entries used (0 when nothing is left). */
static inline int engine_iov_window(const struct iovec *iov, int cnt,
				    size_t skip, struct iovec *dst, int max)
{
	int i = 0, n = 0;
	while (i < cnt && skip >= iov[i].iov_len)
		skip -= iov[i++].iov_len;
	for (; i < cnt && n < max; i++) {
		if (iov[i].iov_len <= skip)
			continue;
		dst[n].iov_base = (char *)iov[i].iov_base + skip;
		dst[n].iov_len = iov[i].iov_len - skip;
		skip = 0;
		n++;
	}
	return n;
}

/*
 * Requests a thread is delivering and has not yet accounted for. They
 * still count as in flight for other threads (a waiter wakes only once
 * their callbacks have returned), but a wait() called from one of their
 * callbacks must not wait for itself. Each engine keeps its own
 * thread-local slot; the slot names one engine context at a time.
 */
struct engine_own {
	const void *ctx;
	uint64_t n;
};

/* This thread is about to run the callbacks of @n requests of @ctx.
 * Returns what engine_own_leave() restores once they have returned. */
static inline struct engine_own engine_own_enter(struct engine_own *slot,
						 const void *ctx, uint64_t n)
{
	struct engine_own saved = *slot;
	if (slot->ctx != ctx)
		*slot = (struct engine_own){ctx, 0};
	slot->n += n;
	return saved;
}

static inline void engine_own_leave(struct engine_own *slot,
				    struct engine_own saved)
{
	*slot = saved;
}

/* How many of @ctx's in-flight requests this thread is delivering. */
static inline uint64_t engine_own_of(const struct engine_own *slot,
				     const void *ctx)
{
	return slot->ctx == ctx ? slot->n : 0;
}

/* Sleep @ns with @lock dropped (held on entry and on return), so that
 * whoever the sleeper waits for can take it meanwhile. */
static inline void engine_unlocked_sleep(pthread_mutex_t *lock, long ns)
{
	struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
	pthread_mutex_unlock(lock);
	nanosleep(&ts, NULL);
	pthread_mutex_lock(lock);
}

#endif
