/* SPDX-License-Identifier: MIT */
/*
 * Buffered read.
 */
#include <limits.h>
#include <string.h>

#include "mapping/cache.h"
#include "mapping/fill.h"
#include "mapping/lookup.h"
#include "mapping/readahead.h"
#include "mapping/request.h"

/* Folios one read locks and fills at once: bounds the folio array on the
 * stack while letting a large read become a few big engine requests. */
#define READ_BATCH 64

/* One folio of a read batch and the part of it the caller wants. */
struct read_slot {
	struct folio *folio;
	size_t off, len;
};

/* Copies an optimistic read of one folio tries before the locked
 * path: a writer that keeps changing the folio makes a reader wait for
 * its lock rather than copy over and over. */
#define READ_OPTIMISTIC_TRIES 3

/* The bytes of a read of `want` at pos that lie below EOF as of now. */
static inline size_t read_len(struct folio_mapping *m, uint64_t pos,
			      size_t want)
{
	uint64_t eof = mapping_eof(m);
	return pos >= eof ? 0 : (size_t)MIN((uint64_t)want, eof - pos);
}

/* read_optimistic()'s copy again, after its first one failed to
 * validate: out of line, so that the first one's frame stays small. */
static __attribute__((noinline)) bool
read_optimistic_again(const struct folio *f, unsigned char *buf, size_t off,
		      size_t n)
{
	for (unsigned i = 1; i < READ_OPTIMISTIC_TRIES; i++) {
		struct folio_seq s;
		if (!folio_read_begin(f, &s))
			break;
		folio_copy_racy(buf, f->data + off, n);
		if (folio_read_valid(f, &s))
			return true;
	}
	return false;
}

/*
 * The validated copy of n bytes at off of f: false when the locked
 * path must decide. `excl` (see read_optimistic()) is checked once the
 * folio's version is read: a truncate or invalidate whose increment it
 * misses made no change this copy or the caller's EOF can have seen
 * (base/brlock.h), and the version catches any it makes from then on.
 */
static inline __attribute__((always_inline)) bool
read_copy(struct folio_mapping *m, const struct folio *f, unsigned char *buf,
	  size_t off, size_t n, const unsigned *excl)
{
	struct folio_seq s;
	if (!folio_read_begin(f, &s))
		return false;
	if (excl && !brlock_optimistic_valid(&m->io_lock, *excl))
		return false;
	folio_copy_racy(buf, f->data + off, n);
	if (folio_read_valid(f, &s))
		return true;
	/* Without io_lock the locked path retries, under it. */
	return excl ? false : read_optimistic_again(f, buf, off, n);
}

/* How much of len a copy from off of f takes: what f holds of it, or,
 * lock-free (excl), all of it or nothing (the rest of a read that
 * crosses folios needs io_lock): false then. */
static inline bool read_span(const struct folio *f, size_t off, size_t len,
			     const unsigned *excl, size_t *n)
{
	size_t room = folio_bytes(f) - off;
	if (excl) {
		*n = len;
		return len <= room;
	}
	*n = MIN(len, room);
	return true;
}

/*
 * One folio's part of a cached read that writes nothing the folio's other
 * users read (doc/design.md, "Optimistic reads"): find the folio holding p
 * (the thread's hint, whose pinned reference keeps it mapped, else the
 * index inside an epoch section, which keeps its header mapped and, with
 * the allocator's grace period before any unmap, its data), copy while it
 * is unlocked, uptodate and unmarked, and keep the copy only when its
 * version did not move meanwhile. True with the bytes copied in *copied
 * (all of len lock-free; never 0 for a len above 0), false when the
 * locked path must decide (missing, busy, partly uptodate, a readahead
 * mark to take, a writer that kept changing it). The caller holds io_lock
 * shared (excl NULL), or holds nothing and passes the io_lock token
 * that brlock_optimistic_begin() gave it before it loaded EOF: then the copy is
 * all of len or nothing, and it is not retried here.
 */
static inline __attribute__((always_inline)) bool
read_optimistic(struct folio_mapping *m, unsigned char *buf, size_t len,
		uint64_t p, unsigned stripe, const unsigned *excl,
		size_t *copied)
{
	struct folio *f;
	size_t off;
	bool got;
	/* The hint and the index each with a copy of their own: one
	 * shared copy would carry which of them found the folio, and its
	 * epoch slot, across the memcpy() call, in a frame that already
	 * keeps the caller's arguments live there. */
	if (mapping_hint_holding(m, p, &f, &off)) {
		got = read_span(f, off, len, excl, copied) &&
		      read_copy(m, f, buf, off, *copied, excl);
		/* Hint hits are no accesses (mapping_grab()). */
		if (got && m->cache)
			mapping_count_hit(m, stripe);
		return got;
	}
	unsigned ep = epoch_read_enter_at(stripe);
	f = index_lookup_inline(&m->index, mapping_key(m, p));
	/* A lookup racing a remove and a smaller insert may reach a folio
	 * that does not hold p (lookup.c). */
	uint64_t o;
	if (!f || (o = p - f->pos) >= folio_bytes(f) ||
	    !read_span(f, (size_t)o, len, excl, copied)) {
		epoch_read_exit(ep);
		return false;
	}
	got = read_copy(m, f, buf, (size_t)o, *copied, excl);
	if (got && m->cache) {
		/* The count is written only while it can still rise. */
		folio_note_access(f);
		mapping_count_hit(m, stripe);
	}
	epoch_read_exit(ep);
	return got;
}

/* One folio's part under a tried folio lock: what read_optimistic() left
 * (partly uptodate folios, readahead marks, a busy writer). 0 when the
 * folio is missing, locked by someone else or not uptodate over the part
 * wanted. */
static size_t read_locked(struct folio_mapping *m, unsigned char *buf,
			  size_t len, uint64_t p, unsigned stripe)
{
	struct folio *f;
	size_t off;
	if (mapping_hint_holding(m, p, &f, &off))
		f = mapping_trylock_hint(m, f, stripe);
	else if ((f = mapping_trylock_cached(m, p, false, stripe)))
		off = (size_t)(p - f->pos);
	if (!f)
		return 0;
	size_t n = MIN(len, folio_bytes(f) - off);
	bool ok = folio_all_uptodate(f) || folio_is_uptodate(f, off, n) == 1;
	if (ok) {
		memcpy(buf, f->data + off, n);
		/* Readahead (readahead.c): see folio_mapping_read(). */
		mapping_readahead_reached(m, f);
	}
	folio_unlock_unchanged(f);
	return ok ? n : 0;
}

/*
 * The read fast path: copy [pos, pos+len) out of cached folios that are
 * uptodate over the part wanted, in order, each one atomically against
 * writes (an optimistic copy its version validates, else under a tried
 * folio lock), until a folio is missing, busy or not uptodate there: no
 * request, no io_group, no engine. Returns the bytes copied; the caller
 * does the rest the ordinary way, which waits for busy folios. Caller
 * holds io_lock shared and has clamped len to EOF (a read one folio
 * serves whole ends before, in folio_mapping_read(), without io_lock).
 * The write fast path (write.c) is the locked loop copying the other
 * way.
 */
static __attribute__((noinline)) size_t
read_cached(struct folio_mapping *m, unsigned char *buf, size_t len,
	    uint64_t pos, unsigned stripe)
{
	size_t done = 0;
	while (done < len) {
		size_t n;
		if (!read_optimistic(m, buf + done, len - done, pos + done,
				     stripe, NULL, &n))
			n = read_locked(m, buf + done, len - done, pos + done,
					stripe);
		if (!n)
			break;
		done += n;
	}
	return done;
}

/*
 * The rest of a read the cached path left at `done` (of len, clamped to
 * EOF; `want` as asked), holding io_lock shared, which it drops; returns
 * what folio_mapping_read() returns. Out of line, so that a hit's frame
 * holds none of the batch below.
 */
static __attribute__((noinline)) ssize_t
read_uncached(struct folio_mapping *m, unsigned char *dst, size_t len,
	      uint64_t pos, size_t want, size_t done)
{
	int err = 0;
	struct mapping_cache_credit credit = {0, 0};
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
		mapping_start_reads(m, &b, &g);

		/* Lock a batch of folios in position order and queue their
		 * missing blocks; contiguous runs merge across folios. */
		for (size_t at = done; at < len && n < READ_BATCH;) {
			uint64_t p = pos + at;
			struct folio *f = mapping_grab(m, p, len - at,
						       &credit, &err);
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
		int r = mapping_finish_reads(m, &b, &g, mapping_read_end(m), true);
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
			len = MAX(read_len(m, pos, want), done);
		}
	}
	brlock_read_unlock(&m->io_lock);
	mapping_cache_credit_return(m, &credit);
	stat_add(&m->stats.io_bytes[brlock_thread_stripe()].read, done);
	return done ? (ssize_t)done : err;
}

/*
 * A read under io_lock shared: what the lock-free path could not take
 * whole (a read crossing folios, a folio missing, busy or changing, a
 * truncate or invalidate under way). Out of line: a hit's frame holds
 * none of this.
 */
static __attribute__((noinline)) ssize_t
read_shared(struct folio_mapping *m, unsigned char *buf, size_t want,
	    uint64_t pos, unsigned stripe)
{
	brlock_read_lock_at(&m->io_lock, stripe);
	size_t len = read_len(m, pos, want);
	size_t done = len ? read_cached(m, buf, len, pos, stripe) : 0;
	if (done < len)
		return read_uncached(m, buf, len, pos, want, done);
	brlock_read_unlock_at(&m->io_lock, stripe);
	stat_add(&m->stats.io_bytes[stripe].read, done);
	return (ssize_t)done;
}

/* folio_mapping_read() of what the lock-free path did not take: the
 * arguments checked, then under io_lock. Out of line: a hit's frame
 * holds none of it. */
static __attribute__((noinline)) ssize_t
read_checked(struct folio_mapping *m, unsigned char *buf, size_t len,
	     uint64_t pos, unsigned stripe)
{
	int err = mapping_check_io_args(m, buf, len, pos);
	if (err)
		return err;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	return read_shared(m, buf, len, pos, stripe);
}

ssize_t folio_mapping_read(struct folio_mapping *m, void *buf, size_t len,
			   uint64_t pos)
{
	if (!m)
		return -EINVAL;
	/* One stripe lookup for the epoch, the counter and the lock. */
	unsigned stripe = brlock_thread_stripe();
	/*
	 * The first folio without io_lock (doc/design.md, "Optimistic
	 * reads"): only an exclusive hold changes what a read may return
	 * beyond one folio's version (EOF going down, folios cut), and
	 * io_lock's token, taken before EOF is loaded and checked once the
	 * folio's version is, says whether one could have been seen. A read
	 * wholly within one cached folio ends here. Wholly below EOF, which
	 * is at most FOLIO_MAX_POS, its position and length need no other
	 * check; anything else (a read reaching EOF among it) goes the
	 * checked way.
	 */
	unsigned excl;
	if (brlock_optimistic_begin(&m->io_lock, &excl)) {
		uint64_t eof = mapping_eof(m);
		size_t n;
		if (pos < eof && len <= eof - pos &&
		    __builtin_expect(buf != NULL, 1) &&
		    read_optimistic(m, buf, len, pos, stripe, &excl, &n)) {
			stat_add(&m->stats.io_bytes[stripe].read, n);
			return (ssize_t)n;
		}
	}
	return read_checked(m, buf, len, pos, stripe);
}
