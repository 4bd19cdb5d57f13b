/* SPDX-License-Identifier: MIT */
/*
 * Direct I/O: requests straight between the caller's memory and the
 * engine, kept coherent with the cache (doc/design.md, "Direct I/O").
 *
 * A direct write supersedes what the cache holds for its range before the
 * I/O (dirty and unstable blocks dropped unwritten once their writeback
 * ended, clean copies dropped) and drops the clean blocks again after it,
 * the way Linux invalidates the page cache around an O_DIRECT write: a
 * buffered read that raced in between read the old bytes and must not
 * leave them cached. Dirty blocks found after the I/O belong to a
 * buffered write that raced with this one and stay.
 *
 * The overwrite fast path holds io_lock shared all along: truncate and
 * invalidate (exclusive) cannot change sizes, extents or folios under it,
 * and the extent cache is only changed under io_lock exclusive, so the
 * fast path reads it without a lock of its own.
 */
#include <string.h>

#include "mapping/cache.h"
#include "mapping/commit.h"
#include "mapping/direct.h"
#include "mapping/errseq.h"
#include "mapping/extents.h"
#include "mapping/readahead.h"
#include "mapping/request.h"
#include "mapping/tags.h"
#include "mapping/wait.h"

/* Requests one batch submits before it waits for them all: a range over
 * more extents goes in several batches, the request array on the stack. */
#define DIRECT_BATCH 8

/* One extent's share of the range: one request. */
struct direct_piece {
	uint64_t pos, dev;
	size_t len;
	uint32_t flags; /* FOLIO_EXTENT_* */
};

struct direct_rq {
	struct engine_io base;
	struct iovec iov;
	struct io_group *group;
	ssize_t result;
	/* The engine's failed flushes at submission (see direct_batch()). */
	uint64_t failures;
};

/* What the requests of a call achieved so far. */
struct direct_out {
	size_t done;         /* bytes from the start done, in order */
	uint64_t stored_end; /* end of the furthest bytes the store took */
	int err;             /* the first failure, in order */
	bool stopped;        /* short or failed: nothing more is sent */
	bool not_durable;    /* a durable write not made durable in full */
	int barrier_error;   /* a durable write's failed barrier, else 0 */
};

/*
 * The piece of [at, end) starting at `at`. `how`: PIECE_CACHED only from
 * the extent cache (-EAGAIN when it does not hold `at`); PIECE_ANY the
 * cache first, then map(); PIECE_MAP map() always (identity without it),
 * remembering written extents when the mapping keeps a cache.
 */
enum piece_how { PIECE_CACHED, PIECE_ANY, PIECE_MAP };

static int next_piece(struct folio_mapping *m, uint64_t at, uint64_t end,
		      enum piece_how how, struct direct_piece *p)
{
	uint64_t dev, avail;
	if (how != PIECE_MAP && mapping_extents_lookup(&m->direct, at, &dev, &avail)) {
		*p = (struct direct_piece){at, dev, (size_t)MIN(avail, end - at),
					   0};
		return 0;
	}
	struct folio_engine *e = m->engine;
	if (how == PIECE_CACHED && e->ops.map)
		return -EAGAIN;
	struct map_cache mc = {0};
	uint32_t flags;
	if (e->ops.map)
		stat_add(&m->stats.direct_map_calls, 1);
	int r = mapping_map_extent(m, &mc, at, end - at, &dev, &avail, &flags);
	if (r)
		return r;
	if (how == PIECE_MAP && mc.valid && !flags &&
	    !(m->flags & FOLIO_MAPPING_DIRECT_EXCLUSIVE))
		mapping_extents_insert(&m->direct, mc.ext.pos, mc.ext.len, mc.ext.dev_pos);
	*p = (struct direct_piece){at, dev, (size_t)avail, flags};
	return 0;
}

/* ---- coherence with the cache ---------------------------------------- */

void mapping_forget_blocks(struct folio_mapping *m, struct folio *f,
			   size_t off, size_t len)
{
	size_t dirty = folio_clear_dirty_counted(f, off, len);
	size_t unstable = folio_forget_unstable(f, off, len);
	mapping_cache_account(m, -mapping_block_bytes(f, dirty), 0,
			      -mapping_block_bytes(f, unstable));
}

/* What a walk does with each folio of the range: its bytes [off,
 * off+len) lie in the range, buf holds the range from its start. */
typedef void folio_visit_fn(struct folio_mapping *m, struct folio *f,
			    size_t off, size_t len, unsigned char *buf);

/* Visit each cached folio touching [pos, end) (those tagged `tag`, or
 * all), locked and still in the mapping. */
static void walk_locked(struct folio_mapping *m, uint64_t pos, uint64_t end,
			int tag, folio_visit_fn *fn, unsigned char *buf)
{
	uint64_t key = mapping_key(m, pos);
	uint64_t last = mapping_key(m, end - 1);
	struct folio *f;
	while ((f = mapping_next_folio(m, &key, last, tag))) {
		mapping_lock_folio(m, f);
		/* A pool may have reclaimed it since it was found. */
		if (!folio_test_removed(f)) {
			uint64_t a = MAX(f->pos, pos);
			uint64_t z = MIN(f->pos + folio_bytes(f), end);
			fn(m, f, (size_t)(a - f->pos), (size_t)(z - a),
			   buf ? buf + (a - pos) : NULL);
		}
		folio_unlock(f);
		folio_unref(f);
	}
}

/*
 * Before blocks of f (locked, its writeback ended) are marked not
 * uptodate: its state map must be its own. When that cannot be had (out
 * of memory), f holds only clean, stable copies (what the shared map
 * says), so all of them are forgotten instead, with no map and no change
 * of the index (folios found by others, a settle walk's for one, stay
 * where they are). Returns true when they were.
 */
static bool own_state_or_forget(struct folio *f)
{
	return folio_own_state(f) && folio_forget_shared(f);
}

/* Before the I/O, once f's writeback ended: its blocks inside the range
 * are replaced, so their dirty and unstable data is dropped unwritten and
 * their copy too. */
static void supersede_blocks(struct folio_mapping *m, struct folio *f,
			     size_t off, size_t len, unsigned char *unused)
{
	(void)unused;
	(void)mapping_wait_writeback(m, f);
	if (own_state_or_forget(f))
		return;
	mapping_forget_blocks(m, f, off, len);
	folio_clear_uptodate(f, off, len);
}

/* After the I/O, once f's writeback ended: drop each clean block inside
 * the range (a copy read while the write was in flight, or a buffered
 * write the store now holds in some order with this one); keep dirty
 * ones. */
static void drop_clean_blocks(struct folio_mapping *m, struct folio *f,
			      size_t off, size_t len, unsigned char *unused)
{
	(void)unused;
	(void)mapping_wait_writeback(m, f);
	if (own_state_or_forget(f))
		return;
	size_t bs = (size_t)1 << f->block_shift;
	size_t unstable = 0;
	for (size_t at = off; at < off + len; at += bs) {
		if (folio_is_dirty(f, at, bs) == 1)
			continue;
		unstable += folio_forget_unstable(f, at, bs);
		folio_clear_uptodate(f, at, bs);
	}
	mapping_cache_account(m, 0, 0, -mapping_block_bytes(f, unstable));
}

/* A direct read after its own read: blocks still dirty (their writeback
 * failed, or a buffered write raced in) are what a buffered read would
 * return, so they replace what the store gave. */
static void copy_dirty_blocks(struct folio_mapping *m, struct folio *f,
			      size_t off, size_t len, unsigned char *buf)
{
	(void)m;
	size_t at = off;
	ssize_t run;
	while ((run = folio_next_dirty(f, &at)) > 0 && at < off + len) {
		size_t z = MIN(at + (size_t)run, off + len);
		size_t a = MAX(at, off);
		if (a < z)
			memcpy(buf + (a - off), f->data + a, z - a);
		at += (size_t)run;
	}
}

/* ---- requests ---------------------------------------------------------- */

static void direct_end_io(struct engine_io *rq, ssize_t result)
{
	struct direct_rq *d = container_of(rq, struct direct_rq, base);
	d->result = result;
	io_group_done(d->group, result < 0 ? (int)result : 0);
}

/*
 * Send the n pieces (buf holds the bytes of pos0 on) and wait for them
 * all, then account their results in order. A write completed while a
 * flush of the engine failed may have been dropped by it: the library
 * holds no copy to write again, so it fails with -EIO (the count read
 * before submission against the one read now).
 */
static void direct_batch(struct folio_mapping *m, enum folio_io_op op,
			 unsigned char *buf, uint64_t pos0,
			 const struct direct_piece *p, unsigned n,
			 uint32_t extra, struct direct_out *out)
{
	struct folio_engine *e = m->engine;
	struct direct_rq rq[DIRECT_BATCH];
	struct io_group g;
	io_group_init(&g);
	for (unsigned i = 0; i < n; i++) {
		struct direct_rq *d = &rq[i];
		*d = (struct direct_rq){
			.base = {.io = {.op = op,
					.flags = p[i].flags | extra |
						 engine_waited_flag(e),
					.pos = p[i].pos,
					.dev_pos = p[i].dev,
					.len = p[i].len,
					.iov = &d->iov,
					.iovcnt = 1},
				 .end_io = direct_end_io},
			.iov = {buf + (p[i].pos - pos0), p[i].len},
			.group = &g,
		};
		d->failures = atomic_load(&e->flush_failures);
		io_group_add(&g);
		int r = engine_submit(e, &d->base.io);
		if (r)
			direct_end_io(&d->base, r);
	}
	if (e->ops.unplug)
		e->ops.unplug(e->ctx);
	/* Request errors are in the results; a failing wait() still waits
	 * for every request. */
	(void)io_group_wait(&g, e);
	for (unsigned i = 0; i < n; i++) {
		struct direct_rq *d = &rq[i];
		ssize_t res = d->result;
		size_t good = res < 0 ? 0 : MIN((size_t)res, p[i].len);
		bool write = op == FOLIO_IO_WRITE;
		if (write && good)
			out->stored_end = MAX(out->stored_end, p[i].pos + good);
		/* A failed write may have landed all the same, as in
		 * writeback (wb_end_io()). */
		if (write && res < 0)
			mapping_size_raise(&m->size.landed_maybe,
					   p[i].pos + p[i].len);
		/* Even after the call stopped: a failed barrier is a
		 * failed flush of the engine, which the caller settles. */
		if (d->base.barrier_error && !out->barrier_error)
			out->barrier_error = d->base.barrier_error;
		if (out->stopped)
			continue;
		int err = res < 0 ? (int)res : d->base.barrier_error;
		if (!err && write && good &&
		    atomic_load(&e->flush_failures) != d->failures)
			err = -EIO;
		if (!err && !write && good < p[i].len)
			err = -EIO;
		if (err) {
			out->err = err;
			out->stopped = true;
			continue;
		}
		if (d->base.barrier_untrusted || good < p[i].len)
			out->not_durable = true;
		out->done += good;
		out->stopped = good < p[i].len;
	}
}

/*
 * Write or read [pos, end) from buf, piece by piece as `how` finds them,
 * up to DIRECT_BATCH requests at a time. Reads zero-fill holes without a
 * request. A write's unwritten extents written in full join the extent
 * cache (written now) on the exclusive path.
 */
static void direct_run(struct folio_mapping *m, enum folio_io_op op,
		       unsigned char *buf, uint64_t pos, uint64_t end,
		       enum piece_how how, uint32_t extra,
		       struct direct_out *out)
{
	uint64_t at = pos;
	while (at < end && !out->stopped) {
		struct direct_piece p[DIRECT_BATCH];
		unsigned n = 0;
		int map_err = 0;
		while (n < DIRECT_BATCH && at < end) {
			map_err = next_piece(m, at, end, how, &p[n]);
			if (map_err)
				break;
			at += p[n].len;
			if (op == FOLIO_IO_READ &&
			    (p[n].flags & FOLIO_EXTENT_HOLE)) {
				/* Nothing stored there: zeros, as buffered
				 * reads make them (rqb_add()). */
				memset(buf + (p[n].pos - pos), 0, p[n].len);
				continue;
			}
			n++;
		}
		if (n)
			direct_batch(m, op, buf, pos, p, n, extra, out);
		if (map_err && !out->stopped) {
			out->err = map_err;
			out->stopped = true;
		}
		for (unsigned i = 0; i < n && how == PIECE_MAP; i++) {
			if ((p[i].flags & FOLIO_EXTENT_NEW) &&
			    p[i].pos + p[i].len <= pos + out->done &&
			    !(m->flags & FOLIO_MAPPING_DIRECT_EXCLUSIVE))
				mapping_extents_insert(&m->direct, p[i].pos, p[i].len, p[i].dev);
		}
	}
}

/* ---- the calls ------------------------------------------------------------ */

/* Arguments of both calls: 0, -EINVAL or -EFBIG. */
static int check_direct_args(struct folio_mapping *m, const void *buf,
			     size_t len, uint64_t pos)
{
	int r = mapping_check_io_args(m, buf, len, pos);
	if (r)
		return r;
	uint64_t bmask = (UINT64_C(1) << m->block_shift) - 1;
	if ((pos & bmask) || (len & bmask) || len > SSIZE_MAX ||
	    ((uintptr_t)buf & (FOLIO_ENGINE_DIRECT_ALIGN - 1)))
		return -EINVAL;
	return 0;
}

/*
 * May [pos, end) take the fast path? Then p[] holds its pieces. Inside
 * EOF and the store's size no size changes; where the store is stale a
 * buffered read would zero-fill what the write put there; with map(),
 * every byte must lie in an extent known written. Caller holds io_lock
 * shared.
 */
static bool plan_overwrite(struct folio_mapping *m, uint64_t pos,
			   uint64_t end, struct direct_piece *p, unsigned *n)
{
	if ((m->flags & FOLIO_MAPPING_DIRECT_EXCLUSIVE) ||
	    end > mapping_eof(m) || end > atomic_load(&m->size.backing) ||
	    end > atomic_load(&m->size.stale_from))
		return false;
	unsigned k = 0;
	for (uint64_t at = pos; at < end; at += p[k++].len) {
		if (k == DIRECT_BATCH ||
		    next_piece(m, at, end, PIECE_CACHED, &p[k]))
			return false;
	}
	*n = k;
	return true;
}

/*
 * A direct write that did not complete superseded dirty data it never
 * wrote, which may have been what would have grown the store to EOF:
 * grow it now (zeros), so that a sync leaves store and mapping the same
 * size, as writeback would have. Caller holds io_lock exclusively (no
 * write in flight reaches past EOF). Returns err, or the truncate's
 * error when err is 0.
 */
static int grow_store_to_eof(struct folio_mapping *m, int err)
{
	uint64_t eof = mapping_eof(m);
	if (atomic_load(&m->size.backing) >= eof)
		return err;
	int r = engine_truncate(m->engine, eof);
	if (r)
		return err ? err : r;
	atomic_store(&m->size.backing, eof);
	mapping_resize_unstable(m, eof);
	return err;
}

/* Attempts at settling truncates that keep coming before a direct write
 * gives up with -EAGAIN. */
#define SETTLE_TRIES 8

/*
 * A truncate no flush has covered yet is redone after a failed flush by
 * cutting the store at the smallest size since and growing it back
 * (commit.c): what was written above the cut since must be in the cache
 * to be written again, and a direct write's bytes are not. So a direct
 * write reaching above a pending cut first has it flushed. Returns 0 once
 * none is pending, else, after SETTLE_TRIES flushes, the last flush's
 * error, or -EAGAIN when they succeeded but truncates kept coming.
 */
static int settle_resize(struct folio_mapping *m, uint64_t end,
			 unsigned tries)
{
	int err = 0;
	for (; mapping_resize_pending_below(m, end); tries++) {
		if (tries >= SETTLE_TRIES)
			return err ? err : -EAGAIN;
		/* A failure may be an older one the flush reports (a failed
		 * flush of the engine since this mapping's last): the next
		 * flush then settles the truncate. */
		err = mapping_commit(m);
	}
	return 0;
}

static void direct_unlock(struct folio_mapping *m, bool fast,
			  unsigned stripe)
{
	if (fast)
		brlock_read_unlock_at(&m->io_lock, stripe);
	else
		brlock_write_unlock(&m->io_lock);
}

ssize_t folio_mapping_write_direct(struct folio_mapping *m, const void *buf,
				   size_t len, uint64_t pos, unsigned flags)
{
	int r = check_direct_args(m, buf, len, pos);
	if (r)
		return r;
	if (flags & ~FOLIO_DIRECT_DSYNC)
		return -EINVAL;
	if (!len)
		return 0;
	uint64_t end = pos + len;
	bool dsync = flags & FOLIO_DIRECT_DSYNC;
	uint32_t extra = dsync && engine_has_durable(m->engine) &&
					 !(m->flags & FOLIO_MAPPING_DROP_ON_ERROR)
				 ? FOLIO_IO_DURABLE
				 : 0;
	folio_errseq_t begin = atomic_load(&m->err.seq);
	/* The bytes are only read: requests carry them to the engine. */
	unsigned char *src = (unsigned char *)(uintptr_t)buf;
	struct direct_piece p[DIRECT_BATCH];
	unsigned n = 0;
	struct direct_out out = {0};

	unsigned stripe = brlock_thread_stripe();
	bool fast;
	for (unsigned tries = 0;; tries++) {
		/* Outside io_lock: a flush may take it. */
		r = settle_resize(m, end, tries);
		if (r)
			return r;
		brlock_read_lock_at(&m->io_lock, stripe);
		fast = plan_overwrite(m, pos, end, p, &n);
		if (!fast) {
			brlock_read_unlock_at(&m->io_lock, stripe);
			brlock_write_lock(&m->io_lock);
			stat_add(&m->stats.direct_exclusive, 1);
		}
		/* A truncate that came in between: settle it too. */
		if (!mapping_resize_pending_below(m, end))
			break;
		direct_unlock(m, fast, stripe);
	}
	if (!fast) {
		if (end > atomic_load(&m->size.stale_from)) {
			/* Buffered reads zero-fill there until a sync redoes
			 * the lost truncate: they would not see this write. */
			brlock_write_unlock(&m->io_lock);
			return -EIO;
		}
		/* Readahead started before may still fill folios of the
		 * range from the old bytes. */
		mapping_readahead_drain(m);
	}
	stat_add(&m->stats.direct_writes, 1);
	stat_add(&m->stats.direct_fast_writes, fast);
	walk_locked(m, pos, end, INDEX_NO_TAG, supersede_blocks, NULL);
	if (fast)
		direct_batch(m, FOLIO_IO_WRITE, src, pos, p, n, extra, &out);
	else
		direct_run(m, FOLIO_IO_WRITE, src, pos, end, PIECE_MAP, extra,
			   &out);
	if (!fast && out.stored_end) {
		/* Bytes the store took grew it, also those of a write that
		 * then failed (its barrier, or a flush in flight). */
		mapping_size_raise(&m->size.backing, out.stored_end);
		mapping_grow_eof(m, out.stored_end);
	}
	if (!fast && out.done < len) {
		/* A failed piece past EOF may have grown the store all the
		 * same: cut it back, so that it ends where the mapping does.
		 * (Below EOF a failed piece's blocks read as whatever the
		 * store holds, as after any failed write.) */
		mapping_cut_landed_writes(m, mapping_eof(m));
		out.err = grow_store_to_eof(m, out.err);
	}
	walk_locked(m, pos, end, INDEX_NO_TAG, drop_clean_blocks, NULL);
	direct_unlock(m, fast, stripe);

	if (out.err)
		errseq_record(m, out.err);
	/* This write's own barrier failed: a flush of the engine that may
	 * have dropped what the mapping's earlier writes left unstable.
	 * Settled now, those bytes are dirty again before the error
	 * returns (found by the fuzzer: the next sync used to find them
	 * lost and only the one after wrote them again). */
	if (out.barrier_error) {
		if (!out.err)
			errseq_record(m, out.barrier_error);
		mapping_commit_failed_barrier(m, out.barrier_error);
	}
	if (!out.done)
		return out.err;
	if (dsync && (!extra || out.not_durable)) {
		/* A flush another thread ran for us reports through the
		 * error sequence: any error since the call began may be
		 * this write's. */
		int fr = mapping_commit(m);
		if (fr)
			return fr;
		if (atomic_load(&m->err.seq) != begin) {
			int err = atomic_load(&m->err.last_error);
			return err ? err : -EIO;
		}
	}
	return (ssize_t)out.done;
}

ssize_t folio_mapping_read_direct(struct folio_mapping *m, void *buf,
				  size_t len, uint64_t pos)
{
	int r = check_direct_args(m, buf, len, pos);
	if (r)
		return r;
	if (!len || pos >= mapping_eof(m))
		return 0;
	/* The store must hold what was written before the call. Failures
	 * are recorded by the pass; what it could not write stays dirty
	 * and is copied from the cache below. */
	struct folio_writeback_opts wb = {
		.sz = sizeof(wb),
		.start = pos,
		.end = pos + len,
		.flags = FOLIO_WB_WAIT,
	};
	(void)folio_mapping_writeback(m, &wb);

	unsigned stripe = brlock_thread_stripe();
	brlock_read_lock_at(&m->io_lock, stripe);
	uint64_t eof = mapping_eof(m);
	ssize_t ret = 0;
	if (pos < eof) {
		size_t count = (size_t)MIN(len, eof - pos);
		uint64_t bmask = (UINT64_C(1) << m->block_shift) - 1;
		uint64_t stop =
			MAX(pos, MIN(pos + count, mapping_read_end(m)));
		uint64_t io_end = stop > pos ? (stop + bmask) & ~bmask : pos;
		uint64_t blk_end = (pos + count + bmask) & ~bmask;
		struct direct_out out = {0};
		unsigned char *dst = buf;
		stat_add(&m->stats.direct_reads, 1);
		direct_run(m, FOLIO_IO_READ, dst, pos, io_end, PIECE_ANY, 0,
			   &out);
		if (out.err) {
			ret = out.err;
		} else {
			/* Past EOF, or where the store is stale, the object
			 * holds zeros. */
			if (stop < blk_end)
				memset(dst + (stop - pos), 0,
				       (size_t)(blk_end - stop));
			walk_locked(m, pos, pos + count, INDEX_TAG_DIRTY,
				    copy_dirty_blocks, dst);
			ret = (ssize_t)count;
		}
	}
	brlock_read_unlock_at(&m->io_lock, stripe);
	return ret;
}
