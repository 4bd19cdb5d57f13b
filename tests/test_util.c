/* SPDX-License-Identifier: MIT */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "test_util.h"

uint64_t test_seed(const char *test_name)
{
	const char *env = getenv("FOLIO_TEST_SEED");
	uint64_t seed;
	if (env && *env) {
		seed = strtoull(env, NULL, 0);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
	}
	if (!seed)
		seed = 1;
	/* TAP diagnostics start with '#'. */
	printf("# %s: seed %llu (replay with FOLIO_TEST_SEED=%llu)\n",
	       test_name, (unsigned long long)seed, (unsigned long long)seed);
	fflush(stdout);
	return seed;
}

bool test_slow_env(void)
{
	return getenv("FOLIO_TEST_VALGRIND") || getenv("FOLIO_TEST_QUICK");
}

unsigned test_iters(unsigned normal, unsigned slow)
{
	return test_slow_env() ? slow : normal;
}

bool test_trace_on(void)
{
	/* Looked up once: TRACE runs on every operation, from any thread. */
	static atomic_int on = -1;
	int v = atomic_load_explicit(&on, memory_order_relaxed);
	if (v < 0) {
		v = getenv("FOLIO_TEST_TRACE") != NULL;
		atomic_store_explicit(&on, v, memory_order_relaxed);
	}
	return v;
}

struct folio_mapping_stats test_mapping_stats(struct folio_mapping *m)
{
	struct folio_mapping_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_mapping_stats(m, &st), 0);
	return st;
}

struct folio_mem_stats test_mem_stats(struct folio_engine *e)
{
	struct folio_mem_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_engine_mem_stats(e, &st), 0);
	return st;
}

void test_close(struct folio_mapping *m, struct folio_engine *e)
{
	if (m) {
		folio_mapping_invalidate(m, 0, 0, FOLIO_INVALIDATE_DISCARD);
		assert_int_equal(folio_mapping_free(m), 0);
	}
	assert_int_equal(folio_engine_free(e), 0);
}
