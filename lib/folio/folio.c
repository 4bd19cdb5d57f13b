/* SPDX-License-Identifier: MIT */
/*
 * Folio objects: geometry, reference counting, the LOCKED/WRITEBACK flags
 * and sleeping on them, the version optimistic readers check (the lock
 * word's upper bits) and their racy copy. Per-block state lives in blocks.c.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "bitmap/bitmap.h"
#include "base/futex.h"
#include "folio/folio.h"

#if !defined(FOLIO_RACY_CHECKED) && defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define FOLIO_HAVE_MEMCHECK 1
#endif
#endif

/* Header + 3 bits per block, in whole words (none for one block), or a
 * pointer to a map outside. */
static size_t meta_size(size_t nblocks)
{
	size_t words = 0;
	if (nblocks > FOLIO_MAP_INLINE_MAX)
		words = 1;
	else if (nblocks > 1)
		words = BITMAP_WORDS(3 * nblocks);
	return sizeof(struct folio) + words * sizeof(uint64_t);
}

int folio_alloc(struct folio **out, uint64_t pos, size_t size,
		size_t block_size, bool zero)
{
	if (!out || !is_pow2(size) || !is_pow2(block_size) ||
	    block_size < FOLIO_MIN_BLOCK_SIZE ||
	    block_size > FOLIO_MAX_BLOCK_SIZE || size < block_size ||
	    size > FOLIO_MAX_SIZE || pos % size || pos >= FOLIO_MAX_POS)
		return -EINVAL;

	size_t nblocks = size / block_size;
	void *data, *meta;
	bool zeroed;
	if (alloc_folio_mem(size, meta_size(nblocks), &data, &meta, &zeroed))
		return -ENOMEM;
	struct folio *f = meta;
	/* Fresh pages read as zeros already: folio_new() of a large folio
	 * would otherwise fault every page in just to write zeros. */
	if (zero && !zeroed)
		memset(data, 0, size);
	atomic_init(&f->flags, 0);
	atomic_init(&f->refcount, 1);
	spin_init(&f->state_lock);
	f->size_shift = (uint8_t)ilog2_u64(size);
	f->block_shift = (uint8_t)ilog2_u64(block_size);
	atomic_init(&f->cache_bits, 0);
	f->cache_node = 0;
	f->pos = pos;
	f->data = data;
	atomic_init(&f->wb_pending, 0);
	f->mapping = NULL;
	f->unstable_gen = f->unstable_failures = 0;
	f->begin_off = f->begin_len = 0;
	if (folio_map_outside(f)) {
		if (folio_map_init(f)) {
			alloc_folio_mem_free(data, size, meta,
					     meta_size(nblocks));
			return -ENOMEM;
		}
	} else if (nblocks > 1) {
		memset(f->state, 0, BITMAP_WORDS(3 * nblocks) *
					    sizeof(uint64_t));
	}
	*out = f;
	return 0;
}

#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(struct folio) == 64, "folio header is one cache line");
#endif

size_t folio_metadata_bytes(const struct folio *f)
{
	return meta_size(folio_nblocks(f));
}

/* cache_bits: access count in bits 0-1, the cache's flag in bit 2, hint
 * pins in bits 3-7. */
#define CACHE_FLAG 0x04u
#define PIN_ONE 0x08u
#define PIN_SHIFT 3

unsigned folio_access_lower(struct folio *f)
{
	uint8_t v = atomic_load_explicit(&f->cache_bits, memory_order_relaxed);
	while ((v & FOLIO_ACCESS_MAX) &&
	       !atomic_compare_exchange_weak_explicit(&f->cache_bits, &v,
						      (uint8_t)(v - 1),
						      memory_order_relaxed,
						      memory_order_relaxed))
		;
	return v & FOLIO_ACCESS_MAX;
}

unsigned folio_access_reset(struct folio *f)
{
	return atomic_fetch_and_explicit(&f->cache_bits,
					 (uint8_t)~FOLIO_ACCESS_MAX,
					 memory_order_relaxed) &
	       FOLIO_ACCESS_MAX;
}

bool folio_cache_flag(const struct folio *f)
{
	return atomic_load_explicit(&((struct folio *)f)->cache_bits,
				    memory_order_relaxed) & CACHE_FLAG;
}

void folio_set_cache_flag(struct folio *f, bool on)
{
	if (on)
		atomic_fetch_or_explicit(&f->cache_bits, (uint8_t)CACHE_FLAG,
					 memory_order_relaxed);
	else
		atomic_fetch_and_explicit(&f->cache_bits,
					  (uint8_t)~CACHE_FLAG,
					  memory_order_relaxed);
}

/*
 * The reference comes first and the pin after it, and on the way out the
 * pin goes first: refcount minus pins then never reads lower than the
 * references that are not pins, which is what a cache deciding "is anyone
 * using this folio" must not underestimate.
 */
bool folio_hint_get(struct folio *f)
{
	folio_ref(f);
	return folio_hint_adopt(f);
}

bool folio_hint_adopt(struct folio *f)
{
	uint8_t v = atomic_load_explicit(&f->cache_bits, memory_order_relaxed);
	while ((v >> PIN_SHIFT) != 0x1fu) {
		if (atomic_compare_exchange_weak_explicit(
			    &f->cache_bits, &v, (uint8_t)(v + PIN_ONE),
			    memory_order_acq_rel, memory_order_relaxed))
			return true;
	}
	return false; /* 31 pins already: a plain reference */
}

void folio_hint_put(struct folio *f, bool pinned)
{
	if (pinned)
		atomic_fetch_sub_explicit(&f->cache_bits, (uint8_t)PIN_ONE,
					  memory_order_acq_rel);
	folio_unref(f);
}

/* References before pins: a hint let go meanwhile (pin first, then the
 * reference) can then only make the answer too high. A hint taken
 * meanwhile can make it too low; a caller that must not act on that
 * (reclaim) uses folio_ref_freeze() instead, which fails then. */
unsigned folio_unpinned_refs(const struct folio *f)
{
	struct folio *w = (struct folio *)f;
	unsigned refs = atomic_load(&w->refcount);
	unsigned pins = atomic_load(&w->cache_bits) >> PIN_SHIFT;
	return refs - pins;
}

bool folio_ref_freeze(struct folio *f, unsigned unpinned)
{
	/* A hint taken or dropped between the two loads changes the count,
	 * so the exchange below fails: only a count that held still with
	 * exactly `unpinned` references besides the pins is frozen. */
	unsigned r = atomic_load(&f->refcount);
	unsigned pins = atomic_load(&f->cache_bits) >> PIN_SHIFT;
	if (r - pins != unpinned)
		return false;
	return atomic_compare_exchange_strong(&f->refcount, &r,
					      r | FOLIO_REF_FROZEN);
}

void folio_ref_unfreeze(struct folio *f)
{
	atomic_fetch_and(&f->refcount, ~FOLIO_REF_FROZEN);
}

static void free_header(struct epoch_entry *e)
{
	struct folio *f = container_of(e, struct folio, retire);
	alloc_folio_meta_free(f, meta_size(folio_nblocks(f)));
}

int folio_new(struct folio **out, uint64_t pos, size_t size, size_t block_size)
{
	return folio_alloc(out, pos, size, block_size, true);
}

struct folio *folio_get(struct folio *f)
{
	return folio_ref(f);
}

void folio_put(struct folio *f)
{
	folio_unref(f);
}

void folio_free_unreferenced(struct folio *f)
{
	/* Only holders of a reference read the state map: it goes now. */
	if (folio_map_outside(f))
		folio_map_release(f);
	/* A folio that was in an index may still be looked at by a
	 * lock-free lookup that found it there just before it left: its
	 * data goes now (nobody reaches it without a reference), its header
	 * after a grace period. Whatever a cache counted for it went back
	 * when it left the index, so the budget never sees the wait. */
	if (atomic_load_explicit(&f->flags, memory_order_relaxed) &
	    FOLIO_F_REMOVED) {
		alloc_folio_data_free(f->data, folio_size(f));
		epoch_retire(&f->retire, free_header);
		return;
	}
	alloc_folio_mem_free(f->data, folio_size(f), f,
			     meta_size(folio_nblocks(f)));
}

void *folio_data(const struct folio *f)
{
	return f ? f->data : NULL;
}

uint64_t folio_pos(const struct folio *f)
{
	return f ? f->pos : 0;
}

size_t folio_size(const struct folio *f)
{
	return f ? folio_bytes(f) : 0;
}

size_t folio_block_size(const struct folio *f)
{
	return f ? (size_t)1 << f->block_shift : 0;
}

static bool test_flag(const struct folio *f, unsigned bit)
{
	return f && (atomic_load_explicit(&((struct folio *)f)->flags,
					  memory_order_acquire) & bit);
}

bool folio_test_uptodate(const struct folio *f)
{
	return f && folio_all_uptodate(f);
}

bool folio_test_dirty(const struct folio *f)
{
	return f && folio_flag_dirty(f);
}

bool folio_test_writeback(const struct folio *f)
{
	return f && folio_flag_writeback(f);
}

bool folio_test_locked(const struct folio *f)
{
	return test_flag(f, FOLIO_F_LOCKED);
}

atomic_uint folio_seq_wraps;

void folio_seq_wrap(void)
{
	atomic_fetch_add_explicit(&folio_seq_wraps, 1, memory_order_release);
}

#ifdef FOLIO_RACY_CHECKED
/* Byte by byte through volatile loads, so that the compiler makes no
 * memcpy() of it, which the sanitizers' runtime would intercept. */
#ifdef FOLIO_RACY_TSAN
__attribute__((no_sanitize("thread")))
#else
__attribute__((no_sanitize("address")))
#endif
void folio_copy_racy_slow(void *dst, const void *src, size_t n)
{
	unsigned char *d = dst;
	const volatile unsigned char *s = src;
	for (size_t i = 0; i < n; i++)
		d[i] = s[i];
}
#else
#ifdef FOLIO_HAVE_MEMCHECK
/* The source may have been freed (and marked no-access) since the copy
 * began: the version check throws such a copy away, so memcheck must not
 * report it. */
static void *copy_racy_memcheck(void *dst, const void *src, size_t n)
{
	VALGRIND_DISABLE_ERROR_REPORTING;
	memcpy(dst, src, n);
	VALGRIND_ENABLE_ERROR_REPORTING;
	return dst;
}
#endif

/* The first copy: learn which copy to use from now on, then copy. */
static void *copy_racy_probe(void *dst, const void *src, size_t n)
{
	folio_copy_fn fn = memcpy;
#ifdef FOLIO_HAVE_MEMCHECK
	/* Only memcheck answers its requests (-1); callgrind and plain
	 * runs leave the default 0. */
	int probe = 0;
	if ((long)VALGRIND_MAKE_MEM_DEFINED(&probe, sizeof(probe)) == -1)
		fn = copy_racy_memcheck;
#endif
	atomic_store_explicit(&folio_copy_racy_fn, fn, memory_order_relaxed);
	return fn(dst, src, n);
}

_Atomic(folio_copy_fn) folio_copy_racy_fn = copy_racy_probe;
#endif

void folio_wake_waiters(struct folio *f)
{
	futex_wake_all(&f->flags);
}

bool folio_wait_flag_clear_for(struct folio *f, unsigned bit,
			       const struct timespec *timeout)
{
	unsigned v = atomic_load_explicit(&f->flags, memory_order_acquire);
	while (v & bit) {
		if (!(v & FOLIO_F_WAITERS)) {
			if (!atomic_compare_exchange_weak_explicit(
				    &f->flags, &v, v | FOLIO_F_WAITERS,
				    memory_order_acq_rel, memory_order_acquire))
				continue;
			v |= FOLIO_F_WAITERS;
		}
		futex_wait_for(&f->flags, v, timeout);
		v = atomic_load_explicit(&f->flags, memory_order_acquire);
		if (timeout)
			break;
	}
	return !(v & bit);
}

void folio_wait_flag_clear(struct folio *f, unsigned bit)
{
	folio_wait_flag_clear_for(f, bit, NULL);
}

int folio_trylock(struct folio *f)
{
	if (!f)
		return -EINVAL;
	return folio_lock_nowait(f) ? 1 : 0;
}

int folio_lock(struct folio *f)
{
	if (!f)
		return -EINVAL;
	while (!folio_lock_nowait(f))
		folio_wait_flag_clear(f, FOLIO_F_LOCKED);
	return 0;
}

int folio_unlock(struct folio *f)
{
	if (!f)
		return -EINVAL;
	if (!test_flag(f, FOLIO_F_LOCKED))
		return -EPERM;
	folio_unlock_held(f);
	return 0;
}

int folio_start_writeback(struct folio *f)
{
	if (!f)
		return -EINVAL;
	return folio_trystart_writeback(f) ? 0 : -EBUSY;
}

int folio_end_writeback(struct folio *f)
{
	if (!f)
		return -EINVAL;
	if (!folio_flag_writeback(f))
		return -EPERM;
	folio_end_writeback_held(f);
	return 0;
}

int folio_wait_writeback(struct folio *f)
{
	if (!f)
		return -EINVAL;
	folio_wait_flag_clear(f, FOLIO_F_WRITEBACK);
	return 0;
}
