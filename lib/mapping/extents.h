/* SPDX-License-Identifier: MIT */
/*
 * The extent cache of direct I/O (extents.c): written extents the
 * engine's map() returned, so direct overwrites need no map() call.
 * Lock: changed only under the mapping's io_lock exclusive (a direct
 * write's exclusive path, truncate, invalidate, a failed flush's redo of
 * a resize), read under io_lock shared: the fast path takes no lock of
 * its own and writes no shared line.
 */
#ifndef FOLIO_MAPPING_EXTENTS_H
#define FOLIO_MAPPING_EXTENTS_H

#include <stdbool.h>
#include <stdint.h>

/* A database file is a few large extents; a miss costs one map(). */
#define MAPPING_EXTENTS 8

struct mapping_extents {
	struct mapping_extent {
		uint64_t pos, len, dev; /* len 0: a free slot */
	} ext[MAPPING_EXTENTS];
	unsigned next; /* the slot to replace next */
};

/* Does the cache hold pos? Then *dev is its device position and *avail
 * the bytes from pos to the end of its extent. */
bool mapping_extents_lookup(const struct mapping_extents *x, uint64_t pos,
			    uint64_t *dev, uint64_t *avail);

/* Remember [pos, pos+len) as written at dev: what it overlaps goes, a
 * neighbour it continues on the device too absorbs it. */
void mapping_extents_insert(struct mapping_extents *x, uint64_t pos,
			    uint64_t len, uint64_t dev);

/* The store may no longer hold written extents from `from` on (a
 * truncate cut there, a discard moved EOF there): forget them, so a
 * direct write there goes through map() again. */
void mapping_extents_forget(struct mapping_extents *x, uint64_t from);

#endif
