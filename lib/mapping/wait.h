/* SPDX-License-Identifier: MIT */
/*
 * Waiting for a folio (wait.c): for its lock and for its writeback,
 * driving a polled engine while waiting.
 */
#ifndef FOLIO_MAPPING_WAIT_H
#define FOLIO_MAPPING_WAIT_H

#include "mapping/mapping.h"

/*
 * Lock a folio of m. Its lock may be held by a read whose completion
 * nobody waits for (readahead), which a polled engine delivers only when
 * someone calls its wait(): so the waiter drives the engine instead of
 * only sleeping.
 */
void mapping_lock_folio_slow(struct folio_mapping *m, struct folio *f);
/* Inline: an uncontended lock is one atomic, and a writeback pass takes
 * one per dirty folio. */
static inline void mapping_lock_folio(struct folio_mapping *m,
				      struct folio *f)
{
	if (!folio_lock_nowait(f))
		mapping_lock_folio_slow(m, f);
}

/* Sleep until the folio's writeback ends, driving a polled engine.
 * Returns 0 or the error the engine's wait() returned meanwhile. */
int mapping_wait_writeback(struct folio_mapping *m, struct folio *f);

/* Sleep until every folio in [start, end) that is under writeback now has
 * finished it (folios that start writeback later are not waited for).
 * Returns 0 or the first error of the engine's wait(). */
int mapping_wait_range_writeback(struct folio_mapping *m, uint64_t start,
				 uint64_t end);

#endif
