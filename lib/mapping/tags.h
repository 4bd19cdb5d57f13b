/* SPDX-License-Identifier: MIT */
/*
 * Iterating the index and changing its tags (tags.c): dirty, writeback,
 * unstable and readahead marks of the folios a mapping caches.
 */
#ifndef FOLIO_MAPPING_TAGS_H
#define FOLIO_MAPPING_TAGS_H

#include "mapping/mapping.h"

/* Does any folio of m carry `tag` (INDEX_TAG_*)? A hint: it may be
 * stale by the time the caller acts on it. Stale index bits do not make it
 * true (it confirms with a find, and prunes them when nothing is found). */
bool mapping_any_tagged(struct folio_mapping *m, unsigned tag);
/* Bytes of index nodes m uses (metadata statistics). */
size_t mapping_index_bytes(struct folio_mapping *m);

/*
 * Iteration: the next folio at or after *key (only folios carrying `tag`
 * unless it is INDEX_NO_TAG), referenced, with *key moved past it; NULL at
 * the end of [*key, last]. The index may change between calls.
 */
#define INDEX_NO_TAG (-1)
struct folio *mapping_next_folio(struct folio_mapping *m, uint64_t *key,
				 uint64_t last, int tag);

/*
 * mapping_next_folio() for up to `max` folios carrying `tag`, each
 * referenced, with where it sits in the index (for the *_at calls below).
 * Returns how many; 0 at the end of [*key, last].
 */
unsigned mapping_next_tagged_batch(struct folio_mapping *m, uint64_t *key,
				   uint64_t last, unsigned tag,
				   struct index_hit *hits, unsigned max);

/*
 * Tag changes of a folio through where it sits in the index (the node
 * holding it and its bits there, struct index_place), with no index
 * lock in the common case: the caller guarantees the folio stays in the
 * index meanwhile (it holds the folio lock and saw it not REMOVED, or the
 * folio is under writeback, which truncate, invalidate and reclaim wait
 * for). Setting falls back to mapping_tag_set() when the node's ancestors
 * may lack the tag. Dropping clears the folio's own bit and re-sets it if
 * `still` says the state came back; bits above may stay set until
 * mapping_tags_prune() (finds skip them at a small cost).
 */
void mapping_tag_set(struct folio_mapping *m, struct folio *f, unsigned tag);
static inline void mapping_tag_set_at(struct folio_mapping *m,
				      struct folio *f, struct index_place at,
				      unsigned tag)
{
	if (!index_tag_set_fast(at, tag))
		mapping_tag_set(m, f, tag);
}

static inline void mapping_tag_drop_at(struct folio_mapping *m,
				       struct folio *f, struct index_place at,
				       unsigned tag,
				       bool (*still)(const struct folio *))
{
	index_tag_drop(at, tag);
	/* After the drop: a setter that made the state come back before
	 * it is seen here, one that made it come back after sets the tag
	 * after the drop (index_tag_drop()). */
	if (still && still(f))
		mapping_tag_set_at(m, f, at, tag);
}
/* Clear stale tag bits (tags in mask) over keys [first, last]: one
 * exclusive index_lock acquisition for what drops left behind. */
void mapping_tags_prune(struct folio_mapping *m, uint64_t first,
			uint64_t last, unsigned mask);

/* Tag the folio dirty in the index, after a state change returned
 * FOLIO_BECAME_DIRTY. */
void mapping_tag_dirty(struct folio_mapping *m, struct folio *f);

/* Set or clear one index tag of a folio. Clearing re-checks the folio's
 * state under the exclusive index lock (`still` says whether the state
 * the tag stands for came back meanwhile), before the clear and again
 * after it, since a lock-free setter (mapping_tag_set_at()) may set its
 * bit between the two: a racing setter's tag is never lost. */
void mapping_tag_clear_unless(struct folio_mapping *m, struct folio *f,
			      unsigned tag, bool (*still)(const struct folio *));

#endif
