/* SPDX-License-Identifier: MIT */
/*
 * The mapping (the cache of one object) as seen by its modules:
 * mapping.c (life cycle, folio lookup/creation, tags, stats), rw.c (buffered
 * read and write), truncate.c (truncate, invalidate), request.c (building
 * engine requests), writeback.c, commit.c (flushes and unstable data) and
 * errseq.c (error reporting).
 *
 * Lock order, outermost first:
 *   io_lock (brlock: shared for read/write/writeback, exclusive for
 *            truncate and invalidate, which change which folios exist
 *            beyond what a reader or writer could observe mid-call)
 *   folio LOCKED bits, in ascending position order
 *   index_lock (rwlock around the radix tree; tags are set under the
 *               shared side with atomics, cleared under the exclusive side)
 *   folio state spinlock
 * commit.lock guards only the bookkeeping of flushes and pending resizes;
 * nothing else is taken while it is held.
 * Completions of engine requests take only index_lock and state locks, so
 * waiting for I/O while holding a folio lock or io_lock cannot deadlock.
 */
#ifndef FOLIO_MAPPING_H
#define FOLIO_MAPPING_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/brlock.h"
#include "mapping/index.h"
#include "engine/engine.h"
#include "folio/folio.h"

struct folio_mapping {
	struct folio_engine *engine;
	unsigned block_shift;
	unsigned min_shift; /* index key = pos >> min_shift */
	unsigned max_shift;
	unsigned flags;

	struct brlock io_lock;
	pthread_rwlock_t index_lock;
	struct index_tree index;

	_Atomic uint64_t size; /* EOF */
	/* The backing object's size as far as this mapping knows: the size
	 * it was opened with, raised by completed writes, set by truncate.
	 * Where an invalidated tail leaves EOF (truncate.c). */
	_Atomic uint64_t backing_size;

	/* Unique per mapping ever created, and bumped whenever a folio
	 * leaves the index (always under io_lock exclusively): together they
	 * tell whether a thread's cached folio pointer is still good. */
	uint64_t id;
	_Atomic uint64_t remove_gen;

	/* Error sequence (writeback.c): the low bit says "seen", the rest
	 * counts errors; the errno of the latest error is kept beside it. */
	_Atomic uint64_t errseq;
	atomic_int last_error;

	/* For folio_mapping_sync(m, NULL), from any number of threads. */
	_Atomic folio_errseq_t own_cursor;

	/* Flushes (commit.c). A write completing in epoch E is covered by a
	 * flush that starts after the epoch moved past E. */
	_Atomic uint64_t flush_epoch;
	struct {
		pthread_mutex_t lock;
		pthread_cond_t done_cond;
		bool running;
		uint64_t started, finished; /* flush generations */
		/* Engine truncates no flush has covered yet: a flush that
		 * fails may have lost them too (a volatile disk cache), so
		 * they are redone. `low` is the smallest size cut to since
		 * the last covering flush, `epoch` the newest truncate's. */
		bool resize_pending;
		uint64_t resize_low, resize_epoch;
	} commit;

	/* Write requests in flight: free refuses while there are any. */
	atomic_uint wb_inflight;
	/* Short writes whose rest was put back dirty: sync repeats its pass
	 * while this moves, so a short completion never ends a sync. */
	_Atomic uint64_t short_writes;

	/* Bytes the callers wrote and read, counted on every call: striped
	 * per thread like io_lock, so threads on disjoint folios do not
	 * share a written cache line. */
	struct {
		_Alignas(BRLOCK_LINE) _Atomic uint64_t written;
		_Atomic uint64_t read;
	} io_bytes[BRLOCK_STRIPES];

	struct {
		_Atomic uint64_t read_requests, read_bytes;
		_Atomic uint64_t wb_requests, wb_bytes, wb_merges;
		_Atomic uint64_t map_calls, retries, errors, flushes;
	} stats;
};

static inline void stat_add(_Atomic uint64_t *counter, uint64_t v)
{
	atomic_fetch_add_explicit(counter, v, memory_order_relaxed);
}

static inline uint64_t mapping_key(const struct folio_mapping *m,
				   uint64_t pos)
{
	return pos >> m->min_shift;
}

static inline unsigned mapping_folio_order(const struct folio_mapping *m,
				      const struct folio *f)
{
	return f->size_shift - m->min_shift;
}

static inline uint64_t mapping_eof(struct folio_mapping *m)
{
	return atomic_load_explicit(&m->size, memory_order_acquire);
}

/* Raise EOF to at least `end` (concurrent writers race benignly). */
void mapping_grow_eof(struct folio_mapping *m, uint64_t end);

/* The cached folio holding pos, referenced, or NULL. */
struct folio *mapping_lookup(struct folio_mapping *m, uint64_t pos);

/*
 * The folio holding pos, created when absent (see create_folio() for its
 * size). The caller holds io_lock (shared): folios leave the index only
 * under the exclusive side, so the result needs no reference while the
 * caller keeps io_lock, and repeated hits on one folio are served from a
 * per-thread cache without touching the index. NULL with *err set
 * (-ENOMEM) on failure.
 */
struct folio *mapping_find_or_create_folio(struct folio_mapping *m,
					   uint64_t pos, size_t len_hint,
					   int *err);

/*
 * Iteration: the next folio at or after *key (only folios carrying `tag`
 * unless it is INDEX_NO_TAG), referenced, with *key moved past it; NULL at
 * the end of [*key, last]. The index may change between calls.
 */
#define INDEX_NO_TAG (-1)
struct folio *mapping_next_folio(struct folio_mapping *m, uint64_t *key,
				 uint64_t last, int tag);

/* Tag the folio dirty in the index, after a state change returned
 * FOLIO_BECAME_DIRTY. */
void mapping_tag_dirty(struct folio_mapping *m, struct folio *f);

/* Set or clear one index tag of a folio. Clearing re-checks the folio's
 * state under the exclusive index lock (`still` says whether the state
 * the tag stands for came back meanwhile), so a racing setter's tag is
 * never lost. */
void mapping_tag_set(struct folio_mapping *m, struct folio *f, unsigned tag);
void mapping_tag_clear_unless(struct folio_mapping *m, struct folio *f,
			      unsigned tag, bool (*still)(const struct folio *));

/* ---- flushes and unstable data (commit.c) ---------------------------- */

int mapping_commit_init(struct folio_mapping *m);
void mapping_commit_destroy(struct folio_mapping *m);

/* The engine's truncate() to `size` succeeded: unstable like a write until
 * a flush covers it. Caller holds io_lock exclusively. */
void mapping_resize_unstable(struct folio_mapping *m, uint64_t size);

/* A write of [off, off+len) of f completed: the bytes are unstable. */
void mapping_mark_unstable(struct folio_mapping *m, struct folio *f,
			   size_t off, size_t len);

/*
 * Make every write that completed before the call durable: run the
 * engine's flush() (or wait for one that another thread started after
 * the call), then release the unstable blocks it covers, or on failure
 * make every unstable block dirty again and record the error. Flushes of
 * one mapping run one at a time, and a thread arriving while one runs
 * shares the next. Returns 0 or the flush's error.
 */
int mapping_commit(struct folio_mapping *m);

/* ---- error sequence (errseq.c) --------------------------------------- */

/* Record an error. Call it before waking anyone who waits for the
 * operation that failed. */
void errseq_record(struct folio_mapping *m, int err);
/* End of a sync that read the sequence as `begin` when it started:
 * report an error the cursor (NULL: the mapping's shared one) has not
 * seen, or one recorded since `begin`, advancing the cursor; 0 if
 * neither. */
int errseq_check_advance(struct folio_mapping *m, folio_errseq_t *cursor,
			 folio_errseq_t begin);

/* Remove a folio from the index and drop the index's reference. Caller
 * holds the folio lock and io_lock exclusively. */
void mapping_remove_folio(struct folio_mapping *m, struct folio *f);

/* Sleep until the folio's writeback ends, driving a polled engine.
 * Returns 0 or the error the engine's wait() returned meanwhile. */
int mapping_wait_writeback(struct folio_mapping *m, struct folio *f);

/* Sleep until every folio in [start, end) that is under writeback now has
 * finished it (folios that start writeback later are not waited for).
 * Returns 0 or the first error of the engine's wait(). */
int mapping_wait_range_writeback(struct folio_mapping *m, uint64_t start,
				 uint64_t end);

/* Zero the bytes of [off, off+len) of f that lie at or past EOF. */
void mapping_zero_past_eof(struct folio_mapping *m, struct folio *f,
			   size_t off, size_t len, uint64_t eof);

/* ---- requests (request.c) ------------------------------------------ */

/* Request limits when the caller sets none. */
#define RQ_DEFAULT_MAX_BYTES ((size_t)1 << 20)
#define RQ_DEFAULT_MAX_SEGS 256u

struct rq_seg {
	struct folio *folio;
	size_t off;
	size_t len;
};

/* A request as the mapping tracks it. */
struct mapping_io {
	struct engine_io base;
	struct folio_mapping *m;
	struct io_group *group; /* woken at completion, or NULL */
	struct mapping_io *next; /* the builder's list of submitted requests */
	ssize_t result;
	unsigned nsegs;
	unsigned cap;      /* room in iov[] and segs[] */
	unsigned max_segs; /* the builder's limit */
	struct rq_seg *segs;
	struct iovec iov[];
};

/* Last extent returned by the engine's map(), so consecutive runs inside
 * one extent cost no callback. */
struct map_cache {
	bool valid;
	struct folio_extent ext;
};

struct rq_builder {
	struct folio_mapping *m;
	enum folio_io_op op;
	size_t max_bytes;
	unsigned max_segs;
	size_t merge_gap;
	void (*end_io)(struct engine_io *rq, ssize_t result);
	struct io_group *group;
	struct map_cache map;
	struct mapping_io *cur;
	/* Submitted requests, when the caller keeps them (reads): it walks
	 * and frees them after the group completes. */
	bool keep;
	struct mapping_io *submitted;
	uint64_t submitted_bytes;
	unsigned submitted_count;
	uint64_t added; /* bytes of folio runs queued for I/O so far */
	int error; /* first submission or map error */
};

void rqb_init(struct rq_builder *b, struct folio_mapping *m,
	      enum folio_io_op op, struct io_group *group,
	      void (*end_io)(struct engine_io *, ssize_t));

/*
 * Add folio bytes [off, off+len) to the request being built, starting a
 * new request when the run is not contiguous with it in file and device
 * position or would break a limit. For reads, runs in a hole extent are
 * zero-filled in place and need no I/O. Returns 0 or a negative errno
 * (map() failure, -ENOMEM); on error the run was not added.
 */
int rqb_add(struct rq_builder *b, struct folio *f, size_t off, size_t len);

/* Submit the request being built, if any. */
void rqb_submit(struct rq_builder *b);

/* Finish the batch (submit + unplug the engine). */
void rqb_finish(struct rq_builder *b);

void mapping_io_free(struct mapping_io *io);

/* Resolve pos through the engine's map() (identity without one). On
 * return [pos, pos + *avail) is device-contiguous at *dev with *flags. */
int mapping_map_extent(struct folio_mapping *m, struct map_cache *mc,
		       uint64_t pos, uint64_t len, uint64_t *dev,
		       uint64_t *avail, uint32_t *flags);

#endif
