/* SPDX-License-Identifier: MIT */
/*
 * Runs: 2 MiB regions cut into blocks of one order, 64 KiB .. 1 MiB,
 * described outside the region.
 *
 * Why not the buddy chunks: a chunk's header takes its first pages, so
 * its first 64 KiB block is lost to blocks of 64 KiB and more (31 per
 * chunk), and the header page is resident for them: 133 bytes of RSS per
 * 64 KiB folio, more than the rest of the folio's metadata together. A
 * run keeps its state in a small struct alloc_run (a free mask and a
 * zero mask, one bit per block) found through the arena's table by region
 * address, so a region holds 32 blocks of 64 KiB and nothing of it is
 * resident but the blocks in use: about 2 bytes per 64 KiB folio.
 *
 * Runs never merge blocks: a region serves one order until all its blocks
 * are free, then goes back like a chunk (a spare, or unmapped). Free
 * blocks keep their pages and count in the arena's free_resident, so the
 * bound on free resident memory (arena.c) gives them back as it does free
 * buddy blocks. The free call names the class, so a block of a run order
 * is always a run's and nothing else has to be asked.
 *
 * Everything here runs under the arena's lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "alloc/internal.h"

/* A table slot whose run was removed: probing goes on past it. */
#define RUN_GONE ((struct alloc_run *)(uintptr_t)1)

struct alloc_run {
	uintptr_t base;                  /* the region */
	struct alloc_run *next, *prev;   /* runs of this order with a free block */
	uint32_t free;                   /* bit i: block i is free */
	uint32_t zero;                   /* of those, known to read as zeros */
	unsigned order;
};

static inline unsigned run_blocks(unsigned order)
{
	return 1u << (ALLOC_CHUNK_SHIFT - ALLOC_PAGE_SHIFT - order);
}

static inline uint32_t run_all(unsigned order)
{
	unsigned n = run_blocks(order);
	return n == 32 ? UINT32_MAX : (UINT32_C(1) << n) - 1;
}

static inline size_t run_block_size(unsigned order)
{
	return (size_t)ALLOC_PAGE_SIZE << order;
}

static inline size_t run_hash(uintptr_t base, size_t mask)
{
	uint64_t k = (uint64_t)(base >> ALLOC_CHUNK_SHIFT);
	return (size_t)((k * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & mask;
}

/* ---- the table: region address -> run (open addressing) ---- */

static struct alloc_run **run_slot(struct alloc_arena *a, uintptr_t base)
{
	if (!a->run_tab)
		return NULL;
	for (size_t i = run_hash(base, a->run_mask);; i = (i + 1) & a->run_mask) {
		struct alloc_run *r = a->run_tab[i];
		if (!r)
			return NULL;
		if (r != RUN_GONE && r->base == base)
			return &a->run_tab[i];
	}
}

static void run_tab_put(struct alloc_run **tab, size_t mask,
			struct alloc_run *r)
{
	size_t i = run_hash(r->base, mask);
	while (tab[i] && tab[i] != RUN_GONE)
		i = (i + 1) & mask;
	tab[i] = r;
}

/* Room for one more: at most half the slots live or gone. 0 / -ENOMEM. */
static int run_tab_reserve(struct alloc_arena *a)
{
	size_t cap = a->run_tab ? a->run_mask + 1 : 0;
	if ((a->run_used + 1) * 2 <= cap)
		return 0;
	size_t ncap = 16;
	while (ncap < (a->nruns + 1) * 4)
		ncap *= 2;
	struct alloc_run **tab = calloc(ncap, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; i < cap; i++)
		if (a->run_tab[i] && a->run_tab[i] != RUN_GONE)
			run_tab_put(tab, ncap - 1, a->run_tab[i]);
	free(a->run_tab);
	a->run_tab = tab;
	a->run_mask = ncap - 1;
	a->run_used = a->nruns;
	return 0;
}

/* ---- the lists of runs with a free block ---- */

static void run_list_add(struct alloc_arena *a, struct alloc_run *r)
{
	struct alloc_run **h = &a->run_head[r->order - ALLOC_RUN_MIN_ORDER];
	r->prev = NULL;
	r->next = *h;
	if (*h)
		(*h)->prev = r;
	*h = r;
}

static void run_list_del(struct alloc_arena *a, struct alloc_run *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		a->run_head[r->order - ALLOC_RUN_MIN_ORDER] = r->next;
	if (r->next)
		r->next->prev = r->prev;
}

/* ---- blocks ---- */

static struct alloc_run *run_new(struct alloc_arena *a, unsigned order)
{
	if (run_tab_reserve(a))
		return NULL;
	struct alloc_run *r = a->run_spare_desc;
	if (r) {
		a->run_spare_desc = NULL;
		memset(r, 0, sizeof(*r));
	} else if (!(r = calloc(1, sizeof(*r)))) {
		return NULL;
	}
	bool fresh;
	void *p = alloc_region_get(a, &fresh);
	if (!p) {
		if (!a->run_spare_desc)
			a->run_spare_desc = r;
		else
			free(r);
		return NULL;
	}
	r->base = (uintptr_t)p;
	r->order = order;
	r->free = run_all(order);
	r->zero = fresh ? r->free : 0;
	if (!fresh)
		a->free_resident += ALLOC_CHUNK_SIZE;
	run_tab_put(a->run_tab, a->run_mask, r);
	a->run_used++;
	a->nruns++;
	run_list_add(a, r);
	return r;
}

void *alloc_run_take(struct alloc_arena *a, unsigned order, bool *zero)
{
	unsigned k = order - ALLOC_RUN_MIN_ORDER;
	struct alloc_run *r = a->run_head[k];
	if (!r && (r = a->run_kept[k])) {
		/* Back in use as a spare region would come back (run_new). */
		a->run_kept[k] = NULL;
		a->nkept--;
		a->nruns++;
		r->zero = 0;
		a->free_resident += ALLOC_CHUNK_SIZE;
		run_list_add(a, r);
	}
	if (!r && !(r = run_new(a, order)))
		return NULL;
	unsigned i = (unsigned)__builtin_ctz(r->free);
	uint32_t bit = UINT32_C(1) << i;
	r->free &= ~bit;
	*zero = r->zero & bit;
	if (!*zero)
		a->free_resident -= run_block_size(order);
	r->zero &= ~bit;
	if (!r->free)
		run_list_del(a, r);
	return (char *)r->base + ((size_t)i << (ALLOC_PAGE_SHIFT + order));
}

/* A wholly free run leaves the lists and the counts of runs in use; its
 * free blocks stop counting as resident free memory, as a spare's. */
static void run_retire(struct alloc_arena *a, struct alloc_run *r)
{
	a->free_resident -= run_block_size(r->order) *
			    (size_t)__builtin_popcount(r->free & ~r->zero);
	run_list_del(a, r);
	a->nruns--;
}

/* A retired run's region goes back (a spare, or unmapped). */
static void run_drop(struct alloc_arena *a, struct alloc_run **slot)
{
	struct alloc_run *r = *slot;
	/* A slot whose successor is empty ends every probe through it, so it
	 * can be emptied too: a run released and made again (one folio freed
	 * and allocated in turn) then leaves no tombstones that would make
	 * the table grow and rehash. */
	if (!a->run_tab[(size_t)(slot - a->run_tab + 1) & a->run_mask]) {
		*slot = NULL;
		a->run_used--;
	} else {
		*slot = RUN_GONE;
	}
	check_free_region((void *)r->base, ALLOC_CHUNK_SIZE);
	alloc_region_put(a, (void *)r->base);
	/* One struct kept: a folio freed and allocated in turn would
	 * otherwise free and allocate its run's description each time. */
	if (!a->run_spare_desc)
		a->run_spare_desc = r;
	else
		free(r);
}

void alloc_run_give(struct alloc_arena *a, unsigned order, void *p)
{
	uintptr_t base = (uintptr_t)p & ~(uintptr_t)(ALLOC_CHUNK_SIZE - 1);
	size_t off = (size_t)((uintptr_t)p - base);
	struct alloc_run **slot = run_slot(a, base);
	struct alloc_run *r = slot ? *slot : NULL;
	uint32_t bit = UINT32_C(1) << (off >> (ALLOC_PAGE_SHIFT + order) & 31);
	if (!r || r->order != order || off & (run_block_size(order) - 1) ||
	    (r->free & bit)) {
		fprintf(stderr, "libfolio-state: bad free of %p (order %u)\n",
			p, order);
		abort();
	}
	if (!r->free)
		run_list_add(a, r);
	r->free |= bit;
	a->free_resident += run_block_size(order);
	if (r->free != run_all(order))
		return;
	run_retire(a, r);
	unsigned k = order - ALLOC_RUN_MIN_ORDER;
	if (!a->run_kept[k] && a->nspare + a->nkept < ALLOC_SPARE_MAX) {
		a->run_kept[k] = r;
		a->nkept++;
	} else {
		run_drop(a, slot);
	}
}

void alloc_run_release_kept(struct alloc_arena *a)
{
	for (unsigned k = 0; k < ALLOC_RUN_ORDERS && a->nkept; k++) {
		struct alloc_run *r = a->run_kept[k];
		if (!r)
			continue;
		a->run_kept[k] = NULL;
		a->nkept--;
		run_drop(a, run_slot(a, r->base));
	}
}

size_t alloc_run_trim(struct alloc_arena *a, unsigned order, size_t target)
{
	long sys_page = sysconf(_SC_PAGESIZE);
	size_t len = run_block_size(order), given = 0;
	if (sys_page <= 0 || len < (size_t)sys_page)
		return 0;
	for (struct alloc_run *r = a->run_head[order - ALLOC_RUN_MIN_ORDER]; r;
	     r = r->next)
		for (uint32_t nz = r->free & ~r->zero; nz; nz &= nz - 1) {
			if (a->free_resident <= target)
				return given;
			unsigned i = (unsigned)__builtin_ctz(nz);
			if (madvise((char *)r->base + i * len, len,
				    MADV_DONTNEED))
				continue;
			r->zero |= UINT32_C(1) << i;
			a->free_resident -= len;
			given += len;
		}
	return given;
}

size_t alloc_run_header_bytes(const struct alloc_arena *a)
{
	return a->nruns * sizeof(struct alloc_run) +
	       (a->run_tab ? (a->run_mask + 1) * sizeof(*a->run_tab) : 0);
}

void alloc_run_destroy(struct alloc_arena *a)
{
	free(a->run_spare_desc);
	a->run_spare_desc = NULL;
	free(a->run_tab);
	a->run_tab = NULL;
	a->run_mask = a->run_used = 0;
}
