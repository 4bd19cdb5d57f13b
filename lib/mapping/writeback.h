/* SPDX-License-Identifier: MIT */
/*
 * Writeback as the cache's flushers call it (writeback.c).
 */
#ifndef FOLIO_MAPPING_WRITEBACK_H
#define FOLIO_MAPPING_WRITEBACK_H

#include "mapping/mapping.h"

/*
 * One flusher step: write back the dirty folios of m from *cursor on,
 * submitting at most `max_bytes` (whole folios; 0: no limit), and wait
 * for those requests after io_lock is released; busy folios are left
 * for later. *cursor moves past the last folio taken, or to 0 when the
 * end of the mapping was reached. Returns the bytes submitted.
 */
int64_t mapping_writeback_chunk(struct folio_mapping *m, uint64_t *cursor,
				uint64_t max_bytes);

#endif
