/* SPDX-License-Identifier: MIT */
/*
 * Micro-benchmark of a lock-free lookup's read-side section
 * (lib/base/epoch.h) against what it replaced and what it could have
 * been: ns per enter + exit around a one-load body, with 1 and 2 threads
 * looping at once, for
 *   rwlock   pthread_rwlock_rdlock/unlock on one shared lock (the old
 *            index_lock path);
 *   epoch    epoch_read_enter/exit (per-thread stripes);
 *   urcu-bp  liburcu's bulletproof flavour, rcu_read_lock/unlock, when
 *            Meson found liburcu-bp (doc/design.md says why the library
 *            does not use it).
 *
 * Usage: epoch-bench [iterations per thread] (default 20000000)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/epoch.h"

#ifdef HAVE_URCU_BP
#include <urcu-bp.h>
#endif

enum kind { RWLOCK, EPOCH, URCU_BP, NKINDS };
static const char *const names[NKINDS] = {"rwlock", "epoch", "urcu-bp"};

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static _Atomic uint64_t shared_word = 1;
static uint64_t iters = 20000000;

struct arg {
	enum kind kind;
	double ns;
	uint64_t sink;
};

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *loop(void *p)
{
	struct arg *a = p;
	uint64_t sink = 0;
#ifdef HAVE_URCU_BP
	if (a->kind == URCU_BP)
		urcu_bp_register_thread(); /* outside the timing */
#endif
	double t0 = now_ns();
	for (uint64_t i = 0; i < iters; i++) {
		switch (a->kind) {
		case RWLOCK:
			pthread_rwlock_rdlock(&lock);
			sink += atomic_load_explicit(&shared_word,
						     memory_order_relaxed);
			pthread_rwlock_unlock(&lock);
			break;
		case EPOCH: {
			unsigned ep = epoch_read_enter();
			sink += atomic_load_explicit(&shared_word,
						     memory_order_relaxed);
			epoch_read_exit(ep);
			break;
		}
		default:
#ifdef HAVE_URCU_BP
			urcu_bp_read_lock();
			sink += atomic_load_explicit(&shared_word,
						     memory_order_relaxed);
			urcu_bp_read_unlock();
#endif
			break;
		}
	}
	a->ns = (now_ns() - t0) / (double)iters;
	a->sink = sink;
	return NULL;
}

static double run(enum kind k, unsigned n)
{
	pthread_t t[2];
	struct arg a[2] = {{.kind = k}, {.kind = k}};
	for (unsigned i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, loop, &a[i]))
			return -1;
	double worst = 0;
	for (unsigned i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		if (a[i].ns > worst)
			worst = a[i].ns;
	}
	return worst;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		iters = strtoull(argv[1], NULL, 10);
	if (!iters) {
		fprintf(stderr, "usage: epoch-bench [iterations]\n");
		return 2;
	}
	unsigned nkinds = NKINDS;
#ifndef HAVE_URCU_BP
	nkinds = URCU_BP;
	printf("(urcu-bp not built: liburcu-bp was not found)\n");
#endif
	/* Interleaved rounds, median of 5: the machine may be shared. */
	enum { ROUNDS = 5 };
	double v[NKINDS][2][ROUNDS];
	for (unsigned r = 0; r < ROUNDS; r++)
		for (unsigned k = 0; k < nkinds; k++)
			for (unsigned n = 1; n <= 2; n++)
				v[k][n - 1][r] = run((enum kind)k, n);
	printf("ns per read-side section (enter + one load + exit), median of "
	       "%d rounds of %llu per thread\n",
	       ROUNDS, (unsigned long long)iters);
	printf("%-8s %10s %10s\n", "", "1 thread", "2 threads");
	for (unsigned k = 0; k < nkinds; k++) {
		double med[2];
		for (unsigned n = 0; n < 2; n++) {
			double *x = v[k][n];
			for (unsigned i = 1; i < ROUNDS; i++)
				for (unsigned j = i; j > 0 && x[j] < x[j - 1];
				     j--) {
					double s = x[j];
					x[j] = x[j - 1];
					x[j - 1] = s;
				}
			med[n] = x[ROUNDS / 2];
		}
		printf("%-8s %10.2f %10.2f\n", names[k], med[0], med[1]);
	}
	return 0;
}
