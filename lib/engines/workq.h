/* SPDX-License-Identifier: MIT */
/*
 * A FIFO of requests run by a small pool of engine threads: what turns an
 * engine whose I/O calls block (preadv/pwritev) into an asynchronous one.
 * submit() queues and returns; a worker runs the request and completes it.
 */
#ifndef FOLIO_ENGINES_WORKQ_H
#define FOLIO_ENGINES_WORKQ_H

#include "engines/builtin.h"

/* Runs @io to its completion (folio_io_complete()) on a worker thread. */
typedef void (*engine_workq_fn)(void *arg, struct folio_io *io);

/* Runs @n requests a worker took from the queue together, all of them to
 * their completions, and returns once the last completion returned. */
typedef void (*engine_workq_batch_fn)(void *arg, struct folio_io **ios,
				      int n);

/* Most requests one batch takes. */
#define WORKQ_BATCH_MAX 64

/* A slot's tid when it stands for a batch of several threads' requests. */
#define WORKQ_TID_MANY 0u

struct workq_slot {
	struct folio_io *io; /* NULL for a batch */
	uint64_t seq;        /* acceptance order, from 1; a batch's oldest */
	unsigned tid;        /* the submitting thread (workq.c) */
	bool write;          /* a write, or a batch holding one */
};

struct workq_worker {
	struct engine_workq *q;
	pthread_t thread;
	struct workq_slot running; /* what it runs; seq 0 when nothing */
	struct workq_slot helping; /* what its completion runs in a drain */
};

/* A thread that is no worker running a queued request while it waits
 * (engine_workq_help()): on the queue's list so that drains see it. */
struct workq_helper {
	struct workq_slot running;
	unsigned thread; /* the helping thread's number (workq.c) */
	struct workq_helper *next;
};

struct engine_workq {
	pthread_mutex_t lock;
	pthread_cond_t work_cv; /* queued work, or stop */
	pthread_cond_t done_cv; /* a request finished, signalled to waiters */
	struct workq_slot *ring;
	size_t cap, head, len;
	uint64_t seq; /* requests accepted so far */
	struct workq_worker *workers;
	struct workq_helper *helpers; /* threads in engine_workq_help() */
	int max, started, idle;
	unsigned waiters; /* threads sleeping on done_cv */
	bool stop;
	engine_workq_fn run;
	void *arg;
	/* Optional (set before the first request): a worker that finds
	 * several requests queued that batchable() takes, oldest first,
	 * takes up to batch_max (<= WORKQ_BATCH_MAX) of them at once and
	 * gives them to run_batch, and each worker calls worker_exit before
	 * it ends. */
	engine_workq_batch_fn run_batch;
	bool (*batchable)(const struct folio_io *io);
	int batch_max;
	void (*worker_exit)(void *arg);
};

/* Up to @max workers (>= 1), started as the queue needs them. 0 or
 * -ENOMEM. */
int engine_workq_init(struct engine_workq *q, int max, engine_workq_fn run,
		      void *arg);

/* Queue @io for a worker. 0; -ESHUTDOWN once engine_workq_stop() began;
 * -ENOMEM (nothing queued). When no worker can be started (the system
 * refuses threads and none runs yet) the request is run right here,
 * which is still a completion. A FOLIO_IO_WAITED request that finds the
 * queue empty wakes no worker: its submitter's engine_workq_help() runs
 * it, unless a worker gets there first (a drain, the next request
 * queued behind it, or engine_workq_stop() makes sure one does). */
int engine_workq_submit(struct engine_workq *q, struct folio_io *io);

/* Run the oldest queued request in the calling thread, as a worker
 * would, instead of letting it wait for one: a thread about to sleep
 * for its requests does the I/O itself rather than pay two thread
 * switches (the submitter's request going to a worker, the worker's
 * completion waking it). True when it ran one; false when nothing was
 * queued (what runs on workers completes from there). */
bool engine_workq_help(struct engine_workq *q);

/* Sleep until every request accepted before the call has finished (its
 * completion returned), except the one the calling worker runs. */
void engine_workq_drain_older(struct engine_workq *q);

/* Sleep until no write the calling thread submitted is queued or
 * running; requests of other threads are not waited for. */
void engine_workq_drain_own_writes(struct engine_workq *q);

/* Refuse new requests (also from completions), let the workers run what
 * is queued, join them and free everything. */
void engine_workq_stop(struct engine_workq *q);

#endif
