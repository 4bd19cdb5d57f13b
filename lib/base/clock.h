/* SPDX-License-Identifier: MIT */
/* The monotonic clock in nanoseconds, for deadlines and ages. */
#ifndef FOLIO_CLOCK_H
#define FOLIO_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t base_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The absolute CLOCK_MONOTONIC time `ns` from now, as the timed waits of
 * condition variables set to that clock take it. */
static inline struct timespec base_deadline_ts(uint64_t ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t at = (uint64_t)ts.tv_nsec + ns;
	ts.tv_sec += (time_t)(at / 1000000000u);
	ts.tv_nsec = (long)(at % 1000000000u);
	return ts;
}

#endif
