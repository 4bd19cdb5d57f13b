/* SPDX-License-Identifier: MIT */
/*
 * --posix-threads: how many engine threads the posix engines of a
 * workload get (folio_posix_opts.workers), so that the library default,
 * inline I/O and several pool sizes run side by side in one run.
 */
#ifndef FOLIO_BENCH_POSIX_THREADS_H
#define FOLIO_BENCH_POSIX_THREADS_H

#include <stddef.h>

#include "common.h"

/* What bench_posix_open() passes as folio_posix_opts.workers: 0 (the
 * library's default), FOLIO_POSIX_INLINE or a count. */
extern int bench_posix_workers;

struct bench_posix_list {
	unsigned n;
	int v[BENCH_LIST_MAX];
};

/* "default", "inline" or a count 1..FOLIO_POSIX_MAX_WORKERS, comma
 * separated. 0 or -EINVAL (printed). */
int bench_posix_parse(const char *what, const char *s,
		      struct bench_posix_list *l);

/* "default", "inline" or "N threads" for a value of the list. */
const char *bench_posix_label(int w, char *buf, size_t len);

/* The help line every workload with the option shows. */
#define BENCH_POSIX_THREADS_HELP                                          \
	"posix engine threads: default, inline or 1..64, comma separated " \
	"(each runs side by side)"

#endif
