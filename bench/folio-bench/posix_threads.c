/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "posix_threads.h"

int bench_posix_workers;

int bench_posix_open(struct folio_engine **out, int fd)
{
	struct folio_posix_opts o = {.sz = sizeof(o),
				     .workers = bench_posix_workers};
	return folio_engine_posix_opts(out, fd, &o);
}

int bench_posix_parse(const char *what, const char *s,
		      struct bench_posix_list *l)
{
	l->n = 0;
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", s);
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		int w;
		char *end;
		if (!strcmp(t, "default")) {
			w = 0;
		} else if (!strcmp(t, "inline")) {
			w = FOLIO_POSIX_INLINE;
		} else {
			long v = strtol(t, &end, 10);
			if (*end || v < 1 || v > FOLIO_POSIX_MAX_WORKERS)
				goto bad;
			w = (int)v;
		}
		if (l->n == BENCH_LIST_MAX)
			goto bad;
		l->v[l->n++] = w;
	}
	if (l->n)
		return 0;
bad:
	fprintf(stderr, "folio-bench %s: --posix-threads: %s: want default, "
			"inline or 1..%d, comma separated (at most %d)\n",
		what, s, FOLIO_POSIX_MAX_WORKERS, BENCH_LIST_MAX);
	return -EINVAL;
}

const char *bench_posix_label(int w, char *buf, size_t len)
{
	if (!w)
		return "default";
	if (w == FOLIO_POSIX_INLINE)
		return "inline";
	snprintf(buf, len, "%d threads", w);
	return buf;
}
