/* SPDX-License-Identifier: MIT */
/*
 * Writeback: turn dirty runs into as few engine requests as possible, and
 * keep every byte safe when a request fails.
 *
 * Each folio under writeback carries a pending-byte counter with a bias:
 * it is set to one more than the folio size when writeback starts, each
 * completed piece subtracts its bytes, and the submitter subtracts the part
 * of the bias it did not submit (at least 1) once it has added all the
 * folio's runs. Whoever brings it to zero ends the folio's writeback, so
 * completions that arrive before the submitter has finished (inline
 * engines) cannot end it early, even when they cover the whole folio.
 * Which locks a pass and a completion take: doc/design.md, "Concurrency".
 */
#include <stdlib.h>
#include <string.h>

#include "base/futex.h"
#include "mapping/cache.h"
#include "mapping/commit.h"
#include "mapping/errseq.h"
#include "mapping/request.h"
#include "mapping/tags.h"
#include "mapping/wait.h"
#include "mapping/writeback.h"

#define MAX_SEGMENTS_LIMIT 1024u
/* Runs taken from a folio per lock round trip. */
#define RUNS_PER_TAKE 64

/* A folio's share of a request finished (bytes counted against its bias). */
static void wb_folio_done(struct folio_mapping *m, struct folio *f,
			  struct index_place at, long long bytes)
{
	if (atomic_fetch_sub(&f->wb_pending, bytes) != bytes)
		return;
	/* Before writeback ends: until then nothing removes the folio, so
	 * its node stays. The bits above are pruned by a later pass. */
	mapping_tag_drop_at(m, f, at, INDEX_TAG_WRITEBACK, NULL);
	folio_end_writeback_held(f);
	folio_unref(f); /* the reference writeback took */
}

/* Put back the dirty bits of bytes that did not reach the store. */
static void redirty(struct folio_mapping *m, struct folio *f, size_t off,
		    size_t len)
{
	size_t newly = 0;
	int r = folio_dirty_counted(f, off, len, false, &newly);
	if (r > 0 && (r & FOLIO_BECAME_DIRTY))
		mapping_tag_dirty(m, f);
	mapping_cache_account(m, mapping_block_bytes(f, newly), 0, 0);
}

static void wb_end_io(struct engine_io *rq, ssize_t result)
{
	struct mapping_io *io = container_of(rq, struct mapping_io, base);
	struct folio_mapping *m = io->m;
	size_t len = io->base.io.len;
	/* A durable write that failed only in its barrier completes with
	 * its full length: its bytes count as written (they are in the
	 * store, whose size they grew), and mapping_durable_epoch()
	 * records the failure as the flush's it was. */
	int err = result < 0 ? (int)result : 0;
	size_t good = result < 0 ? 0 : MIN((size_t)result, len);
	bool drop = err && (m->flags & FOLIO_MAPPING_DROP_ON_ERROR);
	uint64_t gen = mapping_unstable_gen(m, io, result);

	/* Everything a waiter acts on is in place before the first folio's
	 * writeback ends: the bytes that did not make it are dirty again,
	 * the bytes that did are unstable, and the error or short count is
	 * recorded; a sync woken by the end of writeback then sees all of
	 * it. */
	size_t at = 0;
	for (unsigned i = 0; i < io->nsegs; i++) {
		struct rq_seg *s = &io->segs[i];
		size_t ok = good > at ? MIN(good - at, s->len) : 0;
		if (ok)
			mapping_mark_unstable(m, s, ok, gen,
					      io->flush_failures);
		if (ok < s->len && !drop)
			redirty(m, s->folio, s->off + ok, s->len - ok);
		at += s->len;
	}
	/* A flush of the engine failed while this write was in flight: it
	 * may have dropped what the write put in the store, before or
	 * after the failed flush settled this mapping's unstable blocks
	 * (marking first and looking after closes the gap: the failed
	 * flush counts before it settles). Dirty now, the next sync writes
	 * it; left unstable, a later flush would find it lost only after
	 * that sync's pass (test_write_in_flight_across_settled_failure). */
	if (good && !drop &&
	    atomic_load(&m->engine->flush_failures) != io->flush_failures) {
		for (unsigned i = 0; i < io->nsegs; i++)
			mapping_unstable_lost(m, io->segs[i].folio);
		atomic_fetch_add(&m->wb.rewrites, 1);
	}
	if (good)
		mapping_size_raise(&m->size.backing, io->base.io.pos + good);
	else if (err)
		mapping_size_raise(&m->size.landed_maybe,
				   io->base.io.pos + len);
	if (err) {
		errseq_record(m, err);
	} else if (good < len) {
		stat_add(&m->stats.retries, 1);
		atomic_fetch_add(&m->wb.rewrites, 1);
	}
	mapping_cache_account(m, 0, -(int64_t)len, 0);
	for (unsigned i = 0; i < io->nsegs; i++)
		wb_folio_done(m, io->segs[i].folio, io->segs[i].at,
			      (long long)io->segs[i].len);
	/* Bytes that reached the store are what waiters for room or for
	 * dirty data to drop need. Before the group drops: the pass waiting
	 * for this request may return, and its mapping go, at once. */
	if (good)
		mapping_cache_progress(m);
	/* The pass waiting for this request may return (and its group go
	 * away) as soon as the group drops: touch nothing after that. */
	struct io_group *group = io->group;
	mapping_io_free(io);
	futex_count_put(&m->wb.inflight);
	if (group)
		io_group_done(group, err);
}

struct wb_params {
	uint64_t start, end; /* end: exclusive, already clamped */
	bool wait_busy;
	bool wait_own; /* wait for this pass's requests (implied by busy) */
	uint64_t budget;
	size_t max_request;
	unsigned max_segments;
	size_t merge_gap;
	uint64_t resume; /* out: where a pass the budget stopped ends, or 0
			  * when it reached the end of its range */
	struct mapping_durable *durable; /* a sync's, or NULL */
	struct folio_list *written;     /* a sync's, or NULL */
};

static int parse_opts(const struct folio_mapping *m,
		      const struct folio_writeback_opts *o, struct wb_params *p)
{
	memset(p, 0, sizeof(*p));
	p->end = FOLIO_MAX_POS;
	p->max_request = RQ_DEFAULT_MAX_BYTES;
	p->max_segments = RQ_DEFAULT_MAX_SEGS;
	if (!o)
		return 0;
	int r = sized_check(o, o->sz,
			    SIZEOF_THROUGH(struct folio_writeback_opts,
					   merge_gap),
			    sizeof(*o));
	if (r)
		return r;
	/* A request smaller than a block could never carry a dirty block. */
	if ((o->flags & ~FOLIO_WB_WAIT) || (o->end && o->end < o->start) ||
	    o->max_segments > MAX_SEGMENTS_LIMIT ||
	    (o->max_request &&
	     o->max_request < ((size_t)1 << m->block_shift)))
		return -EINVAL;
	p->start = o->start;
	if (o->end)
		p->end = MIN(o->end, FOLIO_MAX_POS);
	p->wait_busy = o->flags & FOLIO_WB_WAIT;
	p->budget = o->budget;
	if (o->max_request)
		p->max_request = o->max_request;
	if (o->max_segments)
		p->max_segments = o->max_segments;
	p->merge_gap = o->merge_gap;
	return 0;
}

/*
 * Join runs separated by at most merge_gap bytes of clean blocks that are
 * uptodate (their bytes are valid, so writing them again is harmless and
 * saves a request). Runs are sorted; returns the new count.
 */
static int merge_gaps(struct folio *f, struct folio_range *runs, int n,
		      size_t gap)
{
	if (!gap || n < 2)
		return n;
	int out = 0;
	for (int i = 1; i < n; i++) {
		struct folio_range *prev = &runs[out];
		size_t prev_end = prev->off + prev->len;
		size_t hole = runs[i].off - prev_end;
		if (hole <= gap && folio_is_uptodate(f, prev_end, hole) == 1) {
			prev->len = runs[i].off + runs[i].len - prev->off;
		} else {
			runs[++out] = runs[i];
		}
	}
	return out + 1;
}

static bool still_dirty(const struct folio *f)
{
	return folio_flag_dirty(f);
}

/*
 * Write back one locked, dirty folio sitting at `at` in the index: take its
 * runs and queue them. The caller's reference becomes writeback's, which
 * its end drops: the folio stays valid while locked all the same, since
 * the index holds it until it is removed under its lock. Returns the
 * bytes queued.
 */
static uint64_t writeback_folio(struct folio_mapping *m, struct rq_builder *b,
				struct folio *f, struct index_place at,
				size_t gap)
{
	/* EOF as of now, under the folio lock: a writer grows EOF before it
	 * unlocks the folio it appended to, so every dirty byte of this
	 * folio lies below it. An EOF read at the start of the pass could
	 * be older than bytes appended since. */
	uint64_t eof = mapping_eof(m);
	long long bias = (long long)folio_bytes(f) + 1;
	atomic_store(&f->wb_pending, bias);
	/* Cannot fail: the caller waited for the folio's last writeback
	 * under the lock it holds. */
	(void)folio_trystart_writeback(f);
	/* Before DIRTY goes: a sync that no longer finds the folio dirty
	 * must find it under writeback. */
	mapping_tag_set_at(m, f, at, INDEX_TAG_WRITEBACK);
	b->at = at;

	uint64_t queued = 0, taken = 0;
	struct folio_range runs[RUNS_PER_TAKE];
	size_t from = 0;
	int n;
	while ((n = folio_take_dirty_from(f, from, runs, RUNS_PER_TAKE)) > 0) {
		from = runs[n - 1].off + runs[n - 1].len;
		/* Before merging: a gap of clean blocks was never dirty. */
		for (int i = 0; i < n; i++)
			taken += runs[i].len;
		bool more = n == RUNS_PER_TAKE;
		n = merge_gaps(f, runs, n, gap);
		for (int i = 0; i < n; i++) {
			uint64_t pos = f->pos + runs[i].off;
			/* A run may end in the block holding EOF: write
			 * only up to EOF so the store does not grow past
			 * it. A run wholly past EOF cannot exist (see
			 * above); were there one, it stays dirty rather
			 * than vanish unwritten. */
			if (pos >= eof) {
				redirty(m, f, runs[i].off, runs[i].len);
				continue;
			}
			size_t len = (size_t)MIN((uint64_t)runs[i].len,
						 eof - pos);
			uint64_t before = b->added;
			int r = rqb_add(b, f, runs[i].off, len);
			size_t got = (size_t)(b->added - before);
			queued += got;
			if (r) {
				/* The rest was not queued: keep it dirty and
				 * tell sync. */
				redirty(m, f, runs[i].off + got,
					runs[i].len - got);
				errseq_record(m, r);
			}
		}
		/* Fewer runs than asked for: that was all of them. */
		if (!more)
			break;
	}

	/* Dirty bits are gone: drop the tag unless a run was put back. */
	mapping_tag_drop_at(m, f, at, INDEX_TAG_DIRTY, still_dirty);

	/* Counted before the bias drops: completions subtract what they
	 * finish, and the runs put back were counted by redirty(). */
	mapping_cache_account(m, -(int64_t)taken, (int64_t)queued, 0);
	wb_folio_done(m, f, at, bias - (long long)queued);
	return queued;
}

/* Dirty folios found per index round trip. */
#define WB_BATCH 32

/* One folio the pass found tagged dirty, with a reference the call
 * consumes: write it back if it still is. Returns the bytes queued. */
static uint64_t visit_folio(struct folio_mapping *m, struct rq_builder *b,
			    struct wb_params *p, struct folio *f,
			    struct index_place at)
{
	mapping_lock_folio(m, f);
	/* Reclaimed meanwhile (it was clean; its node may be gone), or busy
	 * and this pass does not wait. */
	bool skip = folio_test_removed(f) ||
		    (folio_flag_writeback(f) && !p->wait_busy);
	if (!skip && folio_flag_writeback(f)) {
		/* Never sleep on a request we still hold. */
		rqb_finish(b);
		int r = mapping_wait_writeback(m, f);
		if (r)
			errseq_record(m, r);
	}
	if (!skip && folio_flag_dirty(f)) {
		/* Before writeback_folio(): the caller's reference becomes
		 * writeback's, which a completion may drop inside it. */
		if (p->written)
			folio_list_add(p->written, f, at);
		uint64_t queued = writeback_folio(m, b, f, at, p->merge_gap);
		/* Dirty runs taken, writeback started: nothing an
		 * optimistic reader sees changed. */
		folio_unlock_unchanged(f);
		return queued;
	}
	/* A stale tag (the runs went out with an earlier pass): drop it. */
	if (!skip)
		mapping_tag_drop_at(m, f, at, INDEX_TAG_DIRTY, still_dirty);
	folio_unlock_unchanged(f);
	folio_unref(f);
	return 0;
}

/*
 * The folios in [start, end) under writeback as a data-integrity pass's
 * walk ends: writes another pass took (so this walk found them clean)
 * that the caller must see land. Writebacks that start later carry only
 * data dirtied after the walk passed, which the caller need not wait for:
 * with many threads syncing one file, waiting for whatever is under
 * writeback once the caller's own requests are done waited for their
 * next writes too.
 */
static void collect_busy(struct folio_mapping *m, uint64_t start,
			 uint64_t end, struct folio_list *busy)
{
	if (start >= end)
		return;
	uint64_t key = mapping_key(m, start);
	uint64_t last = mapping_key(m, end - 1);
	struct index_hit hits[WB_BATCH];
	unsigned n;
	while ((n = mapping_next_tagged_batch(m, &key, last,
					      INDEX_TAG_WRITEBACK, hits,
					      WB_BATCH))) {
		for (unsigned i = 0; i < n; i++) {
			struct folio *f = hits[i].entry;
			if (folio_test_writeback(f))
				folio_list_add(busy, f, hits[i].at);
			folio_unref(f);
		}
	}
}

/* Wait for the writebacks collect_busy() found, or, when it could not
 * record them all, for everything under writeback in the range. Returns
 * 0 or the first error of the engine's wait(). */
static int wait_busy(struct folio_mapping *m, const struct wb_params *p,
		     const struct folio_list *busy)
{
	if (busy->incomplete)
		return mapping_wait_range_writeback(m, p->start, p->end);
	int err = 0;
	for (size_t i = 0; i < busy->n; i++) {
		int r = mapping_wait_writeback(m, busy->v[i].folio);
		if (!err)
			err = r;
	}
	return err;
}

static int64_t writeback_pass(struct folio_mapping *m,
			      struct wb_params *p)
{
	/* A data-integrity pass waits for its own requests only. */
	struct io_group own;
	io_group_init(&own);
	bool wait_own = p->wait_busy || p->wait_own;
	struct rq_builder b;
	rqb_init(&b, m, FOLIO_IO_WRITE, wait_own ? &own : NULL, wb_end_io);
	if (wait_own)
		rqb_set_waited(&b);
	b.max_bytes = p->max_request;
	b.max_segs = p->max_segments;

	brlock_read_lock(&m->io_lock);
	/* Folios appended past this EOF during the pass are left for the
	 * next one; those below it are written up to EOF as it is when
	 * each is locked. */
	uint64_t end = MIN(p->end, mapping_eof(m));
	uint64_t queued = 0;
	p->resume = 0;
	uint64_t first = mapping_key(m, p->start), visited = first;
	bool seen = false;
	if (p->start < end) {
		uint64_t key = first;
		uint64_t last = mapping_key(m, end - 1);
		visited = last;
		struct index_hit hits[WB_BATCH];
		unsigned n = 0, i = 0;
		for (;; i++) {
			if (i == n) {
				n = mapping_next_tagged_batch(
					m, &key, last, INDEX_TAG_DIRTY, hits,
					WB_BATCH);
				i = 0;
				if (!n)
					break;
				seen = true;
			}
			queued += visit_folio(m, &b, p, hits[i].entry,
					      hits[i].at);
			if (p->budget && queued >= p->budget) {
				uint64_t next = hits[i].first +
						(UINT64_C(1) << hits[i].order);
				if (next && next <= last) {
					p->resume = next << m->min_shift;
					visited = next - 1;
				}
				while (++i < n)
					folio_unref(hits[i].entry);
				break;
			}
		}
	}
	/* Before this pass's last request goes out: its wait must not
	 * depend on how soon other passes start writing. */
	struct folio_list busy;
	folio_list_init(&busy);
	if (p->wait_busy)
		collect_busy(m, p->start, p->end, &busy);
	/* A sync whose data is this one request can have the engine make
	 * it durable on completion; with more, a flush after all of them
	 * costs less than a barrier per request. */
	if (p->durable && b.cur && !b.submitted_count &&
	    mapping_durable_begin(m, p->durable))
		b.cur->base.io.flags |= FOLIO_IO_DURABLE;
	rqb_finish(&b);
	brlock_read_unlock(&m->io_lock);
	if (wait_own) {
		/* Request errors are recorded by their completions; what
		 * else comes back is the engine's wait() failing, and a
		 * data-integrity pass must not look like it succeeded. */
		int r = io_group_wait(&own, m->engine);
		if (r && r != atomic_load(&own.error))
			errseq_record(m, r);
	}
	if (p->wait_busy) {
		/* Writes other threads started before this pass's walk
		 * ended: a folio whose runs another pass took is no longer
		 * dirty, so this pass never visited it. */
		int r = wait_busy(m, p, &busy);
		if (r)
			errseq_record(m, r);
		folio_list_release(&busy);
	}
	/* The tags the pass dropped (and the completions it waited for)
	 * leave stale bits above: clear them in one exclusive step. */
	if (seen)
		mapping_tags_prune(m, first, visited,
				   1u << INDEX_TAG_DIRTY |
					   1u << INDEX_TAG_WRITEBACK);
	return (int64_t)queued;
}

int64_t folio_mapping_writeback(struct folio_mapping *m,
				const struct folio_writeback_opts *opts)
{
	if (!m)
		return -EINVAL;
	struct wb_params p;
	int r = parse_opts(m, opts, &p);
	if (r)
		return r;
	return writeback_pass(m, &p);
}

int64_t mapping_writeback_chunk(struct folio_mapping *m, uint64_t *cursor,
				uint64_t max_bytes)
{
	struct wb_params p;
	parse_opts(m, NULL, &p);
	p.start = MIN(*cursor, FOLIO_MAX_POS);
	p.budget = max_bytes;
	p.wait_own = true;
	int64_t n = writeback_pass(m, &p);
	*cursor = p.resume;
	return n;
}

/* Passes a sync makes while completions keep putting bytes back
 * (m->wb.rewrites). */
#define SYNC_MAX_PASSES 16

int folio_mapping_sync(struct folio_mapping *m, folio_errseq_t *cursor)
{
	if (!m)
		return -EINVAL;
	folio_errseq_t begin = atomic_load(&m->err.seq);
	struct wb_params p;
	parse_opts(m, NULL, &p);
	p.wait_busy = true;
	struct mapping_durable d = {
		.wanted = engine_has_durable(m->engine) &&
			  !(m->flags & FOLIO_MAPPING_DROP_ON_ERROR),
	};
	p.durable = &d;
	/* Nothing is kept unstable under DROP_ON_ERROR: nothing to settle. */
	struct folio_list written;
	folio_list_init(&written);
	if (!(m->flags & FOLIO_MAPPING_DROP_ON_ERROR))
		p.written = &written;
	atomic_fetch_add_explicit(&m->commit.syncers, 1, memory_order_relaxed);

	for (int pass = 0;; pass++) {
		uint64_t rewrites = atomic_load(&m->wb.rewrites);
		writeback_pass(m, &p);
		p.durable = NULL; /* one per sync: it holds the flush role */
		if (atomic_load(&m->wb.rewrites) == rewrites)
			break;
		if (pass + 1 == SYNC_MAX_PASSES) {
			/* The engine keeps writing short, or flushes keep
			 * failing under writes in flight: the rest is still
			 * dirty, and this sync must not claim success. */
			errseq_record(m, -EIO);
			break;
		}
	}
	/* Its error, if any, is in the sequence the cursor reads. */
	mapping_commit_sync(m, &d, &written);
	folio_list_release(&written);
	atomic_fetch_sub_explicit(&m->commit.syncers, 1, memory_order_relaxed);
	return errseq_check_advance(m, cursor, begin);
}

struct range_acc {
	int (*fn)(uint64_t, uint64_t, void *);
	void *arg;
	uint64_t pos, len; /* the range being merged, len 0: none */
};

static int range_emit(struct range_acc *a, uint64_t pos, uint64_t len)
{
	if (a->len && a->pos + a->len == pos) {
		a->len += len;
		return 0;
	}
	int r = a->len ? a->fn(a->pos, a->len, a->arg) : 0;
	a->pos = pos;
	a->len = len;
	return r;
}

int folio_mapping_dirty_ranges(struct folio_mapping *m, uint64_t start,
			       uint64_t end,
			       int (*fn)(uint64_t pos, uint64_t len, void *arg),
			       void *arg)
{
	if (!m || !fn || (end && end < start))
		return -EINVAL;
	struct range_acc acc = {fn, arg, 0, 0};
	int r = 0;
	/* Only folio references are held while fn runs: no lock, so fn may
	 * call back into the mapping. */
	uint64_t eof = mapping_eof(m);
	uint64_t stop = MIN(end ? end : FOLIO_MAX_POS, eof);
	if (start < stop) {
		uint64_t key = mapping_key(m, start);
		uint64_t last = mapping_key(m, stop - 1);
		struct folio *f;
		while (!r && (f = mapping_next_folio(m, &key, last,
						     INDEX_TAG_DIRTY))) {
			size_t off = 0;
			ssize_t run;
			while (!r && (run = folio_next_dirty(f, &off)) > 0) {
				uint64_t a = MAX(f->pos + off, start);
				uint64_t z = MIN(f->pos + off + (size_t)run,
						 stop);
				if (a < z)
					r = range_emit(&acc, a, z - a);
				off += (size_t)run;
			}
			folio_unref(f);
		}
	}
	if (!r && acc.len)
		r = fn(acc.pos, acc.len, arg);
	return r;
}
