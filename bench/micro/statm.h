/* SPDX-License-Identifier: MIT */
/* Resident set of the calling process, for the benchmarks that count the
 * memory a cache costs. */
#ifndef FOLIO_BENCH_STATM_H
#define FOLIO_BENCH_STATM_H

#include <stdio.h>
#include <stdlib.h>

/* Resident pages now (/proc/self/statm); exits with 3 when unreadable, as
 * a figure without it would be wrong. */
static inline long statm_rss_pages(void)
{
	long vm = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (!f || fscanf(f, "%ld %ld", &vm, &rss) != 2)
		exit(3);
	fclose(f);
	return rss;
}

#endif
