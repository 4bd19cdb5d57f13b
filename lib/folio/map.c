/* SPDX-License-Identifier: MIT */
/*
 * State maps kept outside the folio header (folios of more than
 * FOLIO_MAP_INLINE_MAX blocks): their own object while the folio's state
 * varies from block to block, one shared read-only map while it is
 * wholly uptodate, clean and stable. A cache of 2 MiB folios read from
 * the store would otherwise keep 192 bytes of bits per folio (4 KiB
 * blocks) saying what the flags already say.
 *
 * Who may rely on a map of its own: a writer, from folio_own_state() to
 * marking its bytes dirty, holds the folio lock, and so does every
 * caller of folio_compact_state(); writeback, from taking the dirty bits
 * to marking them unstable or dirty again, keeps WRITEBACK set, which
 * compaction refuses. Dirty and unstable blocks keep the map too. So the
 * completions that must not fail never find the shared map.
 */
#include <stdatomic.h>
#include <string.h>

#include "alloc/alloc.h"
#include "bitmap/bitmap.h"
#include "folio/folio.h"

/*
 * The two shared states of a clean and stable folio of N blocks (64 <= N
 * <= FOLIO_MAX_SIZE / FOLIO_MIN_BLOCK_SIZE, a multiple of 64): wholly
 * uptodate, N one bits then 2N zero bits; and nothing uptodate, 3N zero
 * bits (folio_forget_shared()). One array of enough ones followed by
 * enough zeros holds both for every N: the first starts N/64 words before
 * the zeros, the second at them. The UPTODATE flag says which one a folio
 * with MAP_SHARED has.
 */
#define MAP_MAX_BLOCKS (FOLIO_MAX_SIZE / FOLIO_MIN_BLOCK_SIZE)
#define ONES_WORDS (MAP_MAX_BLOCKS / 64)
#define ZERO_WORDS (3 * ONES_WORDS)
#define ONE4 UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX
#define ONE16 ONE4, ONE4, ONE4, ONE4
_Static_assert(ONES_WORDS == 64, "the initializer below holds 64 words");
static const uint64_t shared_map[ONES_WORDS + ZERO_WORDS] = {
	ONE16, ONE16, ONE16, ONE16,
};

static _Atomic size_t outside_bytes;

_Atomic unsigned folio_map_fail_next;

static uint64_t *map_alloc(size_t bytes)
{
	unsigned fail = atomic_load_explicit(&folio_map_fail_next,
					     memory_order_relaxed);
	while (fail && !atomic_compare_exchange_weak(&folio_map_fail_next,
						     &fail, fail - 1))
		;
	return fail ? NULL : alloc_folio_meta(bytes);
}

static const uint64_t *shared_map_of(size_t nblocks, bool uptodate)
{
	return shared_map + ONES_WORDS - (uptodate ? nblocks / 64 : 0);
}

static size_t map_bytes(size_t nblocks)
{
	return BITMAP_WORDS(3 * nblocks) * sizeof(uint64_t);
}

static void set_map(struct folio *f, const uint64_t *map)
{
	f->state[0] = (uint64_t)(uintptr_t)map;
}

int folio_map_init(struct folio *f)
{
	size_t bytes = map_bytes(folio_nblocks(f));
	uint64_t *map = map_alloc(bytes);
	if (!map)
		return -ENOMEM;
	memset(map, 0, bytes);
	set_map(f, map);
	atomic_fetch_add_explicit(&outside_bytes, bytes, memory_order_relaxed);
	return 0;
}

void folio_map_release(struct folio *f)
{
	if (folio_map_shared(f))
		return;
	size_t bytes = map_bytes(folio_nblocks(f));
	alloc_folio_meta_free(folio_state_map(f), bytes);
	atomic_fetch_sub_explicit(&outside_bytes, bytes, memory_order_relaxed);
}

size_t folio_compact_state(struct folio *f)
{
	const unsigned need = FOLIO_F_UPTODATE | FOLIO_F_DIRTY |
			      FOLIO_F_UNSTABLE | FOLIO_F_WRITEBACK |
			      FOLIO_F_MAP_SHARED;
	if (!folio_map_outside(f) ||
	    (atomic_load_explicit(&f->flags, memory_order_relaxed) & need) !=
		    FOLIO_F_UPTODATE)
		return 0;
	uint64_t *old = NULL;
	spin_lock(&f->state_lock);
	/* The flags summarise the map under this lock: UPTODATE set and
	 * DIRTY and UNSTABLE clear say every block is uptodate, clean and
	 * stable, which is what the shared map says. */
	if ((atomic_load_explicit(&f->flags, memory_order_relaxed) & need) ==
	    FOLIO_F_UPTODATE) {
		old = folio_state_map(f);
		set_map(f, shared_map_of(folio_nblocks(f), true));
		atomic_fetch_or_explicit(&f->flags, FOLIO_F_MAP_SHARED,
					 memory_order_relaxed);
	}
	spin_unlock(&f->state_lock);
	if (!old)
		return 0;
	size_t bytes = map_bytes(folio_nblocks(f));
	alloc_folio_meta_free(old, bytes);
	atomic_fetch_sub_explicit(&outside_bytes, bytes, memory_order_relaxed);
	return bytes;
}

int folio_own_state_slow(struct folio *f)
{
	size_t n = folio_nblocks(f), bytes = map_bytes(n);
	while (folio_map_shared(f)) {
		/* Allocated outside the spinlock, which no allocation
		 * should extend. */
		uint64_t *map = map_alloc(bytes);
		if (!map)
			return -ENOMEM;
		spin_lock(&f->state_lock);
		if (folio_map_shared(f)) {
			/* Which shared map: under the lock, as
			 * folio_forget_shared() and a whole fill change it. */
			bool up = atomic_load_explicit(&f->flags,
						       memory_order_relaxed) &
				  FOLIO_F_UPTODATE;
			memcpy(map, shared_map_of(n, up), bytes);
			set_map(f, map);
			atomic_fetch_and_explicit(&f->flags,
						  ~FOLIO_F_MAP_SHARED,
						  memory_order_relaxed);
			map = NULL;
		}
		spin_unlock(&f->state_lock);
		if (map)
			alloc_folio_meta_free(map, bytes);
		else
			atomic_fetch_add_explicit(&outside_bytes, bytes,
						  memory_order_relaxed);
	}
	return 0;
}

bool folio_forget_shared(struct folio *f)
{
	bool done = false;
	spin_lock(&f->state_lock);
	if (folio_map_shared(f)) {
		set_map(f, shared_map_of(folio_nblocks(f), false));
		atomic_fetch_and_explicit(&f->flags, ~FOLIO_F_UPTODATE,
					  memory_order_release);
		done = true;
	}
	spin_unlock(&f->state_lock);
	return done;
}

void folio_share_uptodate_locked(struct folio *f)
{
	set_map(f, shared_map_of(folio_nblocks(f), true));
	atomic_fetch_or_explicit(&f->flags, FOLIO_F_UPTODATE,
				 memory_order_release);
}

size_t folio_outside_map_bytes(void)
{
	return atomic_load_explicit(&outside_bytes, memory_order_relaxed);
}
