/* SPDX-License-Identifier: MIT */
/*
 * The folio allocator (lib/alloc/): folio data blocks and folio headers
 * from the library's own 2 MiB chunks instead of one posix_memalign() and
 * one malloc() per folio. alloc.c explains the design; doc/design.md
 * ("Folio allocator") has the figures.
 *
 * Two levels:
 *  - an arena (struct alloc_arena): chunks, a buddy allocator per chunk,
 *    slabs of same-size objects, spare chunks, statistics; one lock;
 *  - thread caches (struct alloc_tcache): a small magazine of free
 *    objects per size class, refilled from and flushed to the arena in
 *    batches, so that the common alloc/free takes no lock.
 *
 * The library uses one arena with real mmap(); tests build arenas of
 * their own with struct alloc_ops to inject failures. An object may be
 * freed through any cache of its arena (any thread), or none.
 */
#ifndef FOLIO_ALLOC_H
#define FOLIO_ALLOC_H

#include <pthread.h>

#include "base/base.h"

#define ALLOC_PAGE_SHIFT 12u
#define ALLOC_PAGE_SIZE (1u << ALLOC_PAGE_SHIFT)
#define ALLOC_CHUNK_SHIFT 21u
#define ALLOC_CHUNK_SIZE ((size_t)1 << ALLOC_CHUNK_SHIFT)
#define ALLOC_CHUNK_PAGES (1u << (ALLOC_CHUNK_SHIFT - ALLOC_PAGE_SHIFT))
/* A chunk's first pages hold its header; only those written are resident
 * (alloc_stats.header_bytes). */
#define ALLOC_CHUNK_HDR_PAGES 3u

/* Data blocks: powers of two, naturally aligned. */
#define ALLOC_MIN_DATA 512u
#define ALLOC_MAX_DATA ALLOC_CHUNK_SIZE
/* Metadata objects: any size up to this, 8-byte aligned (64-byte aligned
 * for the 64-byte class). */
#define ALLOC_MAX_META 2048u

/*
 * Size classes, one index space:
 *   [0, 3)              data 512, 1024, 2048 (slabs in one page)
 *   [3, 28)             metadata 64, 72, .., 128, then four classes per
 *                       doubling up to 2048 (slabs of 1..8 pages)
 *   [28, 38)            data blocks of 2^k pages, 4 KiB .. 2 MiB (buddy;
 *                       2 MiB is a whole chunk)
 */
#define ALLOC_META0 3u
#define ALLOC_NSLAB 28u
#define ALLOC_NORDERS 10u
#define ALLOC_NCLASSES (ALLOC_NSLAB + ALLOC_NORDERS)
/* Orders a chunk's buddy allocator serves: 4 KiB .. 1 MiB (the chunk's
 * header takes its first pages, so no 2 MiB block fits inside). */
#define ALLOC_BUDDY_ORDERS 9u
/* Classes the thread caches hold: every slab class and 4 .. 32 KiB. */
#define ALLOC_TC_CLASSES (ALLOC_NSLAB + 4u)
#define ALLOC_MAG_MAX 32u
/* Wholly free regions kept mapped however long they stay unused. */
#define ALLOC_SPARE_MAX 2u
/* Beyond those, a freed region stays mapped (a spare) until it has gone
 * unused this long; then the next region taken or given back, a pool
 * flusher's idle tick or a trim unmaps it. */
#define ALLOC_SPARE_KEEP_NS 1000000000u
/* Free blocks inside chunks in use that may keep their pages: above
 * this, freeing gives pages of free blocks of ALLOC_TRIM_MIN_ORDER and up
 * back to the kernel until it is met again. */
#define ALLOC_FREE_RESIDENT_MAX ((size_t)2 << 20)
#define ALLOC_TRIM_MIN_ORDER 4u /* 64 KiB */
/* Blocks of these orders (64 KiB .. 1 MiB) come from runs (run.c): 2 MiB
 * regions of one order, described outside the region; smaller ones from
 * the buddy chunks. */
#define ALLOC_RUN_MIN_ORDER 4u
#define ALLOC_RUN_ORDERS (ALLOC_BUDDY_ORDERS - ALLOC_RUN_MIN_ORDER)

/* Arena flags. */
#define ALLOC_HUGEPAGE 0x1u /* madvise(MADV_HUGEPAGE) 2 MiB blocks */

/*
 * Where an arena gets its address space. map() returns `len` bytes of
 * zero-filled, readable and writable memory (any alignment) or NULL;
 * unmap() gives back a piece of what map() returned (the arena trims
 * its over-sized maps, so pieces may be smaller than one map).
 */
struct alloc_ops {
	void *(*map)(void *ctx, size_t len);
	void (*unmap)(void *ctx, void *p, size_t len);
	void *ctx;
	/* Monotonic nanoseconds for the spares' ages; NULL: the clock. */
	uint64_t (*now)(void *ctx);
};

struct alloc_chunk;
struct alloc_run;
struct alloc_tcache;

/* List heads: [0, 9) chunks with a free block of that order, [9, 37)
 * chunks with a partly used slab of that class, 37 every chunk. */
#define ALLOC_LIST_SLAB0 ALLOC_BUDDY_ORDERS
#define ALLOC_LIST_ALL (ALLOC_BUDDY_ORDERS + ALLOC_NSLAB)
#define ALLOC_NLISTS (ALLOC_LIST_ALL + 1)

struct alloc_arena {
	pthread_mutex_t lock;
	struct alloc_ops ops;
	unsigned flags;
	struct alloc_chunk *head[ALLOC_NLISTS];
	/* Wholly free regions kept mapped, oldest first: taken from the
	 * end (the most recently used memory), aged out from the front. */
	struct alloc_spare {
		void *p;
		uint64_t freed_ns;
	} *spare;
	size_t nspare, spare_cap;
	unsigned spare_grow_fail; /* tests: fail this many growths */
	struct alloc_tcache *tcaches;
	size_t nchunks, nhuge, internal_bytes;
	/* Bytes of free buddy blocks not known to be zero (resident, as
	 * far as the arena knows), and where the last trim had to stop
	 * because only blocks too small to give back were left. */
	size_t free_resident, trim_floor;
	size_t maps, unmaps, map_failures;
	size_t out[ALLOC_NCLASSES]; /* objects handed out (used or cached) */
	/* Runs (run.c): per order, those with a free block; all of them in
	 * a table by region address (run_used: slots live or emptied). */
	struct alloc_run *run_head[ALLOC_RUN_ORDERS];
	struct alloc_run **run_tab;
	struct alloc_run *run_spare_desc; /* a released run's, for reuse */
	/* Per order, one wholly free run kept whole (off the lists, out of
	 * nruns): a folio freed and allocated in turn then neither releases
	 * nor rebuilds its run. It stands for a spare region in every count
	 * (kept while nkept + nspare < ALLOC_SPARE_MAX, stats,
	 * free_resident), and a caller needing a region when no spare is
	 * left takes it. */
	struct alloc_run *run_kept[ALLOC_RUN_ORDERS];
	size_t run_mask, run_used, nruns, nkept;
};

struct alloc_stats {
	size_t mapped_bytes;  /* chunks, 2 MiB blocks and spares */
	size_t chunks;	      /* chunks split by the buddy allocator */
	size_t huge_blocks;   /* 2 MiB blocks (a chunk each) */
	size_t runs;          /* regions cut into 64 KiB .. 1 MiB blocks */
	size_t spare_chunks;  /* wholly free, kept mapped */
	size_t data_bytes;    /* data blocks handed out: in use or cached */
	size_t meta_bytes;    /* metadata objects handed out (class sizes) */
	size_t cached_data_bytes; /* of data_bytes, in thread caches */
	size_t cached_meta_bytes; /* of meta_bytes, in thread caches */
	size_t header_bytes;  /* chunk header pages written (resident) and
			       * the runs' descriptions */
	size_t slab_bytes;    /* pages holding slabs (data < 4 KiB, meta) */
	size_t slab_object_bytes; /* of slab_bytes, objects handed out */
	size_t free_resident_bytes; /* free blocks in chunks in use that keep
				     * their pages (at most about
				     * ALLOC_FREE_RESIDENT_MAX) */
	size_t internal_bytes; /* thread cache structures */
	size_t maps, unmaps, map_failures; /* calls to alloc_ops */
};

/* ---- size classes ---- */

/* The class of a data block of `size` bytes, ALLOC_NCLASSES if no class
 * fits (not a power of two, below 512 or above 2 MiB). */
static inline unsigned alloc_data_class(size_t size)
{
	if (!is_pow2(size) || size < ALLOC_MIN_DATA || size > ALLOC_MAX_DATA)
		return ALLOC_NCLASSES;
	unsigned s = ilog2_u64(size);
	return s < ALLOC_PAGE_SHIFT ? s - 9 : ALLOC_NSLAB + s - ALLOC_PAGE_SHIFT;
}

/* The smallest metadata class holding `size` bytes (ALLOC_NCLASSES above
 * ALLOC_MAX_META). */
static inline unsigned alloc_meta_class(size_t size)
{
	if (size > ALLOC_MAX_META)
		return ALLOC_NCLASSES;
	if (size <= 128)
		return ALLOC_META0 + (size <= 64 ? 0 : (unsigned)(size - 57) / 8);
	size_t s = size - 1;
	unsigned hb = ilog2_u64(s);
	return ALLOC_META0 + 9 + (hb - 7) * 4 + (unsigned)((s >> (hb - 2)) & 3);
}

static inline size_t alloc_class_size(unsigned cls)
{
	if (cls < ALLOC_META0)
		return (size_t)ALLOC_MIN_DATA << cls;
	if (cls < ALLOC_NSLAB) {
		unsigned i = cls - ALLOC_META0;
		if (i <= 8)
			return 64 + 8 * (size_t)i;
		unsigned g = (i - 9) / 4, k = (i - 9) % 4;
		return ((size_t)128 << g) + (k + 1) * ((size_t)32 << g);
	}
	return (size_t)ALLOC_PAGE_SIZE << (cls - ALLOC_NSLAB);
}

static inline bool alloc_class_is_meta(unsigned cls)
{
	return cls >= ALLOC_META0 && cls < ALLOC_NSLAB;
}

/* Slab geometry of slab class `cls` (< ALLOC_NSLAB): the slab is a buddy
 * block of 2^order pages holding nobj (<= 64) objects. */
void alloc_slab_geometry(unsigned cls, unsigned *order, unsigned *nobj);

/* ---- arenas ---- */

/* ops NULL: anonymous private mmap(). */
int alloc_arena_init(struct alloc_arena *a, const struct alloc_ops *ops,
		     unsigned flags);
/* Unmap everything; -EBUSY (nothing done) while objects are out or
 * thread caches exist. */
int alloc_arena_destroy(struct alloc_arena *a);
void alloc_arena_stats(struct alloc_arena *a, struct alloc_stats *st);
/* Give spare chunks back and MADV_DONTNEED free blocks of 64 KiB or more
 * not known to be zero (they read back as zeros). Returns bytes given
 * back. */
size_t alloc_arena_trim(struct alloc_arena *a);
/* Unmap the spares beyond ALLOC_SPARE_MAX that have gone unused for
 * ALLOC_SPARE_KEEP_NS. Returns bytes given back. */
size_t alloc_arena_decay(struct alloc_arena *a);

/*
 * One object of class `cls` from cache `tc` (NULL: straight from the
 * arena). *zeroed (may be NULL) tells whether the memory is known to be
 * all zero (fresh pages; only ever for blocks of 4 KiB and more). NULL
 * when out of memory.
 */
void *alloc_obj(struct alloc_arena *a, struct alloc_tcache *tc, unsigned cls,
		bool *zeroed);
void alloc_obj_free(struct alloc_arena *a, struct alloc_tcache *tc,
		    unsigned cls, void *p);

/* Explicit thread caches (the library binds one per thread to its own
 * arena; tests make their own). A cache is used by one thread at a time. */
struct alloc_tcache *alloc_tcache_new(struct alloc_arena *a);
void alloc_tcache_flush(struct alloc_tcache *tc);
void alloc_tcache_destroy(struct alloc_tcache *tc);

/* ---- the library's arena, one cache per thread ---- */

/*
 * A folio's memory: a naturally aligned `data_size` block (a power of two,
 * 512 B .. 2 MiB) and a `meta_size` object (header + bitmaps, at most
 * ALLOC_MAX_META). *zeroed says whether the data is known to be zero.
 * Returns 0, -EINVAL for sizes out of range or -ENOMEM.
 */
int alloc_folio_mem(size_t data_size, size_t meta_size, void **data,
		    void **meta, bool *zeroed);
void alloc_folio_mem_free(void *data, size_t data_size, void *meta,
			  size_t meta_size);
/* Its two halves, for a folio whose header must outlive its data (a
 * lock-free lookup may still read the header of a folio just freed). */
void alloc_folio_data_free(void *data, size_t data_size);
void alloc_folio_meta_free(void *meta, size_t meta_size);
/* One more metadata object (a folio's state map kept outside its header):
 * at most ALLOC_MAX_META bytes; NULL when out of memory or too large. */
void *alloc_folio_meta(size_t meta_size);
void alloc_stats(struct alloc_stats *st);
/* Return the calling thread's cache to the arena. */
void alloc_thread_flush(void);
/* alloc_thread_flush() and alloc_arena_trim() of the library's arena. */
size_t alloc_trim(void);
/* alloc_arena_decay() of the library's arena: for threads that wake on a
 * timer, so that an idle process's spares still age out. */
size_t alloc_decay(void);

#endif
