/* SPDX-License-Identifier: MIT */
/*
 * The mem engine: an in-memory backing store for tests. Besides storing
 * data it plays the awkward device: it fails requests on command (fault
 * rules, fault.c), checks that every request went where its own map
 * says (store.c), and completes requests late and out of order (POLL
 * and THREAD modes, sched.c), which is how the library's completion
 * handling gets exercised without a real device.
 *
 * This file holds the engine callbacks, the data path of a request and
 * the calls that create and configure the engine. See mem.h for
 * the locking rule.
 */
#include <stdlib.h>
#include <string.h>

#include "engines/mem/mem.h"

struct mem_ctx *mem_of(struct folio_engine *e)
{
	return e && e->kind == ENGINE_MEM ? e->ctx : NULL;
}

static int mem_map(void *arg, uint64_t pos, uint64_t len,
		   struct folio_extent *ext)
{
	struct mem_ctx *c = arg;
	if (!ext || pos >= FOLIO_MAX_POS)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	c->st.map_calls++;
	int ret = 0;
	if (!c->extent_size) {
		/* Only reachable through a stale copy of the ops. */
		ret = -EINVAL;
	} else {
		uint64_t start = pos & ~(c->extent_size - 1);
		ext->pos = start;
		ext->len = c->extent_size;
		ext->dev_pos = mem_map_dev(c, start);
		ext->flags = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

/* Decide the fate of an accepted request; *applied_error: a write to
 * perform in full and then fail with it (FOLIO_MEM_FAULT_APPLIED). */
static ssize_t mem_plan_locked(struct mem_ctx *c, const struct folio_io *io,
			       int *applied_error)
{
	*applied_error = 0;
	if (io->op == FOLIO_IO_READ)
		c->st.read_requests++;
	else
		c->st.write_requests++;
	c->st.durable_writes += engine_io_durable(io);
	if (c->powered_off)
		return -EIO; /* no device answers */
	if (!mem_directed(c, io)) {
		c->st.misdirected++;
		return -EIO;
	}
	if (io->op == FOLIO_IO_WRITE && io->pos + io->len > c->capacity)
		return -ENOSPC;
	const struct folio_mem_fault *f =
		mem_fault_check_locked(c, 1u << io->op, io);
	if (!f)
		return (ssize_t)io->len;
	if (f->flags & FOLIO_MEM_FAULT_APPLIED) {
		*applied_error = f->error;
		return (ssize_t)io->len;
	}
	if (f->error)
		return f->error;
	return (ssize_t)MIN(f->short_len, io->len);
}

/* The durability barrier: everything completed before it (the whole
 * log) becomes durable, in order. */
static int mem_flush_locked(struct mem_ctx *c)
{
	c->st.flushes++;
	const struct folio_mem_fault *f;
	if (c->powered_off)
		return -EIO;
	if ((f = mem_fault_check_locked(c, FOLIO_MEM_OP_FLUSH, NULL))) {
		/* A losing flush drops the cache it failed to write, as
		 * fdatasync may drop the dirty pages it could not write. */
		if (f->flags & FOLIO_MEM_FAULT_LOSE)
			mem_log_discard_locked(c);
		return f->error;
	}
	return mem_log_apply_locked(c);
}

static ssize_t mem_transfer(struct mem_ctx *c, struct folio_io *io,
			    ssize_t n, uint64_t power_gen);

void mem_perform_locked(struct mem_ctx *c, struct mem_held *h)
{
	struct folio_io *io = h->io;
	h->plan = mem_transfer(c, io, h->plan, h->power_gen);
	if (h->applied_error && h->plan == (ssize_t)io->len) {
		/* The store has it all; the caller hears of a failure. */
		h->plan = h->applied_error;
		h->barrier = 0;
		return;
	}
	/* Durable: the barrier follows the write at once, as a linked
	 * fsync would, and is judged like flush() (fault rules on
	 * FOLIO_MEM_OP_FLUSH, power). Only a full write is synced. */
	h->barrier = 0;
	if (engine_io_durable(io) && h->plan == (ssize_t)io->len)
		h->barrier = mem_flush_locked(c);
}

static ssize_t mem_transfer(struct mem_ctx *c, struct folio_io *io,
			    ssize_t n, uint64_t power_gen)
{
	if (n < 0)
		return n;
	if (power_gen != c->power_gen || c->powered_off)
		return -EIO; /* the power went while it was in flight */
	size_t want = (size_t)n, done = 0;
	if (io->op == FOLIO_IO_WRITE && c->volatile_on) {
		/* Into the volatile cache: visible, not durable. */
		if (want && mem_log_write_locked(c, io, want))
			return -ENOMEM;
		c->st.write_bytes += want;
		if (want && io->pos + want > c->size)
			c->size = io->pos + want;
		return (ssize_t)want;
	}
	uint64_t dev = io->dev_pos;
	for (int i = 0; i < io->iovcnt && done < want; i++) {
		size_t l = MIN(io->iov[i].iov_len, want - done);
		if (io->op == FOLIO_IO_READ) {
			mem_store_read(c, dev + done, io->iov[i].iov_base, l);
		} else {
			size_t w = mem_store_write(c, dev + done,
						   io->iov[i].iov_base, l);
			if (w < l) {
				done += w;
				break;
			}
		}
		done += l;
	}
	if (io->op == FOLIO_IO_READ) {
		/* The volatile cache over the durable store. */
		if (c->log_head)
			mem_log_overlay_locked(c, io->pos, io->iov, io->iovcnt,
					       done);
		/* Bytes at or past the size read as zeros whatever the store
		 * holds at their device place. */
		if (io->pos + done > c->size) {
			size_t from = c->size > io->pos ?
					      (size_t)(c->size - io->pos) : 0;
			engine_iov_zero(io->iov, io->iovcnt, from, done);
		}
		c->st.read_bytes += done;
	} else {
		c->st.write_bytes += done;
		if (done && io->pos + done > c->size)
			c->size = c->dsize = io->pos + done;
		if (done < want && !done)
			return -ENOMEM;
	}
	return (ssize_t)done;
}

/* ---- callbacks ------------------------------------------------------ */

static int mem_submit(void *arg, struct folio_io *io)
{
	struct mem_ctx *c = arg;
	int ret = engine_check_io(io);
	if (ret)
		return ret;
	pthread_mutex_lock(&c->lock);
	if (c->closing) {
		pthread_mutex_unlock(&c->lock);
		return -ESHUTDOWN;
	}
	/* Grow before deciding anything so a refusal leaves the counters
	 * and rules untouched. */
	if (c->mode != FOLIO_MEM_SYNC && mem_held_reserve_locked(c)) {
		pthread_mutex_unlock(&c->lock);
		return -ENOMEM;
	}
	int applied_error;
	ssize_t plan = mem_plan_locked(c, io, &applied_error);
	c->inflight++;
	c->inflight_writes += io->op == FOLIO_IO_WRITE;
	if (c->mode != FOLIO_MEM_SYNC) {
		c->held[c->nheld++] =
			(struct mem_held){io, plan, c->power_gen, 0,
					  applied_error};
		if (c->mode == FOLIO_MEM_THREAD)
			pthread_cond_signal(&c->work_cv);
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	struct mem_held h = {io, plan, c->power_gen, 0, applied_error};
	mem_perform_locked(c, &h);
	c->completing++;
	pthread_mutex_unlock(&c->lock);
	mem_deliver_one(c, &h);
	return 0;
}

static int mem_flush(void *arg)
{
	struct mem_ctx *c = arg;
	pthread_mutex_lock(&c->lock);
	int ret = mem_flush_locked(c);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static int mem_truncate(void *arg, uint64_t size)
{
	struct mem_ctx *c = arg;
	pthread_mutex_lock(&c->lock);
	c->st.truncates++;
	const struct folio_mem_fault *f = c->powered_off ? NULL :
		mem_fault_check_locked(c, FOLIO_MEM_OP_TRUNCATE, NULL);
	int ret = 0;
	if (c->powered_off) {
		ret = -EIO;
	} else if (f) {
		ret = f->error;
	} else if (size > c->capacity) {
		ret = -EFBIG;
	} else if (c->volatile_on) {
		ret = mem_log_truncate_locked(c, size);
		if (!ret)
			c->size = size;
	} else {
		mem_durable_resize_locked(c, size);
		c->size = size;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static void mem_destroy(void *arg)
{
	struct mem_ctx *c = arg;
	pthread_mutex_lock(&c->lock);
	c->closing = true;
	pthread_mutex_unlock(&c->lock);
	mem_stop_thread(c);

	pthread_mutex_lock(&c->lock);
	mem_fail_held(c, -ECANCELED);

	/* A completion delivered by another thread may still be about to
	 * account for itself; the context must outlive that. */
	pthread_mutex_lock(&c->lock);
	while (c->completing)
		pthread_cond_wait(&c->progress_cv, &c->lock);
	pthread_mutex_unlock(&c->lock);

	mem_log_free(c);
	mem_store_free(c);
	pthread_cond_destroy(&c->work_cv);
	pthread_cond_destroy(&c->progress_cv);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static const struct folio_engine_ops mem_ops = {
	.sz = sizeof(struct folio_engine_ops),
	.submit = mem_submit,
	.flush = mem_flush,
	.truncate = mem_truncate,
	.wait = mem_wait,
	.destroy = mem_destroy,
	.caps = FOLIO_ENGINE_CAP_DURABLE,
};

/* ---- public API ----------------------------------------------------- */

int folio_engine_mem(struct folio_engine **out, uint64_t capacity)
{
	if (!out || !capacity || capacity > FOLIO_MEM_MAX_CAPACITY)
		return -EINVAL;
	struct mem_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->capacity = capacity;
	c->mode = FOLIO_MEM_SYNC;
	c->log_tail = &c->log_head;
	mem_seed(c, 1);
	int ret = mem_store_reserve(c, capacity);
	if (ret) {
		free(c);
		return ret;
	}
	if (pthread_mutex_init(&c->lock, NULL)) {
		ret = -ENOMEM;
		goto fail_store;
	}
	if (pthread_cond_init(&c->work_cv, NULL)) {
		ret = -ENOMEM;
		goto fail_lock;
	}
	if (pthread_cond_init(&c->progress_cv, NULL)) {
		ret = -ENOMEM;
		goto fail_work;
	}
	struct folio_engine *e;
	ret = engine_create(&e, &mem_ops, c, ENGINE_MEM);
	if (ret)
		goto fail_progress;
	c->engine = e;
	*out = e;
	return 0;

fail_progress:
	pthread_cond_destroy(&c->progress_cv);
fail_work:
	pthread_cond_destroy(&c->work_cv);
fail_lock:
	pthread_mutex_destroy(&c->lock);
fail_store:
	mem_store_free(c);
	free(c);
	return ret;
}

int folio_engine_mem_set_map(struct folio_engine *e, uint64_t extent_size,
			     bool scatter)
{
	struct mem_ctx *c = mem_of(e);
	if (!c || (extent_size && (!is_pow2(extent_size) || extent_size < 512 ||
				   extent_size > FOLIO_MEM_MAX_EXTENT)) ||
	    (scatter && !extent_size))
		return -EINVAL;
	if (atomic_load(&e->users))
		return -EBUSY;
	pthread_mutex_lock(&c->lock);
	int ret = 0;
	if (c->size || c->dsize || c->log_head) {
		ret = -EBUSY;
	} else {
		ret = mem_store_reserve(c, extent_size ?
				mem_dev_limit(c->capacity, extent_size,
					      scatter) :
				c->capacity);
	}
	if (!ret) {
		c->extent_size = extent_size;
		c->scatter = scatter;
		/* No mapping uses the engine, so nobody reads ops.map. */
		e->ops.map = extent_size ? mem_map : NULL;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int folio_engine_mem_stats(struct folio_engine *e, struct folio_mem_stats *st)
{
	struct mem_ctx *c = mem_of(e);
	if (!c || !st)
		return -EINVAL;
	int r = sized_check(st, st->sz, sizeof(size_t), sizeof(*st));
	if (r)
		return r;
	struct folio_mem_stats now;
	pthread_mutex_lock(&c->lock);
	now = c->st;
	now.size = c->size;
	now.inflight = c->inflight;
	now.inflight_writes = c->inflight_writes;
	now.mem_bytes = c->mem_bytes;
	now.volatile_bytes = c->log_bytes;
	now.volatile_ops = c->log_ops;
	now.durable_size = c->dsize;
	pthread_mutex_unlock(&c->lock);
	size_t n = MIN(st->sz, sizeof(now));
	memcpy((char *)st + sizeof(size_t), (char *)&now + sizeof(size_t),
	       n - sizeof(size_t));
	return 0;
}

/* Bytes as a read sees them (@cached) or as a power cut would leave
 * them. */
static int mem_peek(struct folio_engine *e, void *buf, size_t len,
		    uint64_t pos, bool cached)
{
	struct mem_ctx *c = mem_of(e);
	if (!c || (!buf && len))
		return -EINVAL;
	if (pos > c->capacity || len > c->capacity - pos)
		return -ERANGE;
	pthread_mutex_lock(&c->lock);
	mem_durable_read_locked(c, pos, buf, len);
	if (cached && c->log_head) {
		struct iovec iov = {buf, len};
		mem_log_overlay_locked(c, pos, &iov, 1, len);
		if (pos + len > c->size) {
			uint64_t from = MAX(pos, c->size);
			memset((char *)buf + (from - pos), 0,
			       (size_t)(pos + len - from));
		}
	}
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int folio_engine_mem_peek(struct folio_engine *e, void *buf, size_t len,
			  uint64_t pos)
{
	return mem_peek(e, buf, len, pos, true);
}

int folio_engine_mem_peek_durable(struct folio_engine *e, void *buf,
				  size_t len, uint64_t pos)
{
	return mem_peek(e, buf, len, pos, false);
}

int folio_engine_mem_poke(struct folio_engine *e, const void *buf,
			  size_t len, uint64_t pos)
{
	struct mem_ctx *c = mem_of(e);
	if (!c || (!buf && len))
		return -EINVAL;
	if (pos > FOLIO_MAX_POS || len > FOLIO_MAX_POS - pos)
		return -ERANGE;
	if (pos + len > c->capacity)
		return -ENOSPC;
	if (!len)
		return 0;
	pthread_mutex_lock(&c->lock);
	int ret = -EBUSY; /* poke sets up durable data, under no cache */
	if (!c->log_head) {
		ret = mem_durable_write_locked(c, pos, buf, len);
		c->size = c->dsize;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}
