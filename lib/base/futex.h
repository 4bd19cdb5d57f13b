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

#endif
