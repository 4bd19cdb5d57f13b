/* SPDX-License-Identifier: MIT */
/*
 * Buffered read and write, and the zero-copy write_begin/write_end pair.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mapping/mapping.h"

/* Folios one read locks and fills at once: bounds the folio array on the
 * stack while letting a large read become a few big engine requests. */
#define READ_BATCH 64

int mapping_read_result(struct mapping_io *io, ssize_t result)
{
	int err = 0;
	if (result < 0)
		err = (int)result;
	else if ((size_t)result != io->base.io.len)
		err = -EIO; /* engines zero-fill past EOF: short is broken */
	io->result = err ? err : result;
	if (err) {
		stat_add(&io->m->stats.errors, 1);
	} else {
		stat_add(&io->m->stats.read_requests, 1);
		stat_add(&io->m->stats.read_bytes, (uint64_t)result);
	}
	return err;
}

static void read_end_io(struct engine_io *rq, ssize_t result)
{
	struct mapping_io *io = container_of(rq, struct mapping_io, base);
	io_group_done(io->group, mapping_read_result(io, result));
}

/* One piece of folio a finished read filled. */
struct read_piece {
	struct folio *folio;
	size_t off, len;
};

static int piece_order(const void *a, const void *b)
{
	const struct read_piece *x = a, *y = b;
	if (x->folio->pos != y->folio->pos)
		return x->folio->pos < y->folio->pos ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/*
 * Some request of the batch failed. A block may have been read in several
 * pieces (map() extents smaller than a block, or a run cut short by a map
 * error), so a piece that succeeded proves nothing about the rest of its
 * block: mark only the blocks that successful pieces cover wholly. Every
 * run a read queues starts and ends on block boundaries, so with no
 * failure this marks exactly what was read.
 */
static void mark_read_blocks(struct mapping_io *list)
{
	size_t n = 0;
	for (struct mapping_io *io = list; io; io = io->next)
		if (io->result >= 0)
			n += io->nsegs;
	if (!n)
		return;
	struct read_piece *p = malloc(n * sizeof(*p));
	if (!p)
		return; /* marking nothing only costs a later re-read */
	size_t k = 0;
	for (struct mapping_io *io = list; io; io = io->next)
		for (unsigned i = 0; io->result >= 0 && i < io->nsegs; i++)
			p[k++] = (struct read_piece){io->segs[i].folio,
						     io->segs[i].off,
						     io->segs[i].len};
	qsort(p, n, sizeof(*p), piece_order);
	for (size_t i = 0; i < n;) {
		struct read_piece run = p[i++];
		while (i < n && p[i].folio == run.folio &&
		       p[i].off == run.off + run.len)
			run.len += p[i++].len;
		size_t mask = folio_block_size(run.folio) - 1;
		size_t a = (run.off + mask) & ~mask;
		size_t z = (run.off + run.len) & ~mask;
		if (a < z)
			folio_set_uptodate(run.folio, a, z - a);
	}
	free(p);
}

/* Start a builder of reads that @g waits for and finish_reads() walks
 * afterwards (so it keeps them). */
static void start_reads(struct folio_mapping *m, struct rq_builder *b,
			struct io_group *g)
{
	io_group_init(g);
	rqb_init(b, m, FOLIO_IO_READ, g, read_end_io);
	b->keep = true;
}

void mapping_settle_reads(struct folio_mapping *m, struct mapping_io *list,
			  uint64_t eof, bool mark, int err)
{
	for (struct mapping_io *io = list; io; io = io->next) {
		for (unsigned i = 0; io->result >= 0 && i < io->nsegs; i++) {
			struct rq_seg *s = &io->segs[i];
			mapping_zero_past_eof(m, s->folio, s->off, s->len, eof);
			if (mark && !err)
				folio_set_uptodate(s->folio, s->off, s->len);
		}
	}
	if (mark && err)
		mark_read_blocks(list);
	while (list) {
		struct mapping_io *next = list->next;
		mapping_io_free(list);
		list = next;
	}
}

/*
 * Wait for the reads a builder submitted and settle them (see
 * mapping_settle_reads()). Returns the first error.
 */
static int finish_reads(struct folio_mapping *m, struct rq_builder *b,
			struct io_group *g, uint64_t eof, bool mark)
{
	int err = io_group_wait(g, m->engine);
	if (b->error && !err)
		err = b->error;
	mapping_settle_reads(m, b->submitted, eof, mark, err);
	b->submitted = NULL;
	return err;
}

/*
 * Make the partly covered edge blocks of [off, off+len) valid before a
 * write: blocks at or past EOF are zero-filled, the others are read (one
 * request per contiguous run, so two adjacent edge blocks cost one read).
 * Wholly covered blocks are never read. With `mark` the edges are set
 * uptodate (write_begin hands the folio to the caller, who may copy less
 * than planned); write() leaves marking to its single dirty+uptodate
 * update. On error nothing is marked.
 */
static int prepare_write(struct folio_mapping *m, struct folio *f, size_t off,
			 size_t len, bool mark)
{
	if (folio_all_uptodate(f))
		return 0;
	size_t bs = (size_t)1 << f->block_shift, mask = bs - 1;
	/* Whole-folio tracking writes the whole folio back, so all of it
	 * must be valid: the write covers nothing and every block is an
	 * edge. */
	if (m->flags & FOLIO_MAPPING_FOLIO_DIRTY) {
		off = 0;
		len = 0;
	}
	size_t head = off & ~mask, tail = len ? (off + len - 1) & ~mask : 0;
	struct folio_range edge[2];
	unsigned nedge = 0;
	if (!len) {
		edge[nedge++] = (struct folio_range){0, folio_size(f)};
	} else {
		if ((off & mask) && folio_is_uptodate(f, head, 1) == 0)
			edge[nedge++] = (struct folio_range){head, bs};
		if (((off + len) & mask) && (tail != head || !(off & mask)) &&
		    folio_is_uptodate(f, tail, 1) == 0)
			edge[nedge++] = (struct folio_range){tail, bs};
	}
	if (!nedge)
		return 0;

	/* Blocks past this are zeros (at or past EOF, or where the store
	 * is stale), never read. */
	uint64_t eof = mapping_read_end(m);
	struct io_group g;
	struct rq_builder b;
	start_reads(m, &b, &g);
	int err = 0;
	for (unsigned i = 0; i < nedge && !err; i++) {
		/* Only the missing blocks of each edge; adjacent edge blocks
		 * join one request in the builder. */
		size_t at = edge[i].off, end = at + edge[i].len;
		while (!err && at < end) {
			ssize_t run = folio_next_missing(f, &at);
			if (run <= 0 || at >= end)
				break;
			size_t n = MIN((size_t)run, end - at);
			if (f->pos + at >= eof) {
				memset(f->data + at, 0, n);
			} else if (f->pos + at + n > eof) {
				/* Read up to the block holding EOF, zero the
				 * rest without I/O. */
				size_t keep = (size_t)((eof - f->pos - at +
							mask) & ~(uint64_t)mask);
				err = rqb_add(&b, f, at, keep);
				memset(f->data + at + keep, 0, n - keep);
			} else {
				err = rqb_add(&b, f, at, n);
			}
			at += n;
		}
	}
	rqb_finish(&b);
	int r = finish_reads(m, &b, &g, eof, false);
	if (!err)
		err = r;
	if (!err && (mark || !len))
		for (unsigned i = 0; i < nedge; i++)
			folio_set_uptodate(f, edge[i].off, edge[i].len);
	return err;
}

static int check_io_args(struct folio_mapping *m, const void *buf,
			 size_t len, uint64_t pos)
{
	if (!m || (!buf && len))
		return -EINVAL;
	if (pos >= FOLIO_MAX_POS || len > FOLIO_MAX_POS - pos)
		return -EFBIG;
	return 0;
}

/* Honour stable writes on a folio locked for a content change. */
static void wait_stable(struct folio_mapping *m, struct folio *f)
{
	if (m->flags & FOLIO_MAPPING_STABLE_WRITES)
		mapping_wait_writeback(m, f);
}

/*
 * Bytes this thread newly dirtied in pooled mappings since it last
 * looked at its pool's thresholds: looking costs a read of every stripe,
 * so a thread looks once per cache->ratelimit bytes (the kernel's
 * per-CPU ratelimit in balance_dirty_pages, in effect).
 */
static _Thread_local uint64_t dirtied_since_check TLS_FAST;

/* Mark [off, off+len) dirty+uptodate after the bytes were copied in. */
static void commit_write(struct folio_mapping *m, struct folio *f, size_t off,
			 size_t len)
{
	size_t newly = 0;
	int r;
	if (m->flags & FOLIO_MAPPING_FOLIO_DIRTY) {
		/* The whole folio is valid, but only what lies below EOF is
		 * the object's: blocks wholly past it stay clean (zeros no
		 * pass may write, which would otherwise stay dirty for
		 * good once a discard split them off). */
		size_t size = folio_bytes(f), mask = folio_block_size(f) - 1;
		uint64_t eof = MAX(mapping_eof(m), f->pos + off + len);
		size_t dirty_end = (size_t)MIN((uint64_t)size,
					       ((eof - f->pos) + mask) & ~mask);
		if (dirty_end < size)
			folio_set_uptodate(f, dirty_end, size - dirty_end);
		r = folio_dirty_counted(f, 0, dirty_end, true, &newly);
	} else if (folio_single_dirty_uptodate(f)) {
		/* A rewrite of a dirty block: nothing to update. Every path
		 * that clears a mapping folio's dirty or uptodate state
		 * (writeback taking it, truncate, invalidate, read errors)
		 * holds the folio lock, which is ours, so the flags cannot
		 * change before it is released. */
		r = 0;
	} else {
		r = folio_dirty_counted(f, off, len, true, &newly);
	}
	if (r > 0 && (r & FOLIO_BECAME_DIRTY))
		mapping_tag_dirty(m, f);
	mapping_grow_eof(m, f->pos + off + len);
	stat_add(&m->io_bytes[brlock_thread_stripe()].written, len);
	if (m->cache && newly) {
		uint64_t bytes = (uint64_t)newly << f->block_shift;
		mapping_cache_account(m, (int64_t)bytes, 0, 0);
		dirtied_since_check += bytes;
	}
}

/*
 * Has this thread dirtied enough to look at its pool's thresholds, and
 * is the pool over its dirty limit (the writer must be throttled, which
 * it may only be holding no lock)? Above the background threshold the
 * flushers are kicked on the way, which never sleeps.
 */
static bool over_dirty_limit(struct folio_mapping *m)
{
	struct mapping_cache *c = m->cache;
	if (!c || dirtied_since_check < c->ratelimit)
		return false;
	dirtied_since_check = 0;
	int64_t total = mapping_cache_dirty_total(c);
	if (total >= (int64_t)c->dirty_limit)
		return true;
	if (total >= (int64_t)c->dirty_background)
		c->ops->kick(c);
	return false;
}

static void throttle(struct folio_mapping *m)
{
	m->cache->ops->balance(m->cache, m);
}

/*
 * Between two folios of one write, with io_lock held shared: throttle
 * if this thread dirtied enough. The write lets go of io_lock to wait,
 * since waiting for writeback holding it could deadlock (a truncate
 * waiting for it blocks the flusher's writeback of this mapping); it
 * stays atomic per folio, as documented, and a truncate may come between
 * its pieces.
 */
static void throttle_between_folios(struct folio_mapping *m)
{
	if (!over_dirty_limit(m))
		return;
	brlock_read_unlock(&m->io_lock);
	throttle(m);
	brlock_read_lock(&m->io_lock);
}

/* Where this thread's last write ended: a write starting there is taken
 * for the next step of a sequential writer. */
static _Thread_local struct {
	uint64_t mapping_id, end;
} last_write TLS_FAST;

/*
 * The fast paths of read and write: copy [pos, pos+len) out of (or, with
 * `write`, into) cached folios that are uptodate over the part wanted, in
 * order, each under a tried folio lock (atomic per folio against writes,
 * safe against reclaim and truncate), until a folio is missing, busy or
 * not uptodate there: no request, no io_group, no engine. Returns the
 * bytes copied; the caller does the rest the ordinary way, which waits
 * for busy folios. `sequential`: see mapping_trylock_cached(). Caller
 * holds io_lock shared; a read has clamped len to EOF. Inlined into
 * each caller so that `write` costs no branch.
 */
static inline __attribute__((always_inline)) size_t
copy_cached(struct folio_mapping *m, unsigned char *buf, size_t len,
	    uint64_t pos, bool write, bool sequential)
{
	size_t done = 0;
	while (done < len) {
		uint64_t p = pos + done;
		struct folio *f = mapping_trylock_cached(m, p, sequential);
		if (!f)
			break;
		size_t off = (size_t)(p - f->pos);
		size_t n = MIN(len - done, folio_bytes(f) - off);
		bool ok = folio_all_uptodate(f) ||
			  folio_is_uptodate(f, off, n) == 1;
		if (ok && write) {
			memcpy(f->data + off, buf + done, n);
			commit_write(m, f, off, n);
		} else if (ok) {
			memcpy(buf + done, f->data + off, n);
			/* Readahead (readahead.c): see folio_mapping_read(). */
			mapping_readahead_reached(m, f);
		}
		folio_release(f);
		if (!ok)
			break;
		done += n;
		if (write && done < len)
			throttle_between_folios(m);
	}
	return done;
}

/*
 * The write fast path: overwrites of cached folios that are uptodate over
 * the bytes they change, so there is no folio to create and no edge
 * block to read; copy_cached() copies in and commit_write() marks them
 * dirty exactly as the ordinary path does, without its lookup-or-create
 * loop and read machinery. Whole-folio tracking (edges always read) and
 * stable writes (waits for writeback) take the ordinary path.
 */
static size_t write_cached(struct folio_mapping *m, const unsigned char *src,
			   size_t len, uint64_t pos)
{
	if (m->flags & (FOLIO_MAPPING_FOLIO_DIRTY | FOLIO_MAPPING_STABLE_WRITES))
		return 0;
	bool sequential = last_write.mapping_id == m->id &&
			  last_write.end == pos;
	/* Only read from: copy_cached() copies into buf for reads alone. */
	return copy_cached(m, (unsigned char *)src, len, pos, true,
			   sequential);
}

ssize_t folio_mapping_write(struct folio_mapping *m, const void *buf,
			    size_t len, uint64_t pos)
{
	int err = check_io_args(m, buf, len, pos);
	if (err)
		return err;
	if (!len)
		return 0;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;

	const unsigned char *src = buf;
	size_t done = 0;
	struct mapping_cache_credit credit = {0, 0};
	brlock_read_lock(&m->io_lock);
	done = write_cached(m, src, len, pos);
	while (done < len) {
		uint64_t p = pos + done;
		struct folio *f = mapping_find_or_create_locked(
			m, p, len - done, &credit, &err);
		if (!f) {
			if (err != MAPPING_CACHE_FULL)
				break;
			/*
			 * The pool is full and nothing could be reclaimed at
			 * once. Waiting for writeback and flushes holding
			 * io_lock could deadlock (a truncate waiting for it
			 * blocks the flusher's writeback of this mapping),
			 * so the write lets go between two folios: it stays
			 * atomic per folio, as documented, and a truncate
			 * may come between its pieces.
			 */
			brlock_read_unlock(&m->io_lock);
			err = mapping_cache_reserve(m, &credit);
			brlock_read_lock(&m->io_lock);
			if (err)
				break;
			continue;
		}
		wait_stable(m, f);
		size_t off = (size_t)(p - f->pos);
		size_t n = MIN(len - done, folio_bytes(f) - off);
		err = prepare_write(m, f, off, n, false);
		if (!err) {
			memcpy(f->data + off, src + done, n);
			commit_write(m, f, off, n);
			done += n;
		}
		folio_release(f);
		if (err)
			break;
		if (done < len)
			throttle_between_folios(m);
	}
	brlock_read_unlock(&m->io_lock);
	mapping_cache_credit_return(m, &credit);
	last_write.mapping_id = m->id;
	last_write.end = pos + done;
	if (over_dirty_limit(m))
		throttle(m);
	return done ? (ssize_t)done : err;
}

ssize_t folio_mapping_write_begin(struct folio_mapping *m, uint64_t pos,
				  size_t len, struct folio **folio)
{
	if (!folio || !len)
		return -EINVAL;
	int err = check_io_args(m, folio, len, pos);
	if (err)
		return err;
	/* Zero-copy writers are throttled here, before anything is
	 * locked; write_end() runs with the folio locked. */
	if (over_dirty_limit(m))
		throttle(m);
	struct mapping_cache_credit credit = {0, 0};
	struct folio *f;
	brlock_read_lock(&m->io_lock);
	while (!(f = mapping_find_or_create_locked(m, pos, len, &credit,
						   &err)) &&
	       err == MAPPING_CACHE_FULL) {
		brlock_read_unlock(&m->io_lock);
		err = mapping_cache_reserve(m, &credit);
		brlock_read_lock(&m->io_lock);
		if (err)
			break;
	}
	if (!f) {
		brlock_read_unlock(&m->io_lock);
		mapping_cache_credit_return(m, &credit);
		return err;
	}
	folio_get(f);
	wait_stable(m, f);
	/* Every remover takes the folio lock, so holding only it from here
	 * to write_end is enough to keep the folio in the mapping. */
	brlock_read_unlock(&m->io_lock);
	mapping_cache_credit_return(m, &credit);
	size_t off = (size_t)(pos - f->pos);
	size_t n = MIN(len, folio_size(f) - off);
	if (n > SSIZE_MAX)
		n = SSIZE_MAX;
	err = prepare_write(m, f, off, n, true);
	if (err) {
		folio_unlock(f);
		folio_put(f);
		return err;
	}
	/* write_end() accepts exactly this: its edges are valid, nothing
	 * else is known to be. */
	folio_mark_write_begin(f, off, n);
	*folio = f;
	return (ssize_t)n;
}

ssize_t folio_mapping_write_end(struct folio_mapping *m, struct folio *f,
				uint64_t pos, size_t copied)
{
	if (!m || !f)
		return -EINVAL;
	bool mine = f->mapping == m && folio_test_write_begin(f);
	/* Only the range write_begin() prepared: its start, at most its
	 * length. Anything else would commit bytes nobody made valid. */
	if (!mine || pos != f->pos + f->begin_off || copied > f->begin_len)
		return -EINVAL;
	size_t off = f->begin_off, end = off + copied;
	size_t mask = folio_block_size(f) - 1;
	/* write_begin made only the edges of the planned range valid; a
	 * short copy that ends inside a block nobody filled must not mark
	 * that block, so the count stops at its start. */
	if ((end & mask) && folio_is_uptodate(f, end & ~mask, 1) == 0)
		end = MAX(off, end & ~mask);
	if (end > off)
		commit_write(m, f, off, end - off);
	folio_unlock(f); /* clears WRITE_BEGIN with LOCKED */
	folio_put(f);
	return (ssize_t)(end - off);
}

/* One folio of a read batch and the part of it the caller wants. */
struct read_slot {
	struct folio *folio;
	size_t off, len;
};

int mapping_queue_missing(struct rq_builder *b, struct folio *f, size_t off,
			  size_t len)
{
	if (folio_test_uptodate(f))
		return 0;
	size_t mask = folio_block_size(f) - 1;
	size_t at = off & ~mask;
	size_t end = (off + len + mask) & ~mask;
	while (at < end) {
		size_t run_off = at;
		ssize_t run = folio_next_missing(f, &run_off);
		if (run <= 0 || run_off >= end)
			break;
		size_t run_len = MIN((size_t)run, end - run_off);
		int r = rqb_add(b, f, run_off, run_len);
		if (r)
			return r;
		at = run_off + run_len;
	}
	return 0;
}

ssize_t folio_mapping_read(struct folio_mapping *m, void *buf, size_t len,
			   uint64_t pos)
{
	int err = check_io_args(m, buf, len, pos);
	if (err)
		return err;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;

	unsigned char *dst = buf;
	size_t done = 0, want = len;
	struct mapping_cache_credit credit = {0, 0};
	brlock_read_lock(&m->io_lock);
	uint64_t eof = mapping_eof(m);
	if (pos >= eof)
		len = 0;
	else
		len = (size_t)MIN((uint64_t)len, eof - pos);
	done = copy_cached(m, dst, len, pos, false, false);
	/* Readahead (readahead.c) learns from every read the cache could
	 * not serve, and may start reading beyond it before the read itself
	 * locks anything. */
	if (done < len)
		mapping_readahead_on_read(m, pos + done, len - done);
	while (done < len && !err) {
		struct read_slot slot[READ_BATCH];
		unsigned n = 0;
		struct io_group g;
		struct rq_builder b;
		start_reads(m, &b, &g);

		/* Lock a batch of folios in position order and queue their
		 * missing blocks; contiguous runs merge across folios. */
		for (size_t at = done; at < len && n < READ_BATCH;) {
			uint64_t p = pos + at;
			struct folio *f = mapping_find_or_create_locked(
				m, p, len - at, &credit, &err);
			if (!f)
				break;
			struct read_slot *s = &slot[n++];
			s->folio = f;
			s->off = (size_t)(p - f->pos);
			s->len = MIN(len - at, folio_size(f) - s->off);
			at += s->len;
			/* Readahead (readahead.c): a first use of a folio
			 * it brought in, or its mark reached. */
			mapping_readahead_reached(m, f);
			err = mapping_queue_missing(&b, f, s->off, s->len);
			if (err)
				break;
		}
		/* A full pool ends the batch: the folios it holds locked
		 * are read and released first, and only a batch that could
		 * not start waits for room (holding no lock, see write). */
		bool need_room = err == MAPPING_CACHE_FULL;
		if (need_room && n)
			err = 0;
		rqb_finish(&b);
		int r = finish_reads(m, &b, &g, mapping_read_end(m), true);
		(void)r; /* what matters is which bytes became uptodate */

		/* Copy out in order, stopping at the first range that could
		 * not be filled: the caller gets a short count. */
		bool stop = false;
		for (unsigned i = 0; i < n; i++) {
			struct read_slot *s = &slot[i];
			if (!stop && folio_is_uptodate(s->folio, s->off,
						       s->len) == 1) {
				memcpy(dst + done, s->folio->data + s->off,
				       s->len);
				done += s->len;
			} else if (!stop) {
				stop = true;
				if (!err)
					err = r ? r : -EIO;
			}
			folio_unlock(s->folio);
		}
		if (need_room && !n) {
			brlock_read_unlock(&m->io_lock);
			err = mapping_cache_reserve(m, &credit);
			brlock_read_lock(&m->io_lock);
			/* A truncate may have come in between: never read
			 * past the EOF of now. */
			eof = mapping_eof(m);
			uint64_t end = MIN(pos + want, MAX(eof, pos));
			len = (size_t)MAX(end - pos, (uint64_t)done);
		}
	}
	brlock_read_unlock(&m->io_lock);
	mapping_cache_credit_return(m, &credit);
	stat_add(&m->io_bytes[brlock_thread_stripe()].read, done);
	return done ? (ssize_t)done : err;
}
