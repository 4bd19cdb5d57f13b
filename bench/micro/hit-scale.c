/* SPDX-License-Identifier: MIT */
/*
 * Cached read hits from one and two threads against memcpy() of the same
 * folio memory (issue 24: a hit must write nothing shared, so two
 * threads should scale as two memcpy() loops do).
 *
 * One mapping in a pool (mem engine), HOT bytes in folios of FOLIO bytes,
 * written and synced first; then rounds of four timed runs, interleaved:
 *   lib x1, lib x2   folio_mapping_read() of 4 KiB at random aligned
 *                    offsets of the hot set, 1 and 2 threads at once;
 *   memcpy x1, x2    memcpy() of 4 KiB out of folio_data() of the same
 *                    folios (references held), same offsets.
 * Prints each run's GB/s (all threads together), the medians, and the
 * scaling (x2 / x1) of each and lib's scaling over memcpy's (target
 * >= 0.9).
 *
 * Usage: hit-scale [ITERS per thread per run] [HOT bytes] [FOLIO bytes]
 *        [ROUNDS]   (defaults 2000000, 1 MiB, 4 KiB, 5)
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "folio_state.h"
#include "folio_state_mem.h"

#define BS 4096
#define MAX_ROUNDS 15

static uint64_t iters = 2000000, hot = 1u << 20, fsize = BS;
static unsigned rounds = 5;
static struct folio_mapping *map;
static struct folio **folios;

struct worker {
	pthread_t t;
	bool lib;
	uint64_t seed;
	int err;
	pthread_barrier_t *start;
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *run(void *arg)
{
	struct worker *w = arg;
	char *buf = aligned_alloc(BS, BS);
	uint64_t s = w->seed, slots = hot / BS;
	if (!buf) {
		w->err = 1;
		return NULL;
	}
	pthread_barrier_wait(w->start);
	for (uint64_t i = 0; i < iters; i++) {
		uint64_t off = rnd(&s) % slots * BS;
		if (w->lib) {
			if (folio_mapping_read(map, buf, BS, off) != BS) {
				w->err = 1;
				break;
			}
		} else {
			const char *d = folio_data(folios[off / fsize]);
			memcpy(buf, d + off % fsize, BS);
		}
		__asm__ __volatile__("" : : "r"(buf) : "memory");
	}
	free(buf);
	return NULL;
}

/* One timed run: GB/s of all threads together. */
static double timed(bool lib, unsigned nthreads)
{
	struct worker w[2];
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, nthreads + 1);
	for (unsigned i = 0; i < nthreads; i++) {
		w[i] = (struct worker){.lib = lib, .seed = 0x9e3779b97f4a7c15u * (i + 1),
				       .start = &start};
		if (pthread_create(&w[i].t, NULL, run, &w[i])) {
			perror("pthread_create");
			exit(1);
		}
	}
	pthread_barrier_wait(&start);
	double t0 = now_s();
	int err = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(w[i].t, NULL);
		err |= w[i].err;
	}
	double t = now_s() - t0;
	pthread_barrier_destroy(&start);
	if (err) {
		fprintf(stderr, "hit-scale: a read failed\n");
		exit(1);
	}
	return (double)iters * nthreads * BS / t / 1e9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp);
	return v[n / 2];
}

int main(int argc, char **argv)
{
	if (argc > 1)
		iters = strtoull(argv[1], NULL, 0);
	if (argc > 2)
		hot = strtoull(argv[2], NULL, 0);
	if (argc > 3)
		fsize = strtoull(argv[3], NULL, 0);
	if (argc > 4)
		rounds = (unsigned)strtoul(argv[4], NULL, 0);
	if (!iters || hot < fsize || fsize < BS || hot % fsize || !rounds ||
	    rounds > MAX_ROUNDS) {
		fprintf(stderr, "usage: hit-scale [ITERS] [HOT] [FOLIO] "
				"[ROUNDS <= %d]\n", MAX_ROUNDS);
		return 2;
	}
	struct folio_engine *e;
	struct folio_pool *pool;
	struct folio_pool_opts po = {.sz = sizeof(po), .budget = 2 * hot};
	struct folio_mapping_opts mo = {.sz = sizeof(mo),
					.min_folio_size = fsize,
					.max_folio_size = fsize,
					.size = hot};
	if (folio_engine_mem(&e, hot) || folio_pool_new(&pool, &po))
		return 1;
	mo.engine = e;
	mo.pool = pool;
	if (folio_mapping_new(&map, &mo))
		return 1;
	char *fill = malloc(hot);
	folios = calloc(hot / fsize, sizeof(*folios));
	if (!fill || !folios)
		return 1;
	for (uint64_t i = 0; i < hot; i++)
		fill[i] = (char)(i * 7 + 1);
	if (folio_mapping_write(map, fill, hot, 0) != (ssize_t)hot ||
	    folio_mapping_sync(map, NULL))
		return 1;
	for (uint64_t i = 0; i < hot / fsize; i++)
		if (folio_mapping_lookup(map, i * fsize, &folios[i]))
			return 1;

	static const char *const names[4] = {"lib x1", "lib x2", "memcpy x1",
					     "memcpy x2"};
	double gbs[4][MAX_ROUNDS];
	printf("hit-scale: %" PRIu64 " reads of 4 KiB per thread per run, "
	       "hot %" PRIu64 " KiB, folio %" PRIu64 " KiB, %u rounds\n",
	       iters, hot >> 10, fsize >> 10, rounds);
	for (unsigned r = 0; r < rounds; r++) {
		for (unsigned k = 0; k < 4; k++)
			gbs[k][r] = timed(k < 2, k % 2 + 1);
		printf("round %u:", r);
		for (unsigned k = 0; k < 4; k++)
			printf("  %s %.1f", names[k], gbs[k][r]);
		printf(" GB/s\n");
	}
	double med[4];
	for (unsigned k = 0; k < 4; k++)
		med[k] = median(gbs[k], rounds);
	double ls = med[1] / med[0], ms = med[3] / med[2];
	printf("median GB/s: lib x1 %.1f, x2 %.1f (%.2fx); memcpy x1 %.1f, "
	       "x2 %.1f (%.2fx)\n",
	       med[0], med[1], ls, med[2], med[3], ms);
	printf("lib scaling / memcpy scaling: %.2f (target >= 0.9)\n", ls / ms);

	for (uint64_t i = 0; i < hot / fsize; i++)
		folio_put(folios[i]);
	free(folios);
	free(fill);
	if (folio_mapping_free(map) || folio_pool_free(pool) ||
	    folio_engine_free(e))
		return 1;
	return 0;
}
