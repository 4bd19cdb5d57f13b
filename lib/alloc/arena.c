/* SPDX-License-Identifier: MIT */
/*
 * The folio allocator's arena: chunks, buddy blocks, slabs.
 *
 * Why not posix_memalign(): glibc puts its chunk header in front of
 * every 4096-aligned block, so each 4 KiB folio costs two pages of
 * resident memory. Here every folio costs its data, its header object
 * and 16 bytes of page descriptor (below 4096 + 128 bytes in all).
 *
 * Chunks. Address space comes in 2 MiB regions aligned to 2 MiB (map
 * 2 MiB; if the kernel placed it unaligned, map 4 MiB and trim), so the
 * region of any block is its address rounded down, with no lookup. A
 * region is used one of three ways:
 *  - as a 2 MiB data block of its own (no header at all, so a 2 MiB folio
 *    costs exactly 2 MiB; MADV_HUGEPAGE when the arena asks for it);
 *  - as a run of blocks of one order, 64 KiB .. 1 MiB, described outside
 *    the region (run.c);
 *  - as a chunk: a header in its first pages (struct alloc_chunk: list
 *    links and one 16-byte descriptor per page, the kernel's struct page
 *    idea), the rest split by a buddy allocator into blocks of 4 KiB ..
 *    1 MiB, of which callers get those below 64 KiB and slabs (and the
 *    thread caches their own pages).
 *
 * Descriptors, not free-list nodes inside free blocks: the allocator never
 * writes to free memory, so pages nobody allocated stay untouched (never
 * resident) and a fresh chunk's blocks are known to be zero, which lets
 * folio_new() skip its memset. Lists are 16-bit page indices inside a
 * chunk (page 0 is header, so 0 is the end of a list); the arena keeps,
 * per order and per slab class, a list of the chunks that have such a
 * block, so finding one is O(1) whatever the number of chunks.
 *
 * Buddy. Free blocks sit on their chunk's per-order list; allocation
 * takes the smallest order that has one and splits; a freed block merges
 * with its buddy while the buddy is free and of the same order (headers
 * are never free, so merging stops at them). A chunk whose last used page
 * comes back is released at once.
 *
 * Slabs. Data blocks below 4 KiB and metadata objects (64-byte folio
 * header + 3 bits per block, from 64 B to 1600 B) come from slabs: a
 * buddy block of 1..8 pages cut into objects of one class, at most 64 of
 * them so that the free map is one word in the slab's descriptor. The
 * slab size is the smallest that wastes at most 1/32 of it. Metadata
 * classes are exact in steps of 8 up to 128 bytes (the sizes small
 * folios have) and four per doubling above (at most 25% rounding for the
 * rare large folio, whose data dwarfs it). An emptied slab goes back to
 * the buddy allocator at once; the thread caches absorb the churn.
 *
 * Memory back to the kernel. A released region (chunk, run or 2 MiB
 * block) becomes a spare: it stays mapped and resident, and the next
 * region anyone needs is the spare freed last. Spares exist because
 * memory given back costs twice when it is wanted again: the kernel
 * zeroes every page it faults in (a 2 MiB folio: a whole huge page
 * cleared), munmap() waits for a grace period (unmap_spares()), and on a
 * VM the host may have to fault the page in too. A cache that drops a
 * mapping and opens another, or reads a file through, frees and refills
 * the same amount within moments: measured, a benchmark of cold 128 KiB
 * reads through a new mapping per round spent a quarter of all its time
 * clearing pages (doc/benchmarks.md, "Cold sequential reads"). Spares
 * age out: ALLOC_SPARE_MAX of them stay whatever their age, the others
 * are unmapped once unused for ALLOC_SPARE_KEEP_NS (checked whenever a
 * region is taken or given back, by idle pool flushers and by trims), so
 * the memory kept beyond in-use memory is at most what was in use within
 * that time, as with jemalloc's decay. Free blocks inside chunks in use
 * keep their pages up to ALLOC_FREE_RESIDENT_MAX: MADV_DONTNEED on every
 * free would make every reuse fault and zero again (a 1 MiB folio
 * recycled through reclaim: 256 faults), and MADV_FREE would leave RSS
 * unchanged until the kernel gets round to it, which makes resident
 * memory no guide for the pool. But folios of mixed sizes fragment
 * chunks: the free holes could not serve the sizes asked for, new chunks
 * were mapped, and RSS grew far past the pool's budget with free memory
 * (64 MiB through a 16 MiB budget in folio-fuse: 37 MiB). So a free that
 * takes the free resident bytes past the limit gives back the pages of
 * free blocks of 64 KiB and more (MADV_DONTNEED; the blocks are then
 * known to be zero) until they are under it. alloc_arena_trim() gives
 * all of it back on demand.
 *
 * Huge pages. With THP in "madvise" mode (Debian's default) nothing is
 * huge unless asked; the arena asks only for 2 MiB blocks, where one huge
 * page is exactly the block (chunks cut into small folios would pin 2 MiB
 * of RSS for any one page in use). Measured in doc/benchmarks.md.
 *
 * Memory checkers. Under ASan free objects are poisoned; under valgrind
 * every object handed out is a MALLOCLIKE block, so leaked folios, reads
 * of freed folios and of memory never written are still reported as they
 * were with malloc (the check_*() hooks in internal.h).
 *
 * Locking: one mutex per arena. The thread caches (tcache.c) move objects
 * in batches (half a magazine: 2 to 17 objects), so the common
 * allocation and free take no lock at all.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "alloc/internal.h"
#include "base/epoch.h"

enum {
	PD_NONE = 0, /* not the head of a block (inside one, or header) */
	PD_FREE,
	PD_USED,
	PD_SLAB,
};

/* One per page; meaningful on the first page of a block only. */
struct page_desc {
	uint64_t free_map; /* slab: bit i set = object i is free */
	uint16_t next, prev; /* free list of `order` / partial list of `cls` */
	uint8_t order;
	uint8_t state;
	uint8_t cls;
	uint8_t zero; /* free block known to read as zeros */
};

struct alloc_link {
	struct alloc_chunk *next, *prev;
};

struct alloc_chunk {
	struct alloc_link link[ALLOC_NLISTS];
	uint16_t head[ALLOC_LIST_ALL]; /* first page of each list, 0 = none */
	uint16_t used_pages; /* pages in used blocks and slabs */
	uint16_t hdr_touched; /* header pages written so far (resident) */
	/* By pd_slot(), not by page. */
	struct page_desc pd[ALLOC_CHUNK_PAGES];
};

#define HDR_PAGES ALLOC_CHUNK_HDR_PAGES
_Static_assert(sizeof(struct page_desc) == 16, "page descriptor size");
_Static_assert(sizeof(struct alloc_chunk) <= HDR_PAGES * ALLOC_PAGE_SIZE,
	       "chunk header pages");
_Static_assert(ALLOC_CHUNK_PAGES <= UINT16_MAX, "page index width");

/*
 * Descriptor order. By page, a chunk cut into 64 KiB blocks would write
 * one descriptor every 256 bytes, so all three header pages would be
 * resident for 31 blocks (397 bytes of RSS per 64 KiB folio). Instead the
 * descriptors of the 32 pages that start a 64 KiB group come first, then
 * those of the first group's other pages (beside the header, where slabs
 * of folio headers go), then the rest group by group: a chunk of blocks
 * of 64 KiB and more, and the slabs next to its header, touch only the
 * header's first page.
 */
#define PD_GROUP_SHIFT 4u
#define PD_GROUP (1u << PD_GROUP_SHIFT)
#define PD_GROUPS (ALLOC_CHUNK_PAGES >> PD_GROUP_SHIFT)

static inline unsigned pd_slot(unsigned pg)
{
	unsigned grp = pg >> PD_GROUP_SHIFT, in = pg & (PD_GROUP - 1);
	return in ? PD_GROUPS + grp * (PD_GROUP - 1) + in - 1 : grp;
}

static inline struct page_desc *pd_of(struct alloc_chunk *c, unsigned pg)
{
	return &c->pd[pd_slot(pg)];
}

/* The header pages up to and including the one holding pg's descriptor. */
static inline unsigned pd_hdr_pages(unsigned pg)
{
	size_t end = offsetof(struct alloc_chunk, pd) +
		     (pd_slot(pg) + 1) * sizeof(struct page_desc);
	return (unsigned)((end + ALLOC_PAGE_SIZE - 1) / ALLOC_PAGE_SIZE);
}

_Static_assert(offsetof(struct alloc_chunk, pd) +
			       (PD_GROUPS + PD_GROUP - 1) *
				       sizeof(struct page_desc) <=
		       ALLOC_PAGE_SIZE,
	       "64 KiB heads and the first group in the header's first page");

static inline struct alloc_chunk *chunk_of(const void *p)
{
	return (struct alloc_chunk *)((uintptr_t)p & ~(ALLOC_CHUNK_SIZE - 1));
}

static inline unsigned page_of(const void *p)
{
	return (unsigned)(((uintptr_t)p & (ALLOC_CHUNK_SIZE - 1)) >>
			  ALLOC_PAGE_SHIFT);
}

static inline char *page_addr(struct alloc_chunk *c, unsigned pg)
{
	return (char *)c + ((size_t)pg << ALLOC_PAGE_SHIFT);
}

void alloc_slab_geometry(unsigned cls, unsigned *order, unsigned *nobj)
{
	size_t size = alloc_class_size(cls);
	unsigned o = 0;
	for (;; o++) {
		size_t slab = (size_t)ALLOC_PAGE_SIZE << o;
		size_t n = MIN(slab / size, 64);
		if ((slab - n * size) * 32 <= slab || o == 3) {
			*order = o;
			*nobj = (unsigned)n;
			return;
		}
	}
}

/* ---- lists ---- */

static void clist_add(struct alloc_arena *a, unsigned li, struct alloc_chunk *c)
{
	struct alloc_chunk *h = a->head[li];
	c->link[li].prev = NULL;
	c->link[li].next = h;
	if (h)
		h->link[li].prev = c;
	a->head[li] = c;
}

static void clist_del(struct alloc_arena *a, unsigned li, struct alloc_chunk *c)
{
	struct alloc_link *l = &c->link[li];
	if (l->prev)
		l->prev->link[li].next = l->next;
	else
		a->head[li] = l->next;
	if (l->next)
		l->next->link[li].prev = l->prev;
}

/* Page lists inside a chunk; the chunk is on the arena's list `li`
 * exactly while its own list `li` is not empty. */
static void plist_add(struct alloc_arena *a, struct alloc_chunk *c,
		      unsigned li, unsigned pg)
{
	struct page_desc *d = pd_of(c, pg);
	uint16_t h = c->head[li];
	d->prev = 0;
	d->next = h;
	if (h)
		pd_of(c, h)->prev = (uint16_t)pg;
	else
		clist_add(a, li, c);
	c->head[li] = (uint16_t)pg;
}

static void plist_del(struct alloc_arena *a, struct alloc_chunk *c,
		      unsigned li, unsigned pg)
{
	struct page_desc *d = pd_of(c, pg);
	if (d->prev)
		pd_of(c, d->prev)->next = d->next;
	else
		c->head[li] = d->next;
	if (d->next)
		pd_of(c, d->next)->prev = d->prev;
	if (!c->head[li])
		clist_del(a, li, c);
}

/* ---- regions ---- */

static void *mmap_map(void *ctx, size_t len)
{
	(void)ctx;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void mmap_unmap(void *ctx, void *p, size_t len)
{
	(void)ctx;
	munmap(p, len);
}

static void unmap(struct alloc_arena *a, void *p, size_t len)
{
	check_unmapping(p, len);
	a->ops.unmap(a->ops.ctx, p, len);
	a->unmaps++;
}

/* A fresh, zero 2 MiB-aligned region, or NULL. */
static void *region_map(struct alloc_arena *a)
{
	a->maps++;
	char *p = a->ops.map(a->ops.ctx, ALLOC_CHUNK_SIZE);
	if (!p)
		goto fail;
	if (!((uintptr_t)p & (ALLOC_CHUNK_SIZE - 1)))
		goto out;
	/* Placed unaligned: map twice the size and keep the aligned part.
	 * The kernel tends to place the next map just below this one, so
	 * the next chunk is usually aligned at the first try. */
	unmap(a, p, ALLOC_CHUNK_SIZE);
	a->maps++;
	p = a->ops.map(a->ops.ctx, 2 * ALLOC_CHUNK_SIZE);
	if (!p)
		goto fail;
	char *al = (char *)(((uintptr_t)p + ALLOC_CHUNK_SIZE - 1) &
			    ~(ALLOC_CHUNK_SIZE - 1));
	if (al > p)
		unmap(a, p, (size_t)(al - p));
	if (p + 2 * ALLOC_CHUNK_SIZE > al + ALLOC_CHUNK_SIZE)
		unmap(a, al + ALLOC_CHUNK_SIZE,
		      (size_t)(p + ALLOC_CHUNK_SIZE - al));
	p = al;
out:
	check_mapped(p, ALLOC_CHUNK_SIZE);
	return p;
fail:
	a->map_failures++;
	return NULL;
}

static uint64_t arena_now(struct alloc_arena *a)
{
	if (a->ops.now)
		return a->ops.now(a->ops.ctx);
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Unmap regions that held objects: an optimistic reader (doc/design.md,
 * "Optimistic reads") may still be copying from a folio freed in one,
 * inside an epoch section, and its copy must read stale bytes, not fault.
 * One grace period serves the whole batch. */
static void unmap_spares(struct alloc_arena *a, size_t n)
{
	epoch_synchronize();
	for (size_t i = 0; i < n; i++) {
		check_free_region(a->spare[i].p, ALLOC_CHUNK_SIZE);
		unmap(a, a->spare[i].p, ALLOC_CHUNK_SIZE);
	}
	a->nspare -= n;
	memmove(a->spare, a->spare + n, a->nspare * sizeof(*a->spare));
}

/* Under a->lock: unmap the spares past their keeping time, oldest first,
 * leaving ALLOC_SPARE_MAX (runs kept whole count as spares). */
static size_t spares_decay(struct alloc_arena *a, uint64_t now)
{
	size_t keep = ALLOC_SPARE_MAX > a->nkept ? ALLOC_SPARE_MAX - a->nkept : 0;
	size_t n = 0;
	while (a->nspare - n > keep &&
	       now - a->spare[n].freed_ns >= ALLOC_SPARE_KEEP_NS)
		n++;
	if (n)
		unmap_spares(a, n);
	return n * ALLOC_CHUNK_SIZE;
}

void *alloc_region_get(struct alloc_arena *a, bool *fresh)
{
	if (!a->nspare && a->nkept)
		alloc_run_release_kept(a);
	if (a->nspare > ALLOC_SPARE_MAX)
		spares_decay(a, arena_now(a));
	if (a->nspare) {
		*fresh = false;
		return a->spare[--a->nspare].p;
	}
	*fresh = true;
	return region_map(a);
}

void alloc_region_put(struct alloc_arena *a, void *p)
{
	if (a->nspare == a->spare_cap) {
		size_t cap = a->spare_cap ? 2 * a->spare_cap : 8;
		struct alloc_spare *n = NULL;
		if (a->spare_grow_fail)
			a->spare_grow_fail--;
		else
			n = realloc(a->spare, cap * sizeof(*n));
		if (!n) {
			/* Kept memory is an optimisation: without room to
			 * note the region, give it back. */
			epoch_synchronize();
			unmap(a, p, ALLOC_CHUNK_SIZE);
			return;
		}
		a->spare = n;
		a->spare_cap = cap;
	}
	uint64_t now = arena_now(a);
	a->spare[a->nspare++] = (struct alloc_spare){p, now};
	spares_decay(a, now);
}

size_t alloc_arena_decay(struct alloc_arena *a)
{
	pthread_mutex_lock(&a->lock);
	size_t given =
		a->nspare > ALLOC_SPARE_MAX ? spares_decay(a, arena_now(a)) : 0;
	pthread_mutex_unlock(&a->lock);
	return given;
}

/* ---- chunks and the buddy allocator ---- */

static void add_free(struct alloc_arena *a, struct alloc_chunk *c, unsigned pg,
		     unsigned order, bool zero)
{
	struct page_desc *d = pd_of(c, pg);
	d->state = PD_FREE;
	d->order = (uint8_t)order;
	d->zero = zero;
	c->hdr_touched = (uint16_t)MAX(c->hdr_touched, pd_hdr_pages(pg));
	if (!zero)
		a->free_resident += (size_t)ALLOC_PAGE_SIZE << order;
	plist_add(a, c, order, pg);
}

/* Take a free block off its list (to use it or merge it). */
static void del_free(struct alloc_arena *a, struct alloc_chunk *c,
		     unsigned pg)
{
	struct page_desc *d = pd_of(c, pg);
	if (!d->zero)
		a->free_resident -= (size_t)ALLOC_PAGE_SIZE << d->order;
	plist_del(a, c, d->order, pg);
}

/*
 * Give back the pages of free blocks of ALLOC_TRIM_MIN_ORDER and up,
 * largest first, until at most `target` free bytes keep theirs. Returns
 * the bytes given back.
 */
static size_t trim_free_blocks(struct alloc_arena *a, size_t target)
{
	long sys_page = sysconf(_SC_PAGESIZE);
	size_t given = 0;
	for (unsigned o = ALLOC_BUDDY_ORDERS; o-- > ALLOC_TRIM_MIN_ORDER;) {
		size_t len = (size_t)ALLOC_PAGE_SIZE << o;
		if (o >= ALLOC_RUN_MIN_ORDER)
			given += alloc_run_trim(a, o, target);
		if (sys_page <= 0 || len < (size_t)sys_page)
			continue;
		for (struct alloc_chunk *c = a->head[o]; c;
		     c = c->link[o].next)
			for (unsigned pg = c->head[o]; pg; pg = pd_of(c, pg)->next) {
				if (a->free_resident <= target)
					return given;
				struct page_desc *d = pd_of(c, pg);
				if (d->zero ||
				    madvise(page_addr(c, pg), len, MADV_DONTNEED))
					continue;
				d->zero = 1;
				a->free_resident -= len;
				given += len;
			}
	}
	return given;
}

/* After a free: keep the free resident bytes near the limit. A trim that
 * could not get under it (the rest are holes too small to give back)
 * does not run again until another limit's worth has been freed. */
static void bound_free_resident(struct alloc_arena *a)
{
	if (a->free_resident <= ALLOC_FREE_RESIDENT_MAX ||
	    a->free_resident <= a->trim_floor)
		return;
	trim_free_blocks(a, ALLOC_FREE_RESIDENT_MAX / 2);
	a->trim_floor = a->free_resident > ALLOC_FREE_RESIDENT_MAX
				? a->free_resident + ALLOC_FREE_RESIDENT_MAX
				: 0;
}

static struct alloc_chunk *chunk_new(struct alloc_arena *a)
{
	bool fresh;
	struct alloc_chunk *c = alloc_region_get(a, &fresh);
	if (!c)
		return NULL;
	check_internal(c, HDR_PAGES * ALLOC_PAGE_SIZE);
	/* Fresh memory is an empty header already (0 ends every list), and
	 * its pages stay untouched until descriptors there are written. A
	 * spare's may hold anything (it may have been a 2 MiB block). */
	if (!fresh)
		memset(c, 0, sizeof(*c));
	c->hdr_touched = fresh ? 1 : HDR_PAGES;
	for (unsigned pg = HDR_PAGES; pg < ALLOC_CHUNK_PAGES;) {
		unsigned order = MIN((unsigned)__builtin_ctz(pg),
				     ALLOC_BUDDY_ORDERS - 1);
		add_free(a, c, pg, order, fresh);
		pg += 1u << order;
	}
	clist_add(a, ALLOC_LIST_ALL, c);
	a->nchunks++;
	return c;
}

static void chunk_release(struct alloc_arena *a, struct alloc_chunk *c)
{
	/* Wholly free: its blocks leave the free lists with it. */
	for (unsigned pg = HDR_PAGES; pg < ALLOC_CHUNK_PAGES;
	     pg += 1u << pd_of(c, pg)->order)
		if (!pd_of(c, pg)->zero)
			a->free_resident -= (size_t)ALLOC_PAGE_SIZE
					    << pd_of(c, pg)->order;
	for (unsigned li = 0; li < ALLOC_LIST_ALL; li++)
		if (c->head[li])
			clist_del(a, li, c);
	clist_del(a, ALLOC_LIST_ALL, c);
	a->nchunks--;
	check_free_region(c, ALLOC_CHUNK_SIZE);
	alloc_region_put(a, c);
}

static void *buddy_alloc(struct alloc_arena *a, unsigned order, bool *zero)
{
	unsigned k = order;
	while (k < ALLOC_BUDDY_ORDERS && !a->head[k])
		k++;
	if (k == ALLOC_BUDDY_ORDERS) {
		if (!chunk_new(a))
			return NULL;
		for (k = order; !a->head[k]; k++)
			;
	}
	struct alloc_chunk *c = a->head[k];
	unsigned pg = c->head[k];
	del_free(a, c, pg);
	struct page_desc *d = pd_of(c, pg);
	bool z = d->zero;
	while (k > order) {
		k--;
		add_free(a, c, pg + (1u << k), k, z);
	}
	d->state = PD_USED;
	d->order = (uint8_t)order;
	d->zero = 0;
	c->used_pages += 1u << order;
	*zero = z;
	return page_addr(c, pg);
}

static void buddy_free(struct alloc_arena *a, void *p, unsigned order)
{
	struct alloc_chunk *c = chunk_of(p);
	unsigned pg = page_of(p);
	struct page_desc *d = pd_of(c, pg);
	if (d->state == PD_FREE || d->order != order) {
		fprintf(stderr, "libfolio-state: bad free of %p (order %u)\n",
			p, order);
		abort();
	}
	c->used_pages -= 1u << order;
	d->state = PD_NONE;
	while (order < ALLOC_BUDDY_ORDERS - 1) {
		unsigned b = pg ^ (1u << order);
		struct page_desc *bd = pd_of(c, b);
		if (bd->state != PD_FREE || bd->order != order)
			break;
		del_free(a, c, b);
		bd->state = PD_NONE;
		pg &= ~(1u << order);
		order++;
	}
	add_free(a, c, pg, order, false);
	if (!c->used_pages)
		chunk_release(a, c);
	else
		bound_free_resident(a);
}

/* ---- slabs ---- */

static inline uint64_t full_map(unsigned nobj)
{
	return nobj == 64 ? ~UINT64_C(0) : (UINT64_C(1) << nobj) - 1;
}

static void *slab_alloc(struct alloc_arena *a, unsigned cls)
{
	unsigned li = ALLOC_LIST_SLAB0 + cls, order, nobj;
	alloc_slab_geometry(cls, &order, &nobj);
	struct alloc_chunk *c = a->head[li];
	unsigned pg;
	struct page_desc *d;
	if (c) {
		pg = c->head[li];
		d = pd_of(c, pg);
	} else {
		bool zero;
		void *p = buddy_alloc(a, order, &zero);
		if (!p)
			return NULL;
		c = chunk_of(p);
		pg = page_of(p);
		d = pd_of(c, pg);
		d->state = PD_SLAB;
		d->cls = (uint8_t)cls;
		d->free_map = full_map(nobj);
		plist_add(a, c, li, pg);
	}
	unsigned i = (unsigned)__builtin_ctzll(d->free_map);
	d->free_map &= d->free_map - 1;
	if (!d->free_map)
		plist_del(a, c, li, pg);
	return page_addr(c, pg) + i * alloc_class_size(cls);
}

static void slab_free(struct alloc_arena *a, unsigned cls, void *p)
{
	unsigned li = ALLOC_LIST_SLAB0 + cls, order, nobj;
	alloc_slab_geometry(cls, &order, &nobj);
	struct alloc_chunk *c = chunk_of(p);
	unsigned pg = page_of(p) & ~((1u << order) - 1);
	struct page_desc *d = pd_of(c, pg);
	size_t off = (size_t)((char *)p - page_addr(c, pg));
	size_t size = alloc_class_size(cls);
	uint64_t bit = UINT64_C(1) << (off / size);
	if (d->state != PD_SLAB || d->cls != cls || off % size ||
	    off / size >= nobj || (d->free_map & bit)) {
		fprintf(stderr, "libfolio-state: bad free of %p (class %u)\n",
			p, cls);
		abort();
	}
	bool was_full = !d->free_map;
	d->free_map |= bit;
	if (d->free_map == full_map(nobj)) {
		if (!was_full)
			plist_del(a, c, li, pg);
		d->state = PD_USED;
		buddy_free(a, page_addr(c, pg), order);
	} else if (was_full) {
		plist_add(a, c, li, pg);
	}
}

/* ---- 2 MiB blocks ---- */

static void *huge_alloc(struct alloc_arena *a, bool *zero)
{
	void *p = alloc_region_get(a, zero);
	if (!p)
		return NULL;
	if (a->flags & ALLOC_HUGEPAGE)
		madvise(p, ALLOC_CHUNK_SIZE, MADV_HUGEPAGE);
	a->nhuge++;
	return p;
}

static void huge_free(struct alloc_arena *a, void *p)
{
	a->nhuge--;
	alloc_region_put(a, p);
}

/* ---- the arena's interface (the callers in tcache.c hold the lock) ---- */

void *alloc_arena_take(struct alloc_arena *a, unsigned cls)
{
	void *p;
	bool zero = false;
	if (cls < ALLOC_NSLAB)
		p = slab_alloc(a, cls);
	else if (cls >= ALLOC_NSLAB + ALLOC_RUN_MIN_ORDER &&
		 cls < ALLOC_NCLASSES - 1)
		p = alloc_run_take(a, cls - ALLOC_NSLAB, &zero);
	else if (cls < ALLOC_NCLASSES - 1)
		p = buddy_alloc(a, cls - ALLOC_NSLAB, &zero);
	else
		p = huge_alloc(a, &zero);
	if (!p)
		return NULL;
	a->out[cls]++;
	return (void *)((uintptr_t)p | zero);
}

void alloc_arena_give(struct alloc_arena *a, unsigned cls, void *p)
{
	a->out[cls]--;
	if (cls < ALLOC_NSLAB)
		slab_free(a, cls, p);
	else if (cls >= ALLOC_NSLAB + ALLOC_RUN_MIN_ORDER &&
		 cls < ALLOC_NCLASSES - 1) {
		alloc_run_give(a, cls - ALLOC_NSLAB, p);
		bound_free_resident(a);
	} else if (cls < ALLOC_NCLASSES - 1)
		buddy_free(a, p, cls - ALLOC_NSLAB);
	else
		huge_free(a, p);
}

void *alloc_arena_take_internal(struct alloc_arena *a, unsigned order)
{
	bool zero;
	void *p = buddy_alloc(a, order, &zero);
	if (!p)
		return NULL;
	size_t len = (size_t)ALLOC_PAGE_SIZE << order;
	check_internal(p, len);
	if (!zero)
		memset(p, 0, len);
	a->internal_bytes += len;
	return p;
}

void alloc_arena_give_internal(struct alloc_arena *a, void *p, unsigned order)
{
	size_t len = (size_t)ALLOC_PAGE_SIZE << order;
	a->internal_bytes -= len;
	check_free_region(p, len);
	buddy_free(a, p, order);
}

int alloc_arena_init(struct alloc_arena *a, const struct alloc_ops *ops,
		     unsigned flags)
{
	if (!a)
		return -EINVAL;
	memset(a, 0, sizeof(*a));
	int r = pthread_mutex_init(&a->lock, NULL);
	if (r)
		return -r;
	if (ops) {
		a->ops = *ops;
	} else {
		a->ops.map = mmap_map;
		a->ops.unmap = mmap_unmap;
	}
	a->flags = flags;
	return 0;
}

/* The library's arena, statically initialised so that the first
 * allocation needs no init call. */
struct alloc_arena alloc_default_arena = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.ops = {.map = mmap_map, .unmap = mmap_unmap},
	.flags = ALLOC_DEFAULT_FLAGS,
};

int alloc_arena_destroy(struct alloc_arena *a)
{
	pthread_mutex_lock(&a->lock);
	alloc_run_release_kept(a);
	bool busy = a->tcaches != NULL;
	for (unsigned cls = 0; cls < ALLOC_NCLASSES; cls++)
		busy |= a->out[cls] != 0;
	if (busy || a->nchunks || a->nruns) {
		pthread_mutex_unlock(&a->lock);
		return -EBUSY;
	}
	while (a->nspare) {
		void *p = a->spare[--a->nspare].p;
		check_free_region(p, ALLOC_CHUNK_SIZE);
		unmap(a, p, ALLOC_CHUNK_SIZE);
	}
	free(a->spare);
	a->spare = NULL;
	a->spare_cap = 0;
	alloc_run_destroy(a);
	pthread_mutex_unlock(&a->lock);
	pthread_mutex_destroy(&a->lock);
	return 0;
}

void alloc_arena_stats(struct alloc_arena *a, struct alloc_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&a->lock);
	st->chunks = a->nchunks;
	st->huge_blocks = a->nhuge;
	st->spare_chunks = a->nspare + a->nkept;
	st->runs = a->nruns;
	st->mapped_bytes = (a->nchunks + a->nhuge + a->nspare + a->nkept +
			    a->nruns) *
			   ALLOC_CHUNK_SIZE;
	for (unsigned cls = 0; cls < ALLOC_NCLASSES; cls++) {
		size_t bytes = a->out[cls] * alloc_class_size(cls);
		if (cls < ALLOC_NSLAB)
			st->slab_object_bytes += bytes;
		if (alloc_class_is_meta(cls))
			st->meta_bytes += bytes;
		else
			st->data_bytes += bytes;
	}
	for (struct alloc_chunk *c = a->head[ALLOC_LIST_ALL]; c;
	     c = c->link[ALLOC_LIST_ALL].next) {
		st->header_bytes += (size_t)c->hdr_touched * ALLOC_PAGE_SIZE;
		for (unsigned pg = HDR_PAGES; pg < ALLOC_CHUNK_PAGES;
		     pg += 1u << pd_of(c, pg)->order)
			if (pd_of(c, pg)->state == PD_SLAB)
				st->slab_bytes += (size_t)ALLOC_PAGE_SIZE
						  << pd_of(c, pg)->order;
	}
	st->header_bytes += alloc_run_header_bytes(a);
	st->internal_bytes = a->internal_bytes;
	st->free_resident_bytes = a->free_resident;
	alloc_arena_cached_bytes(a, &st->cached_data_bytes, &st->cached_meta_bytes);
	st->maps = a->maps;
	st->unmaps = a->unmaps;
	st->map_failures = a->map_failures;
	pthread_mutex_unlock(&a->lock);
}

size_t alloc_arena_trim(struct alloc_arena *a)
{
	size_t given = 0;
	pthread_mutex_lock(&a->lock);
	alloc_run_release_kept(a);
	given += a->nspare * ALLOC_CHUNK_SIZE;
	if (a->nspare)
		unmap_spares(a, a->nspare);
	given += trim_free_blocks(a, 0);
	a->trim_floor = 0;
	pthread_mutex_unlock(&a->lock);
	return given;
}
