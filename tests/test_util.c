/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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
