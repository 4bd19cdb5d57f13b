/* SPDX-License-Identifier: MIT */
/*
 * Building engine requests out of folio runs. Reads and writeback both
 * append runs in position order; a run joins the request being built when
 * it continues it in file and in device position and the request stays
 * within its byte and segment limits, so runs merge across folios.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/tls.h"
#include "mapping/request.h"

int mapping_map_extent(struct folio_mapping *m, struct map_cache *mc,
		       uint64_t pos, uint64_t len, uint64_t *dev,
		       uint64_t *avail, uint32_t *flags)
{
	struct folio_engine *e = m->engine;
	if (!e->ops.map) {
		*dev = pos;
		*avail = len;
		*flags = 0;
		return 0;
	}
	struct folio_extent *x = &mc->ext;
	if (!mc->valid || pos < x->pos || pos - x->pos >= x->len) {
		struct folio_extent ext = {0};
		stat_add(&m->stats.map_calls, 1);
		int r = engine_result(e->ops.map(e->ctx, pos, len, &ext));
		if (r)
			return r;
		/* An extent that does not hold pos would send data to the
		 * wrong place: refuse it rather than trust it. */
		if (ext.pos > pos || ext.len == 0 || pos - ext.pos >= ext.len ||
		    ext.dev_pos > UINT64_MAX - ext.len)
			return -EIO;
		*x = ext;
		mc->valid = true;
	}
	uint64_t skip = pos - x->pos;
	*dev = x->dev_pos + skip;
	*avail = MIN(len, x->len - skip);
	*flags = x->flags;
	return 0;
}

void rqb_init(struct rq_builder *b, struct folio_mapping *m,
	      enum folio_io_op op, struct io_group *group,
	      void (*end_io)(struct engine_io *, ssize_t))
{
	memset(b, 0, sizeof(*b));
	b->m = m;
	b->op = op;
	b->group = group;
	b->end_io = end_io;
	b->max_bytes = RQ_DEFAULT_MAX_BYTES;
	b->max_segs = RQ_DEFAULT_MAX_SEGS;
}

/* Segments a new request has room for; most requests (a random 4 KiB
 * overwrite, a read of one run) need one, and the array doubles up to the
 * builder's limit for those that merge many runs. */
#define IO_INITIAL_SEGS 4u

/*
 * Requests of the initial size that completed on this thread, kept for
 * its next ones: a writeback pass over scattered blocks builds one per
 * folio, and malloc + free cost about a tenth of writing a folio back.
 * Requests completed on an engine's thread fill that thread's cache and
 * overflow to free(); its destructor frees what a thread leaves.
 */
#define IO_CACHE_MAX 32u

static _Thread_local struct {
	struct mapping_io *head; /* linked through ->next */
	unsigned n;
	bool registered; /* io_cache_exit is armed: the destructor runs */
	bool dead;       /* the destructor ran: cache nothing more */
} io_cache TLS_FAST;

static void io_cache_destructor(void *unused)
{
	(void)unused;
	io_cache.dead = true;
	io_cache.registered = false;
	while (io_cache.head) {
		struct mapping_io *io = io_cache.head;
		io_cache.head = io->next;
		free(io);
	}
	io_cache.n = 0;
}

static struct tls_exit io_cache_exit = TLS_EXIT_INIT(io_cache_destructor);

/* May this thread keep a freed request? Registers the destructor first. */
static bool io_cache_open(void)
{
	if (__builtin_expect(io_cache.registered, 1))
		return io_cache.n < IO_CACHE_MAX;
	if (io_cache.dead)
		return false;
	if (tls_exit_arm(&io_cache_exit, &io_cache))
		return false;
	io_cache.registered = true;
	return true;
}

void mapping_io_free(struct mapping_io *io)
{
	if (io->cap == IO_INITIAL_SEGS && io_cache_open()) {
		io->next = io_cache.head;
		io_cache.head = io;
		io_cache.n++;
		return;
	}
	free(io);
}

static struct mapping_io *io_alloc(struct rq_builder *b, unsigned cap)
{
	struct mapping_io *io = io_cache.head;
	if (cap == IO_INITIAL_SEGS && io) {
		io_cache.head = io->next;
		io_cache.n--;
	} else {
		io = malloc(sizeof(*io) + cap * sizeof(struct iovec) +
			    cap * sizeof(struct rq_seg));
		if (!io)
			return NULL;
	}
	/* Field by field: one assignment of the whole request zeroed it
	 * with a rep stos (18 words, microcoded) before storing the fields.
	 * Left unset: pos, dev_pos and flags (the caller sets them), iovcnt
	 * and, for a write, flush_failures (rqb_submit()), next (set when
	 * the builder keeps the request) and result (set by a read's
	 * completion before anything reads it). */
	io->base.io.op = b->op;
	io->base.io.len = 0;
	io->base.io.iov = io->iov;
	io->base.io.engine_data = NULL;
	io->base.end_io = b->end_io;
	io->base.barrier_engine = NULL;
	io->base.barrier_parity = 0;
	io->base.barrier_untrusted = false;
	io->base.barrier_error = 0;
	io->m = b->m;
	io->group = b->group;
	io->nsegs = 0;
	io->cap = cap;
	io->max_segs = b->max_segs;
	io->segs = (struct rq_seg *)(void *)(io->iov + cap);
	return io;
}

/* Double the segment room of the request being built (not yet
 * submitted, so nothing else points at it). */
static int io_grow(struct rq_builder *b)
{
	struct mapping_io *old = b->cur;
	unsigned cap = MIN(old->cap * 2, old->max_segs);
	struct mapping_io *io = io_alloc(b, cap);
	if (!io)
		return -ENOMEM;
	struct rq_seg *segs = io->segs;
	*io = *old;
	io->cap = cap;
	io->base.io.iov = io->iov;
	io->segs = segs;
	memcpy(io->iov, old->iov, old->nsegs * sizeof(struct iovec));
	memcpy(io->segs, old->segs, old->nsegs * sizeof(struct rq_seg));
	mapping_io_free(old);
	b->cur = io;
	return 0;
}

void rqb_submit(struct rq_builder *b)
{
	struct mapping_io *io = b->cur;
	if (!io)
		return;
	b->cur = NULL;
	io->base.io.iovcnt = (int)io->nsegs;
	if (b->keep) {
		io->next = b->submitted;
		b->submitted = io;
	}
	io->base.io.flags |= b->waited;
	b->submitted_bytes += io->base.io.len;
	b->submitted_count++;
	if (b->group)
		io_group_add(b->group);
	if (b->op == FOLIO_IO_WRITE) {
		io->flush_failures =
			atomic_load(&b->m->engine->flush_failures);
		atomic_fetch_add(&b->m->wb.inflight, 1);
		stat_add(&b->m->stats.wb_requests, 1);
		stat_add(&b->m->stats.wb_bytes, io->base.io.len);
	}
	int r = engine_submit(b->m->engine, &io->base.io);
	if (r) {
		/* Refused: it will never complete, so finish it here with
		 * the error, exactly as if the engine had failed it. */
		if (!b->error)
			b->error = r;
		io->base.end_io(&io->base, r);
	}
}

void rqb_finish(struct rq_builder *b)
{
	rqb_submit(b);
	struct folio_engine *e = b->m->engine;
	if (e->ops.unplug && b->submitted_count)
		e->ops.unplug(e->ctx);
}

/* Does a run at (pos, dev, flags) continue the current request? */
static bool continues(const struct rq_builder *b, uint64_t pos, uint64_t dev,
		      uint32_t flags, size_t len)
{
	const struct mapping_io *io = b->cur;
	const struct folio_io *q = &io->base.io;
	return q->pos + q->len == pos && q->dev_pos + q->len == dev &&
	       q->flags == flags && io->nsegs < io->max_segs &&
	       q->len + len <= b->max_bytes;
}

static int add_piece(struct rq_builder *b, struct folio *f, size_t off,
		     size_t len, uint64_t dev, uint32_t flags)
{
	uint64_t pos = f->pos + off;
	if (b->cur && continues(b, pos, dev, flags, len)) {
		if (b->cur->nsegs == b->cur->cap && io_grow(b))
			return -ENOMEM;
		stat_add(&b->m->stats.wb_merges, b->op == FOLIO_IO_WRITE);
	} else {
		rqb_submit(b);
		struct mapping_io *io =
			io_alloc(b, MIN(IO_INITIAL_SEGS, b->max_segs));
		if (!io)
			return -ENOMEM;
		io->base.io.pos = pos;
		io->base.io.dev_pos = dev;
		io->base.io.flags = flags;
		b->cur = io;
	}
	struct mapping_io *io = b->cur;
	io->iov[io->nsegs].iov_base = f->data + off;
	io->iov[io->nsegs].iov_len = len;
	io->segs[io->nsegs].folio = f;
	io->segs[io->nsegs].at = b->at;
	io->segs[io->nsegs].off = off;
	io->segs[io->nsegs].len = len;
	io->nsegs++;
	io->base.io.len += len;
	b->added += len;
	return 0;
}

int rqb_add(struct rq_builder *b, struct folio *f, size_t off, size_t len)
{
	while (len) {
		uint64_t dev, avail;
		uint32_t flags;
		int r = mapping_map_extent(b->m, &b->map, f->pos + off, len, &dev,
				    &avail, &flags);
		if (r)
			return r;
		size_t piece = (size_t)MIN(avail, b->max_bytes);
		size_t bmask = ((size_t)1 << f->block_shift) - 1;
		if (b->op == FOLIO_IO_READ && (flags & FOLIO_EXTENT_HOLE) &&
		    !(off & bmask) && !(piece & bmask)) {
			/* Nothing is stored there: the bytes are zeros. (A
			 * hole edge inside a block goes to the engine, which
			 * reads holes as zeros too, so that a block is never
			 * marked uptodate before all of it is valid.) */
			memset(f->data + off, 0, piece);
			folio_set_uptodate(f, off, piece);
		} else {
			r = add_piece(b, f, off, piece, dev, flags);
			if (r)
				return r;
		}
		off += piece;
		len -= piece;
	}
	return 0;
}
