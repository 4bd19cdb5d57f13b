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
	brlock_write_lock(&l);
	assert_int_equal(atomic_load(&l.writer), 1);
	brlock_write_unlock(&l);
	assert_int_equal(atomic_load(&l.writer), 0);
	brlock_destroy(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stripes),
		cmocka_unit_test(test_exclusion),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
