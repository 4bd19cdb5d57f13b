/* SPDX-License-Identifier: MIT */
/*
 * folio_mapping_stats().
 */
#include <string.h>

#include "mapping/mapping.h"

uint64_t mapping_lookup_hits(const struct folio_mapping *m)
{
	uint64_t hits = 0;
	for (unsigned i = 0; i < BRLOCK_STRIPES; i++)
		hits += atomic_load_explicit(&m->stats.io_bytes[i].hits,
					     memory_order_relaxed);
	return hits;
}

int folio_mapping_stats(struct folio_mapping *m,
			struct folio_mapping_stats *st)
{
	if (!m || !st)
		return -EINVAL;
	int r = sized_check(st, st->sz, sizeof(size_t), sizeof(*st));
	if (r)
		return r;
	struct folio_mapping_stats s;
	memset(&s, 0, sizeof(s));
	s.sz = st->sz;
#define LOAD(field) s.field = atomic_load(&m->stats.field)
	for (unsigned i = 0; i < BRLOCK_STRIPES; i++) {
		s.bytes_written += atomic_load(&m->stats.io_bytes[i].written);
		s.bytes_read += atomic_load(&m->stats.io_bytes[i].read);
	}
	LOAD(read_requests);
	LOAD(read_bytes);
	LOAD(wb_requests);
	LOAD(wb_bytes);
	LOAD(wb_merges);
	LOAD(map_calls);
	LOAD(retries);
	LOAD(errors);
	LOAD(flushes);
	LOAD(readahead_bytes);
	LOAD(readahead_hits);
	LOAD(readahead_wasted);
	LOAD(direct_writes);
	LOAD(direct_fast_writes);
	LOAD(direct_reads);
	LOAD(direct_map_calls);
	LOAD(direct_exclusive);
#undef LOAD
	pthread_rwlock_rdlock(&m->index_lock);
	uint64_t key = 0;
	unsigned order;
	struct folio *f;
	while ((f = index_find(&m->index, &key, UINT64_MAX, &order))) {
		size_t up, dirty, unstable;
		folio_count_blocks(f, &up, &dirty, &unstable);
		s.cached_bytes += (uint64_t)up << f->block_shift;
		s.dirty_bytes += (uint64_t)dirty << f->block_shift;
		s.unstable_bytes += (uint64_t)unstable << f->block_shift;
		s.folios++;
		unsigned shift = f->size_shift - 9;
		if (shift < FOLIO_STATS_SHIFTS)
			s.folios_by_shift[shift]++;
		key += UINT64_C(1) << order;
		if (!key)
			break;
	}
	pthread_rwlock_unlock(&m->index_lock);
	memcpy(st, &s, MIN(st->sz, sizeof(s)));
	st->sz = s.sz;
	return 0;
}
