/* SPDX-License-Identifier: MIT */
#include <errno.h>
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

struct folio_mem_fault test_random_fault(uint64_t *seed, bool reads_truncates,
					 size_t short_max, uint64_t skip_below)
{
	struct folio_mem_fault f = {.sz = sizeof(f), .count = 1,
				    .skip = test_rand_below(seed, skip_below),
				    .error = -EIO};
	switch (test_rand_below(seed, reads_truncates ? 5 : 3)) {
	case 0:
		f.ops = FOLIO_MEM_OP_WRITE;
		break;
	case 1:
		f.ops = FOLIO_MEM_OP_WRITE;
		f.error = 0;
		f.short_len = 1 + test_rand_below(seed, short_max);
		break;
	case 2:
		f.ops = FOLIO_MEM_OP_FLUSH;
		f.flags = test_rand_below(seed, 2) ? FOLIO_MEM_FAULT_LOSE : 0;
		break;
	case 3:
		f.ops = FOLIO_MEM_OP_READ;
		break;
	default:
		f.ops = FOLIO_MEM_OP_TRUNCATE;
		break;
	}
	return f;
}

struct folio_mem_stats test_mem_stats(struct folio_engine *e)
{
	struct folio_mem_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_engine_mem_stats(e, &st), 0);
	return st;
}

void test_expect_read(struct folio_mapping *m, const void *want, size_t n,
		      uint64_t pos)
{
	unsigned char *got = malloc(n);
	assert_non_null(got);
	assert_int_equal(folio_mapping_read(m, got, n, pos), (ssize_t)n);
	assert_memory_equal(got, want, n);
	free(got);
}

void test_expect_store(struct folio_engine *e, const void *want, size_t n,
		       uint64_t pos)
{
	unsigned char *got = malloc(n);
	assert_non_null(got);
	assert_int_equal(folio_engine_mem_peek(e, got, n, pos), 0);
	assert_memory_equal(got, want, n);
	free(got);
}

void test_close(struct folio_mapping *m, struct folio_engine *e)
{
	if (m) {
		folio_mapping_invalidate(m, 0, 0, FOLIO_INVALIDATE_DISCARD);
		assert_int_equal(folio_mapping_free(m), 0);
	}
	assert_int_equal(folio_engine_free(e), 0);
}
