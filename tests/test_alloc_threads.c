/* SPDX-License-Identifier: MIT */
/*
 * The folio allocator under threads: objects freed by another thread than
 * the one that allocated them (the last folio_put in an I/O completion
 * thread), thread caches given back at thread exit, and a stress test of
 * random sizes in which every object carries a pattern that is checked
 * before it is freed (two threads handed the same memory would overwrite
 * each other's). Objects travel between threads through atomics only, so
 * that TSan sees every hand-off.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "alloc/alloc.h"
#include "folio_state.h"
#include "test_util.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

/* The first bytes of every metadata object: what the object is. */
struct rec {
	char *data;
	size_t dsize, msize;
	uint64_t tag;
};
#define MIN_META sizeof(struct rec)

static inline uint64_t pat(uint64_t tag, size_t i)
{
	return tag * UINT64_C(0x9E3779B97F4A7C15) + i;
}

/* Every word of small objects, a sample of large ones (still every
 * page, so a block handed out twice is always caught). */
static inline size_t stride(size_t words)
{
	return words <= 2048 ? 1 : 61;
}

static void fill(struct rec *r)
{
	uint64_t *d = (uint64_t *)r->data;
	size_t dw = r->dsize / 8;
	for (size_t i = 0; i < dw; i += stride(dw))
		d[i] = pat(r->tag, i);
	d[dw - 1] = pat(r->tag, dw - 1);
	unsigned char *m = (unsigned char *)r;
	for (size_t i = sizeof(*r); i < r->msize; i++)
		m[i] = (unsigned char)pat(r->tag, i);
}

static void verify(const struct rec *r)
{
	const uint64_t *d = (const uint64_t *)r->data;
	size_t dw = r->dsize / 8;
	for (size_t i = 0; i < dw; i += stride(dw))
		if (d[i] != pat(r->tag, i))
			fail_msg("data word %zu of %p (tag %llu) overwritten", i,
				 (void *)r->data, (unsigned long long)r->tag);
	assert_true(d[dw - 1] == pat(r->tag, dw - 1));
	const unsigned char *m = (const unsigned char *)r;
	for (size_t i = sizeof(*r); i < r->msize; i++)
		if (m[i] != (unsigned char)pat(r->tag, i))
			fail_msg("meta byte %zu of %p overwritten", i, (void *)r);
}

/* Allocation through the library's arena (alloc_folio_mem) or a private
 * arena with the thread's own cache. */
struct where {
	struct alloc_arena *arena; /* NULL: the library's */
	struct alloc_tcache *tc;
};

static struct rec *obj_new(struct where *w, size_t dsize, size_t msize,
			   uint64_t tag)
{
	void *data, *meta;
	if (w->arena) {
		meta = alloc_obj(w->arena, w->tc, alloc_meta_class(msize), NULL);
		data = alloc_obj(w->arena, w->tc, alloc_data_class(dsize), NULL);
		assert_non_null(meta);
		assert_non_null(data);
	} else {
		bool zeroed;
		assert_int_equal(alloc_folio_mem(dsize, msize, &data, &meta,
						 &zeroed),
				 0);
	}
	assert_int_equal((uintptr_t)data % MIN(dsize, 4096), 0);
	assert_int_equal((uintptr_t)data % dsize, 0);
	struct rec *r = meta;
	*r = (struct rec){data, dsize, msize, tag};
	fill(r);
	return r;
}

static void obj_free(struct where *w, struct rec *r)
{
	verify(r);
	if (w->arena) {
		alloc_obj_free(w->arena, w->tc, alloc_data_class(r->dsize),
			       r->data);
		alloc_obj_free(w->arena, w->tc, alloc_meta_class(r->msize), r);
	} else {
		alloc_folio_mem_free(r->data, r->dsize, r, r->msize);
	}
}

static struct alloc_stats lib_stats(void)
{
	struct alloc_stats st;
	alloc_thread_flush();
	alloc_stats(&st);
	return st;
}

/* ---- cross-thread free ---- */

#define RING 64
struct ring {
	_Atomic(struct rec *) slot[RING];
	atomic_bool done;
	unsigned n;
};

static void *producer(void *arg)
{
	struct ring *q = arg;
	struct where w = {0};
	for (unsigned i = 0; i < q->n; i++) {
		size_t dsize = (size_t)512 << (i % 8);
		struct rec *r = obj_new(&w, dsize, 64 + 8 * (i % 4), i + 1);
		unsigned s = i % RING;
		while (atomic_load_explicit(&q->slot[s], memory_order_acquire))
			sched_yield();
		atomic_store_explicit(&q->slot[s], r, memory_order_release);
	}
	atomic_store_explicit(&q->done, true, memory_order_release);
	return NULL;
}

static void *consumer(void *arg)
{
	struct ring *q = arg;
	struct where w = {0};
	for (unsigned i = 0; i < q->n; i++) {
		unsigned s = i % RING;
		struct rec *r;
		while (!(r = atomic_exchange_explicit(&q->slot[s], NULL,
						      memory_order_acq_rel)))
			sched_yield();
		assert_int_equal(r->tag, i + 1);
		obj_free(&w, r);
	}
	return NULL;
}

static void test_cross_thread_free(void **state)
{
	(void)state;
	struct alloc_stats before = lib_stats();
	struct ring *q = calloc(1, sizeof(*q));
	assert_non_null(q);
	q->n = test_iters(20000, 2000);
	pthread_t p, c;
	assert_int_equal(pthread_create(&p, NULL, producer, q), 0);
	assert_int_equal(pthread_create(&c, NULL, consumer, q), 0);
	assert_int_equal(pthread_join(p, NULL), 0);
	assert_int_equal(pthread_join(c, NULL), 0);
	free(q);
	/* Both threads' caches went back to the arena when they exited. */
	struct alloc_stats after = lib_stats();
	assert_int_equal(after.data_bytes, before.data_bytes);
	assert_int_equal(after.meta_bytes, before.meta_bytes);
	assert_int_equal(after.cached_data_bytes + after.cached_meta_bytes, 0);
	assert_int_equal(after.internal_bytes, before.internal_bytes);
}

/* Folios allocated here, freed by a thread that exits: the same through
 * the public API. */
struct folio_batch {
	struct folio **fs;
	unsigned n;
};

static void *put_all(void *arg)
{
	struct folio_batch *b = arg;
	for (unsigned i = 0; i < b->n; i++)
		folio_put(b->fs[i]);
	return NULL;
}

static void test_folio_put_elsewhere(void **state)
{
	(void)state;
	struct alloc_stats before = lib_stats();
	struct folio_batch b = {.n = 1000};
	b.fs = calloc(b.n, sizeof(*b.fs));
	assert_non_null(b.fs);
	for (unsigned i = 0; i < b.n; i++)
		assert_int_equal(folio_new(&b.fs[i], 0, (size_t)4096 << (i % 5),
					   4096),
				 0);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, put_all, &b), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	free(b.fs);
	struct alloc_stats after = lib_stats();
	assert_int_equal(after.data_bytes, before.data_bytes);
	assert_int_equal(after.meta_bytes, before.meta_bytes);
}

/* ---- stress ---- */

#define THREADS 4
#define LIVE 48
#define SHARED 16

struct stress {
	struct alloc_arena *arena;
	_Atomic(struct rec *) shared[SHARED];
	atomic_uint tags;
	unsigned iters;
	uint64_t seed;
};

struct worker {
	struct stress *s;
	unsigned id;
};

/* Mostly small folios, now and then up to 2 MiB. */
static size_t rand_dsize(uint64_t *rs)
{
	unsigned r = (unsigned)test_rand_below(rs, 100);
	unsigned shift = r < 70 ? (unsigned)test_rand_below(rs, 5)
		       : r < 97 ? 5 + (unsigned)test_rand_below(rs, 4)
				: 9 + (unsigned)test_rand_below(rs, 4);
	return (size_t)512 << shift;
}

static void *stress_worker(void *arg)
{
	struct worker *wk = arg;
	struct stress *s = wk->s;
	struct where w = {s->arena, NULL};
	if (s->arena) {
		w.tc = alloc_tcache_new(s->arena);
		assert_non_null(w.tc);
	}
	uint64_t rs = s->seed + wk->id * UINT64_C(0x1000193);
	struct rec *live[LIVE] = {0};
	for (unsigned it = 0; it < s->iters; it++) {
		unsigned i = (unsigned)test_rand_below(&rs, LIVE);
		unsigned op = (unsigned)test_rand_below(&rs, 8);
		if (live[i] && op < 5) {
			obj_free(&w, live[i]);
			live[i] = NULL;
		} else if (live[i]) {
			/* Hand it to whichever thread looks next. */
			unsigned j = (unsigned)test_rand_below(&rs, SHARED);
			struct rec *old = atomic_exchange_explicit(
				&s->shared[j], live[i], memory_order_acq_rel);
			live[i] = NULL;
			if (old)
				obj_free(&w, old);
		} else {
			size_t msize = MIN_META +
				       test_rand_below(&rs, ALLOC_MAX_META -
								    MIN_META + 1);
			live[i] = obj_new(&w, rand_dsize(&rs), msize,
					  atomic_fetch_add(&s->tags, 1));
		}
	}
	for (unsigned i = 0; i < LIVE; i++)
		if (live[i])
			obj_free(&w, live[i]);
	if (w.tc)
		alloc_tcache_destroy(w.tc);
	return NULL;
}

static void run_stress(struct alloc_arena *arena, const char *name)
{
	struct stress *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	s->arena = arena;
	s->iters = test_iters(40000, 3000);
	s->seed = test_seed(name);
	pthread_t tids[THREADS];
	struct worker wk[THREADS];
	for (unsigned i = 0; i < THREADS; i++) {
		wk[i] = (struct worker){s, i};
		assert_int_equal(pthread_create(&tids[i], NULL, stress_worker,
						&wk[i]),
				 0);
	}
	for (unsigned i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(tids[i], NULL), 0);
	struct where w = {arena, NULL};
	for (unsigned j = 0; j < SHARED; j++) {
		struct rec *r = atomic_exchange(&s->shared[j], NULL);
		if (r)
			obj_free(&w, r);
	}
	free(s);
}

static void test_stress_library_arena(void **state)
{
	(void)state;
	struct alloc_stats before = lib_stats();
	run_stress(NULL, "stress_library_arena");
	struct alloc_stats after = lib_stats();
	assert_int_equal(after.data_bytes, before.data_bytes);
	assert_int_equal(after.meta_bytes, before.meta_bytes);
	assert_int_equal(after.cached_data_bytes + after.cached_meta_bytes, 0);
}

/* A private arena: chunks come and go under contention, and at the end
 * every object and chunk is accounted for. */
static void test_stress_private_arena(void **state)
{
	(void)state;
	struct alloc_arena a;
	assert_int_equal(alloc_arena_init(&a, NULL, ALLOC_HUGEPAGE), 0);
	run_stress(&a, "stress_private_arena");
	struct alloc_stats st;
	alloc_arena_stats(&a, &st);
	assert_int_equal(st.data_bytes + st.meta_bytes, 0);
	assert_int_equal(st.chunks + st.huge_blocks, 0);
	/* What stays mapped is spares only, and a trim gives it back. */
	assert_int_equal(st.mapped_bytes, st.spare_chunks * ALLOC_CHUNK_SIZE);
	assert_true(st.maps > 2);
	alloc_arena_trim(&a);
	alloc_arena_stats(&a, &st);
	assert_int_equal(st.mapped_bytes, 0);
	assert_int_equal(alloc_arena_destroy(&a), 0);
}

/* Spares age out in a process that allocates nothing more: a pool's
 * flusher, idle, gives the library arena's old spares back. */
static void test_idle_flusher_ages_spares(void **state)
{
	(void)state;
	enum { N = 16 };
	void *data[N], *meta[N];
	for (int i = 0; i < N; i++) {
		bool zero;
		assert_int_equal(alloc_folio_mem(2 * MIB, 64, &data[i], &meta[i],
						 &zero),
				 0);
		memset(data[i], 7, 4096);
	}
	for (int i = 0; i < N; i++)
		alloc_folio_mem_free(data[i], 2 * MIB, meta[i], 64);
	assert_true(lib_stats().spare_chunks >= N);
	struct folio_pool *p;
	struct folio_pool_opts o = {.sz = sizeof(o), .budget = 4 * MIB,
				    .dirty_expire_ms = 20,
				    .flusher_threads = 1};
	assert_int_equal(folio_pool_new(&p, &o), 0);
	/* ALLOC_SPARE_KEEP_NS, then a flusher period or two. */
	size_t left = SIZE_MAX;
	for (unsigned ms = 0; ms < 10000 && left > ALLOC_SPARE_MAX; ms += 50) {
		struct timespec t = {0, 50 * 1000 * 1000};
		nanosleep(&t, NULL);
		left = lib_stats().spare_chunks;
	}
	assert_int_equal(folio_pool_free(p), 0);
	assert_true(left <= ALLOC_SPARE_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cross_thread_free),
		cmocka_unit_test(test_folio_put_elsewhere),
		cmocka_unit_test(test_stress_library_arena),
		cmocka_unit_test(test_stress_private_arena),
		cmocka_unit_test(test_idle_flusher_ages_spares),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
