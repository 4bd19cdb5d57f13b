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

#endif
