/* SPDX-License-Identifier: MIT */
/*
 * The reader-biased lock behind a mapping's io_lock: readers share it,
 * a writer excludes everyone, with more threads than stripes so stripes
 * are shared too. Readers and writers record who is inside in plain
 * counters guarded by the lock itself; any overlap shows up as a wrong
 * count (and as a race under TSan).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <cmocka.h>

#include "base/brlock.h"
#include "test_util.h"

#define READERS (BRLOCK_STRIPES + 4)
#define WRITERS 2

struct shared {
	struct brlock lock;
	atomic_int readers_inside;
	int writer_inside;     /* only touched under the write lock */
	unsigned long writes;  /* only touched under the write lock */
	unsigned iters;
	atomic_int failures;
};

static void *reader(void *arg)
{
	struct shared *sh = arg;
	for (unsigned i = 0; i < sh->iters; i++) {
		brlock_read_lock(&sh->lock);
		atomic_fetch_add(&sh->readers_inside, 1);
		/* A writer inside now would be a bug; the plain read also
		 * makes TSan check that the lock orders it with writers. */
		if (sh->writer_inside)
			atomic_fetch_add(&sh->failures, 1);
		atomic_fetch_sub(&sh->readers_inside, 1);
		brlock_read_unlock(&sh->lock);
	}
	return NULL;
}

static void *writer(void *arg)
{
	struct shared *sh = arg;
	for (unsigned i = 0; i < sh->iters / 50; i++) {
		brlock_write_lock(&sh->lock);
		if (sh->writer_inside || atomic_load(&sh->readers_inside))
			atomic_fetch_add(&sh->failures, 1);
		sh->writer_inside = 1;
		sh->writes++;
		sh->writer_inside = 0;
		brlock_write_unlock(&sh->lock);
	}
	return NULL;
}

static void test_exclusion(void **state)
{
	(void)state;
	static struct shared sh;
	sh.iters = test_iters(20000, 1000);
	assert_int_equal(brlock_init(&sh.lock), 0);
	pthread_t r[READERS], w[WRITERS];
	for (int i = 0; i < READERS; i++)
		assert_int_equal(pthread_create(&r[i], NULL, reader, &sh), 0);
	for (int i = 0; i < WRITERS; i++)
		assert_int_equal(pthread_create(&w[i], NULL, writer, &sh), 0);
	for (int i = 0; i < READERS; i++)
		pthread_join(r[i], NULL);
	for (int i = 0; i < WRITERS; i++)
		pthread_join(w[i], NULL);
	assert_int_equal(atomic_load(&sh.failures), 0);
	assert_int_equal(sh.writes, WRITERS * (sh.iters / 50));
	brlock_destroy(&sh.lock);
}

static void test_stripes(void **state)
{
	(void)state;
	/* A thread keeps its stripe; stripes stay in range. */
	unsigned s = brlock_thread_stripe();
	assert_true(s < BRLOCK_STRIPES);
	assert_int_equal(brlock_thread_stripe(), s);
	struct brlock l;
	assert_int_equal(brlock_init(&l), 0);
	brlock_read_lock(&l);
	assert_int_equal(atomic_load(&l.stripe[s].readers), 1);
	brlock_read_unlock(&l);
	/* The writer word counts holds: odd while one is held. */
	unsigned before, held, after;
	assert_true(brlock_optimistic_begin(&l, &before));
	assert_true(brlock_optimistic_valid(&l, before));
	brlock_write_lock(&l);
	assert_false(brlock_optimistic_begin(&l, &held));
	assert_false(brlock_optimistic_valid(&l, before));
	brlock_write_unlock(&l);
	assert_true(brlock_optimistic_begin(&l, &after));
	assert_int_equal(after, before + 2);
	assert_false(brlock_optimistic_valid(&l, before));
	assert_false(brlock_optimistic_valid(&l, held));
	assert_true(brlock_optimistic_valid(&l, after));
	/* Shared holds do not move it. */
	brlock_read_lock(&l);
	brlock_read_unlock(&l);
	assert_true(brlock_optimistic_valid(&l, after));
	brlock_destroy(&l);
}

/* Widens the windows between two loads or two stores, so that a check
 * that lets a torn pair through fails here within milliseconds. */
static void spin(unsigned n)
{
	for (volatile unsigned i = 0; i < n; i++)
		;
}

/* Two words a writer changes together under the lock, published with
 * release stores (the contract of the optimistic side). */
struct pair_shared {
	struct brlock lock;
	_Atomic unsigned long a, b;
	atomic_int stop;
	atomic_ulong validated, torn;
};

static void *pair_writer(void *arg)
{
	struct pair_shared *sh = arg;
	for (unsigned long i = 1; !atomic_load(&sh->stop); i++) {
		brlock_write_lock(&sh->lock);
		atomic_store_explicit(&sh->a, i, memory_order_release);
		spin(64);
		atomic_store_explicit(&sh->b, i, memory_order_release);
		brlock_write_unlock(&sh->lock);
	}
	return NULL;
}

static void *pair_reader(void *arg)
{
	struct pair_shared *sh = arg;
	while (!atomic_load(&sh->stop)) {
		unsigned t;
		if (!brlock_optimistic_begin(&sh->lock, &t))
			continue;
		unsigned long a = atomic_load_explicit(&sh->a,
						       memory_order_acquire);
		spin(64);
		unsigned long b = atomic_load_explicit(&sh->b,
						       memory_order_acquire);
		if (!brlock_optimistic_valid(&sh->lock, t))
			continue;
		atomic_fetch_add(&sh->validated, 1);
		if (a != b)
			atomic_fetch_add(&sh->torn, 1);
	}
	return NULL;
}

/* An optimistic read that validates saw no hold begin: never one word of
 * a hold and the other of another. */
static void test_optimistic(void **state)
{
	(void)state;
	static struct pair_shared sh;
	assert_int_equal(brlock_init(&sh.lock), 0);
	pthread_t w, r[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&r[i], NULL, pair_reader, &sh),
				 0);
	assert_int_equal(pthread_create(&w, NULL, pair_writer, &sh), 0);
	/* Until enough reads validated: at least some while the writer
	 * ran, a bound on time for slow checkers. */
	unsigned long want = test_iters(200000, 2000);
	struct timespec ms = {0, 1000000};
	for (unsigned i = 0; i < 3000 && atomic_load(&sh.validated) < want; i++)
		nanosleep(&ms, NULL);
	atomic_store(&sh.stop, 1);
	pthread_join(w, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(r[i], NULL);
	assert_true(atomic_load(&sh.validated) > 0);
	assert_int_equal(atomic_load(&sh.torn), 0);
	brlock_destroy(&sh.lock);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stripes),
		cmocka_unit_test(test_exclusion),
		cmocka_unit_test(test_optimistic),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
