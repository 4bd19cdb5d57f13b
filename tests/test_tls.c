/* SPDX-License-Identifier: MIT */
/*
 * Thread-exit hooks (lib/base/tls.c): the destructor runs once with the
 * armed value for each thread that armed the hook, and for no other;
 * threads racing to arm a new hook create one key between them.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/tls.h"
#include "test_util.h"

#define THREADS 8

/* What the destructors saw: per thread slot, how often and with what. */
static atomic_int calls[THREADS];
static void *_Atomic seen[THREADS];
static atomic_int other_calls;

struct slot {
	unsigned i;
	bool arm;
	struct tls_exit *hook;
	int result;
};

static void record(void *value)
{
	struct slot *s = value;
	atomic_fetch_add(&calls[s->i], 1);
	atomic_store(&seen[s->i], value);
}

static void record_other(void *value)
{
	(void)value;
	atomic_fetch_add(&other_calls, 1);
}

static struct tls_exit hook = TLS_EXIT_INIT(record);
static struct tls_exit other = TLS_EXIT_INIT(record_other);
static pthread_barrier_t start;

static void *worker(void *arg)
{
	struct slot *s = arg;
	/* All at once: the first arm of the hook races key creation. */
	pthread_barrier_wait(&start);
	if (s->arm)
		s->result = tls_exit_arm(s->hook, s);
	return NULL;
}

static void run(struct slot *slots, unsigned n)
{
	pthread_t t[THREADS];
	assert_int_equal(pthread_barrier_init(&start, NULL, n), 0);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(pthread_create(&t[i], NULL, worker, &slots[i]),
				 0);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	pthread_barrier_destroy(&start);
}

/* Every other thread arms: exactly those see their own value once. */
static void test_runs_for_armed_threads(void **state)
{
	(void)state;
	struct slot slots[THREADS];
	for (unsigned i = 0; i < THREADS; i++)
		slots[i] = (struct slot){i, i % 2 == 0, &hook, -1};
	run(slots, THREADS);
	for (unsigned i = 0; i < THREADS; i++) {
		if (slots[i].arm) {
			assert_int_equal(slots[i].result, 0);
			assert_int_equal(atomic_load(&calls[i]), 1);
			assert_ptr_equal(atomic_load(&seen[i]), &slots[i]);
		} else {
			assert_int_equal(atomic_load(&calls[i]), 0);
		}
	}
	assert_int_equal(atomic_load(&other_calls), 0);
	assert_int_equal(atomic_load(&hook.state), TLS_EXIT_READY);
}

/* Two hooks are two keys: arming one never runs the other. */
static void test_hooks_are_separate(void **state)
{
	(void)state;
	for (unsigned i = 0; i < THREADS; i++)
		atomic_store(&calls[i], 0);
	struct slot slots[2] = {{0, true, &other, -1}, {1, true, &hook, -1}};
	run(slots, 2);
	assert_int_equal(slots[0].result, 0);
	assert_int_equal(slots[1].result, 0);
	assert_int_equal(atomic_load(&other_calls), 1);
	assert_int_equal(atomic_load(&calls[0]), 0);
	assert_int_equal(atomic_load(&calls[1]), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runs_for_armed_threads),
		cmocka_unit_test(test_hooks_are_separate),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
