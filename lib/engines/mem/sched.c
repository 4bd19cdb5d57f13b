/* SPDX-License-Identifier: MIT */
/*
 * The mem engine's completion scheduler: held requests, the
 * pseudo-random generator that picks which complete next, the engine's
 * wait() callback, the completion thread and mode switches. This is how
 * the library's completion handling gets exercised without a device:
 * requests complete late, in batches and out of order.
 */
#include <stdlib.h>
#include <string.h>

#include "engines/mem/mem.h"

/* Most requests one wait() or one thread round completes (bounds the
 * stack array they are collected in). */
#define MEM_BATCH 64
#define MEM_THREAD_BATCH 4
#define MEM_THREAD_MAX_DELAY_NS 100000

/* Lets wait() and set_mode() notice they run on the completion thread. */
static _Thread_local struct mem_ctx *mem_thread_self;

/* Requests this thread has taken for completion (see struct engine_own). */
static _Thread_local struct engine_own mem_own;

static uint64_t splitmix64(uint64_t x)
{
	x += UINT64_C(0x9E3779B97F4A7C15);
	x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
	return x ^ (x >> 31);
}

/* xorshift64*; the state is never 0 (seeded through splitmix64). */
static uint64_t mem_rand(struct mem_ctx *c)
{
	uint64_t x = c->rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	c->rng = x;
	return x * UINT64_C(0x2545F4914F6CDD1D);
}

void mem_seed(struct mem_ctx *c, uint64_t seed)
{
	c->rng = splitmix64(seed);
	if (!c->rng)
		c->rng = 1;
}

/* ---- held requests -------------------------------------------------- */

int mem_held_reserve_locked(struct mem_ctx *c)
{
	if (c->nheld < c->held_cap)
		return 0;
	size_t cap = c->held_cap ? c->held_cap * 2 : 64;
	struct mem_held *h = realloc(c->held, cap * sizeof(*h));
	if (!h)
		return -ENOMEM;
	c->held = h;
	c->held_cap = cap;
	return 0;
}

/* Take every held request out; they count as completing.
 * The caller completes them with complete_taken(). */
static struct mem_held *held_take_all_locked(struct mem_ctx *c, size_t *n)
{
	struct mem_held *held = c->held;
	*n = c->nheld;
	c->held = NULL;
	c->nheld = c->held_cap = 0;
	c->completing += (unsigned)*n;
	return held;
}

/* Account for @n requests, @writes of them writes, whose callbacks have
 * returned, and wake waiters. */
static void finished_locked(struct mem_ctx *c, uint64_t n, uint64_t writes)
{
	c->inflight -= n;
	c->inflight_writes -= writes;
	c->completing -= (unsigned)n;
	c->completions += n;
	pthread_cond_broadcast(&c->progress_cv);
}

static void mem_finished(struct mem_ctx *c, uint64_t n, uint64_t writes)
{
	pthread_mutex_lock(&c->lock);
	finished_locked(c, n, writes);
	pthread_mutex_unlock(&c->lock);
}

/*
 * Run the callbacks of @n requests this thread took out (lock not held):
 * each completes with its plan, which by now is its result, or, when
 * @perform, with what mem_perform_locked() makes of the plan. The caller
 * accounts for them afterwards. Returns how many were writes.
 */
static uint64_t deliver(struct mem_ctx *c, struct mem_held *h, size_t n,
			bool perform)
{
	struct engine_own saved = engine_own_enter(&mem_own, c, n);
	uint64_t writes = 0;
	for (size_t i = 0; i < n; i++) {
		if (perform) {
			pthread_mutex_lock(&c->lock);
			mem_perform_locked(c, &h[i]);
			pthread_mutex_unlock(&c->lock);
		}
		/* Before the completion, which may free the request. */
		writes += h[i].io->op == FOLIO_IO_WRITE;
		engine_complete(h[i].io, h[i].plan, h[i].barrier);
	}
	engine_own_leave(&mem_own, saved);
	return writes;
}

/* Complete @n taken requests with @result, or, when @perform, with what
 * mem_perform_locked() gives each; then account for them, free @held and
 * wake waiters (lock not held). */
static void complete_taken(struct mem_ctx *c, struct mem_held *held,
			   size_t n, bool perform, ssize_t result)
{
	if (!perform) {
		for (size_t i = 0; i < n; i++) {
			held[i].plan = result;
			held[i].barrier = 0;
		}
	}
	uint64_t writes = deliver(c, held, n, perform);
	free(held);
	mem_finished(c, n, writes);
}

void mem_fail_held(struct mem_ctx *c, ssize_t err)
{
	size_t n;
	struct mem_held *held = held_take_all_locked(c, &n);
	pthread_mutex_unlock(&c->lock);
	complete_taken(c, held, n, false, err);
}

void mem_deliver_one(struct mem_ctx *c, const struct mem_held *done)
{
	struct mem_held h = *done;
	mem_finished(c, 1, deliver(c, &h, 1, false));
}

/* Remove held request i (order does not matter: picks are random). */
static struct mem_held held_take(struct mem_ctx *c, size_t i)
{
	struct mem_held h = c->held[i];
	c->held[i] = c->held[--c->nheld];
	return h;
}

/* Take up to @max held requests in pseudo-random order, perform them, and
 * store (io, result) in @out. Returns how many. */
static unsigned take_random_locked(struct mem_ctx *c, struct mem_held *out,
				   unsigned max)
{
	unsigned k = 0;
	while (k < max && c->nheld) {
		struct mem_held h = held_take(c, mem_rand(c) % c->nheld);
		mem_perform_locked(c, &h);
		out[k] = h;
		k++;
	}
	c->completing += k;
	return k;
}

/* Complete between 1 and @max held requests, picked at random, through
 * @buf (lock held, dropped while their callbacks run). */
static void complete_random(struct mem_ctx *c, struct mem_held *buf,
			    unsigned max)
{
	unsigned k = 1 + (unsigned)(mem_rand(c) % max);
	k = take_random_locked(c, buf, k);
	pthread_mutex_unlock(&c->lock);
	uint64_t writes = deliver(c, buf, k, false);
	pthread_mutex_lock(&c->lock);
	finished_locked(c, k, writes);
}

/* ---- wait() and the completion thread ------------------------------- */

int mem_wait(void *arg)
{
	struct mem_ctx *c = arg;
	struct mem_held done[MEM_BATCH];
	pthread_mutex_lock(&c->lock);
	uint64_t seen = c->completions;
	for (;;) {
		if (c->inflight == engine_own_of(&mem_own, c) ||
		    c->completions != seen)
			break;
		/* The completion thread waiting on itself would never wake:
		 * there it completes like POLL mode. */
		bool drive = c->nheld && (c->mode == FOLIO_MEM_POLL ||
					  mem_thread_self == c);
		if (drive) {
			unsigned max = c->mode == FOLIO_MEM_POLL ?
				(unsigned)MIN(c->nheld, (size_t)MEM_BATCH) : 1;
			complete_random(c, done, max);
			break;
		}
		/* Someone else (another waiter, the thread, a SYNC submit,
		 * a mode switch, a power cut) is completing what is in
		 * flight. */
		pthread_cond_wait(&c->progress_cv, &c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return 0;
}

void *mem_thread_main(void *arg)
{
	struct mem_ctx *c = arg;
	struct mem_held done[MEM_THREAD_BATCH];
	mem_thread_self = c;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->thread_stop &&
		       (c->mode != FOLIO_MEM_THREAD || !c->nheld))
			pthread_cond_wait(&c->work_cv, &c->lock);
		if (c->thread_stop)
			break;
		uint64_t r = mem_rand(c);
		/* Half the rounds complete at once, the others after a
		 * delay, so requests overtake each other in time too. */
		if (r & 1) {
			engine_unlocked_sleep(
				&c->lock,
				(long)((r >> 1) % MEM_THREAD_MAX_DELAY_NS));
			if (c->thread_stop)
				break;
			if (c->mode != FOLIO_MEM_THREAD || !c->nheld)
				continue;
		}
		complete_random(c, done, (unsigned)MIN(c->nheld,
						      (size_t)MEM_THREAD_BATCH));
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Stop and join the completion thread (lock not held). Held requests stay
 * held. */
void mem_stop_thread(struct mem_ctx *c)
{
	pthread_mutex_lock(&c->lock);
	bool running = c->thread_running;
	c->thread_stop = true;
	pthread_cond_broadcast(&c->work_cv);
	pthread_mutex_unlock(&c->lock);
	if (running)
		pthread_join(c->thread, NULL);
	pthread_mutex_lock(&c->lock);
	c->thread_running = false;
	c->thread_stop = false;
	pthread_mutex_unlock(&c->lock);
}

/* ---- mode switches -------------------------------------------------- */

int folio_engine_mem_set_mode(struct folio_engine *e,
			      enum folio_mem_mode mode, uint64_t seed)
{
	struct mem_ctx *c = mem_of(e);
	if (!c || (mode != FOLIO_MEM_SYNC && mode != FOLIO_MEM_POLL &&
		   mode != FOLIO_MEM_THREAD))
		return -EINVAL;
	if (mem_thread_self == c)
		return -EDEADLK;
	pthread_mutex_lock(&c->lock);
	if (c->switching || c->closing) {
		pthread_mutex_unlock(&c->lock);
		return -EBUSY;
	}
	c->switching = true;
	bool start = mode == FOLIO_MEM_THREAD && !c->thread_running;
	pthread_mutex_unlock(&c->lock);

	/* Start the thread first so a failure leaves everything as it was:
	 * it idles until the mode says THREAD. */
	if (start) {
		pthread_t t;
		if (pthread_create(&t, NULL, mem_thread_main, c)) {
			pthread_mutex_lock(&c->lock);
			c->switching = false;
			pthread_mutex_unlock(&c->lock);
			return -EAGAIN;
		}
		pthread_mutex_lock(&c->lock);
		c->thread = t;
		c->thread_running = true;
		pthread_mutex_unlock(&c->lock);
	}

	pthread_mutex_lock(&c->lock);
	enum folio_mem_mode old = c->mode;
	c->mode = mode;
	mem_seed(c, seed);
	size_t n;
	struct mem_held *held = held_take_all_locked(c, &n);
	pthread_cond_broadcast(&c->work_cv);
	pthread_mutex_unlock(&c->lock);

	if (old == FOLIO_MEM_THREAD && mode != FOLIO_MEM_THREAD)
		mem_stop_thread(c);

	/* Held requests complete with the outcome decided at submit. */
	complete_taken(c, held, n, true, 0);

	pthread_mutex_lock(&c->lock);
	c->switching = false;
	pthread_cond_broadcast(&c->progress_cv);
	pthread_mutex_unlock(&c->lock);
	return 0;
}
