/* SPDX-License-Identifier: MIT */
/*
 * Grace periods and deferred frees for the read-side sections of
 * epoch.h.
 */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>

#include "base/epoch.h"

struct epoch_domain epoch_global;

/* Grace periods one at a time: each waits for the parity the previous
 * one left behind to drain, which is what lets a reader check only that
 * the epoch did not move while it counted itself. */
static pthread_mutex_t gp_lock = PTHREAD_MUTEX_INITIALIZER;

/* Retired entries waiting for the next grace period. */
static pthread_mutex_t retire_lock = PTHREAD_MUTEX_INITIALIZER;
static struct epoch_entry *retired;
static unsigned nretired;

unsigned epoch_read_enter_retry(unsigned s)
{
	unsigned slot;
	while (!epoch_read_try_enter(s, &slot))
		;
	return slot;
}

void epoch_synchronize(void)
{
	pthread_mutex_lock(&gp_lock);
	/* Sequentially consistent like the readers' count and check: a
	 * reader that counted itself under the old epoch is seen below,
	 * and one that reads the new epoch also reads every unlink the
	 * caller made before calling. */
	uint64_t e = atomic_fetch_add(&epoch_global.now, 1);
	for (unsigned i = 0; i < BRLOCK_STRIPES; i++) {
		atomic_uint *c =
			&epoch_global.readers[EPOCH_SLOT(i, (unsigned)(e & 1))];
		/* Sections are short and never sleep: spinning (politely)
		 * costs less than a futex round trip per stripe. */
		while (atomic_load(c))
			sched_yield();
	}
	pthread_mutex_unlock(&gp_lock);
}

static void free_list(struct epoch_entry *e)
{
	while (e) {
		struct epoch_entry *next = e->next;
		e->free(e);
		e = next;
	}
}

static struct epoch_entry *take_all(void)
{
	pthread_mutex_lock(&retire_lock);
	struct epoch_entry *list = retired;
	retired = NULL;
	nretired = 0;
	pthread_mutex_unlock(&retire_lock);
	return list;
}

void epoch_retire(struct epoch_entry *e, void (*fn)(struct epoch_entry *e))
{
	e->free = fn;
	pthread_mutex_lock(&retire_lock);
	e->next = retired;
	retired = e;
	bool full = ++nretired >= EPOCH_BATCH;
	pthread_mutex_unlock(&retire_lock);
	if (full)
		epoch_barrier();
}

void epoch_barrier(void)
{
	/* Only what was retired before the grace period began is known to
	 * be unreachable by every section it waits for. */
	struct epoch_entry *list = take_all();
	epoch_synchronize();
	free_list(list);
}
