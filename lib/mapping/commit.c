/* SPDX-License-Identifier: MIT */
/*
 * Flushes and unstable data ("unstable until flushed", as NFS keeps
 * unstable writes until a COMMIT).
 *
 * A write the engine completed is in the backing store but not durable:
 * its blocks are clean and unstable until a flush that began after the
 * write completed succeeds. When a flush fails, the engine may have
 * dropped what it held (fdatasync after a write error drops the pages),
 * so every unstable block becomes dirty again: the next sync writes it
 * and flushes again, and no sync returns 0 before that succeeded.
 *
 * The mapping's flush generation orders completions against flushes: a
 * completion stamps its folio with the generation it read, and a flush
 * moves the generation on before it calls the engine, so blocks stamped
 * with an older generation were written before the flush began.
 *
 * Flushes of one mapping run one at a time: a flush that fails must have
 * turned its unstable blocks dirty and recorded its error before any
 * later flush can succeed and a sync relying on it report success.
 * Threads that arrive while a flush runs wait for it and share the next
 * one (a group commit), so concurrent syncs cost few flushes; a round
 * for several syncs waits briefly for their writes in flight, so that
 * it covers them (wait_writes_in_flight()).
 */
#include <sched.h>

#include "base/clock.h"
#include "base/futex.h"
#include "mapping/cache.h"
#include "mapping/commit.h"
#include "mapping/extents.h"
#include "mapping/errseq.h"
#include "mapping/request.h"
#include "mapping/tags.h"
#include "mapping/wait.h"

int mapping_commit_init(struct folio_mapping *m)
{
	if (pthread_mutex_init(&m->commit.lock, NULL))
		return -ENOMEM;
	atomic_init(&m->commit.role, 0);
	atomic_init(&m->commit.rounds_started, 0);
	atomic_init(&m->commit.rounds_finished, 0);
	atomic_init(&m->commit.syncers, 0);
	atomic_init(&m->commit.flush_ns, 0);
	m->commit.resize_pending = false;
	m->commit.resize_low = m->commit.resize_gen = 0;
	m->commit.redo_owed = false;
	atomic_init(&m->commit.durable_gen, 0);
	atomic_init(&m->commit.durable_result, 0);
	atomic_init(&m->commit.durable_failed, false);
	return 0;
}

void mapping_commit_destroy(struct folio_mapping *m)
{
	pthread_mutex_destroy(&m->commit.lock);
}

static bool has_unstable(const struct folio *f)
{
	return folio_test_unstable(f);
}

void mapping_unstable_lost(struct folio_mapping *m, struct folio *f)
{
	size_t unstable = 0, dirty = 0;
	if (folio_redirty_unstable(f, &unstable, &dirty) & FOLIO_BECAME_DIRTY)
		mapping_tag_dirty(m, f);
	mapping_tag_clear_unless(m, f, INDEX_TAG_UNSTABLE, has_unstable);
	mapping_cache_account(m, mapping_block_bytes(f, dirty), 0,
			      -mapping_block_bytes(f, unstable));
}

/* Unstable folios found per index round trip of a settling walk. */
#define SETTLE_BATCH 32

/*
 * Settle one folio sitting at `at` in the index after a flush that began in
 * generation `gen` with `failures` failed flushes of the engine counted
 * (see settle_unstable()); the caller holds io_lock shared, so an
 * indexed folio stays in that node. Returns the bytes released. Always
 * inlined, in the walk too: the sync's own list settles every folio it
 * wrote through here.
 */
static inline __attribute__((always_inline)) int64_t
settle_folio(struct folio_mapping *m, struct folio *f, struct index_place at,
	     uint64_t gen, uint64_t failures, bool failed)
{
	size_t unstable = 0;
	int r = failed ? FOLIO_STABLE_LOST
		       : folio_stabilize(f, gen, failures, &unstable);
	if (r == FOLIO_STABLE_LOST) {
		mapping_unstable_lost(m, f);
		return 0;
	}
	if (!r)
		mapping_tag_drop_at(m, f, at, INDEX_TAG_UNSTABLE,
				    has_unstable);
	return mapping_block_bytes(f, unstable);
}

/*
 * A successful flush's settling of the folios a sync's passes queued
 * (`written`), before any walk. Returns true when that was all there was
 * to settle: no folio of the mapping is tagged unstable any more.
 */
static bool settle_written(struct folio_mapping *m,
			   const struct folio_list *written, uint64_t gen,
			   uint64_t failures, int64_t *released)
{
	uint64_t first = UINT64_MAX, last = 0;
	brlock_read_lock(&m->io_lock);
	for (size_t i = 0; i < written->n; i++) {
		struct folio *f = written->v[i].folio;
		/* Truncated since: its tags went with it. */
		if (folio_test_removed(f))
			continue;
		*released += settle_folio(m, f, written->v[i].at, gen,
					  failures, false);
		uint64_t key = mapping_key(m, f->pos);
		first = MIN(first, key);
		last = MAX(last, key);
	}
	brlock_read_unlock(&m->io_lock);
	/* With the bits the drops left above cleared, the root answers. */
	if (first <= last)
		mapping_tags_prune(m, first, last, 1u << INDEX_TAG_UNSTABLE);
	return !written->incomplete &&
	       !mapping_any_tagged(m, INDEX_TAG_UNSTABLE);
}

/*
 * After a flush that began in generation `gen` with `failures` failed
 * flushes of the engine counted: release what it covered, or make
 * everything unstable dirty again when it failed.
 *
 * A successful flush settles `written` first (settle_written()); when
 * other folios are still tagged, or after a failure, one walk over the
 * UNSTABLE tag, batched (a find per index node, not per folio), with
 * io_lock shared: truncate, invalidate and free, which remove folios,
 * wait for it, and reclaim cannot remove a folio the walk holds a
 * reference to (its freeze expects the index's and its own only). So
 * every folio found stays in the node that holds it, and a released
 * folio's tag is dropped through that node with no index lock
 * (mapping_tag_drop_at(), as writeback drops DIRTY); the stale bits
 * above go in one exclusive prune at the end.
 */
static void settle_unstable(struct folio_mapping *m, uint64_t gen,
			    uint64_t failures, bool failed,
			    const struct folio_list *written)
{
	struct index_hit hits[SETTLE_BATCH];
	uint64_t key = 0;
	int64_t released = 0;
	bool seen = false;
	unsigned n;
	if (!failed && written && written->n &&
	    settle_written(m, written, gen, failures, &released))
		goto done;
	brlock_read_lock(&m->io_lock);
	while ((n = mapping_next_tagged_batch(m, &key, UINT64_MAX,
					      INDEX_TAG_UNSTABLE, hits,
					      SETTLE_BATCH))) {
		seen = true;
		for (unsigned i = 0; i < n; i++) {
			released += settle_folio(m, hits[i].entry,
						 hits[i].at, gen, failures,
						 failed);
			folio_unref(hits[i].entry);
		}
	}
	brlock_read_unlock(&m->io_lock);
	if (seen)
		mapping_tags_prune(m, 0, UINT64_MAX,
				   1u << INDEX_TAG_UNSTABLE);
done:
	mapping_cache_account(m, 0, 0, -released);
	/* Stable folios can be reclaimed now. */
	if (!failed)
		mapping_cache_progress(m);
}

void mapping_resize_unstable(struct folio_mapping *m, uint64_t size)
{
	pthread_mutex_lock(&m->commit.lock);
	if (!m->commit.resize_pending || size < m->commit.resize_low)
		m->commit.resize_low = size;
	m->commit.resize_pending = true;
	atomic_store(&m->commit.resize_hint, true);
	m->commit.resize_gen = atomic_load(&m->commit.flush_gen);
	pthread_mutex_unlock(&m->commit.lock);
}

void mapping_resize_owed(struct folio_mapping *m, uint64_t size)
{
	mapping_resize_unstable(m, size);
	pthread_mutex_lock(&m->commit.lock);
	m->commit.redo_owed = true;
	pthread_mutex_unlock(&m->commit.lock);
	/* io_lock held exclusively: no read is between its look at the
	 * limit and its use of what it read. */
	if (size < atomic_load(&m->size.stale_from))
		atomic_store(&m->size.stale_from, size);
}

/*
 * A write that failed may have landed all the same (a remote store that
 * lost the reply), past `eof` too: the store would keep bytes the mapping
 * does not hold, and show them once EOF grows again (or to the next user
 * of the store). Cut it at `eof`. When the cut fails, it is owed: reads
 * zero-fill from there, and the next flush redoes it before it can
 * succeed (under DROP_ON_ERROR it is only reported). Used after a
 * discard lowered EOF and after a failed direct write. Caller holds
 * io_lock exclusively.
 */
void mapping_cut_landed_writes(struct folio_mapping *m, uint64_t eof)
{
	if (atomic_load(&m->size.landed_maybe) <= eof)
		return;
	int r = engine_truncate(m->engine, eof);
	if (r) {
		/* Under DROP_ON_ERROR no flush redoes a lost cut (the redo
		 * would cut what was written since, which that policy keeps
		 * nothing of to write again), so owing it would keep reads
		 * zero-filling and direct writes failing past `eof` for
		 * good. There it is a failed write like any other: reported
		 * once, the store keeps what it holds. */
		if (!(m->flags & FOLIO_MAPPING_DROP_ON_ERROR))
			mapping_resize_owed(m, eof);
		errseq_record(m, r);
		return;
	}
	atomic_store(&m->size.backing, eof);
	atomic_store(&m->size.landed_maybe, 0);
	mapping_resize_unstable(m, eof);
}

/* Whether a resize no successful flush has covered is pending, and the
 * smallest size it cut to. */
static bool resize_is_pending(struct folio_mapping *m, uint64_t *low)
{
	pthread_mutex_lock(&m->commit.lock);
	bool pending = m->commit.resize_pending;
	*low = m->commit.resize_low;
	pthread_mutex_unlock(&m->commit.lock);
	return pending;
}

bool mapping_resize_pending_below(struct folio_mapping *m, uint64_t end)
{
	uint64_t low;
	return atomic_load(&m->commit.resize_hint) &&
	       resize_is_pending(m, &low) && low < end;
}

static void resize_settled(struct folio_mapping *m, uint64_t gen)
{
	pthread_mutex_lock(&m->commit.lock);
	if (m->commit.resize_pending && m->commit.resize_gen <= gen) {
		m->commit.resize_pending = false;
		atomic_store(&m->commit.resize_hint, false);
	}
	pthread_mutex_unlock(&m->commit.lock);
}

/*
 * A failed flush may have lost truncates as well as writes. Redo them
 * before anything is re-dirtied: cut the object to the smallest size it
 * was truncated to, then set it to EOF. Every byte above that low mark was
 * written after the cut, so it is unstable or dirty and the re-dirtying
 * that follows writes it again; the zeros in between come back from the
 * cut. No writeback may run meanwhile (it would land before the cut and
 * be lost with it): the caller holds io_lock exclusively and writes in
 * flight drain first. The resize stays pending until a flush covers it.
 *
 * When the redo fails, the store may still hold what the truncate cut:
 * reads zero-fill from the cut on (stale_from) and the next flush must
 * redo it first (redo_owed).
 */
static int redo_resize_locked(struct folio_mapping *m)
{
	uint64_t low;
	int r = 0;
	if (resize_is_pending(m, &low)) {
		mapping_wait_range_writeback(m, 0, FOLIO_MAX_POS);
		struct folio_engine *e = m->engine;
		uint64_t eof = mapping_eof(m);
		uint64_t cut = MIN(low, eof);
		r = engine_truncate(e, cut);
		mapping_extents_forget(&m->direct, cut);
		if (!r)
			atomic_store(&m->size.backing, cut);
		if (!r && low < eof) {
			r = engine_truncate(e, eof);
			/* The store has this size now: a discard reaching
			 * EOF must not pull EOF below it (the redone cut is
			 * not the store's end any more). */
			if (!r)
				atomic_store(&m->size.backing, eof);
		}
		if (!r)
			atomic_store(&m->size.landed_maybe, 0);
		/* io_lock held: no read is between its look at the limit
		 * and its use of what it read. */
		if (r && cut < atomic_load(&m->size.stale_from))
			atomic_store(&m->size.stale_from, cut);
	}
	if (!r)
		atomic_store(&m->size.stale_from, UINT64_MAX);
	pthread_mutex_lock(&m->commit.lock);
	m->commit.redo_owed = r != 0;
	pthread_mutex_unlock(&m->commit.lock);
	return r;
}

static bool redo_is_owed(struct folio_mapping *m)
{
	pthread_mutex_lock(&m->commit.lock);
	bool owed = m->commit.redo_owed;
	pthread_mutex_unlock(&m->commit.lock);
	return owed;
}

/*
 * A barrier failed and may have lost truncates too: redo them, with
 * io_lock taken exclusively unless *locked says the caller has it. When
 * the redo fails that error is recorded too, and the resize stays
 * pending.
 */
static void redo_after_failure(struct folio_mapping *m, bool *locked)
{
	if (!*locked) {
		brlock_write_lock(&m->io_lock);
		*locked = true;
	}
	int rr = redo_resize_locked(m);
	if (rr)
		errseq_record(m, rr);
}

/*
 * What a barrier that began when the engine's flush failure count was
 * `failures`, and returned r, proves. A flush of this engine that failed
 * since this mapping's last one settled, or while this one ran (another
 * mapping's, or a flush some other caller made), may have dropped writes
 * and truncates of ours that completed before it: this flush's success
 * then proves nothing about them, and it counts as failed, truncate redo
 * included (run_flush_as()). Writes that were in flight across such a
 * failure see it themselves (wb_end_io()). Called with the role held,
 * once the barrier returned, before anything acts on r.
 */
static int barrier_result(struct folio_mapping *m, uint64_t failures, int r)
{
	if (!r && (failures != m->commit.failures_seen ||
		   atomic_load(&m->engine->flush_failures) != failures))
		return -EIO;
	return r;
}

/*
 * The end of a barrier that began in generation `gen`, when the engine's
 * flush failure count was `failures`, and gave r (barrier_result(), the
 * truncate redo done; io_lock not held). A failure is reported after the
 * walk made the unstable blocks dirty, also when `recorded` says a failed
 * durable write recorded it already: a sync that began in between passed
 * over those blocks while they were unstable, and must not report them
 * as written.
 */
static int settle_flush(struct folio_mapping *m, uint64_t gen,
			uint64_t failures, int r, bool recorded,
			const struct folio_list *written)
{
	if (!r) {
		resize_settled(m, gen);
		settle_unstable(m, gen, failures, false, written);
		m->commit.failures_seen = failures;
		return 0;
	}
	/* Read before the walk: a failure after it may drop writes that
	 * complete after the walk passed their folio. */
	m->commit.failures_seen = atomic_load(&m->engine->flush_failures);
	settle_unstable(m, gen, m->commit.failures_seen, true, NULL);
	if (recorded)
		errseq_report_again(m, r);
	else
		errseq_record(m, r);
	return r;
}

/*
 * One flush round, with the role held: the engine's flush, or with
 * `failed` (a negative errno) a flush of the engine that already failed
 * with it (a durable write's barrier, whose caller recorded the error),
 * then the settling of either outcome.
 */
static int run_flush_as(struct folio_mapping *m,
			const struct folio_list *written, int failed)
{
	uint64_t gen = atomic_fetch_add_explicit(&m->commit.flush_gen, 1,
						 memory_order_acq_rel);
	uint64_t failures = atomic_load(&m->engine->flush_failures);
	bool redo = !(m->flags & FOLIO_MAPPING_DROP_ON_ERROR);
	uint64_t low;
	/*
	 * With a truncate no flush has covered yet, a flush that fails may
	 * give the store its cut tail back until the redo: readers are kept
	 * out meanwhile (a page cache would not read a stale tail either).
	 * Only then, so that plain syncs never stop reads and writes.
	 */
	bool locked = redo && resize_is_pending(m, &low);
	if (locked)
		brlock_write_lock(&m->io_lock);
	int r;
	if (failed) {
		r = failed;
		if (redo)
			redo_after_failure(m, &locked);
	} else if (redo && redo_is_owed(m)) {
		/*
		 * The last failed flush could not redo the lost resize. A
		 * flush now would settle the resize over the stale tail, so
		 * this round redoes it instead. The cut takes everything
		 * written above the low mark since (unstable: none of it was
		 * flushed), so that is dirty again, as after a failed flush,
		 * and the round fails: the next one writes and flushes it.
		 */
		r = redo_resize_locked(m);
		r = r ? r : -EIO;
	} else {
		uint64_t t0 = base_now_ns();
		r = barrier_result(m, failures, engine_flush(m->engine));
		atomic_store_explicit(&m->commit.flush_ns, base_now_ns() - t0,
				      memory_order_relaxed);
		stat_add(&m->stats.flushes, 1);
		if (r && redo)
			redo_after_failure(m, &locked);
	}
	if (locked)
		brlock_write_unlock(&m->io_lock);
	return settle_flush(m, gen, failures, r, failed != 0, written);
}

static int run_flush(struct folio_mapping *m, const struct folio_list *written)
{
	return run_flush_as(m, written, 0);
}

/*
 * The flush role (commit.role). Whoever holds it runs the mapping's
 * flush rounds, one at a time; the others sleep on the word until a
 * release changes it. No mutex: with many syncers of one mapping, a
 * mutex and condition variable made every release wake every waiter
 * into a fight for the mutex, most of them only to sleep again.
 */
#define COMMIT_ROLE_HELD 0x1u
#define COMMIT_ROLE_SLEEPERS 0x2u
#define COMMIT_ROLE_RELEASE 0x4u /* added by each release */

static bool role_try_take(struct folio_mapping *m)
{
	unsigned w = atomic_load(&m->commit.role);
	return !(w & COMMIT_ROLE_HELD) &&
	       atomic_compare_exchange_strong(&m->commit.role, &w,
					      w | COMMIT_ROLE_HELD);
}

/* Hand the role back; `round` is the round it finished, or 0 when it
 * ran none. */
static void role_release(struct folio_mapping *m, uint64_t round)
{
	if (round)
		atomic_store(&m->commit.rounds_finished, round);
	unsigned w = atomic_load(&m->commit.role), next;
	do
		next = (w + COMMIT_ROLE_RELEASE) &
		       ~(COMMIT_ROLE_HELD | COMMIT_ROLE_SLEEPERS);
	while (!atomic_compare_exchange_weak(&m->commit.role, &w, next));
	if (w & COMMIT_ROLE_SLEEPERS)
		futex_wake_all(&m->commit.role);
}

/* Sleep until the role, seen held as `w`, is released (or spuriously). */
static void role_wait(struct folio_mapping *m, unsigned w)
{
	if (!(w & COMMIT_ROLE_SLEEPERS) &&
	    !atomic_compare_exchange_strong(&m->commit.role, &w,
					    w | COMMIT_ROLE_SLEEPERS))
		return; /* it changed: look again */
	futex_wait(&m->commit.role, w | COMMIT_ROLE_SLEEPERS);
}

/*
 * Before a round for several syncs: let the writes other syncs' passes
 * have in flight complete first, for at most one flush time, so that the
 * round covers them. A write that reaches the device during a flush may
 * complete only after it (this host measured ~35 us after), and its sync
 * then needs a round of its own: with 2 threads syncing one O_DIRECT
 * file every sync ran its own flush. Waiting at most what that next round
 * would cost bounds what a sync pays for others' data. (jbd2 waits
 * likewise, for up to its average commit time, when a synchronous
 * handle's transaction has other writers.)
 *
 * The first COMMIT_BATCH_SPIN_NS yield the CPU rather than sleep, as
 * RocksDB's write group leader does: the write completes within tens of
 * microseconds, and a thread woken from a futex on this VM runs 30 us
 * later. 2 threads syncing one O_DIRECT file: 1.07-1.12x the kernel
 * yielding, 0.70x sleeping, 0.91-0.94x with no wait. Past it the round
 * sleeps on the in-flight count, which its last completion wakes.
 * COMMIT_BATCH_MAX_NS caps the wait for a store whose flush is slow.
 */
#define COMMIT_BATCH_MAX_NS 10000000u
#define COMMIT_BATCH_SPIN_NS 100000u

_Atomic(mapping_commit_hook_fn) mapping_commit_batch_hook;

static void wait_writes_in_flight(struct folio_mapping *m)
{
	mapping_commit_hook_fn hook = atomic_load_explicit(
		&mapping_commit_batch_hook, memory_order_relaxed);
	if (hook)
		hook(m);
	if (atomic_load_explicit(&m->commit.syncers, memory_order_relaxed) <
		    2 ||
	    futex_count_drained(&m->wb.inflight))
		return;
	uint64_t bound = MIN(atomic_load_explicit(&m->commit.flush_ns,
						  memory_order_relaxed),
			     COMMIT_BATCH_MAX_NS);
	uint64_t start = base_now_ns(), end = start + bound;
	for (;;) {
		uint64_t now = base_now_ns();
		if (now >= end || futex_count_drained(&m->wb.inflight))
			break;
		if (now - start < COMMIT_BATCH_SPIN_NS) {
			sched_yield();
			continue;
		}
		struct timespec t = {.tv_nsec = (long)(end - now)};
		futex_count_sleep(&m->wb.inflight, &t);
	}
	/* One sleeper at a time: the role's holder. */
	atomic_fetch_and(&m->wb.inflight, ~FUTEX_COUNT_SLEEPER);
}

/* mapping_commit(), settling `written` first when this thread runs the
 * round. */
static int commit_rounds(struct folio_mapping *m,
			 const struct folio_list *written)
{
	int r = 0;
	/* A flush already running may have begun before our writes
	 * completed: only one that starts from now on covers them. */
	uint64_t need = atomic_load(&m->commit.rounds_started) + 1;
	while (atomic_load(&m->commit.rounds_finished) < need) {
		unsigned w = atomic_load(&m->commit.role);
		if (w & COMMIT_ROLE_HELD) {
			role_wait(m, w);
			continue;
		}
		if (!role_try_take(m))
			continue;
		/* Before the round's number: syncs whose writes complete
		 * meanwhile count on this round, not the next. */
		wait_writes_in_flight(m);
		uint64_t round =
			atomic_fetch_add(&m->commit.rounds_started, 1) + 1;
		r = run_flush(m, written);
		role_release(m, round);
	}
	/* A flush another thread ran for us reports through the error
	 * sequence, which it updated before it finished. */
	return r;
}

int mapping_commit(struct folio_mapping *m)
{
	return commit_rounds(m, NULL);
}

void mapping_commit_failed_barrier(struct folio_mapping *m, int err)
{
	for (;;) {
		unsigned w = atomic_load(&m->commit.role);
		if (w & COMMIT_ROLE_HELD) {
			role_wait(m, w);
			continue;
		}
		if (role_try_take(m))
			break;
	}
	uint64_t round = atomic_fetch_add(&m->commit.rounds_started, 1) + 1;
	run_flush_as(m, NULL, err);
	role_release(m, round);
}

/* ---- durable writes ------------------------------------------------- */

/* Outcomes of a sync's durable write (commit.durable_result). */
#define DURABLE_PENDING 1 /* not complete, or complete but not durable */

bool mapping_durable_begin(struct folio_mapping *m, struct mapping_durable *d)
{
	if (!d->wanted)
		return false;
	d->wanted = false;
	/*
	 * With other syncs under way, the durable write would hold the
	 * role for this sync's data alone while theirs waits behind it for
	 * a round of its own; a round run for all of them costs one flush.
	 * 8 threads syncing one mapping (posix engine): 17-18k syncs/s
	 * with the durable write, 21-23k without.
	 */
	if (atomic_load_explicit(&m->commit.syncers, memory_order_relaxed) > 1)
		return false;
	struct folio_engine *e = m->engine;
	/*
	 * The role makes the durable write a flush round like any
	 * other: no other flush of this mapping runs until it is settled,
	 * so a failure is turned into dirty blocks before anything can
	 * succeed after it (see the top of this file). A pending resize
	 * needs run_flush()'s redo around its barrier; an unaccounted
	 * engine failure fails the next flush anyway. Those change only
	 * under the role or, for a resize, with io_lock exclusive (the
	 * caller holds it shared), so they are looked at once it is held.
	 */
	if (!role_try_take(m))
		return false;
	pthread_mutex_lock(&m->commit.lock);
	bool ok = !m->commit.resize_pending && !m->commit.redo_owed &&
		  m->commit.failures_seen == atomic_load(&e->flush_failures);
	if (ok) {
		d->round = atomic_fetch_add(&m->commit.rounds_started, 1) + 1;
		/* As run_flush(): what completed before this point is
		 * covered by the barrier, which the engine starts only
		 * after the write (so after this) completed. */
		d->flush_gen = atomic_fetch_add_explicit(
			&m->commit.flush_gen, 1, memory_order_acq_rel);
		d->failures = atomic_load(&e->flush_failures);
		atomic_store(&m->commit.durable_gen, d->flush_gen);
		atomic_store(&m->commit.durable_result, DURABLE_PENDING);
		atomic_store(&m->commit.durable_failed, false);
		d->taken = true;
	}
	pthread_mutex_unlock(&m->commit.lock);
	if (!ok)
		role_release(m, 0);
	return ok;
}

uint64_t mapping_durable_gen(struct folio_mapping *m,
			     const struct mapping_io *io, ssize_t result)
{
	uint64_t now = atomic_load_explicit(&m->commit.flush_gen,
					    memory_order_acquire);
	struct folio_engine *e = m->engine;
	int64_t outcome = DURABLE_PENDING;
	int err = result < 0 ? (int)result : io->base.barrier_error;
	if (err) {
		/* engine.c counted it as a failed flush of the engine. A
		 * failed transfer's completion records its error; a barrier's
		 * is recorded here, before any of the write's folios ends
		 * its writeback (a sync woken by that sees it). */
		if (result >= 0)
			errseq_record(m, err);
		outcome = err;
		atomic_store(&m->commit.durable_failed, true);
	} else if ((size_t)result == io->base.io.len &&
		   !io->base.barrier_untrusted) {
		/* Another flush of the engine failed while this was in
		 * flight: this barrier's success proves nothing about what
		 * that one dropped (as in barrier_result()). */
		outcome = atomic_load(&e->flush_failures) == io->flush_failures
				  ? 0 : -EIO;
	}
	atomic_store(&m->commit.durable_result, outcome);
	/* Stamped with the barrier's generation, the bytes are released when
	 * the sync settles it, or made dirty again when that fails. */
	return outcome ? now : atomic_load(&m->commit.durable_gen);
}

void mapping_commit_sync(struct folio_mapping *m, struct mapping_durable *d,
			 struct folio_list *written)
{
	if (!d->taken) {
		commit_rounds(m, written);
		return;
	}
	int64_t outcome = atomic_load(&m->commit.durable_result);
	int r = 1;
	if (outcome <= 0) {
		stat_add(&m->stats.flushes, 1);
		r = barrier_result(m, d->failures, (int)outcome);
		if (r) {
			bool locked = false;
			redo_after_failure(m, &locked);
			brlock_write_unlock(&m->io_lock);
		}
		/* A write that failed recorded its error as it completed. */
		r = settle_flush(m, d->flush_gen, d->failures, r,
				 atomic_load(&m->commit.durable_failed),
				 written);
	}
	/* What the barrier could not cover needs a flush of its own: the
	 * write was short, or other writes completed, or a truncate ran,
	 * after it began. A failure is reported already. */
	uint64_t low;
	if (r > 0 || (!r && (mapping_any_tagged(m, INDEX_TAG_UNSTABLE) ||
			     resize_is_pending(m, &low))))
		run_flush(m, NULL);
	role_release(m, d->round);
}
