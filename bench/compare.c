/* SPDX-License-Identifier: MIT */
#include "compare.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double compare_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t compare_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double compare_median(const double *v, int n)
{
	double *tmp = malloc(sizeof(*tmp) * (size_t)n);
	if (!tmp)
		compare_die("compare", "median", ENOMEM);
	memcpy(tmp, v, sizeof(*tmp) * (size_t)n);
	qsort(tmp, (size_t)n, sizeof(*tmp), cmp_double);
	double m = n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
	free(tmp);
	return m;
}

int compare_turn(int j, int r, int n)
{
	return (j + r) % n;
}

void compare_die(const char *prog, const char *what, int err)
{
	fprintf(stderr, "%s: %s: %s\n", prog, what,
		strerror(err < 0 ? -err : err));
	exit(1);
}
