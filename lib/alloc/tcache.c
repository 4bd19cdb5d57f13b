/* SPDX-License-Identifier: MIT */
/*
 * Thread caches and the library's arena.
 *
 * A cache holds, per class of 32 KiB or less, a magazine: a stack of up to
 * `cap` free objects. Allocation pops, free pushes, no lock and no shared
 * cache line. An empty magazine takes cap/2 objects from the arena under
 * one lock round trip; a full one gives its older half back. The caps keep
 * what one thread can hold small (about 64 KiB per data class, 16 KiB per
 * slab class at most) because the pool's budget does not see it.
 *
 * Objects are not owned by threads: a folio allocated by a writer and
 * freed by an I/O completion thread lands in the completion thread's
 * cache, and goes back to the arena from there when that magazine
 * overflows or the thread exits.
 *
 * Each thread's cache is bound to the library's arena through a TLS
 * pointer (initial-exec: one load on the fast path) and a pthread key
 * whose destructor flushes and frees it at thread exit. A thread that
 * allocates after its destructor ran (another key's destructor freeing a
 * folio) goes straight to the arena. The main thread's cache is never
 * destroyed: its objects stay in mmap'd memory, which no leak checker
 * counts, and the objects handed out are what valgrind tracks.
 *
 * The counts are atomics only so that alloc_stats() may read another
 * thread's magazines: the owner's relaxed load and store compile to plain
 * moves.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/internal.h"
#include "base/tls.h"

struct alloc_mag {
	atomic_uint n;
	unsigned cap;
	void *slot[ALLOC_MAG_MAX];
};

struct alloc_tcache {
	struct alloc_arena *arena;
	struct alloc_tcache *next, *prev;
	bool checked; /* under valgrind: report objects to memcheck */
	struct alloc_mag mag[ALLOC_TC_CLASSES];
};

#define TC_ORDER 2u /* 16 KiB; only the pages of classes in use are touched */
_Static_assert(sizeof(struct alloc_tcache) <= (ALLOC_PAGE_SIZE << TC_ORDER),
	       "thread cache size");

static unsigned tc_cap(unsigned cls)
{
	size_t size = alloc_class_size(cls);
	size_t bytes = cls >= ALLOC_NSLAB ? 64 * 1024 : 16 * 1024;
	return (unsigned)MAX(MIN(bytes / size, ALLOC_MAG_MAX), 2);
}

static inline void *untag(void *p, bool *zeroed)
{
	if (zeroed)
		*zeroed = (uintptr_t)p & 1;
	return (void *)((uintptr_t)p & ~(uintptr_t)1);
}

struct alloc_tcache *alloc_tcache_new(struct alloc_arena *a)
{
	pthread_mutex_lock(&a->lock);
	struct alloc_tcache *tc = alloc_arena_take_internal(a, TC_ORDER);
	if (tc) {
		tc->arena = a;
		tc->checked = check_running();
		for (unsigned cls = 0; cls < ALLOC_TC_CLASSES; cls++)
			tc->mag[cls].cap = tc_cap(cls);
		tc->next = a->tcaches;
		if (a->tcaches)
			a->tcaches->prev = tc;
		a->tcaches = tc;
	}
	pthread_mutex_unlock(&a->lock);
	return tc;
}

/* Under the lock: give back the first `k` objects of a magazine. */
static void mag_give(struct alloc_arena *a, unsigned cls, struct alloc_mag *m,
		     unsigned k)
{
	unsigned n = atomic_load_explicit(&m->n, memory_order_relaxed);
	for (unsigned i = 0; i < k; i++)
		alloc_arena_give(a, cls, untag(m->slot[i], NULL));
	memmove(m->slot, m->slot + k, (n - k) * sizeof(m->slot[0]));
	/* No stale copies above the top (see obj_get()). */
	memset(m->slot + (n - k), 0, k * sizeof(m->slot[0]));
	atomic_store_explicit(&m->n, n - k, memory_order_relaxed);
}

void alloc_tcache_flush(struct alloc_tcache *tc)
{
	struct alloc_arena *a = tc->arena;
	pthread_mutex_lock(&a->lock);
	for (unsigned cls = 0; cls < ALLOC_TC_CLASSES; cls++) {
		struct alloc_mag *m = &tc->mag[cls];
		mag_give(a, cls, m,
			 atomic_load_explicit(&m->n, memory_order_relaxed));
	}
	pthread_mutex_unlock(&a->lock);
}

void alloc_tcache_destroy(struct alloc_tcache *tc)
{
	if (!tc)
		return;
	struct alloc_arena *a = tc->arena;
	alloc_tcache_flush(tc);
	pthread_mutex_lock(&a->lock);
	if (tc->prev)
		tc->prev->next = tc->next;
	else
		a->tcaches = tc->next;
	if (tc->next)
		tc->next->prev = tc->prev;
	alloc_arena_give_internal(a, tc, TC_ORDER);
	pthread_mutex_unlock(&a->lock);
}

void alloc_arena_cached_bytes(struct alloc_arena *a, size_t *data, size_t *meta)
{
	*data = *meta = 0;
	for (struct alloc_tcache *tc = a->tcaches; tc; tc = tc->next)
		for (unsigned cls = 0; cls < ALLOC_TC_CLASSES; cls++) {
			size_t bytes = atomic_load_explicit(&tc->mag[cls].n,
							    memory_order_relaxed) *
				       alloc_class_size(cls);
			if (alloc_class_is_meta(cls))
				*meta += bytes;
			else
				*data += bytes;
		}
}

static void *take_locked(struct alloc_arena *a, unsigned cls)
{
	pthread_mutex_lock(&a->lock);
	void *p = alloc_arena_take(a, cls);
	pthread_mutex_unlock(&a->lock);
	return p;
}

/* The magazine is empty: fill half of it and take one. */
static void *refill(struct alloc_arena *a, unsigned cls, struct alloc_mag *m)
{
	unsigned want = m->cap / 2 + 1, n = 0;
	pthread_mutex_lock(&a->lock);
	while (n < want) {
		void *p = alloc_arena_take(a, cls);
		if (!p)
			break;
		m->slot[n++] = p;
	}
	pthread_mutex_unlock(&a->lock);
	if (!n)
		return NULL;
	atomic_store_explicit(&m->n, n - 1, memory_order_relaxed);
	return m->slot[n - 1];
}

/* Are the memory checker hooks live? Always under ASan (its poisoning is
 * compiled in); under valgrind only when running on it, which a cache
 * asks once: the client requests cost twenty instructions each, a third
 * of the whole fast path. */
static inline bool checking(const struct alloc_tcache *tc)
{
#if defined(ALLOC_ASAN)
	(void)tc;
	return true;
#elif defined(ALLOC_VALGRIND)
	return !tc || tc->checked;
#else
	(void)tc;
	return false;
#endif
}

static inline __attribute__((always_inline)) void *
obj_get(struct alloc_arena *a, struct alloc_tcache *tc, unsigned cls,
	bool *zeroed)
{
	void *p;
	if (tc && cls < ALLOC_TC_CLASSES) {
		struct alloc_mag *m = &tc->mag[cls];
		unsigned n = atomic_load_explicit(&m->n, memory_order_relaxed);
		if (__builtin_expect(n != 0, 1)) {
			p = m->slot[n - 1];
			atomic_store_explicit(&m->n, n - 1,
					      memory_order_relaxed);
		} else {
			p = refill(a, cls, m);
		}
	} else {
		p = take_locked(a, cls);
	}
	if (__builtin_expect(!p, 0))
		return NULL;
	bool z;
	p = untag(p, &z);
	if (zeroed)
		*zeroed = z;
	if (checking(tc)) {
		/* The popped slot still points at the object, and memcheck
		 * scans our mmap'd memory: a leaked folio would look
		 * reachable from it. */
		if (tc && cls < ALLOC_TC_CLASSES)
			tc->mag[cls].slot[atomic_load_explicit(
				&tc->mag[cls].n, memory_order_relaxed)] = NULL;
		check_obj_out(p, alloc_class_size(cls), z);
	}
	return p;
}

/* A full magazine gives its older half back first. */
static void flush_half(struct alloc_arena *a, unsigned cls, struct alloc_mag *m)
{
	pthread_mutex_lock(&a->lock);
	mag_give(a, cls, m, m->cap / 2);
	pthread_mutex_unlock(&a->lock);
}

static inline __attribute__((always_inline)) void
obj_put(struct alloc_arena *a, struct alloc_tcache *tc, unsigned cls, void *p)
{
	if (checking(tc))
		check_obj_in(p, alloc_class_size(cls));
	if (tc && cls < ALLOC_TC_CLASSES) {
		struct alloc_mag *m = &tc->mag[cls];
		unsigned n = atomic_load_explicit(&m->n, memory_order_relaxed);
		if (__builtin_expect(n == m->cap, 0)) {
			flush_half(a, cls, m);
			n -= m->cap / 2;
		}
		m->slot[n] = p;
		atomic_store_explicit(&m->n, n + 1, memory_order_relaxed);
		return;
	}
	pthread_mutex_lock(&a->lock);
	alloc_arena_give(a, cls, p);
	pthread_mutex_unlock(&a->lock);
}

void *alloc_obj(struct alloc_arena *a, struct alloc_tcache *tc, unsigned cls,
		bool *zeroed)
{
	return obj_get(a, tc, cls, zeroed);
}

void alloc_obj_free(struct alloc_arena *a, struct alloc_tcache *tc,
		    unsigned cls, void *p)
{
	obj_put(a, tc, cls, p);
}

/* ---- the library's arena and its per-thread caches ---- */

#define TC_DEAD ((struct alloc_tcache *)1)

static _Thread_local struct alloc_tcache *tc_self TLS_FAST;
static pthread_once_t tc_once = PTHREAD_ONCE_INIT;

static void tc_exit(void *v)
{
	tc_self = TC_DEAD;
	alloc_tcache_destroy(v);
}

static struct tls_exit tc_exit_hook = TLS_EXIT_INIT(tc_exit);

/* fork() in a threaded program: the child must not inherit the arena's
 * lock held by a thread that does not exist there. The other threads'
 * caches stay on the list in the child and are never flushed: what they
 * held is lost to the child, nothing breaks. */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&alloc_default_arena.lock);
}

static void atfork_release(void)
{
	pthread_mutex_unlock(&alloc_default_arena.lock);
}

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_release, atfork_release);
}

static struct alloc_tcache *tc_create(void)
{
	pthread_once(&tc_once, atfork_register);
	struct alloc_tcache *tc = alloc_tcache_new(&alloc_default_arena);
	if (!tc)
		return NULL;
	if (tls_exit_arm(&tc_exit_hook, tc)) {
		alloc_tcache_destroy(tc);
		return NULL;
	}
	tc_self = tc;
	return tc;
}

static inline struct alloc_tcache *tc_get(void)
{
	struct alloc_tcache *tc = tc_self;
	if (__builtin_expect((uintptr_t)tc > 1, 1))
		return tc;
	return tc == TC_DEAD ? NULL : tc_create();
}

int alloc_folio_mem(size_t data_size, size_t meta_size, void **data,
		    void **meta, bool *zeroed)
{
	unsigned dc = alloc_data_class(data_size);
	unsigned mc = alloc_meta_class(meta_size);
	if (dc >= ALLOC_NCLASSES || mc >= ALLOC_NCLASSES)
		return -EINVAL;
	struct alloc_arena *a = &alloc_default_arena;
	struct alloc_tcache *tc = tc_get();
	void *m = obj_get(a, tc, mc, NULL);
	if (!m)
		return -ENOMEM;
	void *d = obj_get(a, tc, dc, zeroed);
	if (!d) {
		obj_put(a, tc, mc, m);
		return -ENOMEM;
	}
	*data = d;
	*meta = m;
	return 0;
}

void alloc_folio_data_free(void *data, size_t data_size)
{
	obj_put(&alloc_default_arena, tc_get(), alloc_data_class(data_size),
		data);
}

void *alloc_folio_meta(size_t meta_size)
{
	unsigned mc = alloc_meta_class(meta_size);
	if (mc >= ALLOC_NCLASSES)
		return NULL;
	return obj_get(&alloc_default_arena, tc_get(), mc, NULL);
}

void alloc_folio_meta_free(void *meta, size_t meta_size)
{
	obj_put(&alloc_default_arena, tc_get(), alloc_meta_class(meta_size),
		meta);
}

void alloc_folio_mem_free(void *data, size_t data_size, void *meta,
			  size_t meta_size)
{
	alloc_folio_data_free(data, data_size);
	alloc_folio_meta_free(meta, meta_size);
}

void alloc_stats(struct alloc_stats *st)
{
	alloc_arena_stats(&alloc_default_arena, st);
}

void alloc_thread_flush(void)
{
	struct alloc_tcache *tc = tc_self;
	if ((uintptr_t)tc > 1)
		alloc_tcache_flush(tc);
}

size_t alloc_trim(void)
{
	alloc_thread_flush();
	return alloc_arena_trim(&alloc_default_arena);
}

size_t alloc_decay(void)
{
	return alloc_arena_decay(&alloc_default_arena);
}
