/* SPDX-License-Identifier: MIT */
/*
 * Index iteration and tags.
 */
#include "base/clock.h"

#include "mapping/tags.h"

struct folio *mapping_next_folio(struct folio_mapping *m, uint64_t *key,
				 uint64_t last, int tag)
{
	/* The key wrapped past the top of the key space: nothing after. */
	if (*key > last || *key == UINT64_MAX)
		return NULL;
	unsigned order;
	pthread_rwlock_rdlock(&m->index_lock);
	struct folio *f =
		tag == INDEX_NO_TAG
			? index_find(&m->index, key, last, &order)
			: index_find_tagged(&m->index, key, last,
					    (unsigned)tag, &order);
	folio_ref(f);
	pthread_rwlock_unlock(&m->index_lock);
	if (f) {
		uint64_t next = *key + (UINT64_C(1) << order);
		*key = next > *key ? next : UINT64_MAX;
	}
	return f;
}

unsigned mapping_next_tagged_batch(struct folio_mapping *m, uint64_t *key,
				   uint64_t last, unsigned tag,
				   struct index_hit *hits, unsigned max)
{
	if (*key > last || *key == UINT64_MAX)
		return 0;
	pthread_rwlock_rdlock(&m->index_lock);
	unsigned n = index_find_tagged_batch(&m->index, key, last, (int)tag,
					     hits, max);
	for (unsigned i = 0; i < n; i++)
		folio_ref(hits[i].entry);
	pthread_rwlock_unlock(&m->index_lock);
	/* The last entry ended at the top of the key space. */
	if (n && !*key)
		*key = UINT64_MAX;
	return n;
}

/* REMOVED changes under index_lock's exclusive side, so a folio seen in
 * the index here is the one at its key: a tag change never reaches a
 * newer folio that took a removed one's place (completions and flushes
 * hold only a reference, not io_lock). */
static bool still_indexed_locked(const struct folio *f)
{
	return !folio_test_removed(f);
}

void mapping_tag_set(struct folio_mapping *m, struct folio *f, unsigned tag)
{
	pthread_rwlock_rdlock(&m->index_lock);
	if (still_indexed_locked(f))
		index_tag_set(&m->index, mapping_key(m, f->pos),
			      mapping_folio_order(m, f), tag);
	pthread_rwlock_unlock(&m->index_lock);
}

void mapping_tag_clear_unless(struct folio_mapping *m, struct folio *f,
			      unsigned tag, bool (*still)(const struct folio *))
{
	pthread_rwlock_wrlock(&m->index_lock);
	/* A folio that left the index has no tags to clear. */
	if (still_indexed_locked(f) && (!still || !still(f))) {
		uint64_t key = mapping_key(m, f->pos);
		unsigned order = mapping_folio_order(m, f);
		index_tag_clear(&m->index, key, order, tag);
		/*
		 * A lock-free setter (mapping_tag_set_at(): a completion
		 * marking the folio unstable) does not wait for this lock.
		 * One that brought the state back after the look above and
		 * set its bit before the clear lost that bit to it: look
		 * again and put the tag back. Its state change came before
		 * its bit's release RMW, which the clear's RMW read, and the
		 * fence makes that read an acquire, so this look sees it;
		 * a bit set after the clear stays set.
		 */
		atomic_thread_fence(memory_order_acquire);
		if (still && still(f))
			index_tag_set(&m->index, key, order, tag);
	}
	pthread_rwlock_unlock(&m->index_lock);
}

void mapping_tags_prune(struct folio_mapping *m, uint64_t first,
			uint64_t last, unsigned mask)
{
	pthread_rwlock_wrlock(&m->index_lock);
	index_tag_prune(&m->index, first, last, mask);
	pthread_rwlock_unlock(&m->index_lock);
}

void mapping_tag_dirty(struct folio_mapping *m, struct folio *f)
{
	mapping_tag_set(m, f, INDEX_TAG_DIRTY);
	/* The age of the mapping's dirty data, for the cache's expiry:
	 * only the clean-to-dirty transition of the mapping sets it. */
	if (m->cache && !atomic_load_explicit(&m->in_cache.dirty_since,
					      memory_order_relaxed)) {
		uint64_t zero = 0;
		atomic_compare_exchange_strong(&m->in_cache.dirty_since, &zero,
					       base_now_ns());
	}
}

bool mapping_any_tagged(struct folio_mapping *m, unsigned tag)
{
	pthread_rwlock_rdlock(&m->index_lock);
	bool root = index_any_tagged(&m->index, tag);
	uint64_t key = 0;
	/* The root's bit may be stale: only an entry found says yes. */
	bool any = root && index_find_tagged(&m->index, &key, UINT64_MAX, tag,
					     NULL);
	pthread_rwlock_unlock(&m->index_lock);
	/* Nothing tagged below a set root bit: clear the stale bits once,
	 * so that the next calls answer from the root again. */
	if (root && !any)
		mapping_tags_prune(m, 0, UINT64_MAX, 1u << tag);
	return any;
}

size_t mapping_index_bytes(struct folio_mapping *m)
{
	pthread_rwlock_rdlock(&m->index_lock);
	size_t n = index_node_count(&m->index);
	pthread_rwlock_unlock(&m->index_lock);
	return n * INDEX_NODE_BYTES;
}
