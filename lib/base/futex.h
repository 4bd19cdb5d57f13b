/* SPDX-License-Identifier: MIT */
/*
 * Sleeping on a 32-bit atomic word. Folios keep their flags in one word and
 * sleep on it directly, so a folio needs no mutex or condition variable of
 * its own (the metadata budget is 64 bytes).
 */
#ifndef FOLIO_FUTEX_H
#define FOLIO_FUTEX_H

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleep while *word == expected (returns at once otherwise, or spuriously,
 * or after `timeout` when it is not NULL). */
static inline void futex_wait_for(atomic_uint *word, unsigned expected,
				  const struct timespec *timeout)
{
	syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected,
		timeout, NULL, 0);
}

static inline void futex_wait(atomic_uint *word, unsigned expected)
{
	futex_wait_for(word, expected, NULL);
}

static inline void futex_wake_all(atomic_uint *word)
{
	syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL,
		NULL, 0);
}

/*
 * A count one thread may sleep on until it drains to zero. The top bit
 * says a sleeper may be there, so only then does the last put make the
 * system call; mark and count share one word, so the last put either sees
 * the mark or leaves a count of zero for the futex to refuse the sleep on.
 */
#define FUTEX_COUNT_SLEEPER 0x80000000u

static inline bool futex_count_drained(atomic_uint *count)
{
	return !(atomic_load(count) & ~FUTEX_COUNT_SLEEPER);
}

static inline void futex_count_put(atomic_uint *count)
{
	if (atomic_fetch_sub_explicit(count, 1, memory_order_acq_rel) ==
	    (FUTEX_COUNT_SLEEPER | 1u))
		futex_wake_all(count);
}

/* Sleep until the count drains (or spuriously, or after `timeout`); the
 * mark stays set until the sleeper clears it. */
static inline void futex_count_sleep(atomic_uint *count,
				     const struct timespec *timeout)
{
	unsigned v = atomic_fetch_or_explicit(count, FUTEX_COUNT_SLEEPER,
					      memory_order_acq_rel) |
		     FUTEX_COUNT_SLEEPER;
	if (v != FUTEX_COUNT_SLEEPER)
		futex_wait_for(count, v, timeout);
}

#endif
