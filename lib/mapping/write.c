/* SPDX-License-Identifier: MIT */
/*
 * Buffered write, the zero-copy write_begin/write_end pair, and the
 * throttling of writers of a cache over its dirty limits.
 */
#include <limits.h>
#include <string.h>

#include "mapping/cache.h"
#include "mapping/fill.h"
#include "mapping/lookup.h"
#include "mapping/request.h"
#include "mapping/tags.h"
#include "mapping/wait.h"

/*
 * Make the partly covered edge blocks of [off, off+len) valid before a
 * write: blocks at or past EOF are zero-filled, the others are read (one
 * request per contiguous run, so two adjacent edge blocks cost one read).
 * Wholly covered blocks are never read. With `mark` the edges are set
 * uptodate (write_begin hands the folio to the caller, who may copy less
 * than planned); write() leaves marking to its single dirty+uptodate
 * update. The folio's state map becomes its own first (-ENOMEM), so that
 * marking what is copied dirty cannot fail. On error nothing is marked.
 */
static int prepare_write(struct folio_mapping *m, struct folio *f, size_t off,
			 size_t len, bool mark)
{
	int own = folio_own_state(f);
	if (own || folio_all_uptodate(f))
		return own;
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
	mapping_start_reads(m, &b, &g);
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
	int r = mapping_finish_reads(m, &b, &g, eof, false);
	if (!err)
		err = r;
	if (!err && (mark || !len))
		for (unsigned i = 0; i < nedge; i++)
			folio_set_uptodate(f, edge[i].off, edge[i].len);
	return err;
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

/* The dirty+uptodate update of commit_write(), tagging the folio when it
 * became dirty; returns the blocks that were clean before. */
static size_t mark_written(struct folio_mapping *m, struct folio *f,
			   size_t off, size_t len)
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
	} else {
		r = folio_dirty_counted(f, off, len, true, &newly);
	}
	if (r > 0 && (r & FOLIO_BECAME_DIRTY))
		mapping_tag_dirty(m, f);
	return newly;
}

/*
 * Mark the bytes [pos, pos+len) of f dirty+uptodate after they were
 * copied in. Inline, with the update itself out of line: a rewrite of a
 * dirty block (the common small write) skips it and costs no call.
 * `folio_dirty` is m's FOLIO_MAPPING_FOLIO_DIRTY, from a caller that
 * may know it already: read here, after the copy, it is a load the
 * compiler cannot keep across memcpy().
 */
static inline __attribute__((always_inline)) void
commit_write(struct folio_mapping *m, struct folio *f, uint64_t pos,
	     size_t len, bool folio_dirty)
{
	size_t newly = 0;
	/* A rewrite of a dirty block needs no update. Every path that
	 * clears a mapping folio's dirty or uptodate state (writeback
	 * taking it, truncate, invalidate, read errors) holds the folio
	 * lock, which is ours, so the flags cannot change before it is
	 * released. Whole-folio tracking may have blocks past EOF to
	 * settle, so it always updates. */
	if (folio_dirty || !folio_single_dirty_uptodate(f))
		newly = mark_written(m, f, (size_t)(pos - f->pos), len);
	mapping_grow_eof(m, pos + len);
	if (newly && m->cache) {
		uint64_t bytes = (uint64_t)newly << f->block_shift;
		mapping_cache_account(m, (int64_t)bytes, 0, 0);
		dirtied_since_check += bytes;
	}
}

/* over_dirty_limit() once this thread dirtied enough to look. */
static bool dirty_limit_reached(struct mapping_cache *c)
{
	dirtied_since_check = 0;
	int64_t total = mapping_cache_dirty_total(c);
	if (total >= (int64_t)c->dirty_limit)
		return true;
	if (total >= (int64_t)c->dirty_background)
		c->ops->kick(c);
	return false;
}

/*
 * Has this thread dirtied enough to look at its pool's thresholds, and
 * is the pool over its dirty limit (the writer must be throttled, which
 * it may only be holding no lock)? Above the background threshold the
 * flushers are kicked on the way, which never sleeps.
 * Inline: every write asks, and mostly one or two loads answer.
 */
static inline bool over_dirty_limit(struct folio_mapping *m)
{
	struct mapping_cache *c = m->cache;
	return c && dirtied_since_check >= c->ratelimit &&
	       dirty_limit_reached(c);
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

static inline bool continues_last_write(const struct folio_mapping *m,
					uint64_t pos)
{
	return last_write.mapping_id == m->id && last_write.end == pos;
}

/*
 * The write fast path: overwrites of cached folios that are uptodate over
 * the bytes they change, so there is no folio to create and no edge
 * block to read. Copies [pos, pos+len) into such folios, in order, each
 * under a tried folio lock, and commit_write() marks them dirty exactly
 * as the ordinary path does, without its lookup-or-create loop and read
 * machinery, until a folio is missing, busy or not uptodate there.
 * Returns the bytes copied; the caller writes the rest the ordinary way.
 * Whole-folio tracking (edges always read) and stable writes (waits for
 * writeback) take the ordinary path. Caller holds io_lock shared. The
 * read fast path (read.c) is the same loop copying the other way. Always
 * inlined, like it: left to the heuristics, the compiler spills the
 * caller's arguments on every write.
 */
static inline __attribute__((always_inline)) size_t
write_cached(struct folio_mapping *m, const unsigned char *src, size_t len,
	     uint64_t pos, unsigned stripe)
{
	if (m->flags & (FOLIO_MAPPING_FOLIO_DIRTY | FOLIO_MAPPING_STABLE_WRITES))
		return 0;
	size_t done = 0;
	while (done < len) {
		uint64_t p = pos + done;
		struct folio *f;
		size_t off;
		/* Only a lookup in the index asks whether a write continues
		 * the thread's last one (mapping_trylock_cached()): a write
		 * within the hint's folio never looks. */
		if (mapping_hint_holding(m, p, &f, &off))
			f = mapping_trylock_hint(m, f, stripe);
		else if ((f = mapping_trylock_cached(
				  m, p, continues_last_write(m, pos), stripe)))
			off = (size_t)(p - f->pos);
		if (!f)
			break;
		size_t n = MIN(len - done, folio_bytes(f) - off);
		/* A shared state map becomes the folio's own before the
		 * copy: marking the bytes dirty after it cannot fail. */
		if (!folio_ready_for_write(f) &&
		    ((!folio_all_uptodate(f) &&
		      folio_is_uptodate(f, off, n) != 1) ||
		     folio_own_state(f))) {
			folio_unlock_held(f);
			break;
		}
		memcpy(f->data + off, src + done, n);
		commit_write(m, f, p, n, false);
		folio_unlock_held(f);
		done += n;
		if (done < len)
			throttle_between_folios(m);
	}
	return done;
}


/*
 * The ordinary write path, from byte `done` on: per folio, find or create
 * it, make its edges valid, copy and commit. Returns what the write
 * returns: the bytes written in all, or the error that stopped it before
 * any. Caller holds io_lock shared. Out of line so that the fast path's
 * frame stays small.
 */
static __attribute__((noinline)) ssize_t
write_folios(struct folio_mapping *m, const unsigned char *src, size_t len,
	     uint64_t pos, size_t done)
{
	int err = 0;
	struct mapping_cache_credit credit = {0, 0};
	while (done < len) {
		uint64_t p = pos + done;
		struct folio *f = mapping_grab(m, p, len - done, &credit,
					       &err);
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
			commit_write(m, f, p, n,
				     m->flags & FOLIO_MAPPING_FOLIO_DIRTY);
			done += n;
		}
		folio_unlock_held(f);
		if (err)
			break;
		if (done < len)
			throttle_between_folios(m);
	}
	/* Under io_lock, as when create_charged() gives back what it did
	 * not use: uncharging never waits. */
	mapping_cache_credit_return(m, &credit);
	return done ? (ssize_t)done : err;
}

ssize_t folio_mapping_write(struct folio_mapping *m, const void *buf,
			    size_t len, uint64_t pos)
{
	int err = mapping_check_io_args(m, buf, len, pos);
	if (err)
		return err;
	if (!len)
		return 0;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;

	const unsigned char *src = buf;
	unsigned stripe = brlock_thread_stripe();
	brlock_read_lock_at(&m->io_lock, stripe);
	ssize_t ret = (ssize_t)write_cached(m, src, len, pos, stripe);
	if ((size_t)ret < len)
		ret = write_folios(m, src, len, pos, (size_t)ret);
	brlock_read_unlock_at(&m->io_lock, stripe);
	size_t done = ret > 0 ? (size_t)ret : 0;
	/* Once per call, as a read counts what it returned. */
	stat_add(&m->stats.io_bytes[stripe].written, done);
	last_write.mapping_id = m->id;
	last_write.end = pos + done;
	if (over_dirty_limit(m))
		throttle(m);
	return ret;
}

ssize_t folio_mapping_write_begin(struct folio_mapping *m, uint64_t pos,
				  size_t len, struct folio **folio)
{
	if (!folio || !len)
		return -EINVAL;
	int err = mapping_check_io_args(m, folio, len, pos);
	if (err)
		return err;
	/* Zero-copy writers are throttled here, before anything is
	 * locked; write_end() runs with the folio locked. */
	if (over_dirty_limit(m))
		throttle(m);
	struct mapping_cache_credit credit = {0, 0};
	struct folio *f;
	brlock_read_lock(&m->io_lock);
	while (!(f = mapping_grab(m, pos, len, &credit, &err)) &&
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
	folio_ref(f);
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
		folio_unref(f);
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
	if (end > off) {
		commit_write(m, f, pos, end - off,
			     m->flags & FOLIO_MAPPING_FOLIO_DIRTY);
		stat_add(&m->stats.io_bytes[brlock_thread_stripe()].written,
			 end - off);
	}
	folio_unlock(f); /* clears WRITE_BEGIN with LOCKED */
	folio_unref(f);
	return (ssize_t)(end - off);
}
