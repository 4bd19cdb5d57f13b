/* SPDX-License-Identifier: MIT */
/*
 * What arena.c and tcache.c share: the arena's locked entry points and the
 * memory checker hooks.
 */
#ifndef FOLIO_ALLOC_INTERNAL_H
#define FOLIO_ALLOC_INTERNAL_H

#include "alloc/alloc.h"

/*
 * The library's arena asks for huge pages for 2 MiB blocks: one fault
 * instead of 512 and one TLB entry (doc/benchmarks.md, "Folio
 * allocator").
 */
#define ALLOC_DEFAULT_FLAGS ALLOC_HUGEPAGE

extern struct alloc_arena alloc_default_arena;

/* Under a->lock. One object of class `cls`, NULL when out of memory; the
 * low bit of the pointer is set when the memory is known to be zero. */
void *alloc_arena_take(struct alloc_arena *a, unsigned cls);
void alloc_arena_give(struct alloc_arena *a, unsigned cls, void *p);
/* Zeroed blocks for the allocator's own structures (thread caches). */
void *alloc_arena_take_internal(struct alloc_arena *a, unsigned order);
void alloc_arena_give_internal(struct alloc_arena *a, void *p, unsigned order);
/* A 2 MiB-aligned region: a spare (*fresh false: resident, any content)
 * or a fresh zero map (arena.c); NULL when out of memory. */
void *alloc_region_get(struct alloc_arena *a, bool *fresh);
void alloc_region_put(struct alloc_arena *a, void *p);
/* Runs (run.c): a block of `order` (ALLOC_RUN_MIN_ORDER and up), NULL
 * when out of memory; *zero when known to read as zeros. */
void *alloc_run_take(struct alloc_arena *a, unsigned order, bool *zero);
void alloc_run_give(struct alloc_arena *a, unsigned order, void *p);
/* Give back pages of free run blocks of `order` while free_resident is
 * above target; returns the bytes given back. */
size_t alloc_run_trim(struct alloc_arena *a, unsigned order, size_t target);
/* What describing the runs takes (their structs and the table). */
size_t alloc_run_header_bytes(const struct alloc_arena *a);
/* Release the wholly free runs kept whole: their regions become spares
 * (or are unmapped when the spares are full). */
void alloc_run_release_kept(struct alloc_arena *a);
/* Free the run table (no run left). */
void alloc_run_destroy(struct alloc_arena *a);
/* The bytes sitting in the arena's thread caches (tcache.c). */
void alloc_arena_cached_bytes(struct alloc_arena *a, size_t *data, size_t *meta);

/*
 * Memory checkers. The allocator never reads or writes free memory, so
 * free objects can be made unaddressable: ASan poisons them, valgrind's
 * memcheck sees every object handed out as a heap block of its own
 * (leaks, use after free and reads of unwritten memory are reported as
 * with malloc). Without either these cost nothing (valgrind's client
 * requests are a few no-op instructions when not under valgrind).
 */
#if defined(__SANITIZE_ADDRESS__)
#define ALLOC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ALLOC_ASAN 1
#endif
#endif

#if !defined(ALLOC_ASAN) && defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define ALLOC_VALGRIND 1
#endif
#endif

#ifdef ALLOC_ASAN
#include <sanitizer/asan_interface.h>
#endif

/* Whether a checker watches this run. Valgrind decides at run time, and
 * only memcheck answers its requests (-1; other tools such as callgrind
 * leave the default 0), so instruction counts stay those of a plain run. */
static inline bool check_running(void)
{
#ifdef ALLOC_ASAN
	return true;
#elif defined(ALLOC_VALGRIND)
	int probe = 0;
	return (long)VALGRIND_MAKE_MEM_DEFINED(&probe, sizeof(probe)) == -1;
#else
	return false;
#endif
}

/* A fresh region: nothing in it is handed out yet. */
static inline void check_mapped(void *p, size_t len)
{
#ifdef ALLOC_ASAN
	ASAN_POISON_MEMORY_REGION(p, len);
#elif defined(ALLOC_VALGRIND)
	VALGRIND_MAKE_MEM_NOACCESS(p, len);
#endif
	(void)p;
	(void)len;
}

/* Memory the allocator itself uses (headers, thread caches): zero or
 * about to be written. */
static inline void check_internal(void *p, size_t len)
{
#ifdef ALLOC_ASAN
	ASAN_UNPOISON_MEMORY_REGION(p, len);
#elif defined(ALLOC_VALGRIND)
	VALGRIND_MAKE_MEM_DEFINED(p, len);
#endif
	(void)p;
	(void)len;
}

/* Internal memory given back. */
static inline void check_free_region(void *p, size_t len)
{
	check_mapped(p, len);
}

/* Before an unmap: a later mapping at the same address is not ours. */
static inline void check_unmapping(void *p, size_t len)
{
#ifdef ALLOC_ASAN
	ASAN_UNPOISON_MEMORY_REGION(p, len);
#endif
	(void)p;
	(void)len;
}

/* An object goes to a caller / comes back from one. */
static inline void check_obj_out(void *p, size_t len, bool zeroed)
{
#ifdef ALLOC_ASAN
	ASAN_UNPOISON_MEMORY_REGION(p, len);
#elif defined(ALLOC_VALGRIND)
	VALGRIND_MALLOCLIKE_BLOCK(p, len, 0, zeroed);
#endif
	(void)p;
	(void)len;
	(void)zeroed;
}

static inline void check_obj_in(void *p, size_t len)
{
#ifdef ALLOC_ASAN
	ASAN_POISON_MEMORY_REGION(p, len);
#elif defined(ALLOC_VALGRIND)
	VALGRIND_FREELIKE_BLOCK(p, 0);
#endif
	(void)p;
	(void)len;
}

#endif
