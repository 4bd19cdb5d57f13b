/* SPDX-License-Identifier: MIT */
/*
 * The folio allocator (lib/alloc/), white-box: size classes, alignment and
 * disjointness of every class, reuse, coalescing back to a whole chunk and
 * the chunk going back to the kernel, zero tracking, thread-cache batches,
 * map failures (injected through an arena's own struct alloc_ops, and
 * through RLIMIT_AS in a forked child for the library's arena), and the
 * memory a cached folio costs.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "alloc/alloc.h"
#include "folio/folio.h"
#include "folio_state.h"
#include "test_util.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

/* ---- an arena over real mmap() with failures and misplacement on
 * demand, counting what it has mapped ---- */

struct mock {
	unsigned maps_left; /* map() calls that may succeed */
	unsigned misalign;  /* place the next maps off 2 MiB */
	size_t maps, unmaps, mapped;
	uint64_t now; /* the arena's clock, moved by the tests */
};

static uint64_t mock_now(void *ctx)
{
	return ((struct mock *)ctx)->now;
}

static void *mock_map(void *ctx, size_t len)
{
	struct mock *m = ctx;
	m->maps++;
	if (!m->maps_left)
		return NULL;
	m->maps_left--;
	/* Real memory, placed at a 2 MiB boundary or, on demand, a page
	 * past one. */
	const size_t pad = ALLOC_CHUNK_SIZE + 2 * 4096;
	char *q = mmap(NULL, len + pad, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (q == MAP_FAILED)
		return NULL;
	char *p = (char *)(((uintptr_t)q + ALLOC_CHUNK_SIZE - 1) &
			   ~(uintptr_t)(ALLOC_CHUNK_SIZE - 1));
	if (m->misalign) {
		m->misalign--;
		p += 4096;
	}
	if (p > q)
		munmap(q, (size_t)(p - q));
	if (q + len + pad > p + len)
		munmap(p + len, (size_t)(q + len + pad - (p + len)));
	m->mapped += len;
	return p;
}

static void mock_unmap(void *ctx, void *p, size_t len)
{
	struct mock *m = ctx;
	m->unmaps++;
	m->mapped -= len;
	assert_int_equal(munmap(p, len), 0);
}

struct fixture {
	struct mock mock;
	struct alloc_arena arena;
};

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	if (!fx)
		return -1;
	fx->mock.maps_left = UINT32_MAX;
	struct alloc_ops ops = {mock_map, mock_unmap, &fx->mock, mock_now};
	if (alloc_arena_init(&fx->arena, &ops, 0))
		return -1;
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	int r = alloc_arena_destroy(&fx->arena);
	size_t mapped = fx->mock.mapped;
	free(fx);
	/* Everything handed out came back and every byte is unmapped. */
	return r || mapped ? -1 : 0;
}

static struct alloc_stats stats_of(struct alloc_arena *a)
{
	struct alloc_stats st;
	alloc_arena_stats(a, &st);
	return st;
}

/* Let the spares freed so far outlive their keeping time; returns the
 * bytes the arena then gave back. */
static size_t age_spares(struct fixture *fx)
{
	fx->mock.now += ALLOC_SPARE_KEEP_NS;
	return alloc_arena_decay(&fx->arena);
}

struct obj {
	char *p;
	size_t size;
	unsigned cls;
};

static int obj_cmp(const void *x, const void *y)
{
	const struct obj *a = x, *b = y;
	return a->p < b->p ? -1 : a->p > b->p;
}

static void check_disjoint(struct obj *objs, size_t n)
{
	qsort(objs, n, sizeof(*objs), obj_cmp);
	for (size_t i = 1; i < n; i++)
		assert_true(objs[i - 1].p + objs[i - 1].size <= objs[i].p);
}

/* How many objects of a class make it span more than one slab / chunk. */
static size_t enough_of(unsigned cls)
{
	if (cls < ALLOC_NSLAB) {
		unsigned order, nobj;
		alloc_slab_geometry(cls, &order, &nobj);
		return 2 * nobj + 1;
	}
	unsigned order = cls - ALLOC_NSLAB;
	return order ? MIN(ALLOC_CHUNK_PAGES >> order, 8) + 2 : 600;
}

/* ---- size classes ---- */

static void test_classes(void **state)
{
	(void)state;
	/* Every metadata size gets the smallest class that holds it. */
	for (size_t size = 0; size <= ALLOC_MAX_META; size++) {
		unsigned c = alloc_meta_class(size);
		assert_true(alloc_class_is_meta(c));
		assert_true(alloc_class_size(c) >= size);
		if (c > ALLOC_META0)
			assert_true(alloc_class_size(c - 1) < size);
		assert_int_equal(alloc_class_size(c) % 8, 0);
	}
	assert_int_equal(alloc_meta_class(ALLOC_MAX_META + 1), ALLOC_NCLASSES);
	/* The folio sizes: header 64 bytes + 3 bits per block in words,
	 * stored exactly up to 128 bytes. */
	assert_int_equal(alloc_class_size(alloc_meta_class(64)), 64);
	assert_int_equal(alloc_class_size(alloc_meta_class(72)), 72);
	assert_int_equal(alloc_class_size(alloc_meta_class(88)), 88);
	assert_int_equal(alloc_class_size(alloc_meta_class(1600)), 1792);
	/* Data: every power of two 512 B .. 2 MiB, nothing else. */
	for (size_t size = ALLOC_MIN_DATA; size <= ALLOC_MAX_DATA; size *= 2) {
		unsigned c = alloc_data_class(size);
		assert_true(c < ALLOC_NCLASSES);
		assert_false(alloc_class_is_meta(c));
		assert_int_equal(alloc_class_size(c), size);
	}
	assert_int_equal(alloc_data_class(256), ALLOC_NCLASSES);
	assert_int_equal(alloc_data_class(4 * MIB), ALLOC_NCLASSES);
	assert_int_equal(alloc_data_class(3 * 4096), ALLOC_NCLASSES);
	/* Slabs: at most 64 objects (one free-map word), at least two, and
	 * at most 1/32 of the slab wasted. */
	for (unsigned c = 0; c < ALLOC_NSLAB; c++) {
		unsigned order, nobj;
		alloc_slab_geometry(c, &order, &nobj);
		size_t slab = (size_t)ALLOC_PAGE_SIZE << order;
		assert_true(nobj >= 2 && nobj <= 64);
		assert_true(nobj * alloc_class_size(c) <= slab);
		assert_true((slab - nobj * alloc_class_size(c)) * 32 <= slab);
	}
}

/* ---- every class: alignment, disjointness, content ---- */

static void test_every_class(void **state)
{
	struct fixture *fx = *state;
	struct alloc_arena *a = &fx->arena;
	size_t total = 0;
	for (unsigned c = 0; c < ALLOC_NCLASSES; c++)
		total += enough_of(c);
	struct obj *objs = calloc(total, sizeof(*objs));
	assert_non_null(objs);
	size_t n = 0;
	for (unsigned c = 0; c < ALLOC_NCLASSES; c++) {
		size_t size = alloc_class_size(c);
		for (size_t i = 0; i < enough_of(c); i++) {
			char *p = alloc_obj(a, NULL, c, NULL);
			assert_non_null(p);
			if (alloc_class_is_meta(c))
				assert_int_equal((uintptr_t)p % (size == 64 ? 64 : 8),
						 0);
			else
				assert_int_equal((uintptr_t)p % size, 0);
			memset(p, (int)(n & 0xff), size);
			objs[n++] = (struct obj){p, size, c};
		}
	}
	struct alloc_stats st = stats_of(a);
	assert_true(st.chunks >= 2);
	assert_int_equal(st.huge_blocks, enough_of(ALLOC_NCLASSES - 1));
	/* Slab objects are counted by their class size, and the slab pages
	 * holding them are at least as large. */
	size_t in_slabs = 0;
	for (size_t i = 0; i < n; i++)
		if (objs[i].cls < ALLOC_NSLAB)
			in_slabs += objs[i].size;
	assert_int_equal(st.slab_object_bytes, in_slabs);
	assert_true(st.slab_bytes >= st.slab_object_bytes);
	/* The contents survived every later allocation. */
	for (size_t i = 0; i < n; i++) {
		unsigned char want = (unsigned char)(i & 0xff);
		assert_int_equal((unsigned char)objs[i].p[0], want);
		assert_int_equal((unsigned char)objs[i].p[objs[i].size - 1], want);
		assert_int_equal((unsigned char)objs[i].p[objs[i].size / 2], want);
	}
	check_disjoint(objs, n);
	for (size_t i = 0; i < n; i++)
		alloc_obj_free(a, NULL, objs[i].cls, objs[i].p);
	st = stats_of(a);
	assert_int_equal(st.chunks, 0);
	assert_int_equal(st.huge_blocks, 0);
	assert_int_equal(st.data_bytes, 0);
	assert_int_equal(st.meta_bytes, 0);
	assert_int_equal(st.slab_bytes, 0);
	assert_int_equal(st.slab_object_bytes, 0);
	size_t spares = st.spare_chunks;
	assert_true(spares >= ALLOC_SPARE_MAX);
	assert_int_equal(fx->mock.mapped, spares * ALLOC_CHUNK_SIZE);
	assert_int_equal(age_spares(fx),
			 (spares - ALLOC_SPARE_MAX) * ALLOC_CHUNK_SIZE);
	assert_int_equal(stats_of(a).spare_chunks, ALLOC_SPARE_MAX);
	assert_int_equal(fx->mock.mapped, ALLOC_SPARE_MAX * ALLOC_CHUNK_SIZE);
	free(objs);
}

static void test_reuse(void **state)
{
	struct fixture *fx = *state;
	struct alloc_arena *a = &fx->arena;
	for (unsigned c = 0; c < ALLOC_NCLASSES; c++) {
		void *keep = alloc_obj(a, NULL, c, NULL);
		void *p = alloc_obj(a, NULL, c, NULL);
		assert_non_null(keep);
		assert_non_null(p);
		alloc_obj_free(a, NULL, c, p);
		assert_ptr_equal(alloc_obj(a, NULL, c, NULL), p);
		alloc_obj_free(a, NULL, c, p);
		alloc_obj_free(a, NULL, c, keep);
	}
	/* Same through a thread cache: the last freed comes back first. */
	struct alloc_tcache *tc = alloc_tcache_new(a);
	assert_non_null(tc);
	for (unsigned c = 0; c < ALLOC_NCLASSES; c++) {
		void *p = alloc_obj(a, tc, c, NULL);
		assert_non_null(p);
		alloc_obj_free(a, tc, c, p);
		assert_ptr_equal(alloc_obj(a, tc, c, NULL), p);
		alloc_obj_free(a, tc, c, p);
	}
	alloc_tcache_destroy(tc);
	assert_int_equal(stats_of(a).data_bytes, 0);
}

/* A run whose last block is freed stays whole, standing for a spare
 * region: the next block of its order comes from it without rebuilding
 * it, and a caller needing a whole region when no spare is left gets it. */
static void test_kept_run(void **state)
{
	struct fixture *fx = *state;
	struct alloc_arena *a = &fx->arena;
	const unsigned c64k = alloc_data_class(64 * KIB);
	const unsigned c2m = alloc_data_class(2 * MIB);
	void *p = alloc_obj(a, NULL, c64k, NULL);
	assert_non_null(p);
	size_t maps = fx->mock.maps;
	alloc_obj_free(a, NULL, c64k, p);
	struct alloc_stats st = stats_of(a);
	assert_int_equal(st.runs, 0);
	assert_int_equal(st.spare_chunks, 1);
	assert_int_equal(st.mapped_bytes, ALLOC_CHUNK_SIZE);
	assert_int_equal(st.free_resident_bytes, 0);
	for (int i = 0; i < 3; i++) {
		void *q = alloc_obj(a, NULL, c64k, NULL);
		assert_ptr_equal(q, p);
		assert_int_equal(stats_of(a).runs, 1);
		alloc_obj_free(a, NULL, c64k, q);
	}
	assert_int_equal(fx->mock.maps, maps);
	void *h = alloc_obj(a, NULL, c2m, NULL);
	assert_non_null(h);
	assert_int_equal(fx->mock.maps, maps);
	assert_ptr_equal(h, (void *)((uintptr_t)p & ~(uintptr_t)(ALLOC_CHUNK_SIZE - 1)));
	st = stats_of(a);
	assert_int_equal(st.spare_chunks, 0);
	assert_int_equal(st.huge_blocks, 1);
	alloc_obj_free(a, NULL, c2m, h);
	/* Kept again, then trimmed away with the spares. */
	p = alloc_obj(a, NULL, c64k, NULL);
	alloc_obj_free(a, NULL, c64k, p);
	assert_true(alloc_arena_trim(a) >= ALLOC_CHUNK_SIZE);
	st = stats_of(a);
	assert_int_equal(st.spare_chunks + st.runs, 0);
	assert_int_equal(fx->mock.mapped, 0);
}

/* ---- coalescing and giving chunks back ---- */

static void test_coalesce_to_chunk(void **state)
{
	struct fixture *fx = *state;
	struct alloc_arena *a = &fx->arena;
	const unsigned c4k = alloc_data_class(4096);
	void *first = alloc_obj(a, NULL, c4k, NULL);
	assert_non_null(first);
	struct alloc_stats st = stats_of(a);
	assert_int_equal(st.chunks, 1);
	/* The header is 16 bytes a page and some list heads, and only the
	 * pages holding descriptors written so far are resident. */
	assert_true(st.header_bytes >= ALLOC_PAGE_SIZE &&
		    st.header_bytes <= ALLOC_CHUNK_HDR_PAGES * ALLOC_PAGE_SIZE);
	const size_t per_chunk = ALLOC_CHUNK_PAGES - ALLOC_CHUNK_HDR_PAGES;
	void **blocks = calloc(per_chunk, sizeof(*blocks));
	assert_non_null(blocks);
	blocks[0] = first;
	for (size_t i = 1; i < per_chunk; i++) {
		blocks[i] = alloc_obj(a, NULL, c4k, NULL);
		assert_non_null(blocks[i]);
	}
	/* Exactly one chunk's worth: all in the first chunk. */
	assert_int_equal(stats_of(a).chunks, 1);
	size_t maps = fx->mock.maps;
	void *extra = alloc_obj(a, NULL, c4k, NULL);
	assert_int_equal(stats_of(a).chunks, 2);
	assert_true(fx->mock.maps > maps);
	alloc_obj_free(a, NULL, c4k, extra);
	assert_int_equal(stats_of(a).chunks, 1);
	/* Free in a random order: every block merges back. */
	uint64_t seed = test_seed("coalesce_to_chunk");
	for (size_t i = per_chunk - 1; i > 0; i--) {
		size_t j = test_rand_below(&seed, i + 1);
		void *t = blocks[i];
		blocks[i] = blocks[j];
		blocks[j] = t;
	}
	for (size_t i = 0; i < per_chunk; i++) {
		alloc_obj_free(a, NULL, c4k, blocks[i]);
		assert_int_equal(stats_of(a).chunks, i + 1 < per_chunk);
	}
	st = stats_of(a);
	assert_int_equal(st.spare_chunks, MIN(2, ALLOC_SPARE_MAX));
	assert_int_equal(st.data_bytes, 0);
	/* A spare serves any other use: a run of 1 MiB blocks, without
	 * mapping. */
	maps = fx->mock.maps;
	void *big = alloc_obj(a, NULL, alloc_data_class(MIB), NULL);
	assert_non_null(big);
	assert_int_equal(fx->mock.maps, maps);
	st = stats_of(a);
	assert_int_equal(st.chunks, 0);
	assert_int_equal(st.runs, 1);
	assert_int_equal(st.spare_chunks, MIN(2, ALLOC_SPARE_MAX) - 1);
	alloc_obj_free(a, NULL, alloc_data_class(MIB), big);
	free(blocks);
}

/* Freed regions stay mapped as spares and serve the next allocations
 * without a map() (their pages are not known to be zero any more); the
 * ones unused for ALLOC_SPARE_KEEP_NS, beyond ALLOC_SPARE_MAX, are
 * unmapped at the next region taken or given back, or by a decay or a
 * trim: the kernel has the pages back (mincore() no longer knows the
 * address). */
static void test_spares_age_out(void **state)
{
	struct fixture *fx = *state;
	struct alloc_arena *a = &fx->arena;
	const unsigned c2m = alloc_data_class(2 * MIB), c1m = alloc_data_class(MIB);
	enum { N = 5 };
	/* Two 1 MiB blocks fill a run's region. */
	char *huge[N], *big[2 * N];
	for (int i = 0; i < N; i++) {
		huge[i] = alloc_obj(a, NULL, c2m, NULL);
		assert_non_null(huge[i]);
		memset(huge[i], 1, 2 * MIB);
		for (int k = 2 * i; k < 2 * i + 2; k++) {
			big[k] = alloc_obj(a, NULL, c1m, NULL);
			assert_non_null(big[k]);
			memset(big[k], 1, MIB);
		}
		assert_ptr_equal(big[2 * i] + MIB, big[2 * i + 1]);
	}
	char *region[2 * N];
	for (int i = 0; i < N; i++) {
		region[2 * i] = huge[i];
		region[2 * i + 1] = big[2 * i];
	}
	struct alloc_stats st = stats_of(a);
	assert_int_equal(st.huge_blocks, N);
	assert_int_equal(st.runs, N);
	assert_int_equal(st.chunks, 0);
	assert_int_equal(st.mapped_bytes, 2 * N * ALLOC_CHUNK_SIZE);
	assert_int_equal(fx->mock.mapped, st.mapped_bytes);
	for (int i = 0; i < N; i++) {
		alloc_obj_free(a, NULL, c2m, huge[i]);
		alloc_obj_free(a, NULL, c1m, big[2 * i + 1]);
		alloc_obj_free(a, NULL, c1m, big[2 * i]);
	}
	/* All kept: nothing in use, everything still mapped. The first run
	 * emptied stays whole (test_kept_run) and counts as a spare. */
	st = stats_of(a);
	assert_int_equal(st.chunks + st.huge_blocks + st.runs, 0);
	assert_int_equal(st.spare_chunks, 2 * N);
	assert_int_equal(st.mapped_bytes, 2 * N * ALLOC_CHUNK_SIZE);
	assert_int_equal(fx->mock.mapped, st.mapped_bytes);

	/* Refilling takes the spares, the last freed first, mapping
	 * nothing; their memory is not known to be zero. */
	size_t maps = fx->mock.maps;
	for (int i = 0; i < N; i++) {
		bool zero = true;
		huge[i] = alloc_obj(a, NULL, c2m, &zero);
		assert_non_null(huge[i]);
		assert_false(zero);
	}
	assert_int_equal(fx->mock.maps, maps);
	assert_int_equal(stats_of(a).spare_chunks, N);

	/* Half a keeping time later, the N left are not old enough yet. */
	fx->mock.now += ALLOC_SPARE_KEEP_NS / 2;
	assert_int_equal(alloc_arena_decay(a), 0);
	for (int i = 0; i < N; i++)
		alloc_obj_free(a, NULL, c2m, huge[i]);
	assert_int_equal(stats_of(a).spare_chunks, 2 * N);

	/* Once the first ones are old enough, the next region taken unmaps
	 * them: the N freed since stay, with the run kept whole. */
	fx->mock.now += ALLOC_SPARE_KEEP_NS / 2;
	void *p = alloc_obj(a, NULL, c2m, NULL);
	assert_non_null(p);
	alloc_obj_free(a, NULL, c2m, p);
	st = stats_of(a);
	assert_int_equal(st.spare_chunks, N + 1);
	assert_int_equal(fx->mock.mapped, (N + 1) * ALLOC_CHUNK_SIZE);
	assert_int_equal(st.mapped_bytes, (N + 1) * ALLOC_CHUNK_SIZE);

	/* The rest age out down to ALLOC_SPARE_MAX, which stay for good. */
	assert_int_equal(age_spares(fx),
			 (N + 1 - ALLOC_SPARE_MAX) * ALLOC_CHUNK_SIZE);
	assert_int_equal(age_spares(fx), 0);
	st = stats_of(a);
	assert_int_equal(st.spare_chunks, ALLOC_SPARE_MAX);
	assert_int_equal(fx->mock.mapped, ALLOC_SPARE_MAX * ALLOC_CHUNK_SIZE);
	unsigned gone = 0;
	unsigned char vec[1];
	for (int i = 0; i < 2 * N; i++) {
		errno = 0;
		if (mincore(region[i], 4096, vec) && errno == ENOMEM)
			gone++;
	}
	assert_int_equal(gone, 2 * N - ALLOC_SPARE_MAX);
	/* Trimming gives the spares back too. */
	assert_int_equal(alloc_arena_trim(a), ALLOC_SPARE_MAX * ALLOC_CHUNK_SIZE);
	assert_int_equal(fx->mock.mapped, 0);
	assert_int_equal(stats_of(a).mapped_bytes, 0);
}

/* Without memory to note a spare in, the region is unmapped at once and
 * the arena goes on. */
static void test_spare_note_failure(void **state)
{
	struct fixture *fx = *state;
	struct alloc_arena *a = &fx->arena;
	const unsigned c2m = alloc_data_class(2 * MIB);
	enum { N = 12 };
	char *huge[N];
	for (int i = 0; i < N; i++) {
		huge[i] = alloc_obj(a, NULL, c2m, NULL);
		assert_non_null(huge[i]);
	}
	a->spare_grow_fail = 1;
	alloc_obj_free(a, NULL, c2m, huge[0]);
	assert_int_equal(stats_of(a).spare_chunks, 0);
	assert_int_equal(fx->mock.mapped, (N - 1) * ALLOC_CHUNK_SIZE);
	/* The next ones are kept, growing the array past its first size. */
	for (int i = 1; i < N; i++)
		alloc_obj_free(a, NULL, c2m, huge[i]);
	assert_int_equal(stats_of(a).spare_chunks, N - 1);
	assert_int_equal(fx->mock.mapped, (N - 1) * ALLOC_CHUNK_SIZE);
	alloc_arena_trim(a);
	assert_int_equal(fx->mock.mapped, 0);
}

/* ---- zero tracking ---- */

static bool all_zero(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}


/* Fragmenting frees (every other 64 KiB block of several chunks: no hole
 * merges) keep at most about ALLOC_FREE_RESIDENT_MAX of free memory
 * resident; the rest goes back to the kernel and comes out again zeroed.
 * The count the arena keeps matches what mincore() sees. */
static size_t resident_pages(const char *p, size_t len)
{
	unsigned char vec[16];
	assert_true(len / 4096 <= sizeof(vec));
	assert_int_equal(mincore((void *)p, len, vec), 0);
	size_t n = 0;
	for (size_t i = 0; i < len / 4096; i++)
		n += vec[i] & 1;
	return n;
}

static void test_free_resident_bound(void **state)
{
	struct fixture *fx = *state;
	struct alloc_arena *a = &fx->arena;
	const unsigned c64k = alloc_data_class(64 * KIB);
	enum { N = 160 }; /* five runs */
	char *b[N];
	for (int i = 0; i < N; i++) {
		b[i] = alloc_obj(a, NULL, c64k, NULL);
		assert_non_null(b[i]);
		memset(b[i], 0x3c, 64 * KIB);
	}
	assert_int_equal(stats_of(a).free_resident_bytes, 0);
	size_t freed = 0;
	for (int i = 0; i < N; i += 2) {
		alloc_obj_free(a, NULL, c64k, b[i]);
		freed += 64 * KIB;
		size_t fr = stats_of(a).free_resident_bytes;
		assert_true(fr <= ALLOC_FREE_RESIDENT_MAX);
		assert_true(fr <= freed);
	}
	assert_true(freed > 2 * ALLOC_FREE_RESIDENT_MAX);
	size_t resident = 0;
	for (int i = 0; i < N; i += 2)
		resident += resident_pages(b[i], 64 * KIB) * 4096;
	assert_int_equal(resident, stats_of(a).free_resident_bytes);
	/* Reuse: blocks given back come out zeroed and say so. */
	unsigned zeroed = 0;
	for (int i = 0; i < N; i += 2) {
		bool z = false;
		b[i] = alloc_obj(a, NULL, c64k, &z);
		assert_non_null(b[i]);
		if (z) {
			zeroed++;
			assert_true(all_zero(b[i], 64 * KIB));
		}
		memset(b[i], 0x5a, 64 * KIB);
	}
	assert_true(zeroed * 64 * KIB >= freed - ALLOC_FREE_RESIDENT_MAX);
	assert_int_equal(stats_of(a).free_resident_bytes, 0);
	for (int i = 0; i < N; i++)
		alloc_obj_free(a, NULL, c64k, b[i]);
	/* Runs wholly free leave the count (spares are reported apart). */
	struct alloc_stats st = stats_of(a);
	assert_int_equal(st.chunks + st.runs, 0);
	assert_int_equal(st.free_resident_bytes, 0);
}


static void test_zeroed(void **state)
{
	struct fixture *fx = *state;
	struct alloc_arena *a = &fx->arena;
	const unsigned c64k = alloc_data_class(64 * KIB);
	bool z = false;
	/* A fresh chunk: known zero, and it is. */
	char *p = alloc_obj(a, NULL, c64k, &z);
	assert_true(z);
	assert_true(all_zero(p, 64 * KIB));
	char *q = alloc_obj(a, NULL, c64k, &z);
	assert_true(z);
	memset(p, 0xee, 64 * KIB);
	alloc_obj_free(a, NULL, c64k, p);
	/* Written and freed: no longer known zero. */
	assert_ptr_equal(alloc_obj(a, NULL, c64k, &z), p);
	assert_false(z);
	memset(p, 0xee, 64 * KIB);
	alloc_obj_free(a, NULL, c64k, p);
	/* Trim drops the pages of free blocks: zero again. */
	assert_true(alloc_arena_trim(a) >= 64 * KIB);
	assert_ptr_equal(alloc_obj(a, NULL, c64k, &z), p);
	assert_true(z);
	assert_true(all_zero(p, 64 * KIB));
	alloc_obj_free(a, NULL, c64k, p);
	alloc_obj_free(a, NULL, c64k, q);
	/* Slab objects never claim to be zero. */
	void *s = alloc_obj(a, NULL, alloc_data_class(512), &z);
	assert_false(z);
	alloc_obj_free(a, NULL, alloc_data_class(512), s);
	/* A fresh 2 MiB block is zero; once used and kept as a spare, not
	 * (the emptied chunk above is a spare now: trim it first). */
	const unsigned c2m = alloc_data_class(2 * MIB);
	alloc_arena_trim(a);
	p = alloc_obj(a, NULL, c2m, &z);
	assert_true(z);
	alloc_obj_free(a, NULL, c2m, p);
	p = alloc_obj(a, NULL, c2m, &z);
	assert_false(z);
	alloc_obj_free(a, NULL, c2m, p);
}

/* ---- thread caches: batches, flushing, caps ---- */

static void test_tcache_batches(void **state)
{
	struct fixture *fx = *state;
	struct alloc_arena *a = &fx->arena;
	struct alloc_tcache *tc = alloc_tcache_new(a);
	assert_non_null(tc);
	const unsigned c4k = alloc_data_class(4096);
	void *p = alloc_obj(a, tc, c4k, NULL);
	assert_non_null(p);
	/* One miss took a batch: one for the caller, the rest cached. */
	struct alloc_stats st = stats_of(a);
	assert_true(st.data_bytes > 4096);
	assert_int_equal(st.cached_data_bytes, st.data_bytes - 4096);
	size_t batch = st.data_bytes / 4096;
	/* The cached ones are handed out without the arena. */
	void *more[64];
	for (size_t i = 0; i + 1 < batch; i++)
		more[i] = alloc_obj(a, tc, c4k, NULL);
	st = stats_of(a);
	assert_int_equal(st.data_bytes, batch * 4096);
	assert_int_equal(st.cached_data_bytes, 0);
	/* Frees fill the magazine; past its cap, half goes back. */
	alloc_obj_free(a, tc, c4k, p);
	for (size_t i = 0; i + 1 < batch; i++)
		alloc_obj_free(a, tc, c4k, more[i]);
	st = stats_of(a);
	assert_int_equal(st.cached_data_bytes, st.data_bytes);
	assert_true(st.cached_data_bytes <= ALLOC_MAG_MAX * 4096);
	/* Large blocks bypass the cache. */
	void *big = alloc_obj(a, tc, alloc_data_class(256 * KIB), NULL);
	assert_non_null(big);
	alloc_obj_free(a, tc, alloc_data_class(256 * KIB), big);
	assert_int_equal(stats_of(a).cached_data_bytes, st.cached_data_bytes);
	/* Metadata classes are cached too, and reported apart. */
	void *m = alloc_obj(a, tc, alloc_meta_class(72), NULL);
	st = stats_of(a);
	assert_true(st.meta_bytes > 72);
	assert_int_equal(st.cached_meta_bytes, st.meta_bytes - 72);
	alloc_obj_free(a, tc, alloc_meta_class(72), m);
	assert_true(stats_of(a).internal_bytes > 0);
	/* Overfilling: a magazine never holds more than its cap. */
	void *many[256];
	for (size_t i = 0; i < 256; i++)
		many[i] = alloc_obj(a, tc, c4k, NULL);
	for (size_t i = 0; i < 256; i++)
		alloc_obj_free(a, tc, c4k, many[i]);
	assert_true(stats_of(a).cached_data_bytes <= ALLOC_MAG_MAX * 4096);
	alloc_tcache_flush(tc);
	st = stats_of(a);
	assert_int_equal(st.data_bytes + st.meta_bytes, 0);
	/* Destroying the arena with a cache alive is refused. */
	assert_int_equal(alloc_arena_destroy(a), -EBUSY);
	alloc_tcache_destroy(tc);
	assert_int_equal(stats_of(a).internal_bytes, 0);
}

/* ---- map failures ---- */

static void test_map_failure(void **state)
{
	struct fixture *fx = *state;
	struct alloc_arena *a = &fx->arena;
	const unsigned c4k = alloc_data_class(4096), c2m = alloc_data_class(2 * MIB);
	fx->mock.maps_left = 0;
	for (unsigned c = 0; c < ALLOC_NCLASSES; c++)
		assert_null(alloc_obj(a, NULL, c, NULL));
	assert_int_equal(stats_of(a).map_failures, ALLOC_NCLASSES);
	assert_int_equal(stats_of(a).data_bytes, 0);
	/* A thread cache's refill gets nothing, and says so. */
	struct alloc_tcache *tc = alloc_tcache_new(a);
	assert_null(tc); /* its own memory needs a chunk as well */
	fx->mock.maps_left = 1;
	tc = alloc_tcache_new(a);
	assert_non_null(tc);
	/* The chunk that holds the cache serves until it is full, then
	 * allocation fails cleanly. */
	size_t got = 0;
	void **objs = calloc(ALLOC_CHUNK_PAGES, sizeof(*objs));
	assert_non_null(objs);
	while ((objs[got] = alloc_obj(a, tc, c4k, NULL)))
		got++;
	assert_true(got > 400 && got < ALLOC_CHUNK_PAGES);
	assert_null(alloc_obj(a, tc, c2m, NULL));
	/* Mapping again: allocations go on. */
	fx->mock.maps_left = UINT32_MAX;
	void *h = alloc_obj(a, tc, c2m, NULL);
	assert_non_null(h);
	alloc_obj_free(a, tc, c2m, h);
	for (size_t i = 0; i < got; i++)
		alloc_obj_free(a, tc, c4k, objs[i]);
	alloc_tcache_destroy(tc);
	free(objs);
	/* Misplaced maps: mapped twice the size and trimmed, and a failure
	 * of that second map leaves nothing mapped. */
	alloc_arena_trim(a);
	size_t maps = fx->mock.maps;
	fx->mock.misalign = 1;
	h = alloc_obj(a, NULL, c2m, NULL);
	assert_non_null(h);
	assert_int_equal((uintptr_t)h % (2 * MIB), 0);
	assert_int_equal(fx->mock.maps, maps + 2);
	assert_int_equal(fx->mock.mapped, 2 * MIB);
	alloc_obj_free(a, NULL, c2m, h);
	alloc_arena_trim(a);
	fx->mock.misalign = 1;
	fx->mock.maps_left = 1;
	assert_null(alloc_obj(a, NULL, c2m, NULL));
	assert_int_equal(fx->mock.mapped, 0);
	fx->mock.maps_left = UINT32_MAX;
}

/* ASan, TSan and valgrind: some tests measure or limit the whole
 * process, which the checker's shadow memory is part of. cmocka's skip()
 * reads as a failure in TAP here, so such tests just say why and pass. */
static bool under_checker(const char *why)
{
	bool checked = getenv("FOLIO_TEST_VALGRIND") != NULL;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	checked = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
	checked = true;
#endif
#endif
	if (checked)
		print_message("# not run under a memory checker: %s\n", why);
	return checked;
}

/* The library's arena out of address space: folio_new() says -ENOMEM and
 * everything works again once memory is freed. In a child, since the
 * limit is the whole process's. */
static void test_rlimit_enomem(void **state)
{
	(void)state;
	if (under_checker("RLIMIT_AS would starve the checker itself"))
		return;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		long vm_pages = 0;
		FILE *f = fopen("/proc/self/statm", "r");
		if (!f || fscanf(f, "%ld", &vm_pages) != 1)
			_exit(10);
		fclose(f);
		struct rlimit rl;
		rl.rlim_cur = rl.rlim_max =
			(rlim_t)vm_pages * (rlim_t)sysconf(_SC_PAGESIZE) + 64 * MIB;
		if (setrlimit(RLIMIT_AS, &rl))
			_exit(11);
		enum { MAX = 1024 };
		static struct folio *fs[MAX];
		int n = 0, r = 0;
		while (n < MAX && !(r = folio_new(&fs[n], 0, 2 * MIB, 4096)))
			n++;
		if (r != -ENOMEM || n == 0 || n > 40)
			_exit(12);
		/* Small folios still fit in what is mapped already? Not
		 * necessarily; but freeing makes room for them. */
		for (int i = 0; i < n; i++)
			folio_put(fs[i]);
		struct folio *small = NULL;
		if (folio_new(&small, 0, 4096, 512))
			_exit(13);
		folio_put(small);
		if (folio_new(&fs[0], 0, 2 * MIB, 4096))
			_exit(14);
		folio_put(fs[0]);
		_exit(0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- the library's arena through the folio layer ---- */

static struct alloc_stats lib_stats(void)
{
	struct alloc_stats st;
	alloc_thread_flush();
	alloc_stats(&st);
	return st;
}

/* What a folio costs: its data size and its header class, nothing else;
 * the header is 64 bytes + 3 bits per block in words. */
static size_t class_bytes(size_t bytes)
{
	return alloc_class_size(alloc_meta_class(bytes));
}

static void test_folio_meta_bytes(void **state)
{
	(void)state;
	enum { N = 64 };
	struct folio *fs[N];
	for (size_t bs = 512; bs <= 64 * KIB; bs *= 4)
		for (size_t size = bs; size <= 2 * MIB; size *= 8) {
			struct alloc_stats before = lib_stats();
			for (int i = 0; i < N; i++)
				assert_int_equal(folio_new(&fs[i], 0, size, bs), 0);
			struct alloc_stats after = lib_stats();
			/* Header and state map in one object up to
			 * FOLIO_MAP_INLINE_MAX blocks; above, a header with
			 * a pointer and the map in an object of its own. */
			size_t nblocks = size / bs;
			size_t map = nblocks > 1 ? (3 * nblocks + 63) / 64 * 8 : 0;
			bool outside = nblocks > FOLIO_MAP_INLINE_MAX;
			size_t header = 64 + (outside ? 8 : map);
			size_t meta = (after.meta_bytes - before.meta_bytes) / N;
			assert_int_equal((after.data_bytes - before.data_bytes) / N,
					 size);
			assert_int_equal(meta, class_bytes(header) +
						       (outside ? class_bytes(map) : 0));
			/* Exact classes up to 128 bytes, at most a quarter
			 * more above. */
			assert_true(header > 128 ||
				    class_bytes(header) == header);
			assert_true(header <= 128 ||
				    class_bytes(header) * 4 <= header * 5);
			assert_true(!outside || map <= 128 ||
				    class_bytes(map) * 4 <= map * 5);
			for (int i = 0; i < N; i++)
				folio_put(fs[i]);
			struct alloc_stats end = lib_stats();
			assert_int_equal(end.data_bytes, before.data_bytes);
			assert_int_equal(end.meta_bytes, before.meta_bytes);
		}
}

static long rss_pages(void)
{
	long size = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	assert_non_null(f);
	assert_int_equal(fscanf(f, "%ld %ld", &size, &rss), 2);
	fclose(f);
	return rss;
}

/* The bound: a cached 4 KiB folio costs at most 4096 + 128 bytes
 * of resident memory (header, descriptors, slab tails, chunk headers). */
static void test_folio_rss(void **state)
{
	(void)state;
	if (under_checker("the checker's own memory is in the RSS"))
		return;
	enum { N = 16384 };
	struct folio **fs = malloc(N * sizeof(*fs));
	assert_non_null(fs);
	memset(fs, 0, N * sizeof(*fs)); /* resident before the baseline */
	/* Free memory earlier tests left resident would be reused and make
	 * the figure look better than it is. */
	alloc_trim();
	long before = rss_pages();
	for (int i = 0; i < N; i++) {
		assert_int_equal(folio_new(&fs[i], (uint64_t)i * 4096, 4096, 4096),
				 0);
		memset(folio_data(fs[i]), 0x5a, 4096);
	}
	long after = rss_pages();
	double per = (double)(after - before) * (double)sysconf(_SC_PAGESIZE) / N;
	print_message("# RSS per cached 4 KiB folio: %.1f bytes\n", per);
	assert_true(per <= 4096 + 128);
	for (int i = 0; i < N; i++)
		folio_put(fs[i]);
	free(fs);
}

/* A chunk holding only the slab beside its header (folio headers, say,
 * while the folios' data is in runs) writes only the header's first
 * page: the other header pages stay out of RSS (mincore()) and out of
 * header_bytes; small blocks further in need them. A spare reused as a
 * chunk has a whole header, cleared. 64 KiB blocks come from runs, whose
 * regions have no header at all. */
static void test_header_pages(void **state)
{
	struct fixture *fx = *state;
	struct alloc_arena *a = &fx->arena;
	const unsigned c64k = alloc_data_class(64 * KIB);
	const unsigned cmeta = alloc_meta_class(72);
	enum { N = ALLOC_CHUNK_SIZE / (64 * KIB) };
	char *blk[N], *meta[N];
	for (int i = 0; i < N; i++) {
		blk[i] = alloc_obj(a, NULL, c64k, NULL);
		meta[i] = alloc_obj(a, NULL, cmeta, NULL);
		assert_non_null(blk[i]);
		assert_non_null(meta[i]);
		memset(blk[i], 1, 64 * KIB);
		memset(meta[i], 1, 72);
	}
	struct alloc_stats st = stats_of(a);
	assert_int_equal(st.chunks, 1);
	assert_int_equal(st.runs, 1);
	/* One header page, and the run's description (well under 1 KiB). */
	assert_int_equal(st.header_bytes / ALLOC_PAGE_SIZE, 1);
	assert_true(st.header_bytes % ALLOC_PAGE_SIZE < 1024);
	const uintptr_t cmask = ~(uintptr_t)(ALLOC_CHUNK_SIZE - 1);
	const char *hdr = (const char *)((uintptr_t)meta[0] & cmask);
	/* All 32 blocks in one region, and the slab in another. */
	for (int i = 0; i < N; i++)
		assert_int_equal((uintptr_t)blk[i] & cmask,
				 (uintptr_t)blk[0] & cmask);
	assert_true(((uintptr_t)blk[0] & cmask) != (uintptr_t)hdr);
	assert_int_equal(resident_pages(hdr, ALLOC_CHUNK_HDR_PAGES * 4096), 1);
	/* Past the first ~200 descriptor slots: into the second page. */
	const unsigned c4k = alloc_data_class(4096);
	enum { NSMALL = 256 };
	void *small[NSMALL];
	for (int i = 0; i < NSMALL; i++) {
		small[i] = alloc_obj(a, NULL, c4k, NULL);
		assert_non_null(small[i]);
	}
	st = stats_of(a);
	assert_int_equal(st.chunks, 1);
	assert_true(st.header_bytes / ALLOC_PAGE_SIZE > 1);
	assert_int_equal(st.header_bytes / ALLOC_PAGE_SIZE,
			 resident_pages(hdr, ALLOC_CHUNK_HDR_PAGES * 4096));
	for (int i = 0; i < NSMALL; i++)
		alloc_obj_free(a, NULL, c4k, small[i]);
	for (int i = 0; i < N; i++) {
		alloc_obj_free(a, NULL, cmeta, meta[i]);
		alloc_obj_free(a, NULL, c64k, blk[i]);
	}
	st = stats_of(a);
	assert_int_equal(st.chunks + st.runs, 0);
	assert_int_equal(st.spare_chunks, 2);
	/* A spare (it held 64 KiB blocks) comes back as a chunk with an
	 * empty header: blocks come out of it again, disjoint. */
	enum { NOBJ = 2 * N };
	struct obj objs[NOBJ];
	for (int i = 0; i < NOBJ; i++) {
		objs[i] = (struct obj){alloc_obj(a, NULL, c4k, NULL), 4096, c4k};
		assert_non_null(objs[i].p);
	}
	st = stats_of(a);
	assert_int_equal(st.header_bytes / ALLOC_PAGE_SIZE, ALLOC_CHUNK_HDR_PAGES);
	check_disjoint(objs, NOBJ);
	for (int i = 0; i < NOBJ; i++)
		alloc_obj_free(a, NULL, objs[i].cls, objs[i].p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_classes),
		cmocka_unit_test_setup_teardown(test_every_class, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reuse, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kept_run, setup, teardown),
		cmocka_unit_test_setup_teardown(test_coalesce_to_chunk, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_spares_age_out,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_spare_note_failure, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_zeroed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_header_pages, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_free_resident_bound, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_tcache_batches, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_map_failure, setup, teardown),
		cmocka_unit_test(test_rlimit_enomem),
		cmocka_unit_test(test_folio_meta_bytes),
		cmocka_unit_test(test_folio_rss),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
