/* SPDX-License-Identifier: MIT */
/*
 * The readahead state a mapping embeds (struct folio_mapping.ra), apart
 * so that mapping.h stays a page: the fields only; readahead.h has the
 * functions.
 */
#ifndef FOLIO_MAPPING_RA_STATE_H
#define FOLIO_MAPPING_RA_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/spinlock.h"

/*
 * Readahead state (readahead.c): a few sequential streams, each a reader
 * moving forward contiguously or at a fixed stride, and the window last
 * started for it. Small and under one spinlock: it is touched once per
 * read call and once per window.
 */
#define MAPPING_RA_STREAMS 4
/* Most windows a stream has started that its reader has not reached. */
#define MAPPING_RA_DEPTH 4

struct mapping_ra_stream {
	uint64_t prev;      /* start of the stream's last read */
	uint64_t next;      /* where a contiguous read would continue */
	uint64_t stride;    /* distance between its last two reads; 0: none */
	uint64_t win_start; /* the latest window: [win_start, win_end) */
	uint64_t win_end;
	uint64_t reached;   /* start of the window the reader is in */
	/* Where the windows the reader has not reached yet carry their
	 * marks, ascending. */
	uint64_t ahead[MAPPING_RA_DEPTH];
	unsigned nahead;
	uint64_t used;      /* clock of its last read, for replacement */
	unsigned seq;       /* reads in a row that continued it */
	bool live;
};

/* Lock: `lock` guards the streams and the clock; `inflight` is an atomic
 * count, `async` a relaxed hint, `max` is fixed at creation
 * (doc/design.md, "Concurrency"). */
struct mapping_ra {
	/* Readahead batches whose requests are in flight: free, truncate
	 * and invalidate wait for them (readahead.c). */
	atomic_uint inflight;
	/* The engine completed the last window after its submitter let go
	 * of it (not inside submit()): windows overlap, so keep several
	 * going (readahead.c). */
	atomic_bool async;
	uint64_t max; /* largest window, bytes */
	spinlock_t lock;
	uint64_t clock;
	struct mapping_ra_stream s[MAPPING_RA_STREAMS];
};

#endif
