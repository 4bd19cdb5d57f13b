/* SPDX-License-Identifier: MIT */
/*
 * Readahead (readahead.c): sequential stream detection and reads started
 * without waiting. Its state (struct mapping_ra) is in mapping.h.
 */
#ifndef FOLIO_MAPPING_READAHEAD_H
#define FOLIO_MAPPING_READAHEAD_H

#include "mapping/mapping.h"

/* Largest window when the caller sets none. */
#define MAPPING_RA_DEFAULT_MAX ((uint64_t)2 << 20)

void mapping_readahead_init(struct folio_mapping *m, uint64_t max);

/*
 * A read of [pos, pos+len) (len already clamped to EOF) is about to run,
 * holding io_lock shared and no folio lock: learn from it which streams
 * there are and, when it continues one beyond its windows, start the
 * next window at pos without waiting for it (the read then waits for
 * those folios like for any locked folio); when it enters a window of
 * its stream still in flight, start the windows after it first.
 */
void mapping_readahead_on_read(struct folio_mapping *m, uint64_t pos,
			       size_t len);

/*
 * A reader reached f (locked by it or not; io_lock shared held): count a
 * first read of a folio readahead brought in, and when f carries the
 * readahead mark of a live stream's latest window, start that stream's
 * next window without waiting. Never sleeps on a folio lock.
 */
void mapping_readahead_reached(struct folio_mapping *m, struct folio *f);

/* Wait until no readahead request of m is in flight. The caller holds
 * io_lock exclusively (or is free()), so none can start meanwhile. */
void mapping_readahead_drain(struct folio_mapping *m);

/* f left m's index: what readahead brought into it unread was wasted. */
void mapping_readahead_forget(struct folio_mapping *m, struct folio *f);

#endif
