/* SPDX-License-Identifier: MIT */
/*
 * Flushes, unstable data and durable writes (commit.c).
 */
#ifndef FOLIO_MAPPING_COMMIT_H
#define FOLIO_MAPPING_COMMIT_H

#include "folio/unstable.h"
#include "mapping/cache.h"
#include "mapping/folio_list.h"
#include "mapping/request.h"
#include "mapping/tags.h"

int mapping_commit_init(struct folio_mapping *m);
void mapping_commit_destroy(struct folio_mapping *m);

/* The engine's truncate() to `size` succeeded: unstable like a write until
 * a flush covers it. Caller holds io_lock exclusively. */
void mapping_resize_unstable(struct folio_mapping *m, uint64_t size);

/* The engine's truncate() to `size` failed where the store must be cut
 * (it may hold bytes past `size` the mapping threw away): reads zero-fill
 * from `size` on, and the next flush redoes the cut before it can
 * succeed. Caller holds io_lock exclusively. */
void mapping_resize_owed(struct folio_mapping *m, uint64_t size);

/* A failed write may have landed past `eof` (size.landed_maybe): cut the
 * store there, or owe the cut (commit.c). Caller holds io_lock
 * exclusively. */
void mapping_cut_landed_writes(struct folio_mapping *m, uint64_t eof);

/* Is a resize no flush has covered yet pending with a cut below `end`?
 * A failed flush then redoes it by cutting the store there (commit.c):
 * what was written above since must be in the cache to be rewritten,
 * which direct writes are not. Lock-free when none is pending. */
bool mapping_resize_pending_below(struct folio_mapping *m, uint64_t end);

/* The first `len` bytes of a write request's segment `s` (its folio,
 * where it sits in the index, see mapping_tag_set_at(), and its offset)
 * completed: they are unstable until a flush covering generation `gen`
 * succeeds (mapping_unstable_gen()); `failures` is the engine's
 * failed-flush count read at the request's submission. Inline: every
 * segment of every write completion comes here. */
static inline void mapping_mark_unstable(struct folio_mapping *m,
					 const struct rq_seg *s, size_t len,
					 uint64_t gen, uint64_t failures)
{
	/* Linux policy: nothing is kept for a flush that might fail. */
	if (m->flags & FOLIO_MAPPING_DROP_ON_ERROR)
		return;
	struct folio *f = s->folio;
	size_t newly;
	if (folio_mark_unstable(f, s->off, len, gen, failures, &newly) &
	    FOLIO_BECAME_UNSTABLE)
		mapping_tag_set_at(m, f, s->at, INDEX_TAG_UNSTABLE);
	mapping_cache_account(m, 0, 0, mapping_block_bytes(f, newly));
}

/* mapping_unstable_gen() (below) for a durable write: records its
 * outcome for the sync that sent it. */
struct mapping_io;
uint64_t mapping_durable_gen(struct folio_mapping *m,
			     const struct mapping_io *io, ssize_t result);

/*
 * A sync's durable write (doc/design.md, "Durable writes"). `wanted`: the
 * sync may send one (the engine takes them, the mapping keeps unstable
 * data). mapping_durable_begin() is called with the pass's only request
 * built and not yet submitted: it takes the mapping's flush role when
 * that is free and nothing but writes needs covering (no resize pending,
 * no engine flush failure unaccounted for), moves the flush generation
 * on as a flush would, and returns true: the caller marks the request
 * FOLIO_IO_DURABLE. One per sync.
 */
struct mapping_durable {
	bool wanted;
	bool taken;
	uint64_t round, flush_gen, failures;
};
bool mapping_durable_begin(struct folio_mapping *m, struct mapping_durable *d);


/*
 * The end of a sync: with a durable write taken, settle it as the flush
 * it was (success releases what its barrier covered; failure makes every
 * unstable block dirty and records the error), then run a real flush for
 * anything it could not cover (a short write, other writes that
 * completed meanwhile, a resize); release the role. Without one,
 * mapping_commit(). `written`: the folios the sync's passes queued,
 * each with a reference: a round this call runs itself settles them
 * first, with no index walk, and walks the UNSTABLE tag only when other
 * folios are still tagged (doc/design.md, "Settling from the sync's own
 * list").
 */
void mapping_commit_sync(struct folio_mapping *m, struct mapping_durable *d,
			 struct folio_list *written);

/*
 * Make every write that completed before the call durable: run the
 * engine's flush() (or wait for one that another thread started after
 * the call), then release the unstable blocks it covers, or on failure
 * make every unstable block dirty again and record the error. Flushes of
 * one mapping run one at a time, and a thread arriving while one runs
 * shares the next; with other syncs under way, a round first lets the
 * mapping's writes in flight complete, for at most one flush time, so
 * that it covers them. Returns 0 or the flush's error.
 */
int mapping_commit(struct folio_mapping *m);

/* For tests: called by a flush round just before it looks for other
 * syncs' writes in flight (NULL: nothing). */
typedef void (*mapping_commit_hook_fn)(struct folio_mapping *m);
extern _Atomic(mapping_commit_hook_fn) mapping_commit_batch_hook;

/*
 * A durable write outside a sync (a direct write's) failed in its
 * barrier with `err`, which the caller recorded: a flush of the engine
 * failed, and it may have dropped what this mapping left unstable and
 * truncates no flush had covered. Settle that at once, as a failed flush
 * round of the mapping does (it waits for the flush role): the truncates
 * are redone and every unstable block is dirty again, so the next
 * writeback writes them, rather than the next sync finding them lost.
 * Caller holds no lock of m.
 */
void mapping_commit_failed_barrier(struct folio_mapping *m, int err);

/* The engine may have lost what f's unstable blocks hold (a failed
 * flush): make them dirty again, with tags and counts (commit.c). */
void mapping_unstable_lost(struct folio_mapping *m, struct folio *f);

/*
 * The flush generation a write request that completed with `result`
 * marks its bytes unstable in: the current one, or for a durable write
 * (FOLIO_IO_DURABLE) the one its own barrier covers when that barrier
 * succeeded. Call it once per request, first thing in its completion.
 * Inline: every writeback completion asks, and only a sync's one durable
 * write needs more than a load.
 */
static inline uint64_t mapping_unstable_gen(struct folio_mapping *m,
					    const struct mapping_io *io,
					    ssize_t result)
{
	if (io->base.io.flags & FOLIO_IO_DURABLE)
		return mapping_durable_gen(m, io, result);
	return atomic_load_explicit(&m->commit.flush_gen,
				    memory_order_acquire);
}

#endif
