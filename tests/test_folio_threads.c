/* SPDX-License-Identifier: MIT */
/*
 * The folio layer under concurrency (public API only): racing setters,
 * the content lock, writeback waits, and take_dirty racing set_dirty.
 *
 * Every round starts its threads on a barrier so that their calls really
 * overlap, and checks an exact outcome afterwards (no "it did not crash"
 * tests). Meant to be run under TSan as well: the plain (non-atomic)
 * variables below are deliberate, so that a missing acquire/release in the
 * library shows up as a data race.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "folio_state.h"
#include "test_util.h"

#define MAX_THREADS 8
#define MAX_BLOCKS 4096u
#define MAX_OPS 64
#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

struct geom {
	size_t size, bs;
	unsigned threads;
};

static const struct geom geoms[] = {
	{8 * KIB, 4096, 5},	/* 2 blocks: everyone collides */
	{64 * KIB, 4096, 4},
	{256 * KIB, 4096, 8},	/* 64 blocks: one word per half */
	{2 * MIB, 4096, 6},
	{2 * MIB, 512, 4},	/* 4096 blocks */
};
#define NGEOMS (sizeof(geoms) / sizeof(geoms[0]))

static void start_threads(pthread_t *tids, unsigned n, void *(*fn)(void *),
			  void *args, size_t arg_size)
{
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(pthread_create(&tids[i], NULL, fn,
						(char *)args + i * arg_size),
				 0);
}

static void join_threads(pthread_t *tids, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(pthread_join(tids[i], NULL), 0);
}

static void sleep_us(unsigned us)
{
	struct timespec ts = {0, (long)us * 1000};
	nanosleep(&ts, NULL);
}

/*
 * Persistent workers for many short rounds. Waking threads from a barrier
 * staggers their start by tens of microseconds, longer than most races
 * here last, so after the barrier each worker also spins until all of them
 * are awake: the rounds then really overlap, while idle workers sleep in
 * the barrier instead of burning the few cores.
 */
struct pool {
	pthread_t tids[MAX_THREADS];
	unsigned n;
	void (*fn)(void *arg, unsigned idx);
	void *arg;
	pthread_barrier_t start, end;
	atomic_uint arrived;
	bool quit; /* written before the start barrier */
};

struct pool_worker {
	struct pool *p;
	unsigned idx;
};

static void *pool_main(void *arg)
{
	struct pool_worker *w = arg;
	struct pool *p = w->p;
	for (;;) {
		pthread_barrier_wait(&p->start);
		if (p->quit)
			break;
		atomic_fetch_add(&p->arrived, 1);
		/* More workers than cores: yield rather than spin alone. */
		unsigned spins = 0;
		while (atomic_load(&p->arrived) < p->n)
			if (++spins % 64 == 0)
				sched_yield();
		p->fn(p->arg, w->idx);
		pthread_barrier_wait(&p->end);
	}
	free(w);
	return NULL;
}

static void pool_start(struct pool *p, unsigned n,
		       void (*fn)(void *arg, unsigned idx), void *arg)
{
	p->n = n;
	p->fn = fn;
	p->arg = arg;
	p->quit = false;
	assert_int_equal(pthread_barrier_init(&p->start, NULL, n + 1), 0);
	assert_int_equal(pthread_barrier_init(&p->end, NULL, n + 1), 0);
	for (unsigned i = 0; i < n; i++) {
		struct pool_worker *w = malloc(sizeof(*w));
		assert_non_null(w);
		*w = (struct pool_worker){p, i};
		assert_int_equal(pthread_create(&p->tids[i], NULL, pool_main, w),
				 0);
	}
}

/* Run one round on every worker and wait for all of them. */
static void pool_round(struct pool *p)
{
	atomic_store(&p->arrived, 0);
	pthread_barrier_wait(&p->start);
	pthread_barrier_wait(&p->end);
}

static void pool_stop(struct pool *p)
{
	p->quit = true;
	pthread_barrier_wait(&p->start);
	join_threads(p->tids, p->n);
	pthread_barrier_destroy(&p->start);
	pthread_barrier_destroy(&p->end);
}

/* ---- racing setters ------------------------------------------------- */

enum set_op { SET_UPTODATE, SET_DIRTY, SET_DIRTY_UPTODATE };

struct set_call {
	enum set_op op;
	size_t off, len;
};

struct setter {
	struct folio *f;
	struct set_call ops[MAX_OPS];
	unsigned nops;
	atomic_uint *became_uptodate, *became_dirty, *errors;
};

static void setter_round(void *arg, unsigned idx)
{
	struct setter *s = (struct setter *)arg + idx;
	for (unsigned i = 0; i < s->nops; i++) {
		const struct set_call *c = &s->ops[i];
		int r = c->op == SET_UPTODATE ? folio_set_uptodate(s->f, c->off, c->len)
			: c->op == SET_DIRTY  ? folio_set_dirty(s->f, c->off, c->len)
					      : folio_set_dirty_uptodate(s->f, c->off,
									 c->len);
		if (r < 0 || r & ~(FOLIO_BECAME_DIRTY | FOLIO_BECAME_UPTODATE))
			atomic_fetch_add(s->errors, 1);
		if (r > 0 && (r & FOLIO_BECAME_UPTODATE))
			atomic_fetch_add(s->became_uptodate, 1);
		if (r > 0 && (r & FOLIO_BECAME_DIRTY))
			atomic_fetch_add(s->became_dirty, 1);
	}
}

static void add_call(struct setter *s, bool *up, bool *dirty, size_t bs,
		     enum set_op op, size_t off, size_t len)
{
	if (s->nops == MAX_OPS)
		return;
	s->ops[s->nops++] = (struct set_call){op, off, len};
	for (size_t b = off / bs; len && b <= (off + len - 1) / bs; b++) {
		if (op != SET_DIRTY)
			up[b] = true;
		if (op != SET_UPTODATE)
			dirty[b] = true;
	}
}

/* Compare the folio with the expected bits through the run walkers. */
static void check_bits(struct folio *f, const bool *up, const bool *dirty,
		       size_t n, size_t bs)
{
	bool all_up = true, any_dirty = false;
	for (int kind = 0; kind < 2; kind++) {
		const bool *bits = kind ? dirty : up;
		bool want = kind; /* dirty runs are set bits, missing clear */
		size_t off = 0;
		for (size_t b = 0;;) {
			while (b < n && bits[b] != want)
				b++;
			size_t e = b;
			while (e < n && bits[e] == want)
				e++;
			ssize_t len = kind ? folio_next_dirty(f, &off)
					   : folio_next_missing(f, &off);
			if (b == n) {
				assert_int_equal(len, 0);
				break;
			}
			if (kind)
				any_dirty = true;
			else
				all_up = false;
			assert_int_equal(off, b * bs);
			assert_int_equal(len, (e - b) * bs);
			off += (size_t)len;
			b = e;
		}
	}
	assert_int_equal(folio_test_uptodate(f), all_up);
	assert_int_equal(folio_test_dirty(f), any_dirty);
}

static void test_concurrent_set(void **state)
{
	(void)state;
	uint64_t rng = test_seed("folio concurrent set");
	static struct setter setters[MAX_THREADS];
	static bool up[MAX_BLOCKS], dirty[MAX_BLOCKS];
	static struct pool pool;

	for (size_t gi = 0; gi < NGEOMS; gi++) {
		const struct geom *g = &geoms[gi];
		size_t n = g->size / g->bs;
		unsigned T = g->threads;
		/* Small folios are cheap to make: race on many of them. */
		unsigned rounds = n <= 64 ? test_iters(1500, 40)
					  : test_iters(150, 10);
		pool_start(&pool, T, setter_round, setters);

		for (unsigned r = 0; r < rounds; r++) {
			atomic_uint became_up = 0, became_dirty = 0, errors = 0;
			struct folio *f;
			assert_int_equal(folio_new(&f, 0, g->size, g->bs), 0);
			memset(up, 0, n);
			memset(dirty, 0, n);
			for (unsigned t = 0; t < T; t++)
				setters[t] = (struct setter){
					.f = f,
					.became_uptodate = &became_up,
					.became_dirty = &became_dirty,
					.errors = &errors,
				};

			/* Disjoint part: the blocks are dealt out in random
			 * chunks, each set uptodate by its owner (dirty too
			 * or not). One round in four leaves a block out, so
			 * that "never completed" is checked as well. */
			size_t hole = (r % 4 == 3) ? (size_t)test_rand_below(&rng, n)
						   : SIZE_MAX;
			for (size_t b = 0; b < n;) {
				size_t len = 1 + (size_t)test_rand_below(
							 &rng, n / 8 + 1);
				if (len > n - b)
					len = n - b;
				struct setter *s = &setters[test_rand_below(&rng, T)];
				enum set_op op = test_rand(&rng) & 1
							 ? SET_DIRTY_UPTODATE
							 : SET_UPTODATE;
				if (hole >= b && hole < b + len) {
					if (hole > b)
						add_call(s, up, dirty, g->bs, op,
							 b * g->bs,
							 (hole - b) * g->bs);
					if (hole + 1 < b + len)
						add_call(s, up, dirty, g->bs, op,
							 (hole + 1) * g->bs,
							 (b + len - hole - 1) * g->bs);
				} else {
					add_call(s, up, dirty, g->bs, op,
						 b * g->bs, len * g->bs);
				}
				b += len;
			}
			/* Overlapping part: unaligned ranges anywhere with
			 * any of the three calls (it may fill the hole). */
			for (unsigned t = 0; t < T; t++) {
				unsigned k = 1 + (unsigned)test_rand_below(&rng, 6);
				for (unsigned i = 0; i < k; i++) {
					size_t a = (size_t)test_rand_below(&rng, g->size);
					size_t len = 1 + (size_t)test_rand_below(
								 &rng, g->size - a);
					if (test_rand_below(&rng, 4))
						len = 1 + len % (4 * g->bs);
					if (len > g->size - a)
						len = g->size - a;
					add_call(&setters[t], up, dirty, g->bs,
						 (enum set_op)test_rand_below(&rng, 3),
						 a, len);
				}
			}

			bool all_up = true, any_dirty = false;
			for (size_t b = 0; b < n; b++) {
				all_up = all_up && up[b];
				any_dirty = any_dirty || dirty[b];
			}

			pool_round(&pool);

			assert_int_equal(atomic_load(&errors), 0);
			/* Each transition reported by exactly one caller. */
			assert_int_equal(atomic_load(&became_up), all_up ? 1 : 0);
			assert_int_equal(atomic_load(&became_dirty),
					 any_dirty ? 1 : 0);
			check_bits(f, up, dirty, n, g->bs);
			folio_put(f);
		}
		pool_stop(&pool);
	}
}

/* ---- the content lock ----------------------------------------------- */

struct locker {
	struct folio *f;
	pthread_barrier_t *start;
	unsigned iters;
	unsigned id;
	unsigned long *counter; /* plain: only the folio lock protects it */
	atomic_uint *inside;
	atomic_uint *violations;
};

static void *locker_main(void *arg)
{
	struct locker *l = arg;
	pthread_barrier_wait(l->start);
	for (unsigned i = 0; i < l->iters; i++) {
		/* Mix the sleeping lock with trylock spinning. */
		if ((i + l->id) % 3 == 0) {
			int r;
			while ((r = folio_trylock(l->f)) == 0)
				sched_yield();
			if (r != 1)
				atomic_fetch_add(l->violations, 1);
		} else if (folio_lock(l->f) != 0) {
			atomic_fetch_add(l->violations, 1);
		}
		if (atomic_fetch_add(l->inside, 1) != 0 ||
		    !folio_test_locked(l->f))
			atomic_fetch_add(l->violations, 1);
		/* Widen the window between read and write; a yield now and
		 * then lets a waiter run while the lock is held. */
		unsigned long v = *l->counter;
		if (i % 64 == 0)
			sched_yield();
		*l->counter = v + 1;
		atomic_fetch_sub(l->inside, 1);
		if (folio_unlock(l->f) != 0)
			atomic_fetch_add(l->violations, 1);
	}
	return NULL;
}

static void test_lock_exclusion(void **state)
{
	(void)state;
	enum { T = 6 };
	struct folio *f;
	assert_int_equal(folio_new(&f, 0, 64 * KIB, 4096), 0);
	unsigned long counter = 0;
	atomic_uint inside = 0, violations = 0;
	pthread_barrier_t start;
	pthread_t tids[T];
	struct locker lk[T];
	unsigned iters = test_iters(30000, 300);

	assert_int_equal(pthread_barrier_init(&start, NULL, T), 0);
	for (unsigned i = 0; i < T; i++)
		lk[i] = (struct locker){f, &start, iters, i, &counter, &inside,
					&violations};
	start_threads(tids, T, locker_main, lk, sizeof(lk[0]));
	join_threads(tids, T);
	pthread_barrier_destroy(&start);

	assert_int_equal(atomic_load(&violations), 0);
	assert_int_equal(counter, (unsigned long)T * iters);
	assert_false(folio_test_locked(f));
	assert_int_equal(folio_unlock(f), -EPERM);
	folio_put(f);
}

/* ---- waiting for writeback ------------------------------------------ */

struct waiter {
	struct folio *f;
	pthread_barrier_t *start;
	const unsigned *published; /* plain: ordered by end_writeback */
	unsigned expect;
	atomic_uint *returned;
	atomic_uint *wrong;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	pthread_barrier_wait(w->start);
	if (folio_wait_writeback(w->f) != 0 || folio_test_writeback(w->f) ||
	    *w->published != w->expect)
		atomic_fetch_add(w->wrong, 1);
	atomic_fetch_add(w->returned, 1);
	return NULL;
}

static void test_wait_writeback(void **state)
{
	(void)state;
	enum { W = 4 };
	uint64_t rng = test_seed("folio wait_writeback");
	struct folio *f;
	assert_int_equal(folio_new(&f, 0, 64 * KIB, 4096), 0);
	pthread_barrier_t start;
	pthread_t tids[W];
	struct waiter ws[W];
	unsigned published = 0;
	unsigned rounds = test_iters(200, 20);
	assert_int_equal(pthread_barrier_init(&start, NULL, W + 1), 0);

	for (unsigned r = 1; r <= rounds; r++) {
		atomic_uint returned = 0, wrong = 0;
		assert_int_equal(folio_start_writeback(f), 0);
		for (unsigned i = 0; i < W; i++)
			ws[i] = (struct waiter){f, &start, &published, r,
						&returned, &wrong};
		start_threads(tids, W, waiter_main, ws, sizeof(ws[0]));
		pthread_barrier_wait(&start);
		/* Sometimes end at once (racing the waiters' first look),
		 * sometimes after they have had time to go to sleep. */
		unsigned delay = (unsigned)test_rand_below(&rng, 4);
		if (delay)
			sleep_us(delay * 300);
		assert_int_equal(atomic_load(&returned), 0);
		published = r;
		assert_int_equal(folio_end_writeback(f), 0);
		join_threads(tids, W);
		assert_int_equal(atomic_load(&wrong), 0);
		assert_int_equal(atomic_load(&returned), W);
	}
	pthread_barrier_destroy(&start);
	folio_put(f);
}

/*
 * Lock waiters and writeback waiters sleep on the same flags word. Ending
 * one condition wakes both kinds; the ones whose condition still holds
 * must go back to sleep and still be woken when it ends.
 */
struct mixed {
	struct folio *f;
	atomic_uint locked, wb_done, errors;
};

/* cmocka's assertions must not fire off the main thread: count instead. */
static void *mixed_locker(void *arg)
{
	struct mixed *m = arg;
	if (folio_lock(m->f) != 0)
		atomic_fetch_add(&m->errors, 1);
	atomic_store(&m->locked, 1);
	if (folio_unlock(m->f) != 0)
		atomic_fetch_add(&m->errors, 1);
	return NULL;
}

static void *mixed_wb_waiter(void *arg)
{
	struct mixed *m = arg;
	if (folio_wait_writeback(m->f) != 0 || folio_test_writeback(m->f))
		atomic_fetch_add(&m->errors, 1);
	atomic_store(&m->wb_done, 1);
	return NULL;
}

static void test_mixed_waiters(void **state)
{
	(void)state;
	unsigned rounds = test_iters(50, 5);
	for (unsigned r = 0; r < rounds; r++) {
		struct mixed m = {0};
		assert_int_equal(folio_new(&m.f, 0, 8192, 4096), 0);
		pthread_t a, b;
		assert_int_equal(folio_lock(m.f), 0);
		assert_int_equal(folio_start_writeback(m.f), 0);
		assert_int_equal(pthread_create(&b, NULL, mixed_wb_waiter, &m), 0);
		assert_int_equal(pthread_create(&a, NULL, mixed_locker, &m), 0);
		sleep_us(500);
		assert_int_equal(folio_unlock(m.f), 0);
		assert_int_equal(pthread_join(a, NULL), 0);
		assert_int_equal(atomic_load(&m.locked), 1);
		sleep_us(200);
		assert_int_equal(atomic_load(&m.wb_done), 0);
		assert_int_equal(folio_end_writeback(m.f), 0);
		assert_int_equal(pthread_join(b, NULL), 0);
		assert_int_equal(atomic_load(&m.wb_done), 1);
		assert_int_equal(atomic_load(&m.errors), 0);
		folio_put(m.f);
	}
}

/* ---- take_dirty racing set_dirty ------------------------------------ */

struct run {
	size_t first, len; /* blocks */
};

struct dirtier {
	struct folio *f;
	pthread_barrier_t *start;
	struct run *runs;
	size_t nruns;
	size_t bs;
	uint64_t rng;
	atomic_uint *errors;
};

struct taker {
	struct folio *f;
	pthread_barrier_t *start;
	atomic_uint *setters_left;
	atomic_uint *taken; /* per block */
	size_t bs, n, max_runs;
	atomic_uint *errors;
};

static void *dirtier_main(void *arg)
{
	struct dirtier *d = arg;
	pthread_barrier_wait(d->start);
	for (size_t i = 0; i < d->nruns; i++) {
		const struct run *r = &d->runs[i];
		/* Any byte range whose ends lie in the run's first and last
		 * block touches exactly the run's blocks. */
		size_t off = r->first * d->bs + (size_t)test_rand_below(&d->rng, d->bs);
		size_t end = (r->first + r->len - 1) * d->bs + 1 +
			     (size_t)test_rand_below(&d->rng, d->bs);
		if (end <= off)
			end = off + 1;
		int ret = test_rand(&d->rng) & 1
				  ? folio_set_dirty(d->f, off, end - off)
				  : folio_set_dirty_uptodate(d->f, off, end - off);
		if (ret < 0)
			atomic_fetch_add(d->errors, 1);
	}
	return NULL;
}

static void *taker_main(void *arg)
{
	struct taker *t = arg;
	struct folio_range runs[8];
	pthread_barrier_wait(t->start);
	/* Yielding when there was nothing to take leaves the CPU to the
	 * setters: on a machine with few cores a spinning taker would
	 * otherwise mostly race against itself. */
	/* Stops with the setters, not after draining, so that some blocks
	 * are usually still dirty at the end. */
	while (atomic_load(t->setters_left)) {
		int k = folio_take_dirty(t->f, runs, t->max_runs);
		if (k < 0 || (size_t)k > t->max_runs) {
			atomic_fetch_add(t->errors, 1);
			break;
		}
		if (!k)
			sched_yield();
		for (int i = 0; i < k; i++) {
			if (runs[i].off % t->bs || runs[i].len % t->bs ||
			    !runs[i].len || runs[i].off / t->bs + runs[i].len / t->bs > t->n) {
				atomic_fetch_add(t->errors, 1);
				continue;
			}
			for (size_t b = runs[i].off / t->bs;
			     b < (runs[i].off + runs[i].len) / t->bs; b++)
				atomic_fetch_add(&t->taken[b], 1);
		}
	}
	return NULL;
}

struct dirtier_wrap {
	struct dirtier d;
	atomic_uint *setters_left;
};

static void *dirtier_wrap_main(void *arg)
{
	struct dirtier_wrap *w = arg;
	dirtier_main(&w->d);
	atomic_fetch_sub(w->setters_left, 1);
	return NULL;
}

static void test_take_vs_set(void **state)
{
	(void)state;
	enum { SETTERS = 3, TAKERS = 2 };
	uint64_t rng = test_seed("folio take_dirty vs set_dirty");
	static const struct geom tg[] = {
		{64 * KIB, 4096, 0}, {256 * KIB, 4096, 0}, {2 * MIB, 4096, 0},
		{2 * MIB, 512, 0},
	};
	static struct run runs[SETTERS][MAX_BLOCKS];
	static atomic_uint taken[MAX_BLOCKS];
	unsigned rounds = test_iters(60, 5);

	for (size_t gi = 0; gi < 4; gi++) {
		size_t bs = tg[gi].bs, n = tg[gi].size / bs;
		pthread_barrier_t start;
		assert_int_equal(pthread_barrier_init(&start, NULL,
						      SETTERS + TAKERS), 0);
		for (unsigned r = 0; r < rounds; r++) {
			struct folio *f;
			assert_int_equal(folio_new(&f, 0, tg[gi].size, bs), 0);
			atomic_uint errors = 0, setters_left = SETTERS;
			struct dirtier_wrap dw[SETTERS];
			struct taker tk[TAKERS];
			pthread_t tids[SETTERS + TAKERS];
			size_t nruns[SETTERS] = {0};

			/* Every block belongs to exactly one run of exactly
			 * one setter, so it is set dirty exactly once. */
			for (size_t b = 0; b < n;) {
				size_t len = 1 + (size_t)test_rand_below(&rng, 8);
				if (len > n - b)
					len = n - b;
				unsigned s = (unsigned)test_rand_below(&rng, SETTERS);
				runs[s][nruns[s]++] = (struct run){b, len};
				b += len;
			}
			for (unsigned s = 0; s < SETTERS; s++) {
				/* Shuffle so the setters hit scattered places. */
				for (size_t i = nruns[s]; i > 1; i--) {
					size_t j = (size_t)test_rand_below(&rng, i);
					struct run t = runs[s][i - 1];
					runs[s][i - 1] = runs[s][j];
					runs[s][j] = t;
				}
				dw[s] = (struct dirtier_wrap){
					{f, &start, runs[s], nruns[s], bs,
					 test_rand(&rng) | 1, &errors},
					&setters_left};
			}
			for (size_t b = 0; b < n; b++)
				atomic_init(&taken[b], 0);
			for (unsigned t = 0; t < TAKERS; t++)
				tk[t] = (struct taker){f, &start, &setters_left,
						       taken, bs, n,
						       1 + (r + t) % 4, &errors};

			start_threads(tids, SETTERS, dirtier_wrap_main, dw,
				      sizeof(dw[0]));
			start_threads(tids + SETTERS, TAKERS, taker_main, tk,
				      sizeof(tk[0]));
			join_threads(tids, SETTERS + TAKERS);
			assert_int_equal(atomic_load(&errors), 0);

			bool any = false;
			for (size_t b = 0; b < n; b++) {
				int d = folio_is_dirty(f, b * bs, bs);
				unsigned k = atomic_load(&taken[b]);
				if (k + (unsigned)d != 1) {
					print_error("block %zu of %zu: taken %u "
						    "times, dirty %d\n",
						    b, n, k, d);
					fail();
				}
				any = any || d;
			}
			assert_int_equal(folio_test_dirty(f), any);
			folio_put(f);
		}
		pthread_barrier_destroy(&start);
	}
}

int main(void)
{
	/* A lost wake-up hangs; fail in bounded time instead (valgrind and
	 * sanitizer runs are slower, so they get more). */
	alarm(test_slow_env() ? 1200 : 240);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_concurrent_set),
		cmocka_unit_test(test_lock_exclusion),
		cmocka_unit_test(test_wait_writeback),
		cmocka_unit_test(test_mixed_waiters),
		cmocka_unit_test(test_take_vs_set),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
