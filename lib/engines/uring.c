/* SPDX-License-Identifier: MIT */
/*
 * The io_uring engine.
 *
 * Sharding: the engine owns up to URING_SHARDS rings, and a thread always
 * submits to the same one (picked from a per-thread number), so threads
 * that sync concurrently neither share a lock nor wake each other: each
 * shard has its own mutex, counters and backlog, and is reaped by the
 * threads that submit to it. Shard 0 is set up with the engine, so that
 * creation reports a kernel without io_uring; the others on first use,
 * falling back to shard 0 when the kernel refuses another ring.
 *
 * Within a shard, the mutex guards the submission side of the ring, the
 * counters and the backlog. The completion side has a single consumer at
 * a time, the shard's "reaper" (a role taken under the mutex); it waits
 * for and reads CQEs without the mutex, so submitters never queue behind
 * a thread sleeping in the kernel. liburing keeps the two sides in
 * separate fields, which is what makes that split safe. Completion
 * callbacks run with no lock held because they may submit again.
 *
 * A waiter whose shard is being reaped by another thread (threads beyond
 * URING_SHARDS share rings, and the completion thread reaps for all)
 * sleeps on the shard's condition for one round; reapers broadcast only
 * when such a sleeper exists, so threads on rings of their own are never
 * woken for requests they do not wait for. A waiter with nothing of its
 * own in flight helps the other rings without blocking and returns.
 *
 * A request the library marks FOLIO_IO_WAITED, whose submitter waits for
 * it next, that finds its shard with nothing in flight is held out of the
 * ring ("deferred") and transferred with preadv/pwritev by the first
 * thread that would otherwise sleep for it: the submitter's wait(), a
 * drain (flush, truncate, destroy), or another thread helping. Alone,
 * the ring would cost that thread a submission, a sleep and a wakeup;
 * the next request of the shard instead puts it into the ring ahead of
 * itself, so a batch still goes to the kernel together.
 *
 * Admission: at most cq_entries requests are in a ring or queued for it,
 * so its completion queue cannot overflow. Requests beyond that wait in
 * the shard's FIFO backlog and enter the ring as completions make room;
 * submit() therefore never blocks. It reaps only what has already
 * completed, and only once the backlog is in use (uring_keep_busy_locked()).
 *
 * With FOLIO_URING_COMPLETION_THREAD there is one shard, and the engine's
 * thread is its only reaper: it sleeps in io_uring_wait_cqe() even with
 * nothing in flight, and destroy wakes it with a NOP.
 */
#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "engines/fd.h"

/*
 * The kernel fills read buffers behind memcheck's back, so under valgrind
 * every byte read through the ring would look uninitialised to the caller.
 * Telling memcheck what the kernel wrote keeps valgrind runs meaningful;
 * outside valgrind the request is a no-op.
 */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define HAVE_MEMCHECK_H 1
#endif
#endif

static void mark_read_defined(const struct folio_io *io, ssize_t result)
{
#ifdef HAVE_MEMCHECK_H
	size_t left = result > 0 ? (size_t)result : 0;
	for (int i = 0; i < io->iovcnt && left; i++) {
		size_t n = MIN(left, io->iov[i].iov_len);
		VALGRIND_MAKE_MEM_DEFINED(io->iov[i].iov_base, n);
		left -= n;
	}
#else
	(void)io;
	(void)result;
#endif
}

#define URING_MAX_DEPTH 4096u
#define URING_CQE_BATCH 64
/* Rings one engine may have. More threads than this share them. */
#define URING_SHARDS 16u
/* Give up retrying a request the kernel keeps bouncing (-EAGAIN etc.). */
#define URING_MAX_RETRIES 10000
/* How long a thread that must not leave waits between tries when the ring
 * itself fails or refuses SQEs. */
#define URING_ERROR_PAUSE_NS 1000000L
#define URING_FLAGS (FOLIO_ENGINE_DIRECT | FOLIO_URING_COMPLETION_THREAD)

/* Per-request state: io->engine_data points here while the engine owns
 * the request. */
struct ureq {
	struct folio_io *io;
	struct ureq *prev, *next; /* in-flight list of its op, by seq */
	struct ureq *qnext;      /* backlog or a reaper's local list */
	uint64_t seq;
	size_t done;             /* bytes transferred so far */
	const struct iovec *iov; /* what is left to transfer */
	int iovcnt;
	struct iovec *own;       /* our copy of the iovecs, once resumed */
	unsigned retries;
	ssize_t result;          /* final result (reaper's local lists) */
	/* FOLIO_IO_DURABLE: each round is the write with a linked fsync
	 * (two CQEs), or the fsync alone once the data is all written. */
	bool durable;
	bool sync_only;          /* this round is the fsync alone */
	bool linked;             /* this round is the write + fsync pair */
	unsigned cqes;           /* CQEs of this round still to come */
	int wres, sres;          /* this round's write and fsync results */
	int barrier;             /* a durable write's failed barrier after a
				  * full transfer (engine_complete()) */
};

/* The fsync SQE of a durable round carries its request's address with
 * this bit set (requests are malloc'd, so the bit is free). */
#define UREQ_SYNC_TAG ((uintptr_t)1)

struct ureq_list {
	struct ureq *head, *tail;
};

struct uring_ctx;

/* One ring and what its lock guards. Aligned so that two shards never
 * share a cache line. */
struct ushard {
	_Alignas(64) pthread_mutex_t lock;
	struct io_uring ring;
	struct uring_ctx *c;
	unsigned limit;     /* cq entries: most SQEs queued + in the kernel */
	unsigned queued;    /* SQEs prepared, not yet taken by the kernel */
	unsigned in_kernel; /* SQEs taken by the kernel, CQE not reaped */
	struct ureq_list backlog;
	struct ureq_list inflight[2]; /* by op, oldest first */
	uint64_t seq;
	uint64_t nreq;      /* accepted requests whose callback has not
			     * returned yet */
	bool reaper;
	/* A FOLIO_IO_WAITED request that found the shard idle, held out of
	 * the ring: the next wait(), drain or helper writes it inline, or
	 * the next request puts it into the ring ahead of itself. */
	struct ureq *deferred;
	unsigned running_inline; /* deferred requests being transferred */
	unsigned drainers;  /* threads sleeping on cv for another's reaping
			     * or inline transfer */
	pthread_cond_t cv;  /* progress, signalled only when drainers */
	atomic_bool ready;  /* ring and lock set up (release/acquire) */
};

struct uring_ctx {
	struct engine_fd f;
	unsigned depth;
	unsigned nshards;
	bool use_thread;
	atomic_bool closing;
	pthread_mutex_t setup_lock; /* serialises setting up shards */

	pthread_t thread;
	bool thread_running;
	bool thread_stop; /* shard 0's lock */
	/* The completion thread sleeps on thread_cv while the kernel holds
	 * nothing of its ring (shard 0's lock). */
	bool thread_idle;
	pthread_cond_t thread_cv;

	struct ushard shards[URING_SHARDS];
};

/* Lets wait() notice it runs on the completion thread, which must then
 * reap itself instead of waiting until it does. */
static _Thread_local struct uring_ctx *uring_thread_self;

/* Requests this thread is delivering, per shard (see struct engine_own). */
static _Thread_local struct engine_own uring_own;

/* This thread's number, 0 until it first submits. */
static _Thread_local unsigned uring_tid;
static atomic_uint uring_next_tid;

static void list_append(struct ureq_list *l, struct ureq *r)
{
	r->next = NULL;
	r->prev = l->tail;
	if (l->tail)
		l->tail->next = r;
	else
		l->head = r;
	l->tail = r;
}

static void list_unlink(struct ureq_list *l, struct ureq *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		l->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		l->tail = r->prev;
	r->prev = r->next = NULL;
}

static void fifo_push(struct ureq_list *l, struct ureq *r)
{
	r->qnext = NULL;
	if (l->tail)
		l->tail->qnext = r;
	else
		l->head = r;
	l->tail = r;
}

static struct ureq *fifo_pop(struct ureq_list *l)
{
	struct ureq *r = l->head;
	if (r) {
		l->head = r->qnext;
		if (!l->head)
			l->tail = NULL;
	}
	return r;
}

static int shard_init(struct uring_ctx *c, struct ushard *s)
{
	/* SUBMIT_ALL (5.18) keeps one bad SQE from stalling the rest of a
	 * batch; older kernels reject the flag and do without it. */
	struct io_uring_params p = {.flags = IORING_SETUP_SUBMIT_ALL};
	int ret = io_uring_queue_init_params(c->depth, &s->ring, &p);
	if (ret == -EINVAL) {
		memset(&p, 0, sizeof(p));
		ret = io_uring_queue_init_params(c->depth, &s->ring, &p);
	}
	if (ret)
		return ret;
	if (pthread_mutex_init(&s->lock, NULL)) {
		io_uring_queue_exit(&s->ring);
		return -ENOMEM;
	}
	if (pthread_cond_init(&s->cv, NULL)) {
		pthread_mutex_destroy(&s->lock);
		io_uring_queue_exit(&s->ring);
		return -ENOMEM;
	}
	s->c = c;
	s->limit = s->ring.cq.ring_entries;
	atomic_store_explicit(&s->ready, true, memory_order_release);
	return 0;
}

/* The shard this thread submits to, set up on first use. */
static struct ushard *my_shard(struct uring_ctx *c)
{
	if (!uring_tid)
		uring_tid = atomic_fetch_add_explicit(&uring_next_tid, 1,
						      memory_order_relaxed) +
			    1;
	struct ushard *s = &c->shards[(uring_tid - 1) % c->nshards];
	if (atomic_load_explicit(&s->ready, memory_order_acquire))
		return s;
	pthread_mutex_lock(&c->setup_lock);
	bool ok = atomic_load_explicit(&s->ready, memory_order_relaxed) ||
		  !shard_init(c, s);
	pthread_mutex_unlock(&c->setup_lock);
	/* Out of memory or of rings: shard 0 always exists. */
	return ok ? s : &c->shards[0];
}

/* Hand prepared SQEs to the kernel. Errors the next call may
 * get past (-EAGAIN, -EBUSY, -EINTR) leave the SQEs queued. */
static int uring_submit_locked(struct ushard *s)
{
	int ret = 0;
	while (s->queued) {
		ret = io_uring_submit(&s->ring);
		if (ret == -EINTR)
			continue;
		if (ret <= 0)
			break;
		s->queued -= MIN((unsigned)ret, s->queued);
		s->in_kernel += (unsigned)ret;
		ret = 0;
	}
	if (s->c->thread_idle && s->in_kernel)
		pthread_cond_signal(&s->c->thread_cv);
	return ret < 0 ? ret : 0;
}

/* Room for @n more SQEs next to each other in one submission (lock
 * held): a linked pair must reach the kernel together, or the link would
 * end with the batch. */
static bool uring_room_locked(struct ushard *s, unsigned n)
{
	if (s->queued + s->in_kernel + n > s->limit)
		return false;
	if (io_uring_sq_space_left(&s->ring) < n)
		uring_submit_locked(s);
	return io_uring_sq_space_left(&s->ring) >= n;
}

static void prep_datasync(struct ushard *s, struct io_uring_sqe *sqe,
			  struct ureq *r)
{
	io_uring_prep_fsync(sqe, s->c->f.fd, IORING_FSYNC_DATASYNC);
	io_uring_sqe_set_data(sqe, (void *)((uintptr_t)r | UREQ_SYNC_TAG));
}

/* Put the rest of request r into the ring, or return false. */
static bool uring_queue_locked(struct ushard *s, struct ureq *r)
{
	/* A ring of one SQE cannot hold the pair: there the write goes
	 * alone and its fsync follows in a round of its own. */
	r->linked = r->durable && !r->sync_only &&
		    s->ring.sq.ring_entries >= 2;
	unsigned nsqe = r->linked ? 2 : 1;
	if (!uring_room_locked(s, nsqe))
		return false;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
	r->cqes = nsqe;
	s->queued += nsqe;
	if (r->sync_only) {
		prep_datasync(s, sqe, r);
		return true;
	}
	struct folio_io *io = r->io;
	int fd = s->c->f.fd;
	unsigned n = (unsigned)engine_fd_iov_cut(r->iovcnt);
	__u64 off = io->dev_pos + r->done;
	if (io->op == FOLIO_IO_READ)
		io_uring_prep_readv(sqe, fd, r->iov, n, off);
	else
		io_uring_prep_writev(sqe, fd, r->iov, n, off);
	io_uring_sqe_set_data(sqe, r);
	if (r->linked) {
		/* The kernel starts the fsync only once the write completed
		 * in full; a failed or short write cancels it. */
		io_uring_sqe_set_flags(sqe, IOSQE_IO_LINK);
		prep_datasync(s, io_uring_get_sqe(&s->ring), r);
	}
	return true;
}

/* Move backlog requests into the ring while there is room. */
static void uring_refill_locked(struct ushard *s)
{
	while (s->backlog.head && uring_queue_locked(s, s->backlog.head))
		fifo_pop(&s->backlog);
}

/* Skip @n transferred bytes of r's iovecs. The caller's array is never
 * modified: the first resume copies what is left. */
static bool ureq_advance(struct ureq *r, size_t n)
{
	if (!r->own) {
		int i = 0;
		size_t skip = n;
		while (i < r->iovcnt && skip >= r->iov[i].iov_len)
			skip -= r->iov[i++].iov_len;
		int left = r->iovcnt - i;
		struct iovec *own = malloc((size_t)MAX(left, 1) * sizeof(*own));
		if (!own)
			return false;
		int cnt = engine_iov_window(r->iov, r->iovcnt, n, own, left);
		r->own = own;
		r->iov = own;
		r->iovcnt = cnt;
		return true;
	}
	struct iovec *v = (struct iovec *)r->iov;
	int i = 0;
	while (i < r->iovcnt && n >= v[i].iov_len)
		n -= v[i++].iov_len;
	v += i;
	r->iovcnt -= i;
	if (r->iovcnt) {
		v[0].iov_base = (char *)v[0].iov_base + n;
		v[0].iov_len -= n;
	}
	r->iov = v;
	return true;
}

enum cqe_action { CQE_DONE, CQE_AGAIN, CQE_WAIT };

static bool retryable(struct ureq *r, int res)
{
	return (res == -EAGAIN || res == -EINTR || res == -ECANCELED) &&
	       ++r->retries <= URING_MAX_RETRIES;
}

/* Decide what a transfer's CQE means for r (reaper). */
static enum cqe_action ureq_rw_cqe_locked(const struct uring_ctx *c,
					  struct ureq *r, int res)
{
	if (retryable(r, res))
		return CQE_AGAIN;
	if (engine_fd_transferred(r->io, c->f.direct, &r->done, res,
				  &r->result))
		return CQE_DONE;
	if (!ureq_advance(r, (size_t)res)) {
		r->result = (ssize_t)r->done;
		return CQE_DONE;
	}
	r->retries = 0;
	return CQE_AGAIN;
}

/*
 * The same for a durable write, once both CQEs of its round are in: the
 * write's outcome first (the rest again with a new fsync, or over); a
 * complete write is durable when its fsync succeeded, and a cancelled or
 * interrupted fsync alone is tried again. A short or failed write ends
 * with the write's result: not durable, as FOLIO_IO_DURABLE says.
 */
static enum cqe_action ureq_durable_cqe(const struct uring_ctx *c,
					struct ureq *r)
{
	if (!r->sync_only) {
		enum cqe_action a = ureq_rw_cqe_locked(c, r, r->wres);
		if (a != CQE_DONE || r->result != (ssize_t)r->io->len)
			return a;
		if (!r->linked) {
			r->sync_only = true;
			return CQE_AGAIN;
		}
	}
	if (retryable(r, r->sres)) {
		r->sync_only = true;
		return CQE_AGAIN;
	}
	r->barrier = r->sres;
	return CQE_DONE;
}

/* Decide what a CQE (@data, @res) means for its request *rp (reaper, lock
 * held): CQE_WAIT while a durable round still has a CQE to come. */
static enum cqe_action ureq_cqe(const struct uring_ctx *c, void *data,
				int res, struct ureq **rp)
{
	uintptr_t v = (uintptr_t)data;
	struct ureq *r = (struct ureq *)(v & ~UREQ_SYNC_TAG);
	*rp = r;
	if (!r->durable)
		return ureq_rw_cqe_locked(c, r, res);
	if (v & UREQ_SYNC_TAG)
		r->sres = res;
	else
		r->wres = res;
	if (--r->cqes)
		return CQE_WAIT;
	return ureq_durable_cqe(c, r);
}

static void ureq_free(struct ureq *r)
{
	free(r->own);
	free(r);
}

/*
 * One reaping round of shard s (lock held, role free): take the reaper
 * role, wait for a CQE without the lock (only peek unless @block), then
 * handle every CQE ready under the lock (which also orders our reads of
 * each request after its submitter's writes) and deliver the finished
 * requests with no lock held. Returns with the lock held: the number of
 * requests completed, or a negative errno from io_uring.
 */
static int uring_reap(struct ushard *s, bool block)
{
	struct io_uring_cqe *cqes[URING_CQE_BATCH];
	struct ureq_list deliver = {0}, again = {0};
	struct ureq *r;
	unsigned n, ndone = 0;
	int err = 0;

	s->reaper = true;
	if (block) {
		/* A durable write at the head completes with its second
		 * CQE: waking for the first would cost a round. */
		const struct ureq *h = s->inflight[FOLIO_IO_WRITE].head;
		unsigned want = h && h->cqes == 2 && s->in_kernel >= 2 ? 2 : 1;
		pthread_mutex_unlock(&s->lock);
		do
			err = io_uring_wait_cqe_nr(&s->ring, &cqes[0], want);
		while (err == -EINTR || err == -EAGAIN || err == -ETIME);
		pthread_mutex_lock(&s->lock);
		if (err) {
			s->reaper = false;
			if (s->drainers)
				pthread_cond_broadcast(&s->cv);
			return err;
		}
	}
	n = io_uring_peek_batch_cqe(&s->ring, cqes, URING_CQE_BATCH);
	for (unsigned i = 0; i < n; i++) {
		void *data = io_uring_cqe_get_data(cqes[i]);
		if (!data)
			continue; /* destroy's NOP, waking the thread */
		enum cqe_action a = ureq_cqe(s->c, data, cqes[i]->res, &r);
		if (a == CQE_DONE) {
			list_unlink(&s->inflight[r->io->op], r);
			fifo_push(&deliver, r);
			ndone++;
		} else if (a == CQE_AGAIN) {
			fifo_push(&again, r);
		}
	}
	io_uring_cq_advance(&s->ring, n);
	s->in_kernel -= n;
	/* Resumed requests go before the backlog: they are older. */
	while ((r = fifo_pop(&again))) {
		if (!uring_queue_locked(s, r)) {
			r->qnext = s->backlog.head;
			s->backlog.head = r;
			if (!s->backlog.tail)
				s->backlog.tail = r;
		}
	}
	uring_refill_locked(s);
	uring_submit_locked(s);
	s->reaper = false;
	if (s->drainers)
		pthread_cond_broadcast(&s->cv);
	if (!ndone)
		return 0;
	pthread_mutex_unlock(&s->lock);

	struct engine_own saved = engine_own_enter(&uring_own, s, ndone);
	while ((r = fifo_pop(&deliver))) {
		struct folio_io *io = r->io;
		ssize_t result = r->result;
		int barrier = r->barrier;
		io->engine_data = NULL;
		ureq_free(r);
		if (io->op == FOLIO_IO_READ)
			mark_read_defined(io, result);
		engine_complete(io, result, barrier);
	}
	engine_own_leave(&uring_own, saved);

	pthread_mutex_lock(&s->lock);
	s->nreq -= ndone;
	if (s->drainers)
		pthread_cond_broadcast(&s->cv);
	return (int)ndone;
}

/* May this thread reap shard s at all? With the completion thread only
 * that thread does. */
static bool may_reap(const struct ushard *s)
{
	return !s->c->use_thread || uring_thread_self == s->c;
}

/* Put shard s's deferred request into the ring (lock held): a request
 * behind it is coming, and the two go to the kernel together. */
static void undefer_locked(struct ushard *s)
{
	struct ureq *r = s->deferred;
	s->deferred = NULL;
	if (s->backlog.head || !uring_queue_locked(s, r))
		fifo_push(&s->backlog, r);
}

/*
 * Transfer shard s's deferred request in this thread and deliver it
 * (lock held on entry and on return, dropped meanwhile). It stays on the
 * in-flight list until transferred, so that a drain of the shard still
 * waits for it (running_inline tells drains to sleep on cv for it).
 */
static void run_deferred_locked(struct ushard *s)
{
	struct ureq *r = s->deferred;
	struct folio_io *io = r->io;
	const struct engine_fd *f = &s->c->f;
	s->deferred = NULL;
	s->running_inline++;
	pthread_mutex_unlock(&s->lock);
	ssize_t res = engine_fd_rw(f->fd, f->direct, io);
	int barrier = r->durable && res == (ssize_t)io->len
			      ? engine_fd_datasync(f->fd) : 0;
	pthread_mutex_lock(&s->lock);
	list_unlink(&s->inflight[io->op], r);
	s->running_inline--;
	pthread_mutex_unlock(&s->lock);

	struct engine_own saved = engine_own_enter(&uring_own, s, 1);
	io->engine_data = NULL;
	ureq_free(r);
	engine_complete(io, res, barrier);
	engine_own_leave(&uring_own, saved);

	pthread_mutex_lock(&s->lock);
	s->nreq--;
	if (s->drainers)
		pthread_cond_broadcast(&s->cv);
}

/*
 * A submitter of many requests (a writeback pass over scattered blocks
 * builds thousands) must not leave the device idle while it builds the
 * rest. Once the ring holds all it admits, further requests wait in the
 * backlog until someone reaps, and the SQEs prepared last wait for the
 * next unplug(); before the first wait() the device would see only the
 * first ring's worth (a sync of 10^4 scattered blocks: 512 requests, then
 * 35 ms of idle device). So a request that lands in the backlog sends the
 * queue to the kernel and reaps what has completed, without sleeping, to
 * let the backlog in. Not while this thread delivers completions of the
 * shard: a completion that submits would reap inside a reap.
 */
static void uring_keep_busy_locked(struct ushard *s)
{
	if (!s->backlog.head)
		return;
	uring_submit_locked(s);
	if (s->in_kernel && !s->reaper && may_reap(s) &&
	    !engine_own_of(&uring_own, s))
		(void)uring_reap(s, false);
}

/* ---- callbacks ------------------------------------------------------ */

static int uring_submit(void *arg, struct folio_io *io)
{
	struct uring_ctx *c = arg;
	int ret = engine_check_io(io);
	if (ret)
		return ret;
	ret = engine_fd_submit_tail(&c->f, io);
	if (ret)
		return ret < 0 ? ret : 0;
	if (!io->len) {
		/* Nothing to write; a durable one still owes its barrier. */
		engine_complete(io, 0, engine_io_durable(io)
					       ? engine_fd_datasync(c->f.fd) : 0);
		return 0;
	}
	if (atomic_load_explicit(&c->closing, memory_order_relaxed))
		return -ESHUTDOWN;
	if (engine_io_durable(io) && (io->flags & FOLIO_IO_WAITED)) {
		/* A sync's lone write, its submitter about to wait for it:
		 * written and made durable right here. In the ring its fsync
		 * would go to a kernel worker (fsync always blocks), a
		 * thread switch the waiting thread need not pay. */
		ssize_t res = engine_fd_rw(c->f.fd, c->f.direct, io);
		int barrier = res == (ssize_t)io->len
				      ? engine_fd_datasync(c->f.fd) : 0;
		engine_complete(io, res, barrier);
		return 0;
	}
	struct ureq *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->io = io;
	r->iov = io->iov;
	r->iovcnt = io->iovcnt;
	r->durable = engine_io_durable(io);

	struct ushard *s = my_shard(c);
	pthread_mutex_lock(&s->lock);
	io->engine_data = r;
	r->seq = ++s->seq;
	list_append(&s->inflight[io->op], r);
	if (!s->nreq++ && (io->flags & FOLIO_IO_WAITED)) {
		s->deferred = r;
	} else {
		if (s->deferred)
			undefer_locked(s);
		/* Behind any backlog, so that requests keep their order. */
		if (s->backlog.head || !uring_queue_locked(s, r))
			fifo_push(&s->backlog, r);
		uring_keep_busy_locked(s);
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static int uring_unplug(void *arg)
{
	struct ushard *s = my_shard(arg);
	pthread_mutex_lock(&s->lock);
	uring_refill_locked(s);
	int ret = uring_submit_locked(s);
	pthread_mutex_unlock(&s->lock);
	/* What the kernel refused now goes in with the next call. */
	return ret == -EAGAIN || ret == -EBUSY ? 0 : ret;
}

/* Does shard s (lock held) hold requests that complete only when some
 * thread polls its ring: not yet in the kernel, or in it with nobody
 * reaping? An inline transfer and a reaper complete theirs unasked. */
static bool shard_wants_polling_locked(const struct ushard *s)
{
	if (s->deferred || s->backlog.head || s->queued)
		return true;
	return s->in_kernel && !s->reaper && !s->c->use_thread;
}

/* What a waiter with nothing of its own in flight found in the shards it
 * helped (see uring_wait()). */
struct help_look {
	bool progress; /* it transferred or reaped something */
	bool inflight; /* some shard has requests in flight */
	bool polling;  /* some shard wants polling, or was busy */
};

static void help_look_locked(const struct ushard *s, struct help_look *l)
{
	/* Not those this thread is delivering (a wait() in a completion):
	 * nobody else completes them. */
	if (s->nreq > engine_own_of(&uring_own, s))
		l->inflight = true;
	if (shard_wants_polling_locked(s))
		l->polling = true;
}

/* Push shard s's queue and reap what is ready, without blocking: for
 * requests of other threads that nobody is waiting in. */
static int shard_help(struct ushard *s, struct help_look *l)
{
	if (pthread_mutex_trylock(&s->lock)) {
		l->polling = true;
		return 0;
	}
	if (s->deferred) {
		run_deferred_locked(s);
		l->progress = true;
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	uring_refill_locked(s);
	int ret = uring_submit_locked(s);
	if (ret == -EAGAIN || ret == -EBUSY)
		ret = 0;
	if (!ret && s->in_kernel && !s->reaper && may_reap(s)) {
		int r = uring_reap(s, false);
		ret = r < 0 ? r : 0;
		if (r > 0)
			l->progress = true;
	}
	help_look_locked(s, l);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

static int uring_wait(void *arg)
{
	struct uring_ctx *c = arg;
	struct ushard *s = my_shard(c);
	int ret;

	pthread_mutex_lock(&s->lock);
	if (s->deferred) {
		/* Whoever it is for, running it is progress. */
		run_deferred_locked(s);
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	uring_refill_locked(s);
	ret = uring_submit_locked(s);
	if (ret == -EAGAIN || ret == -EBUSY)
		ret = 0;
	bool mine = s->nreq > engine_own_of(&uring_own, s);
	struct help_look look = {0};
	help_look_locked(s, &look);
	if (!ret && mine && s->in_kernel && !s->reaper && may_reap(s)) {
		/* Until a request completes: a round may bring only the
		 * first CQE of a durable write, and returning then would
		 * send the caller to sleep for its backoff. */
		int r;
		do
			r = uring_reap(s, true);
		while (!r && s->in_kernel && !s->reaper &&
		       s->nreq > engine_own_of(&uring_own, s));
		pthread_mutex_unlock(&s->lock);
		return r < 0 ? r : 0;
	}
	if (!ret && mine && s->in_kernel && (s->reaper || !may_reap(s))) {
		/* Only threads sharing this ring, or the completion thread,
		 * reap for us: one round of theirs is our progress. */
		s->drainers++;
		pthread_cond_wait(&s->cv, &s->lock);
		s->drainers--;
	}
	pthread_mutex_unlock(&s->lock);
	if (ret || mine)
		return ret;
	/* Nothing of ours in flight: whatever the caller waits for was
	 * submitted by another thread, which may never wait for it. */
	for (unsigned i = 0; !ret && i < c->nshards; i++) {
		struct ushard *t = &c->shards[i];
		if (t != s && atomic_load_explicit(&t->ready,
						   memory_order_acquire))
			ret = shard_help(t, &look);
	}
	/*
	 * Requests in flight that no ring needs polled for are being
	 * transferred inline or reaped by other threads, which wake the
	 * caller: it may sleep without a timeout of ours. A short one costs
	 * every such wakeup: on this VM a futex wait with a 100 us timeout
	 * woke 15-25 us later than one without, and 2 threads syncing one
	 * file paid that in each wait for the other's write (doc/design.md,
	 * "Concurrency"). The library still looks again after a while
	 * (ENGINE_IDLE_RECHECK_NS), for a request entering a ring after
	 * this look.
	 */
	if (!ret && look.inflight && !look.polling && !look.progress)
		return FOLIO_ENGINE_WAIT_IDLE;
	return ret;
}

/* Is any request of @op with a sequence number <= @seq in flight? */
static bool older_inflight(const struct ushard *s, int op, uint64_t seq)
{
	const struct ureq *h = s->inflight[op].head;
	return h && h->seq <= seq;
}

/*
 * Drive this thread's shard until none of its writes, and with @reads
 * none of its reads, accepted before now is in flight. Other shards are
 * left alone: their writes belong to threads that wait for them, and
 * waiting for them here is what made every syncer wait for all others.
 * Returns 0 or a fatal io_uring error.
 */
static int shard_drain_older(struct ushard *s, bool reads)
{
	int ret = 0;
	pthread_mutex_lock(&s->lock);
	uint64_t seq = s->seq;
	while (!ret && (older_inflight(s, FOLIO_IO_WRITE, seq) ||
			(reads && older_inflight(s, FOLIO_IO_READ, seq)))) {
		if (s->deferred) {
			run_deferred_locked(s);
			continue;
		}
		uring_refill_locked(s);
		int sub = uring_submit_locked(s);
		if (s->in_kernel && !s->reaper && may_reap(s)) {
			int r = uring_reap(s, true);
			ret = r < 0 ? r : 0;
		} else if ((s->in_kernel && (s->reaper || s->c->use_thread)) ||
			   s->running_inline) {
			/* Whoever reaps or transfers inline signals: we
			 * hold no role. */
			s->drainers++;
			pthread_cond_wait(&s->cv, &s->lock);
			s->drainers--;
		} else if (sub == -EAGAIN || sub == -EBUSY || !sub) {
			/* The kernel refused the queue for now. */
			engine_unlocked_sleep(&s->lock, URING_ERROR_PAUSE_NS);
		} else {
			ret = sub;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

static int uring_flush(void *arg)
{
	struct uring_ctx *c = arg;
	/* The writes this thread submitted are covered even when not yet
	 * unplugged or complete. Those of other threads are covered once
	 * complete (the contract), whichever ring carried them, so no other
	 * ring is drained, and a synchronous fdatasync is one system call. */
	int ret = shard_drain_older(my_shard(c), false);
	if (ret)
		return ret;
	return engine_fd_datasync(c->f.fd);
}

static int uring_truncate(void *arg, uint64_t size)
{
	struct uring_ctx *c = arg;
	if (size > FOLIO_MAX_POS)
		return -EINVAL;
	/* This thread's requests first, so that a read it submitted still
	 * sees the old contents; the library guarantees no write past @size
	 * is in flight elsewhere. */
	int ret = shard_drain_older(my_shard(c), true);
	return ret ? ret : engine_fd_truncate(&c->f, size);
}

static void *uring_thread_main(void *arg)
{
	struct uring_ctx *c = arg;
	struct ushard *s = &c->shards[0];
	uring_thread_self = c;
	pthread_mutex_lock(&s->lock);
	while (!c->thread_stop) {
		if (!s->in_kernel) {
			/* Blocking in io_uring_enter() with nothing in flight
			 * would wait for nothing, and under valgrind, which
			 * does not treat that call as blocking, it holds the
			 * scheduler lock: every other thread stops. Whoever
			 * puts SQEs in the kernel wakes us. */
			c->thread_idle = true;
			pthread_cond_wait(&c->thread_cv, &s->lock);
			c->thread_idle = false;
			continue;
		}
		/* Not expected; do not spin on a broken ring. */
		if (uring_reap(s, true) < 0)
			engine_unlocked_sleep(&s->lock, URING_ERROR_PAUSE_NS);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Wait until nothing of shard s is in flight (destroy). */
static void uring_drain_locked(struct ushard *s)
{
	/* The completion thread keeps the role even with nothing in
	 * flight; anyone else holding it is about to see a CQE. */
	while (s->nreq || (s->reaper && !s->c->use_thread)) {
		if (s->deferred) {
			run_deferred_locked(s);
			continue;
		}
		uring_refill_locked(s);
		uring_submit_locked(s);
		if (s->in_kernel && !s->reaper && may_reap(s)) {
			if (uring_reap(s, true) >= 0)
				continue;
		}
		/* Another thread is delivering, the completion thread
		 * reaps, or the kernel refuses the queue for now. */
		engine_unlocked_sleep(&s->lock, s->reaper || s->c->use_thread
							? URING_ERROR_PAUSE_NS / 20
							: URING_ERROR_PAUSE_NS);
	}
}

static void uring_free_ctx(struct uring_ctx *c)
{
	for (unsigned i = 0; i < c->nshards; i++) {
		struct ushard *s = &c->shards[i];
		if (atomic_load(&s->ready)) {
			io_uring_queue_exit(&s->ring);
			pthread_cond_destroy(&s->cv);
			pthread_mutex_destroy(&s->lock);
		}
	}
	pthread_mutex_destroy(&c->setup_lock);
	pthread_cond_destroy(&c->thread_cv);
	engine_fd_close(&c->f);
	free(c);
}

/* Wake the completion thread out of io_uring_wait_cqe() for good. */
static void thread_stop(struct uring_ctx *c)
{
	struct ushard *s = &c->shards[0];
	pthread_mutex_lock(&s->lock);
	c->thread_stop = true;
	struct io_uring_sqe *sqe;
	while (!(sqe = io_uring_get_sqe(&s->ring))) {
		uring_submit_locked(s);
		engine_unlocked_sleep(&s->lock, URING_ERROR_PAUSE_NS / 20);
	}
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, NULL);
	s->queued++;
	while (s->queued) {
		int r = uring_submit_locked(s);
		if (s->queued && r)
			engine_unlocked_sleep(&s->lock, URING_ERROR_PAUSE_NS);
	}
	pthread_mutex_unlock(&s->lock);
	pthread_join(c->thread, NULL);
}

static void uring_destroy(void *arg)
{
	struct uring_ctx *c = arg;
	atomic_store(&c->closing, true);
	/* Callbacks of requests the kernel still holds may run on other
	 * threads; the rings and the locks must outlive all of them. */
	for (unsigned i = 0; i < c->nshards; i++) {
		struct ushard *s = &c->shards[i];
		if (!atomic_load(&s->ready))
			continue;
		pthread_mutex_lock(&s->lock);
		uring_drain_locked(s);
		pthread_mutex_unlock(&s->lock);
	}
	if (c->thread_running)
		thread_stop(c);
	uring_free_ctx(c);
}

static const struct folio_engine_ops uring_ops = {
	.sz = sizeof(struct folio_engine_ops),
	.submit = uring_submit,
	.flush = uring_flush,
	.truncate = uring_truncate,
	.wait = uring_wait,
	.destroy = uring_destroy,
	.unplug = uring_unplug,
	.caps = FOLIO_ENGINE_CAP_DURABLE | FOLIO_ENGINE_CAP_WAITED,
};

int folio_engine_uring(struct folio_engine **out, int fd, unsigned depth,
		       unsigned flags)
{
	if (!out || fd < 0 || !depth || depth > URING_MAX_DEPTH ||
	    (flags & ~URING_FLAGS))
		return -EINVAL;
	struct engine_fd f;
	int ret = engine_fd_open(&f, fd, flags);
	if (ret)
		return ret;
	struct uring_ctx *c = aligned_alloc(_Alignof(struct uring_ctx),
					    sizeof(*c));
	if (!c) {
		engine_fd_close(&f);
		return -ENOMEM;
	}
	memset(c, 0, sizeof(*c));
	c->f = f;
	c->depth = depth;
	c->use_thread = flags & FOLIO_URING_COMPLETION_THREAD;
	c->nshards = c->use_thread ? 1 : URING_SHARDS;
	atomic_init(&c->closing, false);
	for (unsigned i = 0; i < URING_SHARDS; i++)
		atomic_init(&c->shards[i].ready, false);
	if (pthread_mutex_init(&c->setup_lock, NULL)) {
		engine_fd_close(&c->f);
		free(c);
		return -ENOMEM;
	}
	if (pthread_cond_init(&c->thread_cv, NULL)) {
		pthread_mutex_destroy(&c->setup_lock);
		engine_fd_close(&c->f);
		free(c);
		return -ENOMEM;
	}
	ret = shard_init(c, &c->shards[0]);
	if (ret) {
		uring_free_ctx(c);
		return ret;
	}
	if (c->use_thread) {
		if (pthread_create(&c->thread, NULL, uring_thread_main, c)) {
			uring_free_ctx(c);
			return -EAGAIN;
		}
		c->thread_running = true;
	}
	ret = engine_create(out, &uring_ops, c, ENGINE_URING);
	if (ret)
		uring_destroy(c);
	else
		(*out)->readahead_hint = engine_fd_device_readahead(c->f.fd);
	return ret;
}
