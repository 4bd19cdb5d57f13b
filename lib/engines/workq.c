/* SPDX-License-Identifier: MIT */
/*
 * The engine work queue (workq.h).
 *
 * Workers start on demand: a request that finds no idle worker starts one
 * until there are q->max, so an engine that does one request at a time
 * has one thread, and an engine that never does I/O has none (and a
 * process may fork before its first request). They are started under the
 * lock so that stop() sees every thread it must join.
 *
 * Completions run with no lock held (a completion may submit again), and
 * a worker says it is done only after its completion returned, so that
 * whoever waits for it (drain, stop) knows the callback is over. Waiters
 * are woken only when there are some: a busy queue with nobody draining
 * pays no broadcast.
 */
#include <stdlib.h>

#include "engines/workq.h"

/* The worker this thread is, for a drain called from a completion. */
static _Thread_local struct workq_worker *workq_self;

/* Submitters are told apart by a number (never 0), so that a flush can
 * find its own writes and leave other threads' alone. A thread that
 * writes to a queue records how far its writes go there (the newest
 * seq, for the last queue it wrote to): a flush whose writes are all
 * older than anything in flight has nothing to look for. */
static _Thread_local unsigned workq_tid;
static atomic_uint workq_next_tid = 1;
static _Thread_local const struct engine_workq *workq_last_q;
static _Thread_local uint64_t workq_last_write;

static unsigned workq_my_tid(void)
{
	if (!workq_tid) {
		unsigned t;
		do /* skipping 0 on wrap-around */
			t = atomic_fetch_add(&workq_next_tid, 1);
		while (!t);
		workq_tid = t;
	}
	return workq_tid;
}

int engine_workq_init(struct engine_workq *q, int max, engine_workq_fn run,
		      void *arg)
{
	memset(q, 0, sizeof(*q));
	q->max = max;
	q->run = run;
	q->arg = arg;
	q->workers = calloc((size_t)max, sizeof(*q->workers));
	if (!q->workers)
		return -ENOMEM;
	if (pthread_mutex_init(&q->lock, NULL))
		goto fail_lock;
	if (pthread_cond_init(&q->work_cv, NULL))
		goto fail_work;
	if (pthread_cond_init(&q->done_cv, NULL))
		goto fail_done;
	return 0;
fail_done:
	pthread_cond_destroy(&q->work_cv);
fail_work:
	pthread_mutex_destroy(&q->lock);
fail_lock:
	free(q->workers);
	return -ENOMEM;
}

/* What @mark stood for has completed (lock held): clear it and tell the
 * waiters. */
static void workq_done_locked(struct engine_workq *q, struct workq_slot *mark)
{
	mark->seq = 0;
	if (q->waiters)
		pthread_cond_broadcast(&q->done_cv);
}

/* Take the oldest queued request, noting it in @mark while it runs (with
 * the lock dropped), and tell the waiters once its completion returned. */
static void workq_run_head_locked(struct engine_workq *q,
				  struct workq_slot *mark)
{
	struct workq_slot s = q->ring[q->head];
	q->head = (q->head + 1) % q->cap;
	q->len--;
	*mark = s;
	pthread_mutex_unlock(&q->lock);
	q->run(q->arg, s.io);
	pthread_mutex_lock(&q->lock);
	workq_done_locked(q, mark);
}

/* How many of the oldest queued requests (up to q->batch_max) one batch
 * may take: those q->batchable() takes, up to the first it does not. */
static int workq_batch_len_locked(const struct engine_workq *q)
{
	int n = 0;
	while ((size_t)n < q->len && n < q->batch_max &&
	       q->batchable(q->ring[(q->head + (size_t)n) % q->cap].io))
		n++;
	return n;
}

/*
 * Take the n oldest queued requests for one run_batch() call. While it
 * runs, the worker's slot stands for all of them: the oldest's seq
 * (drains that wait for older requests), a write if any is one, and the
 * submitter when they all have the same one (else WORKQ_TID_MANY, which
 * every thread's flush waits for: it may hold one of its writes). A
 * batch's completions run only once all its transfers are over
 * (posix.c), so a drain from one of them, which skips the worker's own
 * slot, skips nothing still in flight.
 */
static void workq_run_batch_locked(struct engine_workq *q,
				   struct workq_worker *w, int n)
{
	struct folio_io *ios[WORKQ_BATCH_MAX];
	struct workq_slot mark = q->ring[q->head];
	for (int i = 0; i < n; i++) {
		const struct workq_slot *s = &q->ring[(q->head + i) % q->cap];
		ios[i] = s->io;
		mark.write |= s->write;
		if (s->tid != mark.tid)
			mark.tid = WORKQ_TID_MANY;
	}
	mark.io = NULL;
	q->head = (q->head + (size_t)n) % q->cap;
	q->len -= (size_t)n;
	w->running = mark;
	/* More left than this batch took: an idle worker takes the next. */
	if (q->len && q->idle > 0)
		pthread_cond_signal(&q->work_cv);
	pthread_mutex_unlock(&q->lock);
	q->run_batch(q->arg, ios, n);
	pthread_mutex_lock(&q->lock);
	workq_done_locked(q, &w->running);
}

static void *workq_main(void *arg)
{
	struct workq_worker *w = arg;
	struct engine_workq *q = w->q;
	workq_self = w;
	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (!q->len && !q->stop) {
			q->idle++;
			pthread_cond_wait(&q->work_cv, &q->lock);
			q->idle--;
		}
		if (!q->len)
			break;
		int n = q->run_batch && q->len > 1
				? workq_batch_len_locked(q) : 0;
		if (n > 1)
			workq_run_batch_locked(q, w, n);
		else
			workq_run_head_locked(q, &w->running);
	}
	pthread_mutex_unlock(&q->lock);
	if (q->worker_exit)
		q->worker_exit(q->arg);
	return NULL;
}

static bool workq_grow_locked(struct engine_workq *q)
{
	size_t cap = q->cap ? q->cap * 2 : 64;
	struct workq_slot *r = malloc(cap * sizeof(*r));
	if (!r)
		return false;
	for (size_t i = 0; i < q->len; i++)
		r[i] = q->ring[(q->head + i) % q->cap];
	free(q->ring);
	q->ring = r;
	q->cap = cap;
	q->head = 0;
	return true;
}

/* One more worker; false when the system refuses the thread (no error
 * while another worker or a waiter will get to the queue). */
static bool workq_start_locked(struct engine_workq *q)
{
	struct workq_worker *w = &q->workers[q->started];
	w->q = q;
	w->running.seq = w->helping.seq = 0;
	if (pthread_create(&w->thread, NULL, workq_main, w))
		return false;
	q->started++;
	return true;
}

/* Something sleeps until the queue moves (a drain): requests left for
 * their submitters' wait() must not depend on that submitter now. */
static void workq_kick_locked(struct engine_workq *q)
{
	if (!q->len)
		return;
	if (q->idle > 0)
		pthread_cond_signal(&q->work_cv);
	else if (q->started < q->max)
		(void)workq_start_locked(q);
}

int engine_workq_submit(struct engine_workq *q, struct folio_io *io)
{
	pthread_mutex_lock(&q->lock);
	if (q->stop) {
		pthread_mutex_unlock(&q->lock);
		return -ESHUTDOWN;
	}
	if (q->len == q->cap && !workq_grow_locked(q)) {
		pthread_mutex_unlock(&q->lock);
		return -ENOMEM;
	}
	/* A request its submitter is about to wait for, alone in the
	 * queue, is left for that wait() to run (engine_workq_help()): a
	 * sync's lone write then costs no wakeup of a worker that would
	 * find it taken. A second one queued behind it wakes a worker, so
	 * a batch still keeps the workers busy. */
	bool defer = (io->flags & FOLIO_IO_WAITED) && !q->len;
	/* More queued than idle workers to take it: one more thread. */
	if (!defer && q->idle <= (int)q->len && q->started < q->max)
		(void)workq_start_locked(q);
	if (!defer && !q->started) {
		pthread_mutex_unlock(&q->lock);
		q->run(q->arg, io);
		return 0;
	}
	bool write = io->op == FOLIO_IO_WRITE;
	q->ring[(q->head + q->len) % q->cap] =
		(struct workq_slot){io, ++q->seq, workq_my_tid(), write};
	q->len++;
	if (write) {
		workq_last_q = q;
		workq_last_write = q->seq;
	}
	bool wake = !defer && q->idle > 0;
	pthread_mutex_unlock(&q->lock);
	if (wake)
		pthread_cond_signal(&q->work_cv);
	return 0;
}

bool engine_workq_help(struct engine_workq *q)
{
	pthread_mutex_lock(&q->lock);
	if (!q->len) {
		pthread_mutex_unlock(&q->lock);
		return false;
	}
	struct workq_helper h = {.thread = workq_my_tid(), .next = q->helpers};
	q->helpers = &h;
	workq_run_head_locked(q, &h.running);
	struct workq_helper **pp = &q->helpers;
	while (*pp != &h)
		pp = &(*pp)->next;
	*pp = h.next;
	pthread_mutex_unlock(&q->lock);
	return true;
}

/* Is @h a request the calling thread runs as a helper (whose completion
 * may be what drains: waiting for it would wait for itself)? */
static bool helper_is_mine(const struct workq_helper *h)
{
	return h->thread == workq_tid;
}

/* The oldest request queued or running (but not run by @self or by this
 * thread as a helper), or UINT64_MAX when none. */
static uint64_t workq_oldest_locked(const struct engine_workq *q,
				    const struct workq_worker *self)
{
	uint64_t oldest = q->len ? q->ring[q->head].seq : UINT64_MAX;
	for (const struct workq_helper *h = q->helpers; h; h = h->next)
		if (!helper_is_mine(h) && h->running.seq &&
		    h->running.seq < oldest)
			oldest = h->running.seq;
	for (int i = 0; i < q->started; i++) {
		const struct workq_worker *w = &q->workers[i];
		uint64_t h = w->helping.seq, r = w->running.seq;
		if (h && h < oldest)
			oldest = h;
		if (w != self && r && r < oldest)
			oldest = r;
	}
	return oldest;
}

static bool slot_own_write(const struct workq_slot *s, unsigned tid)
{
	return s->seq && s->write &&
	       (s->tid == tid || s->tid == WORKQ_TID_MANY);
}

/* Is a write of thread @tid queued or running (except by @self)? */
static bool workq_own_write_locked(const struct engine_workq *q,
				   const struct workq_worker *self,
				   unsigned tid)
{
	for (const struct workq_helper *h = q->helpers; h; h = h->next)
		if (!helper_is_mine(h) && slot_own_write(&h->running, tid))
			return true;
	for (int i = 0; i < q->started; i++) {
		const struct workq_worker *w = &q->workers[i];
		if (slot_own_write(&w->helping, tid) ||
		    (w != self && slot_own_write(&w->running, tid)))
			return true;
	}
	for (size_t i = 0; i < q->len; i++)
		if (slot_own_write(&q->ring[(q->head + i) % q->cap], tid))
			return true;
	return false;
}

/* Until @busy is false: sleep for a worker to finish something, or, in a
 * completion on a worker while no other one is idle, run the oldest
 * queued request here (waiting for the queue behind it would wait for
 * itself when it is the only worker). */
static void workq_drain(struct engine_workq *q,
			bool (*busy)(const struct engine_workq *q,
				     const void *arg),
			const void *arg)
{
	pthread_mutex_lock(&q->lock);
	while (busy(q, arg)) {
		if (workq_self && q->len && q->idle == 0) {
			workq_run_head_locked(q, &workq_self->helping);
			continue;
		}
		workq_kick_locked(q);
		q->waiters++;
		pthread_cond_wait(&q->done_cv, &q->lock);
		q->waiters--;
	}
	pthread_mutex_unlock(&q->lock);
}

static bool older_busy(const struct engine_workq *q, const void *arg)
{
	return workq_oldest_locked(q, workq_self) <= *(const uint64_t *)arg;
}

void engine_workq_drain_older(struct engine_workq *q)
{
	pthread_mutex_lock(&q->lock);
	uint64_t mine = q->seq;
	pthread_mutex_unlock(&q->lock);
	workq_drain(q, older_busy, &mine);
}

static bool own_writes_busy(const struct engine_workq *q, const void *arg)
{
	/* Everything in flight is newer than this thread's last write:
	 * nothing to look for (the common case: the library waits for its
	 * writes before it flushes). */
	uint64_t last = workq_last_q == q ? workq_last_write : UINT64_MAX;
	if (workq_oldest_locked(q, workq_self) > last)
		return false;
	return workq_own_write_locked(q, workq_self, *(const unsigned *)arg);
}

void engine_workq_drain_own_writes(struct engine_workq *q)
{
	unsigned tid = workq_my_tid();
	workq_drain(q, own_writes_busy, &tid);
}

void engine_workq_stop(struct engine_workq *q)
{
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_mutex_unlock(&q->lock);
	pthread_cond_broadcast(&q->work_cv);
	/* Workers leave once the queue is empty; joining them waits for
	 * the completions they were delivering. */
	for (int i = 0; i < q->started; i++)
		pthread_join(q->workers[i].thread, NULL);
	/* Left for a wait() that never came, with no worker started:
	 * every accepted request still completes. */
	pthread_mutex_lock(&q->lock);
	while (q->len) {
		struct workq_slot done;
		workq_run_head_locked(q, &done);
	}
	pthread_mutex_unlock(&q->lock);
	free(q->ring);
	free(q->workers);
	pthread_cond_destroy(&q->done_cv);
	pthread_cond_destroy(&q->work_cv);
	pthread_mutex_destroy(&q->lock);
}
