/* SPDX-License-Identifier: MIT */
/* Helpers shared by the tests: a reproducible PRNG and scale control. */
#ifndef FOLIO_TEST_UTIL_H
#define FOLIO_TEST_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "folio_state.h"
#include "folio_state_mem.h"

/* Built with ThreadSanitizer? Tests leave out the races the library
 * allows by design (a write into a folio under writeback) there. */
#if defined(__SANITIZE_THREAD__)
#define TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_UNDER_TSAN 1
#endif
#endif
#ifndef TEST_UNDER_TSAN
#define TEST_UNDER_TSAN 0
#endif

/* xorshift64*: fast, good enough for test workloads, reproducible. */
static inline uint64_t test_rand(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * UINT64_C(0x2545F4914F6CDD1D);
}

/* Uniform in [0, n); n > 0. */
static inline uint64_t test_rand_below(uint64_t *state, uint64_t n)
{
	return test_rand(state) % n;
}

static inline uint64_t test_min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* The seed for randomized tests: $FOLIO_TEST_SEED if set, else derived
 * from the time. Always printed so any failure can be replayed. */
uint64_t test_seed(const char *test_name);

/* True under valgrind (set by the valgrind test setup) or when
 * FOLIO_TEST_QUICK is set: randomized and stress tests shrink their
 * iteration counts so the slow runs stay within minutes. */
bool test_slow_env(void);

/* Scale an iteration count down under test_slow_env(). */
unsigned test_iters(unsigned normal, unsigned slow);

/* FOLIO_TEST_TRACE set: model tests log every operation they run (for
 * replaying a seed), each line tagged with the operation's number. */
bool test_trace_on(void);
#define TEST_TRACE(opno, ...)                                             \
	do {                                                              \
		if (test_trace_on()) {                                    \
			printf("# [%u] ", (unsigned)(opno));              \
			printf(__VA_ARGS__);                              \
			printf("\n");                                     \
		}                                                         \
	} while (0)

/* Statistics snapshots that fail the test when the call fails. */
struct folio_mapping_stats test_mapping_stats(struct folio_mapping *m);
struct folio_mem_stats test_mem_stats(struct folio_engine *e);

/*
 * A random mem-engine fault rule for the fault models, drawn from `seed`:
 * a write error, a short write (1..short_max bytes), or a failing flush
 * (losing the volatile cache half the time); with `reads_truncates` also a
 * read or truncate error. It fires once after 0..skip_below-1 matching
 * operations; the caller may widen count and pos/len.
 */
struct folio_mem_fault test_random_fault(uint64_t *seed, bool reads_truncates,
					 size_t short_max,
					 uint64_t skip_below);

/* The mapping's buffered read of [pos, pos+n), and the mem engine's
 * store there, must equal `want` (failing the test otherwise). */
void test_expect_read(struct folio_mapping *m, const void *want, size_t n,
		      uint64_t pos);
void test_expect_store(struct folio_engine *e, const void *want, size_t n,
		       uint64_t pos);

/* Tear down a test's mapping (discarding dirty data; may be NULL) and
 * its engine, failing the test if either refuses. */
void test_close(struct folio_mapping *m, struct folio_engine *e);

#endif
