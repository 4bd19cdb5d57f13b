/* SPDX-License-Identifier: MIT */
/*
 * Folios leaving the index: removal and reclaim.
 */
#include "mapping/cache.h"
#include "mapping/readahead.h"
#include "mapping/remove.h"

/* The folio lock and index_lock exclusive. */
static void remove_locked(struct folio_mapping *m, struct folio *f)
{
	folio_mark_removed(f);
	index_remove(&m->index, mapping_key(m, f->pos),
		     mapping_folio_order(m, f));
}

/* After f left the index: its state no longer counts, its charge goes
 * back, the index's reference goes. */
static void removed_from_index(struct folio_mapping *m, struct folio *f)
{
	mapping_readahead_forget(m, f);
	struct mapping_cache *c = m->cache;
	if (c)
		c->ops->removed(c, m, f);
	f->mapping = NULL;
	folio_unref(f);
}

void mapping_remove_folio_locked(struct folio_mapping *m, struct folio *f)
{
	if (m->cache && (folio_test_dirty(f) || folio_test_unstable(f))) {
		size_t dirty, unstable;
		folio_drain(f, &dirty, &unstable);
		mapping_cache_account(m, -mapping_block_bytes(f, dirty), 0,
			      -mapping_block_bytes(f, unstable));
	}
	pthread_rwlock_wrlock(&m->index_lock);
	remove_locked(m, f);
	pthread_rwlock_unlock(&m->index_lock);
	removed_from_index(m, f);
}

/* Clean, stable and idle: nothing but memory to give back. */
static bool reclaimable(const struct folio *f)
{
	return !folio_test_dirty(f) &&
	       !folio_test_unstable(f) && !folio_test_writeback(f) &&
	       !folio_test_removed(f);
}

size_t mapping_reclaim_folio(struct folio_mapping *m, struct folio *f)
{
	if (folio_trylock(f) != 1)
		return 0;
	size_t freed = 0;
	/* Under the folio lock nothing can dirty it or start writeback,
	 * and completions only touch folios under writeback. */
	if (reclaimable(f)) {
		pthread_rwlock_wrlock(&m->index_lock);
		/* The index's and the caller's references are expected.
		 * References under the shared side cannot be taken now, and
		 * lock-free lookups' try-gets fail while the count is frozen,
		 * so none can appear between the check and the removal. */
		if (folio_ref_freeze(f, 2)) {
			remove_locked(m, f);
			folio_ref_unfreeze(f);
			freed = folio_size(f);
		}
		pthread_rwlock_unlock(&m->index_lock);
	}
	if (freed)
		removed_from_index(m, f);
	folio_unlock(f);
	return freed;
}
