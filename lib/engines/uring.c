/* SPDX-License-Identifier: MIT */
/*
 * The io_uring engine.
 *
 * Locking: one mutex guards the submission side of the ring, the
 * counters and the request lists. The completion side has a single
 * consumer at a time, the "reaper" (a role taken under the mutex); it
 * waits for and reads CQEs without the mutex, so submitters never queue
 * behind a thread sleeping in the kernel. liburing keeps the two sides in
 * separate fields, which is what makes that split safe. Completion
 * callbacks run with no lock held because they may submit again.
 *
 * Admission: at most cq_entries requests are in the kernel or queued for
 * it, so the completion queue cannot overflow. Requests beyond that wait
 * in a FIFO backlog in the engine and enter the ring as completions make
 * room; submit() therefore never blocks and never reaps.
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
/* Give up retrying a request the kernel keeps bouncing (-EAGAIN etc.). */
#define URING_MAX_RETRIES 10000
/* How long a thread that must not leave waits between tries when the ring
 * itself fails. */
#define URING_ERROR_PAUSE_NS 1000000L
#define URING_FLAGS (FOLIO_ENGINE_DIRECT | FOLIO_URING_COMPLETION_THREAD)

/* Per-request state: io->engine_data points here while the engine owns
 * the request. A fsync issued by flush() uses one with io == NULL. */
struct ureq {
	struct folio_io *io;
	struct ureq *prev, *next; /* in-flight list of its op, by seq */
	struct ureq *qnext;       /* backlog or a reaper's local list */
	uint64_t seq;
	size_t done;             /* bytes transferred so far */
	const struct iovec *iov; /* what is left to transfer */
	int iovcnt;
	struct iovec *own;       /* our copy of the iovecs, once resumed */
	unsigned retries;
	ssize_t result;          /* final result (reaper's local lists) */
	bool finished;           /* fsync: its CQE has been seen */
};

struct ureq_list {
	struct ureq *head, *tail;
};

struct uring_ctx {
	struct io_uring ring;
	struct engine_fd f;
	bool use_thread;

	pthread_mutex_t lock;
	pthread_cond_t cv; /* any progress: CQEs handled, role released */

	unsigned limit;     /* cq entries: most SQEs queued + in the kernel */
	unsigned queued;    /* SQEs prepared, not yet taken by the kernel */
	unsigned in_kernel; /* SQEs taken by the kernel, CQE not reaped */
	struct ureq_list backlog;
	struct ureq_list inflight[2]; /* by op, oldest first */
	uint64_t seq;
	uint64_t nreq;        /* accepted requests whose callback has not
			       * returned yet */
	uint64_t completions; /* progress counter */
	unsigned syncs;       /* fsyncs in flight */
	bool reaper;
	bool closing;

	pthread_t thread;
	bool thread_running;
	bool thread_stop;
};

/* Lets wait()/flush() notice they run on the completion thread, which
 * must then reap itself instead of sleeping until it does. */
static _Thread_local struct uring_ctx *uring_thread_self;

/* Requests this thread is delivering (see struct engine_own). */
static _Thread_local struct engine_own uring_own;

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

/* Hand prepared SQEs to the kernel (lock held). Errors the next call may
 * get past (-EAGAIN, -EBUSY, -EINTR) leave the SQEs queued. */
static int uring_submit_locked(struct uring_ctx *c)
{
	int ret = 0;
	while (c->queued) {
		ret = io_uring_submit(&c->ring);
		if (ret == -EINTR)
			continue;
		if (ret <= 0)
			break;
		c->queued -= MIN((unsigned)ret, c->queued);
		c->in_kernel += (unsigned)ret;
		ret = 0;
	}
	if (c->use_thread && c->in_kernel)
		pthread_cond_broadcast(&c->cv);
	return ret < 0 ? ret : 0;
}

/* A free SQE, submitting the queue when it is full (lock held). NULL when
 * the admission limit is reached or the kernel takes nothing. */
static struct io_uring_sqe *uring_sqe(struct uring_ctx *c)
{
	if (c->queued + c->in_kernel >= c->limit)
		return NULL;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);
	if (!sqe) {
		uring_submit_locked(c);
		sqe = io_uring_get_sqe(&c->ring);
	}
	return sqe;
}

/* Put the rest of request r into the ring, or return false (lock held). */
static bool uring_queue(struct uring_ctx *c, struct ureq *r)
{
	struct io_uring_sqe *sqe = uring_sqe(c);
	if (!sqe)
		return false;
	struct folio_io *io = r->io;
	unsigned n = (unsigned)engine_fd_iov_cut(r->iovcnt);
	__u64 off = io->dev_pos + r->done;
	if (io->op == FOLIO_IO_READ)
		io_uring_prep_readv(sqe, c->f.fd, r->iov, n, off);
	else
		io_uring_prep_writev(sqe, c->f.fd, r->iov, n, off);
	io_uring_sqe_set_data(sqe, r);
	c->queued++;
	return true;
}

/* Move backlog requests into the ring while there is room (lock held). */
static void uring_refill(struct uring_ctx *c)
{
	while (c->backlog.head && uring_queue(c, c->backlog.head))
		fifo_pop(&c->backlog);
}

/* Queue r behind any backlog so requests keep their order (lock held). */
static void uring_start(struct uring_ctx *c, struct ureq *r)
{
	if (c->backlog.head || !uring_queue(c, r))
		fifo_push(&c->backlog, r);
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

enum cqe_action { CQE_DONE, CQE_AGAIN };

/* Decide what a CQE means for r (reaper, lock held). */
static enum cqe_action ureq_cqe(struct uring_ctx *c, struct ureq *r, int res)
{
	if (res == -EAGAIN || res == -EINTR || res == -ECANCELED) {
		if (++r->retries <= URING_MAX_RETRIES)
			return CQE_AGAIN;
	}
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

static void ureq_free(struct ureq *r)
{
	free(r->own);
	free(r);
}

/*
 * One reaping round (lock held, role free, c->in_kernel > 0): take the
 * reaper role, wait for a CQE without the lock, then handle every CQE
 * ready under the lock (which also orders our reads of each request after
 * its submitter's writes) and deliver the finished requests with no lock
 * held. Returns with the lock held: the number of requests completed, or
 * a negative errno from io_uring.
 */
static int uring_reap(struct uring_ctx *c)
{
	struct io_uring_cqe *cqes[URING_CQE_BATCH];
	struct ureq_list deliver = {0}, again = {0};
	struct ureq *r;
	unsigned n, ndone = 0;
	int err;

	c->reaper = true;
	pthread_mutex_unlock(&c->lock);
	do
		err = io_uring_wait_cqe(&c->ring, &cqes[0]);
	while (err == -EINTR || err == -EAGAIN || err == -ETIME);
	pthread_mutex_lock(&c->lock);
	if (err) {
		c->reaper = false;
		pthread_cond_broadcast(&c->cv);
		return err;
	}
	n = io_uring_peek_batch_cqe(&c->ring, cqes, URING_CQE_BATCH);
	for (unsigned i = 0; i < n; i++) {
		r = io_uring_cqe_get_data(cqes[i]);
		int res = cqes[i]->res;
		if (!r->io) {
			/* The fsync's owner sleeps in flush() until this. */
			r->result = res;
			r->finished = true;
		} else if (ureq_cqe(c, r, res) == CQE_DONE) {
			list_unlink(&c->inflight[r->io->op], r);
			fifo_push(&deliver, r);
			ndone++;
		} else {
			fifo_push(&again, r);
		}
	}
	io_uring_cq_advance(&c->ring, n);
	c->in_kernel -= n;
	/* Resumed requests go before the backlog: they are older. */
	while ((r = fifo_pop(&again))) {
		if (!uring_queue(c, r)) {
			r->qnext = c->backlog.head;
			c->backlog.head = r;
			if (!c->backlog.tail)
				c->backlog.tail = r;
		}
	}
	uring_refill(c);
	uring_submit_locked(c);
	c->reaper = false;
	pthread_cond_broadcast(&c->cv);
	if (!ndone)
		return 0;
	pthread_mutex_unlock(&c->lock);

	struct engine_own saved = engine_own_enter(&uring_own, c, ndone);
	while ((r = fifo_pop(&deliver))) {
		struct folio_io *io = r->io;
		ssize_t result = r->result;
		io->engine_data = NULL;
		ureq_free(r);
		if (io->op == FOLIO_IO_READ)
			mark_read_defined(io, result);
		folio_io_complete(io, result);
	}
	engine_own_leave(&uring_own, saved);

	pthread_mutex_lock(&c->lock);
	c->nreq -= ndone;
	c->completions += ndone;
	pthread_cond_broadcast(&c->cv);
	return (int)ndone;
}

/*
 * Make some progress on whatever is in flight (lock held; may drop it):
 * reap when this thread may, otherwise sleep until the thread that does
 * reports progress. Returns 0 or a fatal io_uring error.
 */
static int uring_step(struct uring_ctx *c)
{
	uring_refill(c);
	int s = uring_submit_locked(c);
	bool may_reap = !c->reaper &&
			(!c->use_thread || uring_thread_self == c);
	if (may_reap && c->in_kernel) {
		int ret = uring_reap(c);
		return ret < 0 ? ret : 0;
	}
	if (!c->in_kernel && c->queued) {
		/* The kernel refused the queue for now (-EAGAIN: out of
		 * memory, -EBUSY: completions backlogged); try again soon
		 * rather than sleeping on progress nobody will make. */
		if (s != -EAGAIN && s != -EBUSY && s < 0)
			return s;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&c->cv, &c->lock, &ts);
		return 0;
	}
	pthread_cond_wait(&c->cv, &c->lock);
	return 0;
}

/* Is any request of @op with a sequence number <= @seq still in flight? */
static bool older_inflight(const struct uring_ctx *c, int op, uint64_t seq)
{
	const struct ureq *h = c->inflight[op].head;
	return h && h->seq <= seq;
}

/* Drive the ring until no write, and with @reads no read, accepted before
 * now is in flight (lock held; may drop it). 0 or a fatal io_uring
 * error. */
static int uring_drain(struct uring_ctx *c, bool reads)
{
	uint64_t seq = c->seq;
	int ret = 0;
	while (!ret && (older_inflight(c, FOLIO_IO_WRITE, seq) ||
			(reads && older_inflight(c, FOLIO_IO_READ, seq))))
		ret = uring_step(c);
	return ret;
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
		folio_io_complete(io, 0);
		return 0;
	}
	struct ureq *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->io = io;
	r->iov = io->iov;
	r->iovcnt = io->iovcnt;

	pthread_mutex_lock(&c->lock);
	if (c->closing) {
		pthread_mutex_unlock(&c->lock);
		free(r);
		return -ESHUTDOWN;
	}
	io->engine_data = r;
	r->seq = ++c->seq;
	list_append(&c->inflight[io->op], r);
	c->nreq++;
	uring_start(c, r);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int uring_unplug(void *arg)
{
	struct uring_ctx *c = arg;
	pthread_mutex_lock(&c->lock);
	uring_refill(c);
	int ret = uring_submit_locked(c);
	pthread_mutex_unlock(&c->lock);
	/* What the kernel refused now goes in with the next call. */
	return ret == -EAGAIN || ret == -EBUSY ? 0 : ret;
}

static int uring_wait(void *arg)
{
	struct uring_ctx *c = arg;
	int ret = 0;
	pthread_mutex_lock(&c->lock);
	uint64_t seen = c->completions;
	while (c->nreq > engine_own_of(&uring_own, c) &&
	       c->completions == seen) {
		ret = uring_step(c);
		if (ret)
			break;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static int uring_flush(void *arg)
{
	struct uring_ctx *c = arg;
	struct ureq f = {0};
	struct io_uring_sqe *sqe;
	int ret = 0;

	pthread_mutex_lock(&c->lock);
	if ((ret = uring_drain(c, false)))
		goto out;
	/* The fsync bypasses the backlog: it orders after the writes above,
	 * which are all done, and nothing else. */
	while (!(sqe = uring_sqe(c))) {
		if ((ret = uring_step(c)))
			goto out;
	}
	io_uring_prep_fsync(sqe, c->f.fd, IORING_FSYNC_DATASYNC);
	io_uring_sqe_set_data(sqe, &f);
	c->queued++;
	c->syncs++;
	while (!f.finished) {
		ret = uring_step(c);
		if (ret && !f.finished) {
			/* The CQE will still arrive and name &f; it must not
			 * outlive this frame. Nothing better is left than to
			 * keep trying. */
			engine_unlocked_sleep(&c->lock, URING_ERROR_PAUSE_NS);
		}
	}
	c->syncs--;
	ret = (int)f.result;
out:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static int uring_truncate(void *arg, uint64_t size)
{
	struct uring_ctx *c = arg;
	if (size > FOLIO_MAX_POS)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	int ret = uring_drain(c, true);
	pthread_mutex_unlock(&c->lock);
	return ret ? ret : engine_fd_truncate(&c->f, size);
}

static void *uring_thread_main(void *arg)
{
	struct uring_ctx *c = arg;
	uring_thread_self = c;
	pthread_mutex_lock(&c->lock);
	while (!c->thread_stop) {
		/* Not expected; do not spin on a broken ring. */
		if (uring_step(c) < 0)
			engine_unlocked_sleep(&c->lock, URING_ERROR_PAUSE_NS);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

static void uring_free_ctx(struct uring_ctx *c)
{
	engine_fd_close(&c->f);
	io_uring_queue_exit(&c->ring);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static void uring_destroy(void *arg)
{
	struct uring_ctx *c = arg;
	pthread_mutex_lock(&c->lock);
	c->closing = true;
	/* Callbacks of requests the kernel still holds may run on other
	 * threads; the ring and the lock must outlive all of them. */
	while (c->nreq || c->syncs || c->reaper) {
		if (uring_step(c) < 0)
			engine_unlocked_sleep(&c->lock, URING_ERROR_PAUSE_NS);
	}
	c->thread_stop = true;
	pthread_cond_broadcast(&c->cv);
	bool running = c->thread_running;
	pthread_mutex_unlock(&c->lock);
	if (running)
		pthread_join(c->thread, NULL);
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
	struct uring_ctx *c = calloc(1, sizeof(*c));
	if (!c) {
		engine_fd_close(&f);
		return -ENOMEM;
	}
	c->f = f;
	c->use_thread = flags & FOLIO_URING_COMPLETION_THREAD;

	/* SUBMIT_ALL (5.18) keeps one bad SQE from stalling the rest of a
	 * batch; older kernels reject the flag and do without it. */
	struct io_uring_params p = {.flags = IORING_SETUP_SUBMIT_ALL};
	ret = io_uring_queue_init_params(depth, &c->ring, &p);
	if (ret == -EINVAL) {
		memset(&p, 0, sizeof(p));
		ret = io_uring_queue_init_params(depth, &c->ring, &p);
	}
	if (ret)
		goto fail_fd;
	c->limit = c->ring.cq.ring_entries;
	ret = -ENOMEM;
	if (pthread_mutex_init(&c->lock, NULL))
		goto fail_ring;
	if (pthread_cond_init(&c->cv, NULL))
		goto fail_lock;
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
	return ret;

fail_lock:
	pthread_mutex_destroy(&c->lock);
fail_ring:
	io_uring_queue_exit(&c->ring);
fail_fd:
	engine_fd_close(&c->f);
	free(c);
	return ret;
}
