/* SPDX-License-Identifier: MIT */
/*
 * A reader-biased rwlock for the mapping's io_lock: every read and write
 * takes it shared, only truncate and invalidate take it exclusively. A
 * plain rwlock keeps its reader count in one cache line that every reader
 * writes, so two threads writing disjoint folios would bounce that line
 * between cores on every call. Here each thread counts itself in one of
 * BRLOCK_STRIPES cache-line-sized stripes; a writer raises a flag and waits
 * for every stripe to drain. Readers then share only the read-mostly flag.
 *
 * Not recursive, and a shared hold is released by the thread that took
 * it (the stripe is per thread). Writers are preferred: once one waits,
 * new readers wait for it.
 *
 * The writer word is also a sequence count of exclusive holds (odd while
 * a writer holds or wants the lock), so a reader that only loads shared
 * data can go without the lock at all: brlock_optimistic_begin(), read,
 * brlock_optimistic_valid(). That reader writes no line a writer or
 * another reader uses, and writers never wait for it.
 */
#ifndef FOLIO_BRLOCK_H
#define FOLIO_BRLOCK_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include "base/base.h"

#define BRLOCK_STRIPES 16
#define BRLOCK_LINE 64

struct brlock_stripe {
	_Alignas(BRLOCK_LINE) atomic_uint readers;
};

struct brlock {
	/* Exclusive holds begun and ended: odd while a writer holds or
	 * wants the lock. */
	_Alignas(BRLOCK_LINE) atomic_uint writer;
	pthread_mutex_t writers;                  /* one writer at a time */
	struct brlock_stripe stripe[BRLOCK_STRIPES];
};

/* This thread's stripe, 0..BRLOCK_STRIPES-1 (threads are spread round
 * robin). Also used to stripe hot statistics counters. Inline: every
 * read-side section and every call's io_lock asks for it. */
extern _Thread_local unsigned brlock_stripe_tls TLS_FAST;
unsigned brlock_stripe_assign(void);

static inline unsigned brlock_thread_stripe(void)
{
	unsigned s = brlock_stripe_tls;
	return s != UINT_MAX ? s : brlock_stripe_assign();
}

int brlock_init(struct brlock *l);
void brlock_destroy(struct brlock *l);
void brlock_write_lock(struct brlock *l);
void brlock_write_unlock(struct brlock *l);

/* The read side's slow halves (brlock.c): a writer is there. */
void brlock_read_wait(struct brlock *l, atomic_uint *count);
void brlock_wake_writer(atomic_uint *count);

/*
 * Reader and writer each publish themselves and then look at the other
 * (reader: count, then flag; writer: flag, then counts), all sequentially
 * consistent, so at least one of them sees the other and neither enters
 * while the other is inside. Inline: every read and write takes the read
 * side, and without a writer it is one atomic add and one load.
 */
static inline void brlock_read_lock_at(struct brlock *l, unsigned stripe)
{
	atomic_uint *count = &l->stripe[stripe].readers;
	atomic_fetch_add(count, 1);
	if (atomic_load(&l->writer) & 1)
		brlock_read_wait(l, count);
}

static inline void brlock_read_unlock_at(struct brlock *l, unsigned stripe)
{
	atomic_uint *count = &l->stripe[stripe].readers;
	if (atomic_fetch_sub(count, 1) == 1 && (atomic_load(&l->writer) & 1))
		brlock_wake_writer(count);
}

/*
 * The optimistic read side, a seqcount over exclusive holds. Begin
 * stores a token and returns false when a writer holds or wants the
 * lock: the caller then takes the read side instead (the token is still
 * one no later check accepts once that hold ends). brlock_optimistic_valid()
 * then says whether no exclusive hold began since the token was taken.
 * It sees every hold whose effects the caller's reads in between could
 * have observed, provided the caller observed them through acquire loads
 * (a writer publishes its changes with release stores or unlocks after
 * its increment): an acquire load orders the check after it. A caller
 * reading with plain loads validates those with a seqcount of its own
 * first (the folio version of an optimistic copy). Tokens wrap after
 * 2^31 exclusive holds: a reader that stays between the two calls that
 * long is not a case this lock serves.
 */
static inline bool brlock_optimistic_begin(const struct brlock *l,
					   unsigned *token)
{
	*token = atomic_load_explicit(&((struct brlock *)l)->writer,
				      memory_order_acquire);
	return !(*token & 1);
}

static inline bool brlock_optimistic_valid(const struct brlock *l,
					   unsigned token)
{
	return atomic_load_explicit(&((struct brlock *)l)->writer,
				    memory_order_acquire) == token;
}

/* The read side as most callers take it. The _at forms take the stripe
 * from a caller that looked it up already (brlock_thread_stripe()) for
 * its own striped counters too: it never changes once a thread has one. */
static inline void brlock_read_lock(struct brlock *l)
{
	brlock_read_lock_at(l, brlock_thread_stripe());
}

static inline void brlock_read_unlock(struct brlock *l)
{
	brlock_read_unlock_at(l, brlock_thread_stripe());
}

#endif
