/* SPDX-License-Identifier: MIT */
/*
 * Reserving room in the mapping's cache (the rest of cache.h is inline).
 */
#include "mapping/cache.h"

int mapping_cache_reserve(struct folio_mapping *m,
			  struct mapping_cache_credit *credit)
{
	struct mapping_cache *c = m->cache;
	int r = c->ops->reserve(c, m, credit->need);
	if (!r)
		credit->bytes += credit->need;
	credit->need = 0;
	return r;
}
