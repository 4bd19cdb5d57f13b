/* SPDX-License-Identifier: MIT */
/*
 * Readahead: reads started without waiting, ahead of sequential readers
 * or on request (folio_mapping_readahead()).
 *
 * Streams. A mapping remembers a few recent readers (MAPPING_RA_STREAMS).
 * A read continues one when it starts where that one's last read ended,
 * or at the same distance from its last start as the one before (a
 * strided reader; strides above RA_MAX_STRIDE read sizes are not
 * followed, as reading the gaps along would waste most of each window).
 * Anything else takes the least recently used slot: a random reader only
 * ever churns slots and never starts a window, and a stream that turns
 * random is forgotten after a few such reads.
 *
 * Windows. The second read in a row that continues a stream (one could
 * be a random read landing by chance) starts a window at its own
 * position, so that one engine request covers the read and what comes
 * after; its size is RA_INITIAL_FACTOR times the stride (at least
 * RA_INITIAL_MIN, at most readahead_max). The first folio the reader will
 * reach next gets the readahead mark. Every later window starts where the
 * one before ended, twice as large up to readahead_max, and is marked at
 * its start. The stream remembers where the windows its reader has not
 * reached carry their marks (`ahead`); a reader reaching one of them,
 * either through the marked folio or by a read the cache could not serve
 * (the window still in flight, so its folios are locked), tops the stream
 * up: one window beyond the one it entered when the engine completes
 * requests inside submit() (the reader would only read ahead itself),
 * RA_DEPTH - 1 when the engine completes them on its own, as the kernel
 * keeps its next window going while the current one is consumed, here
 * with several windows so that a device or server with many requests in
 * flight streams. A mark of an older window or of a forgotten stream
 * starts nothing. A reader that outruns its windows (the marked folio was
 * evicted, or the mark sat in a folio that was already cached) starts the
 * next one itself, doubled too. Bytes ahead of the reader stay within
 * ra_ahead_cap().
 *
 * A window never waits: existing folios are only trylocked, and dirty,
 * writeback and fully uptodate ones are skipped; new folios are charged
 * to the pool only where it has room at once, and the window ends where
 * it has none. Its folios stay locked until the last of its requests
 * completes; that completion (any thread, or inline for a synchronous
 * engine) marks what was read uptodate, unlocks and frees the batch. A
 * failed request marks nothing it covered, so a reader later reads those
 * bytes itself. Every window counts itself in ra_inflight, which free,
 * truncate and invalidate drain while holding io_lock exclusively (no
 * window starts without io_lock shared).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mapping/fill.h"
#include "mapping/lookup.h"
#include "mapping/readahead.h"
#include "mapping/request.h"

#define RA_INITIAL_FACTOR 4u
#define RA_INITIAL_MIN ((uint64_t)128 << 10)
#define RA_MAX_STRIDE 4u
/* Reads in a row that must continue a stream before it gets a window:
 * one could be chance (a random read landing just after another). */
#define RA_CONFIRM 2u
/* Windows of a stream in flight at once when the engine overlaps them:
 * the one the reader is in and three more (measured in
 * doc/benchmarks.md, "Reads"). */
#define RA_DEPTH MAPPING_RA_DEPTH
/* Bytes ahead of a reader outside a pool, whatever readahead_max is: a
 * window of up to 256 MiB still gets one more behind it. */
#define RA_AHEAD_CAP ((uint64_t)32 << 20)

/* One window in flight: its requests count in group.pending (plus one
 * held by the submitter until it has submitted them all), its folios are
 * locked and referenced. */
struct ra_batch {
	struct io_group group;
	struct folio_mapping *m;
	struct mapping_io *list;
	struct folio **folios;
	size_t nfolios, cap;
};

void mapping_readahead_init(struct folio_mapping *m, uint64_t max)
{
	spin_init(&m->ra.lock);
	uint64_t bmask = ((uint64_t)1 << m->block_shift) - 1;
	m->ra.max = max;
	if (m->cache && m->cache->readahead_max)
		m->ra.max = MAX(MIN(max, m->cache->readahead_max) & ~bmask,
				bmask + 1);
	atomic_init(&m->ra.inflight, 0);
	atomic_init(&m->ra.async, false);
}

static void ra_finish(struct ra_batch *rb)
{
	struct folio_mapping *m = rb->m;
	int err = atomic_load(&rb->group.error);
	mapping_settle_reads(m, rb->list, mapping_read_end(m), true, err);
	for (size_t i = 0; i < rb->nfolios; i++) {
		struct folio *f = rb->folios[i];
		/* What a failed read left missing was not brought in: a
		 * reader using it is no hit, its eviction no waste. */
		if (err && !folio_test_uptodate(f))
			(void)folio_take_ra_marks(f, FOLIO_RA_UNREAD);
		folio_unlock(f);
		folio_unref(f);
	}
	free(rb->folios);
	free(rb);
	/* The last touch of m: a drain may free it right after. */
	atomic_fetch_sub(&m->ra.inflight, 1);
}

/* Drop one count of a window; true when that finished it. */
static bool ra_put(struct ra_batch *rb, int err)
{
	if (err) {
		int none = 0;
		atomic_compare_exchange_strong(&rb->group.error, &none, err);
	}
	if (atomic_fetch_sub_explicit(&rb->group.pending, 1,
				      memory_order_acq_rel) != 1)
		return false;
	ra_finish(rb);
	return true;
}

static void ra_end_io(struct engine_io *rq, ssize_t result)
{
	struct mapping_io *io = container_of(rq, struct mapping_io, base);
	struct ra_batch *rb = container_of(io->group, struct ra_batch, group);
	int err = mapping_read_result(io, result);
	if (!err)
		stat_add(&io->m->stats.readahead_bytes, io->base.io.len);
	(void)ra_put(rb, err);
}

static bool ra_keep(struct ra_batch *rb, struct folio *f)
{
	if (rb->nfolios == rb->cap) {
		size_t cap = rb->cap ? rb->cap * 2 : 16;
		struct folio **p = realloc(rb->folios, cap * sizeof(*p));
		if (!p)
			return false;
		rb->folios = p;
		rb->cap = cap;
	}
	rb->folios[rb->nfolios++] = f;
	return true;
}

/* Can a window fill f, which it holds locked? New or partly missing
 * clean folios only: nothing dirty, in flight or complete is touched. */
static bool ra_fillable(const struct folio *f)
{
	return !folio_test_uptodate(f) && !folio_test_dirty(f) &&
	       !folio_test_writeback(f);
}

/*
 * Start reading [start, end) without waiting, clamped to where reads
 * take bytes from the store. The first folio the window fills that ends
 * past `mark` gets the readahead mark. Returns where the window got to:
 * its (clamped) end, or less when it ended early for lack of room or
 * memory, and then sets *err to -ENOMEM when nothing could be started.
 * Caller holds io_lock shared.
 */
static uint64_t ra_window(struct folio_mapping *m, uint64_t start,
			  uint64_t end, uint64_t mark, int *err)
{
	uint64_t bmask = ((uint64_t)1 << m->block_shift) - 1;
	start &= ~bmask;
	end = MIN(end, mapping_read_end(m));
	*err = 0;
	if (start >= end)
		return end;
	struct ra_batch *rb = calloc(1, sizeof(*rb));
	if (!rb) {
		*err = -ENOMEM;
		return start;
	}
	rb->m = m;
	io_group_init(&rb->group);
	/* Before any folio is locked: see mapping_lock_folio(). */
	atomic_fetch_add(&m->ra.inflight, 1);
	struct rq_builder b;
	rqb_init(&b, m, FOLIO_IO_READ, &rb->group, ra_end_io);
	b.keep = true;
	bool marked = mark >= end;
	int r = 0;
	uint64_t p = start;
	while (p < end && !r) {
		bool locked, created;
		size_t hint = (size_t)MIN(end - p, (uint64_t)SIZE_MAX);
		struct folio *f =
			mapping_grab_nowait(m, p, hint, &locked, &created, &r);
		if (!f)
			break;
		uint64_t fend = f->pos + folio_size(f);
		if (locked && !created && !ra_fillable(f)) {
			folio_unlock(f);
			locked = false;
		}
		if (!locked) {
			folio_unref(f);
			p = fend;
			continue;
		}
		if (!ra_keep(rb, f)) {
			folio_unlock(f);
			folio_unref(f);
			r = -ENOMEM;
			break;
		}
		bool trigger = !marked && fend > mark;
		marked |= trigger;
		folio_set_ra_marks(f, trigger, created);
		size_t off = (size_t)(MAX(p, f->pos) - f->pos);
		size_t lim = (size_t)(MIN(fend, end) - f->pos);
		r = mapping_queue_missing(&b, f, off, lim - off);
		p = fend;
	}
	rqb_finish(&b);
	rb->list = b.submitted;
	bool none = !rb->nfolios, sent = rb->list != NULL;
	/* Finished by this put: every request completed inside submit(). */
	bool done_inline = ra_put(rb, 0);
	if (sent)
		atomic_store_explicit(&m->ra.async, !done_inline,
				      memory_order_relaxed);
	if (none && r == -ENOMEM)
		*err = r;
	return MIN(p, end);
}

/*
 * Make [start, start+size) the stream's latest window and return its end.
 * The end is rounded down to a multiple of the largest power of two in
 * size when that keeps at least half of it: the next window starts
 * there, so after one short window the windows are aligned to their
 * size, get folios as large as they are, and fill whole engine requests.
 */
static uint64_t ra_set_window(struct mapping_ra_stream *s, uint64_t start,
			      uint64_t size)
{
	uint64_t end = start + size;
	uint64_t p2 = (uint64_t)1 << ilog2_u64(size);
	uint64_t aligned = end & ~(p2 - 1);
	if (aligned > start && aligned - start >= size / 2)
		end = aligned;
	s->win_start = start;
	s->win_end = end;
	return end;
}

/* Windows chosen under the stream lock, started after it is dropped
 * (ra_unlock_start()): their work needs no stream state. */
struct ra_plan {
	struct mapping_ra_stream *s; /* the stream they were chosen for */
	unsigned n;
	struct {
		uint64_t start, end, mark;
	} w[RA_DEPTH];
};

/* Make the stream's next window, [start, start+size) rounded as
 * ra_set_window() does, one the reader has not reached, marked at mark. */
static void ra_plan_add(struct ra_plan *pl, struct mapping_ra_stream *s,
			uint64_t start, uint64_t size, uint64_t mark)
{
	uint64_t end = ra_set_window(s, start, size);
	pl->s = s;
	pl->w[pl->n].start = start;
	pl->w[pl->n].end = end;
	pl->w[pl->n].mark = mark;
	pl->n++;
	s->ahead[s->nahead++] = mark;
}

/*
 * Most bytes from a reader's position to the end of its stream's last
 * window. In a pool, the window being read and the next one must fit
 * in a quarter of the small queue each (pool.c sets readahead_max so)
 * or readahead evicts itself unread: two of the largest windows.
 * Otherwise RA_AHEAD_CAP, but always two windows.
 */
static uint64_t ra_ahead_cap(const struct folio_mapping *m)
{
	if (m->cache && m->cache->readahead_max)
		return 2 * m->cache->readahead_max;
	return MAX(2 * m->ra.max, RA_AHEAD_CAP);
}

/*
 * Under the stream lock: start windows after the stream's last until it
 * has `want` its reader (at `at`) has not reached, none at or past
 * where reads stop taking bytes from the store and, beyond the first,
 * none that would put more than ra_ahead_cap() bytes ahead of the
 * reader.
 */
static void ra_top_up_locked(struct folio_mapping *m,
			     struct mapping_ra_stream *s, uint64_t at,
			     struct ra_plan *pl)
{
	bool async = atomic_load_explicit(&m->ra.async, memory_order_relaxed);
	unsigned want = async ? RA_DEPTH - 1 : 1;
	uint64_t stop = mapping_read_end(m), cap = ra_ahead_cap(m);
	while (s->nahead < want && pl->n < RA_DEPTH && s->win_end < stop) {
		uint64_t last = s->win_end - s->win_start;
		/* A window cut to nothing (ra_cut()) starts small again. */
		uint64_t size = MIN(MAX(last * 2, RA_INITIAL_MIN), m->ra.max);
		uint64_t start = s->win_end;
		if (s->nahead && start + size > at + cap)
			break;
		ra_plan_add(pl, s, start, size, start);
	}
}

/*
 * Under the stream lock: the stream's reader, at `at`, reached `upto`
 * (exclusive). The marks of the windows it has entered go; when some
 * did, it is in a new window and the stream is topped up. Returns
 * whether some went.
 */
static bool ra_reach_locked(struct folio_mapping *m,
			    struct mapping_ra_stream *s, uint64_t at,
			    uint64_t upto, struct ra_plan *pl)
{
	unsigned k = 0;
	while (k < s->nahead && s->ahead[k] < upto)
		k++;
	if (!k)
		return false;
	s->reached = s->ahead[k - 1];
	s->nahead -= k;
	memmove(s->ahead, s->ahead + k, s->nahead * sizeof(s->ahead[0]));
	ra_top_up_locked(m, s, at, pl);
	return true;
}

/*
 * A window of the plan ended early at `got` (the pool had no room, or
 * memory ran out): what the stream says lies ahead ends there, unless
 * the stream moved on meanwhile, so that its reader, reaching `got`,
 * starts a window there itself instead of reading the rest block by
 * block. The windows after it in the plan are not started.
 */
static void ra_cut(struct folio_mapping *m, const struct ra_plan *pl,
		   unsigned i, uint64_t got)
{
	struct mapping_ra_stream *s = pl->s;
	spin_lock(&m->ra.lock);
	if (s->live && s->win_end == pl->w[pl->n - 1].end) {
		s->win_start = pl->w[i].start;
		s->win_end = MAX(got, pl->w[i].start);
		while (s->nahead && s->ahead[s->nahead - 1] >= s->win_end)
			s->nahead--;
	}
	spin_unlock(&m->ra.lock);
}

/* Drop the stream lock, then start the windows the caller planned. */
static void ra_unlock_start(struct folio_mapping *m, const struct ra_plan *pl)
{
	spin_unlock(&m->ra.lock);
	for (unsigned i = 0; i < pl->n; i++) {
		int err;
		uint64_t got = ra_window(m, pl->w[i].start, pl->w[i].end,
					 pl->w[i].mark, &err);
		if (got < MIN(pl->w[i].end, mapping_read_end(m))) {
			ra_cut(m, pl, i, got);
			break;
		}
	}
}

static uint64_t ra_initial(const struct folio_mapping *m, uint64_t stride)
{
	uint64_t size = MAX(stride * RA_INITIAL_FACTOR, RA_INITIAL_MIN);
	return MIN(size, m->ra.max);
}

/* Least recently used slot, a free one first. */
static struct mapping_ra_stream *ra_victim_locked(struct mapping_ra *ra)
{
	struct mapping_ra_stream *v = &ra->s[0];
	for (unsigned i = 0; i < MAPPING_RA_STREAMS; i++) {
		struct mapping_ra_stream *t = &ra->s[i];
		if (!t->live)
			return t;
		if (t->used < v->used)
			v = t;
	}
	return v;
}

/* How a read relates to a stream (ra_match_locked()). */
enum ra_fit {
	RA_NONE,   /* no stream: it takes a slot of its own */
	RA_MAYBE,  /* a stream's second read, a little after its first */
	RA_NEXT,   /* continues a stream, contiguous or at its stride */
	RA_INSIDE, /* lands in a window of the stream its reader entered or
		    * has not reached yet, or at the end of its last */
};

/*
 * The stream a read at pos fits best, and how. A read inside a window
 * belongs to that window's stream even when the reads since the window
 * started were not seen (a cached read may skip this path entirely).
 */
static struct mapping_ra_stream *ra_match_locked(struct mapping_ra *ra,
						 uint64_t pos, size_t len,
						 enum ra_fit *fit)
{
	struct mapping_ra_stream *best = NULL;
	*fit = RA_NONE;
	for (unsigned i = 0; i < MAPPING_RA_STREAMS; i++) {
		struct mapping_ra_stream *t = &ra->s[i];
		if (!t->live)
			continue;
		enum ra_fit f = RA_NONE;
		if (pos == t->next || (t->stride && pos == t->prev + t->stride))
			f = RA_NEXT;
		else if (t->win_end && pos >= t->reached && pos <= t->win_end)
			f = RA_INSIDE;
		else if (!t->stride && pos > t->next &&
			 pos - t->prev <= (uint64_t)len * RA_MAX_STRIDE)
			f = RA_MAYBE;
		if (f == RA_NEXT) {
			*fit = f;
			return t;
		}
		if (f > *fit) {
			*fit = f;
			best = t;
		}
	}
	return best;
}

void mapping_readahead_on_read(struct folio_mapping *m, uint64_t pos,
			       size_t len)
{
	if ((m->flags & FOLIO_MAPPING_NO_READAHEAD) || !len)
		return;
	struct mapping_ra *ra = &m->ra;
	struct ra_plan pl = {.n = 0};
	spin_lock(&ra->lock);
	enum ra_fit fit;
	struct mapping_ra_stream *s = ra_match_locked(ra, pos, len, &fit);
	if (!s) {
		s = ra_victim_locked(ra);
		memset(s, 0, sizeof(*s));
		s->live = true;
	} else if (fit != RA_INSIDE) {
		s->stride = pos - s->prev;
		s->seq += fit == RA_NEXT && s->seq < RA_CONFIRM;
	}
	s->prev = pos;
	s->next = pos + len;
	s->used = ++ra->clock;
	if (s->seq >= RA_CONFIRM && pos + len > s->win_end) {
		/* Outran every window: the next starts at the read. */
		uint64_t last = s->win_end - s->win_start;
		uint64_t size = last ? MIN(last * 2, m->ra.max)
				     : ra_initial(m, MAX(s->stride, len));
		uint64_t start = MAX(pos, s->win_end);
		s->nahead = 0;
		s->reached = start;
		ra_plan_add(&pl, s, start, size, pos + s->stride);
	} else if (s->seq >= RA_CONFIRM) {
		/* A window the cache could not serve yet (in flight) was
		 * reached all the same: go on without waiting for it. */
		(void)ra_reach_locked(m, s, pos, pos + len, &pl);
	}
	ra_unlock_start(m, &pl);
}

/* The live stream whose windows not reached yet include f's mark. */
static struct mapping_ra_stream *ra_owner(struct mapping_ra *ra, uint64_t pos,
					  uint64_t fend)
{
	for (unsigned i = 0; i < MAPPING_RA_STREAMS; i++) {
		struct mapping_ra_stream *t = &ra->s[i];
		if (t->live && t->nahead && pos < t->win_end &&
		    fend > t->ahead[0])
			return t;
	}
	return NULL;
}

void mapping_readahead_reached(struct folio_mapping *m, struct folio *f)
{
	unsigned got = folio_take_ra_marks(f, FOLIO_RA_TRIGGER |
						      FOLIO_RA_UNREAD);
	if (!got)
		return;
	if (got & FOLIO_RA_UNREAD)
		stat_add(&m->stats.readahead_hits, 1);
	if (!(got & FOLIO_RA_TRIGGER) ||
	    (m->flags & FOLIO_MAPPING_NO_READAHEAD))
		return;
	struct mapping_ra *ra = &m->ra;
	struct ra_plan pl = {.n = 0};
	spin_lock(&ra->lock);
	/* A mark of a window already reached, or of a stream forgotten
	 * since (it turned random), starts nothing. */
	uint64_t fend = f->pos + folio_size(f);
	struct mapping_ra_stream *s = ra_owner(ra, f->pos, fend);
	if (s)
		(void)ra_reach_locked(m, s, f->pos, fend, &pl);
	ra_unlock_start(m, &pl);
}

void mapping_readahead_forget(struct folio_mapping *m, struct folio *f)
{
	if (!folio_take_ra_marks(f, FOLIO_RA_UNREAD))
		return;
	size_t up, dirty, unstable;
	folio_count_blocks(f, &up, &dirty, &unstable);
	stat_add(&m->stats.readahead_wasted, (uint64_t)up << f->block_shift);
}

static bool ra_idle(void *arg)
{
	struct folio_mapping *m = arg;
	return !atomic_load(&m->ra.inflight);
}

/* Completions of a window touch no waiter, so a drain polls. */
static void ra_pause(void *arg, const struct timespec *t)
{
	(void)arg;
	struct timespec d = {0, 50000};
	nanosleep(t ? t : &d, NULL);
}

void mapping_readahead_drain(struct folio_mapping *m)
{
	if (atomic_load(&m->ra.inflight))
		(void)engine_wait_until(m->engine, ra_idle, ra_pause, m);
}

int folio_mapping_readahead(struct folio_mapping *m, uint64_t pos,
			    uint64_t len)
{
	if (!m || pos > FOLIO_MAX_POS || len > FOLIO_MAX_POS - pos)
		return -EINVAL;
	int err = 0;
	brlock_read_lock(&m->io_lock);
	uint64_t end = MIN(pos + len, mapping_eof(m));
	/* In pieces of the largest window: each batch holds its folios
	 * locked only until its own requests complete. */
	for (uint64_t p = pos; p < end;) {
		uint64_t n = MIN(m->ra.max, end - p);
		int r;
		uint64_t got = ra_window(m, p, p + n, UINT64_MAX, &r);
		if (p == pos)
			err = r;
		if (got < MIN(p + n, mapping_read_end(m)))
			break;
		p += n;
	}
	brlock_read_unlock(&m->io_lock);
	return err;
}
