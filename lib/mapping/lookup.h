/* SPDX-License-Identifier: MIT */
/*
 * Finding the folio at a position (lookup.c): lock-free lookups, the
 * per-thread hint, and creating a folio charged to the mapping's cache.
 */
#ifndef FOLIO_MAPPING_LOOKUP_H
#define FOLIO_MAPPING_LOOKUP_H

#include "mapping/cache.h"

/* The cached folio holding pos, referenced, or NULL. Lock-free in the
 * common case (see lookup.c). */
struct folio *mapping_lookup(struct folio_mapping *m, uint64_t pos);

/* Test hook: called inside the lock-free lookups' epoch section between
 * finding a folio and taking its reference, so a test can hold the
 * section open while removers and reclaimers run. NULL: none. */
extern void (*_Atomic mapping_test_lookup_delay)(void);

/*
 * The last folio this thread found, with a pinned reference
 * (folio_hint_get()), and the id of its mapping. The reference keeps the
 * memory valid however the folio left its mapping meanwhile; the thread
 * drops it when it moves to another folio, frees the mapping, or exits
 * (a pthread key's destructor, lookup.c). Here so that the fast paths
 * can check it inline.
 */
struct mapping_hint {
	uint64_t id; /* 0: no hint (mapping ids start at 1) */
	/* The folio's position and size (fixed while its header lives),
	 * so that checking the hint reads nothing but this thread's own
	 * line. */
	uint64_t pos;
	size_t size;
	struct folio *folio;
	bool pinned;
	bool registered; /* the key is set, so the destructor runs */
};
extern _Thread_local struct mapping_hint mapping_hint TLS_FAST;

/* Is the thread's hint m's folio holding pos? Then *f gets it and *off
 * where pos is in it. */
static inline bool mapping_hint_holding(const struct folio_mapping *m,
					uint64_t pos, struct folio **f,
					size_t *off)
{
	uint64_t o = pos - mapping_hint.pos;
	if (mapping_hint.id != m->id || o >= mapping_hint.size)
		return false;
	*f = mapping_hint.folio;
	*off = (size_t)o;
	return true;
}

/*
 * The cached folio holding pos, locked without waiting, or NULL when it
 * is not cached or someone else holds its lock: the read and write fast
 * paths, which then take the ordinary one. Counts a cache hit like
 * mapping_grab() and never creates or charges. A folio found in the
 * index becomes the thread's hint only with `sequential`
 * (the caller's next access is likely in it too: a random one would pay
 * for moving the hint and never use it) or on the first use of a folio
 * read ahead. Caller holds io_lock shared. Looks in the index: callers
 * first try the hint (mapping_hint_holding(), mapping_trylock_hint()),
 * which most small sequential steps hit without a call. `stripe` is the
 * caller's brlock_thread_stripe(), which it has for io_lock already.
 */
struct folio *mapping_trylock_cached(struct folio_mapping *m, uint64_t pos,
				     bool sequential, unsigned stripe);

/* mapping_trylock_cached() of the hint f that mapping_hint_holding() gave:
 * the reference the hint pins keeps f valid, REMOVED under its lock says
 * whether it is still m's. */
static inline struct folio *mapping_trylock_hint(struct folio_mapping *m,
						 struct folio *f,
						 unsigned stripe)
{
	if (!folio_lock_nowait(f))
		return NULL;
	if (folio_test_removed(f)) {
		folio_unlock_held(f);
		return NULL;
	}
	if (m->cache)
		mapping_count_lookup_at(m, true, stripe);
	return f;
}

/*
 * Grab the folio holding pos: found, or created when absent (see
 * create_folio_locked() for its size; a new folio is inserted locked),
 * and returned locked and still in the index. The caller holds io_lock
 * shared and may hold locks of folios below pos. The folio stays valid
 * while the caller holds its lock: it can leave the index only under
 * that lock.
 *
 * Repeated hits on one folio are served from a per-thread hint that
 * holds a pinned reference (folio_hint_get()): it keeps the folio's
 * memory alive between calls without counting as a user of it, so a
 * cache may still reclaim the folio; the REMOVED check after locking
 * catches that. Only lookups that go to the index raise the folio's
 * access count: a reader or writer moving through one folio in small
 * steps counts as one access, so a one-pass scan does not look hot.
 *
 * A new folio of a mapping in a cache is charged first, from `credit`
 * when it holds enough, else by charge(). NULL with *err: -ENOMEM, or
 * MAPPING_CACHE_FULL with credit->need set: drop every lock,
 * mapping_cache_reserve() and call again.
 */
struct folio *mapping_grab(struct folio_mapping *m, uint64_t pos,
			   size_t len_hint,
			   struct mapping_cache_credit *credit, int *err);

/*
 * For readahead, which must never wait: the folio holding pos, referenced,
 * created (charged, inserted locked) when absent, else locked only when
 * that needs no waiting. *locked says whether the caller holds its lock
 * (then it is still in the index), *created whether it is new. NULL with
 * *err: MAPPING_CACHE_FULL (nothing reclaimable at once) or -ENOMEM. No
 * access, hit or miss is counted and the thread's hint is left alone: a
 * folio read ahead is not a use of it.
 */
struct folio *mapping_grab_nowait(struct folio_mapping *m, uint64_t pos,
				  size_t len_hint, bool *locked,
				  bool *created, int *err);

/* Drop the calling thread's lookup hint when it names m. */
void mapping_drop_hint(struct folio_mapping *m);

#endif
