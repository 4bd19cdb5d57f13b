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
	_Alignas(BRLOCK_LINE) atomic_uint writer; /* a writer holds or wants it */
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
void brlock_read_lock(struct brlock *l);
void brlock_read_unlock(struct brlock *l);
void brlock_write_lock(struct brlock *l);
void brlock_write_unlock(struct brlock *l);

#endif
