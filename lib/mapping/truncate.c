/* SPDX-License-Identifier: MIT */
/*
 * Truncate and invalidate: the operations that remove folios. Both hold
 * io_lock exclusively, so no read or write is between its lookup and its
 * folio lock while folios disappear.
 */
#include <string.h>

#include "mapping/cache.h"
#include "mapping/commit.h"
#include "mapping/direct.h"
#include "mapping/errseq.h"
#include "mapping/extents.h"
#include "mapping/readahead.h"
#include "mapping/remove.h"
#include "mapping/tags.h"
#include "mapping/wait.h"

/* Zero the bytes of f from `size` on and forget the state of the blocks
 * wholly past it: they no longer belong to the object. */
static void cut_folio_tail(struct folio_mapping *m, struct folio *f,
			   uint64_t size)
{
	size_t off = (size_t)(size - f->pos);
	size_t tail = folio_size(f) - off;
	memset(f->data + off, 0, tail);
	mapping_forget_blocks(m, f, off, tail);
}

/* Shrink the cache to `size`: drop folios wholly past it, zero and clean
 * the cut part of the folio that straddles it. */
static void shrink_cache(struct folio_mapping *m, uint64_t size)
{
	uint64_t key = mapping_key(m, size);
	struct folio *f;
	/* A folio holding `size` may start below its key's position: start
	 * from the folio holding size itself. */
	while ((f = mapping_next_folio(m, &key, UINT64_MAX, INDEX_NO_TAG))) {
		mapping_lock_folio(m, f);
		mapping_wait_writeback(m, f);
		/* A pool may have reclaimed it since it was found. */
		bool gone = folio_test_removed(f);
		if (!gone && f->pos >= size)
			mapping_remove_folio_locked(m, f);
		else if (!gone)
			cut_folio_tail(m, f, size);
		folio_unlock(f);
		folio_unref(f);
	}
}

int folio_mapping_truncate(struct folio_mapping *m, uint64_t size)
{
	if (!m)
		return -EINVAL;
	if (size > FOLIO_MAX_POS)
		return -EFBIG;
	brlock_write_lock(&m->io_lock);
	/* Reads started ahead of the old EOF must not complete into a cut
	 * cache: no new one starts while io_lock is held. */
	mapping_readahead_drain(m);
	uint64_t old = mapping_eof(m);
	int r = 0;
	if (size != old) {
		/* The engine first: the cache forgets nothing until the
		 * store really changed, so a failed truncate leaves both as
		 * they were (no old bytes where zeros are due, no lost tail).
		 * Writes in flight past the new size end before the cut. */
		if (size < old)
			mapping_wait_range_writeback(m, size, FOLIO_MAX_POS);
		r = engine_truncate(m->engine, size);
	}
	if (!r) {
		if (size < old) {
			shrink_cache(m, size);
			mapping_extents_forget(&m->direct, size);
		}
		/* Uptodate blocks past EOF always hold zeros (writes and
		 * reads zero-fill there, shrinking zeroes), so growing needs
		 * no memory work: the new space already reads as zeros. */
		atomic_store(&m->size.eof, size);
		if (size != old) {
			atomic_store(&m->size.backing, size);
			atomic_store(&m->size.landed_maybe, 0);
			mapping_resize_unstable(m, size);
		}
	}
	brlock_write_unlock(&m->io_lock);
	return r;
}

/*
 * Where EOF goes when an invalidate threw away dirty data reaching it:
 * to the end of what the cache still holds for the store, i.e. the larger
 * of the store's size as the mapping knows it and the end of the last
 * dirty block below `pos` (at most `pos`). Writing back what is left then
 * gives the store exactly this size, so store and mapping agree.
 */
static uint64_t eof_after_discard(struct folio_mapping *m, uint64_t pos)
{
	/* A write in flight below pos still moves the store's size. */
	mapping_wait_range_writeback(m, 0, pos);
	uint64_t backing = atomic_load(&m->size.backing);
	uint64_t data_end = 0;
	if (backing < pos) {
		uint64_t key = mapping_key(m, backing);
		uint64_t last = mapping_key(m, pos - 1);
		struct folio *f;
		while ((f = mapping_next_folio(m, &key, last,
					       INDEX_TAG_DIRTY))) {
			size_t off = 0;
			ssize_t run;
			/* Only dirty bytes below pos survive the cut at the
			 * new EOF: a dirty block from pos on (one the range
			 * covered only partly) is cut away with the rest,
			 * so it must not hold EOF up. */
			while ((run = folio_next_dirty(f, &off)) > 0 &&
			       f->pos + off < pos) {
				data_end = MAX(data_end,
					       f->pos + off + (size_t)run);
				off += (size_t)run;
			}
			folio_unref(f);
		}
	}
	return MAX(backing, MIN(data_end, pos));
}

int folio_mapping_invalidate(struct folio_mapping *m, uint64_t pos,
			     uint64_t len, unsigned flags)
{
	if (!m || (flags & ~FOLIO_INVALIDATE_DISCARD))
		return -EINVAL;
	if (pos > FOLIO_MAX_POS || (len && len > FOLIO_MAX_POS - pos))
		return -ERANGE;
	uint64_t end = len ? pos + len : FOLIO_MAX_POS;
	if (pos == end)
		return 0;
	bool discard = flags & FOLIO_INVALIDATE_DISCARD;
	bool kept = false, discarded = false;

	brlock_write_lock(&m->io_lock);
	mapping_readahead_drain(m);
	uint64_t key = mapping_key(m, pos);
	uint64_t last = mapping_key(m, end - 1);
	struct folio *f;
	while ((f = mapping_next_folio(m, &key, last, INDEX_NO_TAG))) {
		mapping_lock_folio(m, f);
		if (folio_test_removed(f)) {
			/* Reclaimed by a pool since it was found. */
			folio_unlock(f);
			folio_unref(f);
			continue;
		}
		mapping_wait_writeback(m, f);
		uint64_t fend = f->pos + folio_size(f);
		if (discard && (folio_test_dirty(f) || folio_test_unstable(f))) {
			/* Throw away only what the range wholly covers. */
			uint64_t a = MAX(f->pos, pos), z = MIN(fend, end);
			size_t off = (size_t)(a - f->pos);
			discarded |= folio_is_dirty(f, off, (size_t)(z - a)) == 1;
			mapping_forget_blocks(m, f, off, (size_t)(z - a));
			folio_clear_uptodate(f, off, (size_t)(z - a));
		}
		/* Dirty and unstable data is the cache's to keep until it
		 * is written and flushed. */
		if (!folio_test_dirty(f) && !folio_test_unstable(f))
			mapping_remove_folio_locked(m, f);
		else
			kept = true;
		folio_unlock(f);
		folio_unref(f);
	}
	uint64_t eof = mapping_eof(m);
	if (discarded && end >= eof && pos < eof) {
		uint64_t new_eof = eof_after_discard(m, pos);
		if (new_eof < eof) {
			/* Nothing past the new EOF is worth keeping: dirty
			 * bytes there were discarded (a block only partly
			 * inside the range among them, which would otherwise
			 * stay dirty past EOF for good), the rest are zeros
			 * beyond the store's end. Cut the cache as a shrink
			 * would; the store needs no change. */
			shrink_cache(m, new_eof);
			mapping_extents_forget(&m->direct, new_eof);
			atomic_store(&m->size.eof, new_eof);
			mapping_cut_landed_writes(m, new_eof);
		}
	}
	brlock_write_unlock(&m->io_lock);
	return kept && !discard ? -EBUSY : 0;
}
