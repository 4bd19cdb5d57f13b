/* SPDX-License-Identifier: MIT */
/*
 * Epoch read-side sections and grace periods (lib/base/epoch.c): a grace
 * period waits for every section that began before it and for none that
 * began after; retired memory is freed only after one.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "base/base.h"
#include "base/epoch.h"
#include "test_util.h"

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {0, (long)ms * 1000000L};
	nanosleep(&ts, NULL);
}

struct gp_state {
	atomic_bool in, leave, synced;
};

static void *sit_in_section(void *arg)
{
	struct gp_state *g = arg;
	unsigned ep = epoch_read_enter();
	atomic_store(&g->in, true);
	while (!atomic_load(&g->leave))
		sched_yield();
	epoch_read_exit(ep);
	return NULL;
}

static void *synchronizer(void *arg)
{
	struct gp_state *g = arg;
	epoch_synchronize();
	atomic_store(&g->synced, true);
	return NULL;
}

/* A grace period cannot end while a section that began before it is
 * open, and ends once it closes. */
static void test_grace_waits_for_reader(void **state)
{
	(void)state;
	struct gp_state g = {0};
	pthread_t r, s;
	assert_int_equal(pthread_create(&r, NULL, sit_in_section, &g), 0);
	while (!atomic_load(&g.in))
		sched_yield();
	assert_int_equal(pthread_create(&s, NULL, synchronizer, &g), 0);
	sleep_ms(50);
	assert_false(atomic_load(&g.synced));
	/* A section that begins now is not waited for (it would make the
	 * grace period wait for ever while sections keep starting). */
	unsigned ep = epoch_read_enter();
	atomic_store(&g.leave, true);
	pthread_join(r, NULL);
	pthread_join(s, NULL);
	assert_true(atomic_load(&g.synced));
	epoch_read_exit(ep);
	/* Nothing open: a grace period ends at once, nested sections
	 * balance. */
	ep = epoch_read_enter();
	unsigned inner = epoch_read_enter();
	epoch_read_exit(inner);
	epoch_read_exit(ep);
	epoch_synchronize();
}

struct tracked {
	struct epoch_entry e;
	atomic_int *freed;
};

static void tracked_free(struct epoch_entry *e)
{
	struct tracked *t = container_of(e, struct tracked, e);
	atomic_fetch_add(t->freed, 1);
	free(t);
}

static struct tracked *tracked_new(atomic_int *freed)
{
	struct tracked *t = calloc(1, sizeof(*t));
	assert_non_null(t);
	t->freed = freed;
	return t;
}

/* Retired entries wait for a grace period: a batch, or a barrier. */
static void test_retire_batches(void **state)
{
	(void)state;
	atomic_int freed = 0;
	epoch_barrier(); /* whatever earlier tests left */
	for (unsigned i = 0; i + 1 < EPOCH_BATCH; i++)
		epoch_retire(&tracked_new(&freed)->e, tracked_free);
	assert_int_equal(atomic_load(&freed), 0);
	epoch_retire(&tracked_new(&freed)->e, tracked_free);
	assert_int_equal(atomic_load(&freed), (int)EPOCH_BATCH);
	epoch_retire(&tracked_new(&freed)->e, tracked_free);
	assert_int_equal(atomic_load(&freed), (int)EPOCH_BATCH);
	epoch_barrier();
	assert_int_equal(atomic_load(&freed), (int)EPOCH_BATCH + 1);
}

/* A published object that readers dereference inside sections while a
 * writer replaces it and retires the old one: under ASan a free before
 * the grace period is a use after free, under TSan a missing ordering
 * is a race. */
struct obj {
	struct epoch_entry e;
	uint64_t value, check;
};

struct churn {
	struct obj *_Atomic cur;
	atomic_bool stop;
	atomic_uint errors;
	unsigned iters;
};

static void obj_free(struct epoch_entry *e)
{
	struct obj *o = container_of(e, struct obj, e);
	o->check = 0; /* a reader still inside would see it */
	free(o);
}

static void *churn_reader(void *arg)
{
	struct churn *c = arg;
	while (!atomic_load(&c->stop)) {
		unsigned ep = epoch_read_enter();
		struct obj *o = atomic_load_explicit(&c->cur,
						     memory_order_acquire);
		for (int k = 0; k < 16; k++)
			if (o->check != ~o->value)
				atomic_fetch_add(&c->errors, 1);
		epoch_read_exit(ep);
	}
	return NULL;
}

static void *churn_writer(void *arg)
{
	struct churn *c = arg;
	for (unsigned i = 1; i <= c->iters; i++) {
		struct obj *o = malloc(sizeof(*o));
		if (!o) {
			atomic_fetch_add(&c->errors, 1);
			break;
		}
		o->value = i;
		o->check = ~(uint64_t)i;
		struct obj *old = atomic_exchange_explicit(
			&c->cur, o, memory_order_acq_rel);
		epoch_retire(&old->e, obj_free);
	}
	return NULL;
}

static void test_churn(void **state)
{
	(void)state;
	struct churn c = {.iters = test_iters(200000, 5000)};
	struct obj *first = malloc(sizeof(*first));
	assert_non_null(first);
	first->value = 0;
	first->check = ~UINT64_C(0);
	atomic_init(&c.cur, first);
	pthread_t rd[2], wr[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&rd[i], NULL, churn_reader, &c),
				 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&wr[i], NULL, churn_writer, &c),
				 0);
	for (int i = 0; i < 2; i++)
		pthread_join(wr[i], NULL);
	atomic_store(&c.stop, true);
	for (int i = 0; i < 2; i++)
		pthread_join(rd[i], NULL);
	assert_int_equal(atomic_load(&c.errors), 0);
	free(atomic_load(&c.cur));
	epoch_barrier();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grace_waits_for_reader),
		cmocka_unit_test(test_retire_batches),
		cmocka_unit_test(test_churn),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
