/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>

#include "base/brlock.h"
#include "base/futex.h"
#include "base/base.h"

_Thread_local unsigned brlock_stripe_tls TLS_FAST = UINT_MAX;
static atomic_uint next_stripe;

unsigned brlock_stripe_assign(void)
{
	brlock_stripe_tls = atomic_fetch_add_explicit(&next_stripe, 1,
						      memory_order_relaxed) %
			    BRLOCK_STRIPES;
	return brlock_stripe_tls;
}

int brlock_init(struct brlock *l)
{
	atomic_init(&l->writer, 0);
	for (unsigned i = 0; i < BRLOCK_STRIPES; i++)
		atomic_init(&l->stripe[i].readers, 0);
	return pthread_mutex_init(&l->writers, NULL) ? -ENOMEM : 0;
}

void brlock_destroy(struct brlock *l)
{
	pthread_mutex_destroy(&l->writers);
}

/* Counted in, but a writer holds or wants the lock: step back, let it
 * drain, wait, and count in again until no writer is there. */
void brlock_read_wait(struct brlock *l, atomic_uint *count)
{
	do {
		if (atomic_fetch_sub(count, 1) == 1)
			futex_wake_all(count);
		unsigned w;
		while ((w = atomic_load(&l->writer)) & 1)
			futex_wait(&l->writer, w);
		atomic_fetch_add(count, 1);
	} while (atomic_load(&l->writer) & 1);
}

/* The last reader of a stripe left while a writer waits for it. */
void brlock_wake_writer(atomic_uint *count)
{
	futex_wake_all(count);
}

void brlock_write_lock(struct brlock *l)
{
	pthread_mutex_lock(&l->writers);
	/* Odd: readers keep out, and optimistic readers' tokens are stale
	 * before anything the writer changes. One writer at a time, so
	 * the increments never interleave. */
	atomic_fetch_add(&l->writer, 1);
	for (unsigned i = 0; i < BRLOCK_STRIPES; i++) {
		atomic_uint *count = &l->stripe[i].readers;
		unsigned v;
		while ((v = atomic_load(count)))
			futex_wait(count, v);
	}
}

void brlock_write_unlock(struct brlock *l)
{
	atomic_fetch_add(&l->writer, 1);
	futex_wake_all(&l->writer);
	pthread_mutex_unlock(&l->writers);
}
