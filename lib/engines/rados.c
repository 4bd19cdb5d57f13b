/* SPDX-License-Identifier: MIT */
/*
 * The RADOS engine (folio_state_rados.h): one striped object over
 * librados.
 *
 * A request becomes one RADOS operation per stripe object it touches (a
 * struct rop), each a write op or read op with one extent per iovec
 * segment, so the part of a request inside one object is applied
 * atomically. Operations complete on librados' finisher threads; the
 * last one of a request completes it. No lock is held while calling into
 * librados (its throttle may block in submission, and a completion
 * needing our lock would then never come) or while completing a request.
 *
 * The size lives in the header object's xattr. Its crash rule: the size
 * never covers bytes the data objects do not hold. So a write past the
 * stored size completes only after its data and then a header update
 * covering it have both been acknowledged (a crash in between leaves
 * data past the size, invisible); a shrink lowers the size first, then
 * trims the objects (a crash in between leaves bytes past the size, not a
 * size claiming trimmed bytes). What lies past the size after a failed
 * trim is remembered ("garbage") and trimmed again before anything grows
 * the size over it.
 *
 * That memory dies with the process, so the header also keeps a
 * high-water mark: no data object holds a byte at or past it. A write
 * reaching past the mark raises it (to the end of the stripe object it
 * reaches, so appends pay once per object) before any of its data goes
 * out; a shrink lowers it only after its trim succeeded. An engine
 * opening an object whose mark lies above its size finds what a crash
 * left between them and trims it before the size can grow over it.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "engines/builtin.h"
#include "engines/rados_dl.h"
#include "engines/rados_opts.h"

#define RADOS_NAME_MAX (RADOS_MAX_PREFIX + 18u)
/* Bytes in flight beyond which operations queue: librados' own throttle
 * (objecter_inflight_op_bytes, 100 MiB by default) would block a
 * submitter, possibly a completion callback, instead. */
#define RADOS_MAX_BYTES ((size_t)64 << 20)
#define RADOS_XATTR_SIZE "folio.size"
#define RADOS_XATTR_OSIZE "folio.object_size"
#define RADOS_XATTR_HIGH "folio.high_water"

struct rados_eng;

/* librados' functions (rados_dl.h): loaded by the first
 * folio_engine_rados(), which fails without them, so every engine
 * callback finds them. */
#define R (rados_dl_get())

/* One folio_io in flight. */
struct rreq {
	struct rados_eng *re;
	struct folio_io *io;
	atomic_int pending; /* rops not yet done, + 1 while being built */
	atomic_int err;     /* first error of a rop */
	unsigned parity;    /* the flush parity a write was counted under */
	struct rreq *next;  /* on the size waiters' list */
};

struct rseg {
	char *base;
	size_t len;
	size_t got; /* read: bytes read */
	int rval;   /* read: the extent's result */
};

/* One RADOS operation: the part of a request inside one object. */
struct rop {
	struct rreq *rq;
	struct rop *next; /* in the queue */
	uint64_t idx;     /* stripe object index */
	uint64_t off;     /* first byte inside the object */
	size_t len;
	rados_completion_t c;
	void *op; /* rados_read_op_t or rados_write_op_t */
	int nseg;
	struct rseg seg[];
};

struct rados_eng {
	rados_t cluster;
	bool own_cluster;
	rados_ioctx_t ioctx;
	uint64_t osize;
	unsigned depth;
	char prefix[RADOS_MAX_PREFIX + 1];

	pthread_mutex_t lock;
	pthread_cond_t cond; /* flush, destroy, size updates */
	unsigned ops;        /* rops started, not done */
	size_t bytes;        /* their bytes */
	struct rop *qhead, *qtail;
	uint64_t reqs;           /* requests accepted, not completed */
	uint64_t writes[2];      /* writes in flight, per flush parity */
	unsigned parity;
	uint64_t size;           /* the header's size */
	uint64_t extent;         /* no write submitted past this */
	uint64_t garbage_to;     /* [size, garbage_to) holds stale bytes */
	uint64_t high;           /* the header's high-water mark */
	struct rreq *waiters;    /* writes waiting for the size */
	bool sizing;             /* a header update in flight */
	uint64_t sizing_to;
	bool closing;
	pthread_mutex_t trim_lock; /* one trim or mark change at a time */
};

static void obj_name(const struct rados_eng *re, uint64_t idx,
		     char name[RADOS_NAME_MAX])
{
	snprintf(name, RADOS_NAME_MAX, "%s.%016" PRIx64, re->prefix, idx);
}

/* ---- the size header ------------------------------------------------ */

/* Fill @op with the header's xattrs for @size. @buf holds the text. */
static void header_op(const struct rados_eng *re, rados_write_op_t op,
		      uint64_t size, char buf[2][24])
{
	int n = snprintf(buf[0], 24, "%" PRIu64, size);
	int m = snprintf(buf[1], 24, "%" PRIu64, re->osize);
	R->write_op_setxattr(op, RADOS_XATTR_SIZE, buf[0], (size_t)n);
	R->write_op_setxattr(op, RADOS_XATTR_OSIZE, buf[1], (size_t)m);
}

static int header_write(struct rados_eng *re, uint64_t size)
{
	rados_write_op_t op = R->create_write_op();
	if (!op)
		return -ENOMEM;
	char buf[2][24];
	header_op(re, op, size, buf);
	int r = R->write_op_operate(op, re->ioctx, re->prefix, NULL, 0);
	R->release_write_op(op);
	return r;
}

/* Store the high-water mark @high in the header (trim_lock held; the
 * caller keeps re->high). */
static int high_store(struct rados_eng *re, uint64_t high)
{
	char buf[24];
	int n = snprintf(buf, sizeof(buf), "%" PRIu64, high);
	return R->setxattr(re->ioctx, re->prefix, RADOS_XATTR_HIGH, buf,
			   (size_t)n);
}

/* Before data reaching @end goes out: raise the mark over it. */
static int high_raise(struct rados_eng *re, uint64_t end)
{
	pthread_mutex_lock(&re->trim_lock);
	pthread_mutex_lock(&re->lock);
	bool need = end > re->high;
	pthread_mutex_unlock(&re->lock);
	uint64_t to = MIN(end + (re->osize - end % re->osize) % re->osize,
			  FOLIO_MAX_POS);
	/* Raised in memory only once stored: no data may go past the
	 * stored mark. */
	int r = need ? high_store(re, to) : 0;
	if (need && !r) {
		pthread_mutex_lock(&re->lock);
		re->high = to;
		pthread_mutex_unlock(&re->lock);
	}
	pthread_mutex_unlock(&re->trim_lock);
	return r;
}

/* An xattr holding a decimal number; -ENOENT when the header or the
 * xattr is missing, -EINVAL when it is not a number. */
static int header_get(struct rados_eng *re, const char *key, uint64_t *v)
{
	char buf[32];
	int r = R->getxattr(re->ioctx, re->prefix, key, buf, sizeof(buf) - 1);
	if (r == -ENODATA)
		return -ENOENT;
	if (r < 0)
		return r;
	buf[r] = 0;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(buf, &end, 10);
	if (!r || *end || errno || buf[0] == '-')
		return -EINVAL;
	*v = x;
	return 0;
}

/* ---- requests ------------------------------------------------------- */

static void rreq_finish(struct rreq *rq, ssize_t result)
{
	struct rados_eng *re = rq->re;
	struct folio_io *io = rq->io;
	bool write = io->op == FOLIO_IO_WRITE;
	unsigned parity = rq->parity;
	free(rq);
	folio_io_complete(io, result);
	pthread_mutex_lock(&re->lock);
	if (write)
		re->writes[parity]--;
	re->reqs--;
	pthread_cond_broadcast(&re->cond);
	pthread_mutex_unlock(&re->lock);
}

static void size_update_start(struct rados_eng *re, uint64_t to);

/* Every rop of @rq is done: complete it, or first raise the size. */
static void rreq_end(struct rreq *rq)
{
	struct rados_eng *re = rq->re;
	struct folio_io *io = rq->io;
	int err = atomic_load(&rq->err);
	if (err) {
		rreq_finish(rq, err);
		return;
	}
	uint64_t end = io->pos + io->len;
	pthread_mutex_lock(&re->lock);
	if (io->op != FOLIO_IO_WRITE || end <= re->size) {
		pthread_mutex_unlock(&re->lock);
		rreq_finish(rq, (ssize_t)io->len);
		return;
	}
	rq->next = re->waiters;
	re->waiters = rq;
	bool start = !re->sizing;
	if (start) {
		re->sizing = true;
		re->sizing_to = end;
	}
	pthread_mutex_unlock(&re->lock);
	if (start)
		size_update_start(re, end);
}

static void rreq_put(struct rreq *rq, int err)
{
	if (err) {
		int none = 0;
		atomic_compare_exchange_strong(&rq->err, &none, err);
	}
	if (atomic_fetch_sub(&rq->pending, 1) == 1)
		rreq_end(rq);
}

/* Size update done: complete the writes it covers (or fails), and start
 * the next one for writes that came meanwhile. */
static void size_update_done(rados_completion_t c, void *arg)
{
	struct rados_eng *re = arg;
	int r = R->aio_get_return_value(c);
	R->aio_release(c);
	pthread_mutex_lock(&re->lock);
	uint64_t to = re->sizing_to;
	if (!r && to > re->size)
		re->size = to;
	struct rreq *done = NULL, *keep = NULL, *next;
	uint64_t more = 0;
	for (struct rreq *rq = re->waiters; rq; rq = next) {
		next = rq->next;
		uint64_t end = rq->io->pos + rq->io->len;
		if (end <= to) {
			rq->next = done;
			done = rq;
		} else {
			rq->next = keep;
			keep = rq;
			more = MAX(more, end);
		}
	}
	re->waiters = keep;
	re->sizing = more != 0;
	re->sizing_to = more;
	pthread_cond_broadcast(&re->cond);
	pthread_mutex_unlock(&re->lock);
	for (struct rreq *rq = done; rq; rq = next) {
		next = rq->next;
		rreq_finish(rq, r ? r : (ssize_t)rq->io->len);
	}
	if (more)
		size_update_start(re, more);
}

static void size_update_start(struct rados_eng *re, uint64_t to)
{
	rados_completion_t c;
	rados_write_op_t op = R->create_write_op();
	int r = op ? R->aio_create_completion2(re, size_update_done, &c)
		   : -ENOMEM;
	if (!r) {
		char buf[2][24];
		header_op(re, op, to, buf);
		r = R->aio_write_op_operate(op, re->ioctx, c, re->prefix,
					       NULL, 0);
		if (r)
			R->aio_release(c);
	}
	if (op)
		R->release_write_op(op);
	if (!r)
		return;
	/* Refused at once: fail the writes waiting for it as a failed
	 * update would. */
	pthread_mutex_lock(&re->lock);
	struct rreq *list = re->waiters, *next;
	re->waiters = NULL;
	re->sizing = false;
	pthread_mutex_unlock(&re->lock);
	for (struct rreq *rq = list; rq; rq = next) {
		next = rq->next;
		rreq_finish(rq, r);
	}
}

/* ---- operations ----------------------------------------------------- */

static void rop_free(struct rop *o)
{
	if (o->op) {
		if (o->rq->io->op == FOLIO_IO_READ)
			R->release_read_op(o->op);
		else
			R->release_write_op(o->op);
	}
	free(o);
}

static void rop_start(struct rop *o);

/* Account for a finished rop of @done_len bytes (0: none) and take what may start now from the
 * queue; the caller starts them with no lock held. */
static struct rop *rop_retire(struct rados_eng *re, size_t done_len)
{
	struct rop *start = NULL, **tail = &start;
	pthread_mutex_lock(&re->lock);
	if (done_len) {
		re->ops--;
		re->bytes -= done_len;
	}
	while (re->qhead && re->ops < re->depth &&
	       (!re->ops || re->bytes + re->qhead->len <= RADOS_MAX_BYTES)) {
		struct rop *q = re->qhead;
		re->qhead = q->next;
		if (!re->qhead)
			re->qtail = NULL;
		q->next = NULL;
		re->ops++;
		re->bytes += q->len;
		*tail = q;
		tail = &q->next;
	}
	pthread_mutex_unlock(&re->lock);
	return start;
}

static void rop_start_list(struct rop *o)
{
	while (o) {
		struct rop *next = o->next;
		rop_start(o);
		o = next;
	}
}

static void rop_done(struct rop *o, int r)
{
	struct rreq *rq = o->rq;
	if (rq->io->op == FOLIO_IO_READ) {
		/* A missing object, or bytes past its end, read as zeros. */
		for (int i = 0; i < o->nseg; i++) {
			struct rseg *s = &o->seg[i];
			size_t got = r == -ENOENT ? 0 : MIN(s->got, s->len);
			if (!r && s->rval < 0)
				r = s->rval;
			memset(s->base + got, 0, s->len - got);
		}
		if (r == -ENOENT)
			r = 0;
	}
	struct rados_eng *re = rq->re;
	size_t len = o->len;
	rop_free(o);
	struct rop *start = rop_retire(re, len);
	rop_start_list(start);
	rreq_put(rq, r < 0 ? r : 0);
}

static void rop_complete(rados_completion_t c, void *arg)
{
	struct rop *o = arg;
	int r = R->aio_get_return_value(c);
	R->aio_release(c);
	if (!o->op && o->rq->io->op == FOLIO_IO_READ && r >= 0) {
		/* A plain read returns the bytes it read. */
		o->seg[0].got = (size_t)r;
		r = 0;
	}
	rop_done(o, r);
}

static void rop_start(struct rop *o)
{
	struct rados_eng *re = o->rq->re;
	bool read = o->rq->io->op == FOLIO_IO_READ;
	char name[RADOS_NAME_MAX];
	obj_name(re, o->idx, name);
	int r;
	if (o->nseg == 1) {
		/* One extent: the plain calls, without building an op. */
		r = R->aio_create_completion2(o, rop_complete, &o->c);
		if (!r) {
			struct rseg *s = &o->seg[0];
			r = read ? R->aio_read(re->ioctx, name, o->c, s->base,
					       s->len, o->off)
				 : R->aio_write(re->ioctx, name, o->c, s->base,
						s->len, o->off);
			if (r)
				R->aio_release(o->c);
		}
		if (r)
			rop_done(o, r);
		return;
	}
	o->op = read ? (void *)R->create_read_op()
		     : (void *)R->create_write_op();
	if (!o->op) {
		rop_done(o, -ENOMEM);
		return;
	}
	uint64_t off = o->off;
	for (int i = 0; i < o->nseg; i++) {
		struct rseg *s = &o->seg[i];
		if (read)
			R->read_op_read(o->op, off, s->len, s->base,
					   &s->got, &s->rval);
		else
			R->write_op_write(o->op, s->base, s->len, off);
		off += s->len;
	}
	r = R->aio_create_completion2(o, rop_complete, &o->c);
	if (!r) {
		r = read ? R->aio_read_op_operate(o->op, re->ioctx, o->c,
						     name, 0)
			 : R->aio_write_op_operate(o->op, re->ioctx, o->c,
						      name, NULL, 0);
		if (r)
			R->aio_release(o->c);
	}
	if (r)
		rop_done(o, r);
}

/* The rop for bytes [at, at + len) of @io, inside one object. */
static struct rop *rop_new(struct rreq *rq, uint64_t at, size_t len)
{
	struct folio_io *io = rq->io;
	struct rados_eng *re = rq->re;
	size_t skip = (size_t)(at - io->pos);
	/* Count the segments of the window first. */
	int nseg = 0;
	size_t pos = 0;
	for (int i = 0; i < io->iovcnt; i++) {
		size_t l = io->iov[i].iov_len;
		if (l && pos + l > skip && pos < skip + len)
			nseg++;
		pos += l;
	}
	struct rop *o = calloc(1, sizeof(*o) + (size_t)nseg * sizeof(o->seg[0]));
	if (!o)
		return NULL;
	o->rq = rq;
	o->idx = at / re->osize;
	o->off = at % re->osize;
	o->len = len;
	pos = 0;
	for (int i = 0; i < io->iovcnt; i++) {
		size_t l = io->iov[i].iov_len;
		size_t s = MAX(skip, pos), e = MIN(skip + len, pos + l);
		if (l && s < e)
			o->seg[o->nseg++] = (struct rseg){
				(char *)io->iov[i].iov_base + (s - pos), e - s, 0, 0};
		pos += l;
	}
	return o;
}

/* Trim what lies in [from, to) (all past the size): truncate the object
 * holding @from, remove the objects after it. Missing objects are fine. */
static int trim(struct rados_eng *re, uint64_t from, uint64_t to)
{
	if (from >= to)
		return 0;
	char name[RADOS_NAME_MAX];
	uint64_t first = from / re->osize, last = (to - 1) / re->osize;
	int err = 0;
	if (from % re->osize) {
		obj_name(re, first, name);
		int r = R->trunc(re->ioctx, name, from % re->osize);
		if (r && r != -ENOENT)
			return r;
		first++;
	}
	/* Removes go out in batches of up to 64 at once. */
	while (first <= last && !err) {
		rados_completion_t c[64];
		int n = 0;
		for (; n < 64 && first <= last; n++, first++) {
			obj_name(re, first, name);
			int r = R->aio_create_completion2(NULL, NULL, &c[n]);
			if (!r)
				r = R->aio_remove(re->ioctx, name, c[n]);
			if (r) {
				if (!err)
					err = r;
				if (c[n])
					R->aio_release(c[n]);
				c[n] = NULL;
			}
		}
		for (int i = 0; i < n; i++) {
			if (!c[i])
				continue;
			R->aio_wait_for_complete(c[i]);
			int r = R->aio_get_return_value(c[i]);
			R->aio_release(c[i]);
			if (r && r != -ENOENT && !err)
				err = r;
		}
	}
	return err;
}

/* Before anything grows the size over stale bytes a failed trim left,
 * trim them again. Once trimmed, the high-water mark comes down to the
 * size (or to what writes submitted reach), so that the next open need
 * not trim again; failing to lower it costs only that. */
static int trim_garbage(struct rados_eng *re)
{
	pthread_mutex_lock(&re->trim_lock);
	pthread_mutex_lock(&re->lock);
	uint64_t from = re->size, to = re->garbage_to;
	pthread_mutex_unlock(&re->lock);
	int r = trim(re, from, to);
	if (!r) {
		pthread_mutex_lock(&re->lock);
		if (re->garbage_to == to)
			re->garbage_to = 0;
		uint64_t low = MAX(re->size, re->extent);
		bool lower = !re->garbage_to && re->high > low;
		/* Lowered in memory first, in the same step that read the
		 * writes' extent: a write submitted from now on sees the
		 * lower mark and raises it again, after this store
		 * (high_raise() waits for trim_lock). */
		if (lower)
			re->high = low;
		pthread_mutex_unlock(&re->lock);
		if (lower)
			(void)high_store(re, low);
	}
	pthread_mutex_unlock(&re->trim_lock);
	return r;
}

/* ---- callbacks ------------------------------------------------------ */

static int re_submit(void *ctx, struct folio_io *io)
{
	struct rados_eng *re = ctx;
	int r = engine_check_io(io);
	if (r)
		return r;
	uint64_t end = io->pos + io->len;
	bool write = io->op == FOLIO_IO_WRITE;
	pthread_mutex_lock(&re->lock);
	bool closing = re->closing;
	bool garbage = write && end > re->size && re->garbage_to > re->size;
	pthread_mutex_unlock(&re->lock);
	if (closing)
		return -ESHUTDOWN;
	if (garbage && (r = trim_garbage(re)))
		return r;
	pthread_mutex_lock(&re->lock);
	/* On record before the mark is looked at, so that a trim lowering
	 * the mark meanwhile keeps it over this write (trim_garbage()). */
	if (write)
		re->extent = MAX(re->extent, end);
	bool high = write && end > re->high;
	pthread_mutex_unlock(&re->lock);
	if (high && (r = high_raise(re, end)))
		return r;

	struct rreq *rq = calloc(1, sizeof(*rq));
	if (!rq)
		return -ENOMEM;
	rq->re = re;
	rq->io = io;
	atomic_init(&rq->pending, 1);
	atomic_init(&rq->err, 0);
	struct rop *list = NULL, **tail = &list;
	for (uint64_t at = io->pos; at < end;) {
		uint64_t stop = MIN(end, (at / re->osize + 1) * re->osize);
		struct rop *o = rop_new(rq, at, (size_t)(stop - at));
		if (!o) {
			while (list) {
				struct rop *next = list->next;
				free(list);
				list = next;
			}
			free(rq);
			return -ENOMEM;
		}
		*tail = o;
		tail = &o->next;
		atomic_fetch_add(&rq->pending, 1);
		at = stop;
	}
	pthread_mutex_lock(&re->lock);
	re->reqs++;
	if (write) {
		rq->parity = re->parity;
		re->writes[rq->parity]++;
	}
	if (list) {
		if (re->qtail)
			re->qtail->next = list;
		else
			re->qhead = list;
		re->qtail = container_of(tail, struct rop, next);
	}
	pthread_mutex_unlock(&re->lock);
	rop_start_list(rop_retire(re, 0));
	/* A zero-length request completes here, once the bias is gone. */
	rreq_put(rq, 0);
	return 0;
}

/* Every completed write is already durable (RADOS acknowledges on
 * commit): a flush only waits for the writes in flight when it began. */
static int re_flush(void *ctx)
{
	struct rados_eng *re = ctx;
	pthread_mutex_lock(&re->lock);
	unsigned p = re->parity;
	re->parity ^= 1u;
	while (re->writes[p])
		pthread_cond_wait(&re->cond, &re->lock);
	pthread_mutex_unlock(&re->lock);
	return 0;
}

static int re_truncate(void *ctx, uint64_t size)
{
	struct rados_eng *re = ctx;
	if (size > FOLIO_MAX_POS)
		return -EINVAL;
	pthread_mutex_lock(&re->lock);
	uint64_t old = re->size;
	pthread_mutex_unlock(&re->lock);
	int r = 0;
	if (size < old) {
		/* The size first: a crash before the trim leaves stale bytes
		 * past the size, never a size over trimmed bytes. */
		r = header_write(re, size);
		if (r)
			return r;
		pthread_mutex_lock(&re->lock);
		re->size = size;
		re->garbage_to = MAX(MAX(re->garbage_to, old), re->extent);
		re->extent = size;
		pthread_mutex_unlock(&re->lock);
		/* A failed trim is retried before the size grows again; the
		 * truncate itself has happened. */
		(void)trim_garbage(re);
	} else if (size > old) {
		pthread_mutex_lock(&re->lock);
		bool garbage = re->garbage_to > re->size;
		pthread_mutex_unlock(&re->lock);
		if (garbage && (r = trim_garbage(re)))
			return r;
		r = header_write(re, size);
		if (r)
			return r;
		pthread_mutex_lock(&re->lock);
		re->size = size;
		pthread_mutex_unlock(&re->lock);
	}
	return 0;
}

static void re_destroy(void *ctx)
{
	struct rados_eng *re = ctx;
	pthread_mutex_lock(&re->lock);
	re->closing = true;
	while (re->reqs || re->sizing)
		pthread_cond_wait(&re->cond, &re->lock);
	pthread_mutex_unlock(&re->lock);
	R->ioctx_destroy(re->ioctx);
	if (re->own_cluster)
		R->shutdown(re->cluster);
	pthread_mutex_destroy(&re->lock);
	pthread_mutex_destroy(&re->trim_lock);
	pthread_cond_destroy(&re->cond);
	free(re);
}

/* ---- creation ------------------------------------------------------- */

static int connect_own(struct rados_eng *re, const struct folio_rados_opts *o)
{
	int r = R->create(&re->cluster, o->client ? o->client : "admin");
	if (r)
		return r;
	char t[16];
	snprintf(t, sizeof(t), "%u", o->timeout ? o->timeout
						 : FOLIO_RADOS_DEFAULT_TIMEOUT);
	r = R->conf_read_file(re->cluster, o->conf_path);
	if (!r)
		r = R->conf_set(re->cluster, "rados_osd_op_timeout", t);
	if (!r)
		r = R->conf_set(re->cluster, "rados_mon_op_timeout", t);
	if (!r)
		r = R->conf_set(re->cluster, "client_mount_timeout", t);
	if (!r)
		r = R->connect(re->cluster);
	if (r) {
		R->shutdown(re->cluster);
		return r;
	}
	re->own_cluster = true;
	return 0;
}

static int re_open(struct rados_eng *re, const struct folio_rados_opts *o)
{
	int r = o->cluster ? 0 : connect_own(re, o);
	if (r)
		return r;
	if (o->cluster)
		re->cluster = o->cluster;
	r = R->ioctx_create(re->cluster, o->pool, &re->ioctx);
	if (r)
		goto out_cluster;
	uint64_t osize;
	r = header_get(re, RADOS_XATTR_OSIZE, &osize);
	if (!r && osize != re->osize)
		r = -EINVAL;
	if (!r || r == -ENOENT)
		r = header_get(re, RADOS_XATTR_SIZE, &re->size);
	if (r == -ENOENT) {
		re->size = 0;
		r = 0;
	}
	if (r || re->size > FOLIO_MAX_POS) {
		r = r ? r : -EINVAL;
		R->ioctx_destroy(re->ioctx);
		goto out_cluster;
	}
	re->extent = re->size;
	/* Stale bytes a crash left between the size and the mark are
	 * trimmed before anything can grow the size over them. An object
	 * written before the mark existed has none to trust: its size
	 * stands in. */
	r = header_get(re, RADOS_XATTR_HIGH, &re->high);
	if (r == -ENOENT || (!r && re->high < re->size)) {
		re->high = re->size;
		r = 0;
	}
	if (r) {
		R->ioctx_destroy(re->ioctx);
		goto out_cluster;
	}
	if (re->high > re->size) {
		re->garbage_to = re->high;
		(void)trim_garbage(re);
	}
	return 0;
out_cluster:
	if (re->own_cluster)
		R->shutdown(re->cluster);
	return r;
}

int folio_engine_rados(struct folio_engine **out,
		       const struct folio_rados_opts *opts)
{
	int r = rados_opts_check(opts);
	if (r || !out)
		return r ? r : -EINVAL;
	if (!R)
		return -ENOSYS;
	struct folio_rados_opts o = {0};
	memcpy(&o, opts, MIN(opts->sz, sizeof(o)));
	opts = &o;
	struct rados_eng *re = calloc(1, sizeof(*re));
	if (!re)
		return -ENOMEM;
	memcpy(re->prefix, opts->prefix, strlen(opts->prefix) + 1);
	re->osize = opts->object_size ? opts->object_size
				      : FOLIO_RADOS_DEFAULT_OBJECT_SIZE;
	re->depth = opts->depth ? opts->depth : FOLIO_RADOS_DEFAULT_DEPTH;
	pthread_mutex_init(&re->lock, NULL);
	pthread_mutex_init(&re->trim_lock, NULL);
	pthread_cond_init(&re->cond, NULL);
	r = re_open(re, opts);
	if (r) {
		pthread_mutex_destroy(&re->lock);
		pthread_mutex_destroy(&re->trim_lock);
		pthread_cond_destroy(&re->cond);
		free(re);
		return r;
	}
	struct folio_engine_ops ops = {
		.sz = sizeof(ops),
		.submit = re_submit,
		.flush = re_flush,
		.truncate = re_truncate,
		.destroy = re_destroy,
		.caps = FOLIO_ENGINE_CAP_DURABLE,
	};
	r = folio_engine_new(out, &ops, re);
	if (r) {
		re->closing = true;
		re_destroy(re);
	}
	return r;
}

int folio_engine_rados_size(struct folio_engine *e, uint64_t *size)
{
	if (!e || !size || e->ops.submit != re_submit)
		return -EINVAL;
	struct rados_eng *re = folio_engine_ctx(e);
	pthread_mutex_lock(&re->lock);
	*size = re->size;
	pthread_mutex_unlock(&re->lock);
	return 0;
}
