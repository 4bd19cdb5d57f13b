/* SPDX-License-Identifier: MIT */
/*
 * Truncate and invalidate: the operations that remove folios. Both hold
 * io_lock exclusively, so no read or write is between its lookup and its
 * folio lock while folios disappear.
 */
#include <string.h>

#include "mapping.h"

/* Shrink the cache to `size`: drop folios wholly past it, zero and clean
 * the cut part of the folio that straddles it. */
static void shrink_cache(struct folio_mapping *m, uint64_t size)
{
	uint64_t key = mapping_key(m, size);
	struct folio *f;
	/* A folio holding `size` may start below its key's position: start
	 * from the folio holding size itself. */
	while ((f = mapping_next_folio(m, &key, UINT64_MAX, INDEX_NO_TAG))) {
		folio_lock(f);
		mapping_wait_writeback(m, f);
		if (f->pos >= size) {
			mapping_remove_folio(m, f);
		} else {
			size_t off = (size_t)(size - f->pos);
			size_t tail = folio_size(f) - off;
			memset(f->data + off, 0, tail);
			folio_clear_dirty(f, off, tail);
		}
		folio_unlock(f);
		folio_put(f);
	}
}

int folio_mapping_truncate(struct folio_mapping *m, uint64_t size)
{
	if (!m)
		return -EINVAL;
	if (size > FOLIO_MAX_POS)
		return -EFBIG;
	brlock_write_lock(&m->io_lock);
	uint64_t old = mapping_eof(m);
	if (size < old)
		shrink_cache(m, size);
	/* Uptodate blocks past EOF always hold zeros (writes and reads
	 * zero-fill there, shrinking zeroes), so growing needs no memory
	 * work: the new space already reads as zeros. */
	atomic_store(&m->size, size);
	int r = 0;
	if (size != old) {
		struct folio_engine *e = m->engine;
		r = e->ops.truncate(e->ctx, size);
		if (r > 0)
			r = -EIO;
	}
	brlock_write_unlock(&m->io_lock);
	return r;
}

int folio_mapping_invalidate(struct folio_mapping *m, uint64_t pos,
			     uint64_t len, unsigned flags)
{
	if (!m || (flags & ~FOLIO_INVALIDATE_DISCARD))
		return -EINVAL;
	if (pos >= FOLIO_MAX_POS)
		return 0;
	uint64_t end = (!len || len > FOLIO_MAX_POS - pos) ? FOLIO_MAX_POS
							   : pos + len;
	bool discard = flags & FOLIO_INVALIDATE_DISCARD;
	bool kept_dirty = false;

	brlock_write_lock(&m->io_lock);
	uint64_t key = mapping_key(m, pos);
	uint64_t last = mapping_key(m, end - 1);
	struct folio *f;
	while ((f = mapping_next_folio(m, &key, last, INDEX_NO_TAG))) {
		folio_lock(f);
		mapping_wait_writeback(m, f);
		uint64_t fend = f->pos + folio_size(f);
		if (folio_test_dirty(f) && discard) {
			/* Throw away only what the range wholly covers. */
			uint64_t a = MAX(f->pos, pos), z = MIN(fend, end);
			size_t off = (size_t)(a - f->pos);
			folio_clear_dirty(f, off, (size_t)(z - a));
			folio_clear_uptodate(f, off, (size_t)(z - a));
		}
		if (!folio_test_dirty(f))
			mapping_remove_folio(m, f);
		else
			kept_dirty = true;
		folio_unlock(f);
		folio_put(f);
	}
	brlock_write_unlock(&m->io_lock);
	return kept_dirty && !discard ? -EBUSY : 0;
}
