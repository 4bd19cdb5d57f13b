/* SPDX-License-Identifier: MIT */
/*
 * Folios leaving the index (remove.c): removal by truncate and
 * invalidate, reclaim by the cache.
 */
#ifndef FOLIO_MAPPING_REMOVE_H
#define FOLIO_MAPPING_REMOVE_H

#include "mapping/mapping.h"

/* Remove a folio from the index and drop the index's reference; any
 * dirty or unstable state it still had goes with it. Needs the folio
 * lock, and a check that it is not REMOVED already. */
void mapping_remove_folio_locked(struct folio_mapping *m, struct folio *f);

/*
 * Try to reclaim f, a folio of m the caller holds a reference to: when
 * it can be locked without waiting and is clean, stable, not under
 * writeback and used by nobody but the index and the caller (hint pins
 * aside), it leaves the index. Needs neither io_lock nor any other lock
 * of m: the folio lock and index_lock exclusive are what every user of
 * an indexed folio synchronizes with. The caller may hold io_lock shared
 * and folio locks of any mapping (only trylocks are taken here besides
 * index_lock, under which nobody waits). Returns the folio bytes freed
 * from the index (0: kept).
 */
size_t mapping_reclaim_folio(struct folio_mapping *m, struct folio *f);

#endif
