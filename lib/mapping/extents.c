/* SPDX-License-Identifier: MIT */
/*
 * The extent cache of direct I/O (see extents.h).
 */
#include "base/base.h"
#include "folio_state.h"
#include "mapping/extents.h"

bool mapping_extents_lookup(const struct mapping_extents *c, uint64_t pos,
			    uint64_t *dev, uint64_t *avail)
{
	for (unsigned i = 0; i < MAPPING_EXTENTS; i++) {
		const struct mapping_extent *x = &c->ext[i];
		if (x->len && pos >= x->pos && pos - x->pos < x->len) {
			*dev = x->dev + (pos - x->pos);
			*avail = x->len - (pos - x->pos);
			return true;
		}
	}
	return false;
}

void mapping_extents_insert(struct mapping_extents *c, uint64_t pos,
			    uint64_t len, uint64_t dev)
{
	len = MIN(len, FOLIO_MAX_POS - MIN(pos, FOLIO_MAX_POS));
	if (!len)
		return;
	struct mapping_extent *slot = NULL;
	for (unsigned i = 0; i < MAPPING_EXTENTS; i++) {
		struct mapping_extent *x = &c->ext[i];
		if (x->len && x->pos < pos + len && pos < x->pos + x->len)
			x->len = 0;
		if (x->len && x->pos + x->len == pos && x->dev + x->len == dev) {
			pos = x->pos;
			dev = x->dev;
			len += x->len;
			x->len = 0;
		}
		if (x->len && pos + len == x->pos && dev + len == x->dev) {
			len += x->len;
			x->len = 0;
		}
		if (!x->len && !slot)
			slot = x;
	}
	if (!slot) {
		slot = &c->ext[c->next];
		c->next = (c->next + 1) % MAPPING_EXTENTS;
	}
	*slot = (struct mapping_extent){pos, len, dev};
}

void mapping_extents_forget(struct mapping_extents *c, uint64_t from)
{
	for (unsigned i = 0; i < MAPPING_EXTENTS; i++) {
		struct mapping_extent *x = &c->ext[i];
		if (x->pos >= from)
			x->len = 0;
		else if (x->len > from - x->pos)
			x->len = from - x->pos;
	}
}
