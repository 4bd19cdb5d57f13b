/* SPDX-License-Identifier: MIT */
/*
 * Direct I/O (direct.c): what truncate shares with it.
 */
#ifndef FOLIO_MAPPING_DIRECT_H
#define FOLIO_MAPPING_DIRECT_H

#include "mapping/mapping.h"

/* Forget the dirty and unstable state of the blocks wholly inside
 * [off, off+len) of f (their data is gone or replaced), keeping the
 * cache's counts. Caller holds f's lock. */
struct folio;
void mapping_forget_blocks(struct folio_mapping *m, struct folio *f,
			   size_t off, size_t len);

#endif
