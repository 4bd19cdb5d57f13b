/* SPDX-License-Identifier: MIT */
/*
 * Mapping unit tests: geometry and bad input, read-modify-write accounting,
 * fault injection, truncate, invalidate, zero-copy writes, lookup, stats,
 * reopening, and the posix engine under a mapping on real files.
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "folio_state.h"
#include "folio_state_mem.h"
#include "test_util.h"

#define MIB (1u << 20)

struct fixture {
	struct folio_engine *engine;
	struct folio_mapping *map;
};

static struct folio_mapping_opts default_opts(struct folio_engine *e)
{
	return (struct folio_mapping_opts){
		.sz = sizeof(struct folio_mapping_opts),
		.block_size = 4096,
		.max_folio_size = 64 * 1024,
		.engine = e,
	};
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 9));
}

/* A mem engine preloaded with `size` patterned bytes and a mapping over it. */
static int setup_sized(void **state, uint64_t size, size_t max_folio)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	assert_non_null(fx);
	assert_int_equal(folio_engine_mem(&fx->engine, 64 * MIB), 0);
	if (size) {
		unsigned char *p = malloc(size);
		fill(p, size, 1);
		assert_int_equal(folio_engine_mem_poke(fx->engine, p, size, 0),
				 0);
		free(p);
	}
	struct folio_mapping_opts o = default_opts(fx->engine);
	o.size = size;
	o.max_folio_size = max_folio;
	assert_int_equal(folio_mapping_new(&fx->map, &o), 0);
	*state = fx;
	return 0;
}

static int setup_1m(void **state)
{
	return setup_sized(state, MIB, 64 * 1024);
}

static int setup_empty(void **state)
{
	return setup_sized(state, 0, 64 * 1024);
}

static int setup_large(void **state)
{
	return setup_sized(state, 0, 2 * MIB);
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	test_close(fx->map, fx->engine);
	free(fx);
	return 0;
}

static void test_new_bad_input(void **state)
{
	(void)state;
	struct folio_engine *e;
	assert_int_equal(folio_engine_mem(&e, MIB), 0);
	struct folio_mapping *m = (struct folio_mapping *)(uintptr_t)1;
	struct folio_mapping_opts o = default_opts(e);

	assert_int_equal(folio_mapping_new(NULL, &o), -EINVAL);
	assert_int_equal(folio_mapping_new(&m, NULL), -EINVAL);
	struct {
		const char *what;
		struct folio_mapping_opts o;
	} bad[] = {
		{"sz 0", {.sz = 0, .engine = e}},
		{"no engine", {.sz = sizeof(o)}},
		{"block 3000", {.sz = sizeof(o), .block_size = 3000, .engine = e}},
		{"block 256", {.sz = sizeof(o), .block_size = 256, .engine = e}},
		{"block 128K", {.sz = sizeof(o), .block_size = 128 * 1024, .engine = e}},
		{"min < block", {.sz = sizeof(o), .block_size = 4096, .min_folio_size = 2048, .engine = e}},
		{"max < min", {.sz = sizeof(o), .min_folio_size = 65536, .max_folio_size = 8192, .engine = e}},
		{"max 4M", {.sz = sizeof(o), .max_folio_size = 4 * MIB, .engine = e}},
		{"max npot", {.sz = sizeof(o), .max_folio_size = 12288, .engine = e}},
		{"flags", {.sz = sizeof(o), .flags = 0x80, .engine = e}},
		{"size", {.sz = sizeof(o), .size = UINT64_MAX, .engine = e}},
		{"sz short", {.sz = offsetof(struct folio_mapping_opts, engine), .engine = e}},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (folio_mapping_new(&m, &bad[i].o) != -EINVAL)
			fail_msg("accepted bad options: %s", bad[i].what);
		assert_ptr_equal(m, (struct folio_mapping *)(uintptr_t)1);
	}
	/* A newer caller's larger struct: fine when the unknown tail is
	 * zero, -E2BIG when it is not. */
	struct {
		struct folio_mapping_opts o;
		uint64_t newer;
	} big = {.o = default_opts(e)};
	big.o.sz = sizeof(big);
	big.newer = 1;
	assert_int_equal(folio_mapping_new(&m, &big.o), -E2BIG);
	assert_ptr_equal(m, (struct folio_mapping *)(uintptr_t)1);
	big.newer = 0;
	assert_int_equal(folio_mapping_new(&m, &big.o), 0);
	struct {
		struct folio_mapping_stats st;
		uint64_t newer;
	} bst = {.st = {.sz = sizeof(bst)}, .newer = 7};
	assert_int_equal(folio_mapping_stats(m, &bst.st), -E2BIG);
	bst.newer = 0;
	assert_int_equal(folio_mapping_stats(m, &bst.st), 0);
	assert_int_equal(bst.newer, 0);
	assert_int_equal(folio_mapping_free(m), 0);
	/* All defaults. */
	struct folio_mapping_opts d = {.sz = sizeof(d), .engine = e};
	assert_int_equal(folio_mapping_new(&m, &d), 0);
	/* The engine is in use. */
	assert_int_equal(folio_engine_free(e), -EBUSY);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_mapping_free(NULL), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_io_bad_input(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	char buf[16] = {0};
	struct folio *f = NULL;

	assert_int_equal(folio_mapping_write(NULL, buf, 1, 0), -EINVAL);
	assert_int_equal(folio_mapping_write(m, NULL, 1, 0), -EINVAL);
	assert_int_equal(folio_mapping_write(m, NULL, 0, 0), 0);
	assert_int_equal(folio_mapping_write(m, buf, 1, UINT64_MAX), -EFBIG);
	assert_int_equal(folio_mapping_write(m, buf, 16, (UINT64_C(1) << 62) - 8),
			 -EFBIG);
	assert_int_equal(folio_mapping_read(NULL, buf, 1, 0), -EINVAL);
	assert_int_equal(folio_mapping_read(m, NULL, 1, 0), -EINVAL);
	assert_int_equal(folio_mapping_read(m, buf, 1, UINT64_MAX), -EFBIG);
	assert_int_equal(folio_mapping_write_begin(NULL, 0, 1, &f), -EINVAL);
	assert_int_equal(folio_mapping_write_begin(m, 0, 1, NULL), -EINVAL);
	assert_int_equal(folio_mapping_write_begin(m, 0, 0, &f), -EINVAL);
	assert_int_equal(folio_mapping_write_begin(m, UINT64_MAX - 1, 1, &f),
			 -EFBIG);
	assert_int_equal(folio_mapping_write_end(NULL, f, 0, 0), -EINVAL);
	assert_int_equal(folio_mapping_write_end(m, NULL, 0, 0), -EINVAL);
	assert_int_equal(folio_mapping_lookup(NULL, 0, &f), -EINVAL);
	assert_int_equal(folio_mapping_lookup(m, 0, NULL), -EINVAL);
	assert_int_equal(folio_mapping_lookup(m, UINT64_MAX, &f), -ENOENT);
	assert_int_equal(folio_mapping_truncate(NULL, 0), -EINVAL);
	assert_int_equal(folio_mapping_truncate(m, UINT64_MAX), -EFBIG);
	assert_int_equal(folio_mapping_invalidate(NULL, 0, 0, 0), -EINVAL);
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0x10), -EINVAL);
	assert_int_equal(folio_mapping_size(NULL), -EINVAL);
	assert_int_equal(folio_mapping_stats(NULL, NULL), -EINVAL);
	struct folio_mapping_stats st = {.sz = 0};
	assert_int_equal(folio_mapping_stats(m, &st), -EINVAL);
	assert_int_equal(folio_mapping_stats(m, NULL), -EINVAL);
	/* Nothing above changed the mapping. */
	assert_int_equal(folio_mapping_size(m), (int64_t)MIB);
	st = test_mapping_stats(m);
	assert_int_equal(st.folios, 0);
	assert_int_equal(st.bytes_written, 0);
}

/* Bad reads over cached data, which a read serves without a lock (and
 * without the checked path) when its arguments allow: the same errors,
 * and reads reaching EOF still cut there. */
static void test_read_bad_input_cached(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	char buf[16] = {0};
	assert_int_equal(folio_mapping_truncate(m, 0), 0);
	assert_int_equal(folio_mapping_write(m, buf, 16, 0), 16);
	assert_int_equal(folio_mapping_read(m, NULL, 1, 0), -EINVAL);
	assert_int_equal(folio_mapping_read(m, NULL, 0, 0), 0);
	assert_int_equal(folio_mapping_read(m, buf, SIZE_MAX, 0), -EFBIG);
	assert_int_equal(folio_mapping_read(m, buf,
					    (size_t)(UINT64_C(1) << 62), 8),
			 -EFBIG);
	assert_int_equal(folio_mapping_read(m, buf, 1, UINT64_MAX), -EFBIG);
	assert_int_equal(folio_mapping_read(m, buf, 0, 4), 0);
	assert_int_equal(folio_mapping_read(m, buf, 16, 0), 16);
	assert_int_equal(folio_mapping_read(m, buf, 16, 8), 8);
	assert_int_equal(folio_mapping_read(m, buf, 1, 16), 0);
	assert_int_equal(folio_mapping_size(m), 16);
}

/* A write into a folio whose blocks are not cached reads only the partly
 * covered edge blocks, one request per contiguous run. */
static void test_rmw_accounting(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	unsigned char b[3 * 4096];
	memset(b, 0xab, sizeof(b));

	/* 1 byte into an uncached existing region: one block read. */
	assert_int_equal(folio_mapping_write(m, b, 1, 5000), 1);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.read_requests, 1);
	assert_int_equal(st.read_bytes, 4096);

	/* Block-aligned whole blocks: nothing read. */
	assert_int_equal(folio_mapping_write(m, b, 8192, 256 * 1024), 8192);
	st = test_mapping_stats(m);
	assert_int_equal(st.read_requests, 1);

	/* Two partial edges in adjacent blocks of one folio: one request of
	 * two blocks. (A 64 KiB min folio size keeps both edges in one
	 * folio; folios sized from this short write would split them.) */
	struct folio_mapping *m64;
	struct folio_mapping_opts o = default_opts(fx->engine);
	o.size = MIB;
	o.min_folio_size = 64 * 1024;
	assert_int_equal(folio_mapping_new(&m64, &o), 0);
	assert_int_equal(folio_mapping_write(m64, b, 4096, 512 * 1024 + 100),
			 4096);
	struct folio_mapping_stats st64 = test_mapping_stats(m64);
	assert_int_equal(st64.read_requests, 1);
	assert_int_equal(st64.read_bytes, 2 * 4096);

	/* Two partial edges far apart: two requests of one block each. */
	assert_int_equal(folio_mapping_write(m64, b, 3 * 4096 - 200,
					     768 * 1024 + 100),
			 3 * 4096 - 200);
	st64 = test_mapping_stats(m64);
	assert_int_equal(st64.read_requests, 3);
	assert_int_equal(st64.read_bytes, 4 * 4096);
	assert_int_equal(folio_mapping_invalidate(m64, 0, 0,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(folio_mapping_free(m64), 0);

	/* At EOF: nothing to read, the block is zero-filled. */
	assert_int_equal(folio_mapping_write(m, b, 10, MIB), 10);
	/* Past EOF, leaving a gap. */
	assert_int_equal(folio_mapping_write(m, b, 10, MIB + 20000), 10);
	st = test_mapping_stats(m);
	assert_int_equal(st.read_requests, 1);
	assert_int_equal(st.bytes_written, 1 + 8192 + 20);

	/* Content: the edges kept their old bytes, the gap reads zero. */
	unsigned char orig[MIB / 64], got[20000];
	fill(orig, sizeof(orig), 1);
	assert_int_equal(folio_mapping_read(m, got, 4096, 4096), 4096);
	assert_memory_equal(got, orig + 4096, 5000 - 4096);
	assert_int_equal(got[5000 - 4096], 0xab);
	assert_memory_equal(got + 5001 - 4096, orig + 5001, 8192 - 5001);
	unsigned char zero[20000] = {0};
	assert_int_equal(folio_mapping_read(m, got, 20000 - 10, MIB + 10),
			 20000 - 10);
	assert_memory_equal(got, zero, 20000 - 10);
	assert_int_equal(folio_mapping_size(m), (int64_t)(MIB + 20010));
}

static void test_failed_edge_read(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	struct folio_mem_fault fault = {
		.sz = sizeof(fault),
		.ops = FOLIO_MEM_OP_READ,
		.error = -EIO,
	};
	assert_int_equal(folio_engine_mem_inject(fx->engine, &fault), 0);
	unsigned char b[100];
	memset(b, 1, sizeof(b));
	assert_int_equal(folio_mapping_write(m, b, sizeof(b), 1000), -EIO);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.bytes_written, 0);
	assert_int_equal(st.cached_bytes, 0);
	assert_int_equal(st.dirty_bytes, 0);
	assert_int_equal(st.read_bytes, 0);

	/* A failed read returns the error and marks nothing uptodate. */
	assert_int_equal(folio_mapping_read(m, b, sizeof(b), 1000), -EIO);
	st = test_mapping_stats(m);
	assert_int_equal(st.cached_bytes, 0);
	assert_int_equal(st.bytes_read, 0);

	/* The first folio succeeds without I/O, the second fails: short. */
	unsigned char big[70000];
	memset(big, 2, sizeof(big));
	assert_int_equal(folio_mapping_write(m, big, 65536, 0), 65536);
	assert_int_equal(folio_mapping_write(m, big, 65536 + 10, 0),
			 65536);
	assert_int_equal(folio_mapping_read(m, big, sizeof(big), 0), 65536);

	assert_int_equal(folio_engine_mem_clear_faults(fx->engine), 0);
	assert_int_equal(folio_mapping_read(m, b, sizeof(b), 1000),
			 sizeof(b));
	unsigned char want[100];
	memset(want, 2, sizeof(want));
	assert_memory_equal(b, want, sizeof(b));
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
}

static void test_read_eof_and_coalescing(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	unsigned char *buf = malloc(2 * MIB), *orig = malloc(MIB);
	fill(orig, MIB, 1);

	/* One cold read of 1 MiB over many folios: the missing runs are
	 * contiguous, so they merge into requests of up to 1 MiB. */
	assert_int_equal(folio_mapping_read(m, buf, MIB, 0), (ssize_t)MIB);
	assert_memory_equal(buf, orig, MIB);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_true(st.read_requests <= 2);
	assert_int_equal(st.read_bytes, MIB);
	assert_int_equal(st.cached_bytes, MIB);

	/* Short at EOF; nothing past it. */
	assert_int_equal(folio_mapping_read(m, buf, 4096, MIB - 100), 100);
	assert_int_equal(folio_mapping_read(m, buf, 4096, MIB), 0);
	assert_int_equal(folio_mapping_read(m, buf, 4096, 5 * MIB), 0);
	assert_int_equal(folio_mapping_read(m, buf, 0, 0), 0);
	free(buf);
	free(orig);
}

/*
 * Cached reads take no request: a hot read costs no engine read, a read
 * of a partly uptodate folio is served from the cache up to the first
 * missing block and read from the engine from there, and what a read
 * returns is the cache's content, not the engine's.
 */
static void test_read_cached(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	unsigned char *orig = malloc(MIB), *buf = malloc(256 * 1024);
	fill(orig, MIB, 1);
	/* One block written (not read) makes a folio partly uptodate. */
	unsigned char w[4096];
	memset(w, 0x5a, sizeof(w));
	assert_int_equal(folio_mapping_write(m, w, sizeof(w), 8192), 4096);
	memcpy(orig + 8192, w, sizeof(w));
	uint64_t before = test_mem_stats(fx->engine).read_requests;
	assert_int_equal(folio_mapping_read(m, buf, 4096, 8192), 4096);
	assert_memory_equal(buf, w, 4096);
	assert_int_equal(test_mem_stats(fx->engine).read_requests, before);
	/* Partly cached: the written block comes from the cache, the runs
	 * either side of it from one engine read each. */
	assert_int_equal(folio_mapping_read(m, buf, 64 * 1024, 0), 64 * 1024);
	assert_memory_equal(buf, orig, 64 * 1024);
	assert_int_equal(test_mem_stats(fx->engine).read_requests,
			 before + 2);
	/* A read over cached folios then a cold one: only the cold part
	 * is read. */
	assert_int_equal(folio_mapping_read(m, buf, 128 * 1024, 0),
			 128 * 1024);
	assert_memory_equal(buf, orig, 128 * 1024);
	assert_int_equal(test_mem_stats(fx->engine).read_requests,
			 before + 3);
	/* Hot now: any read inside costs nothing, up to EOF. */
	for (unsigned i = 0; i < 64; i++) {
		uint64_t pos = (uint64_t)i * 2011 % (128 * 1024 - 5000);
		assert_int_equal(folio_mapping_read(m, buf, 5000, pos), 5000);
		assert_memory_equal(buf, orig + pos, 5000);
	}
	assert_int_equal(test_mem_stats(fx->engine).read_requests,
			 before + 3);
	/* The cache wins over the engine: a change behind its back is not
	 * seen by a cached read. */
	unsigned char z[4096] = {0};
	assert_int_equal(folio_engine_mem_poke(fx->engine, z, sizeof(z), 0),
			 0);
	assert_int_equal(folio_mapping_read(m, buf, 4096, 0), 4096);
	assert_memory_equal(buf, orig, 4096);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	free(orig);
	free(buf);
}

static struct folio_mapping_stats map_stats(struct folio_mapping *m)
{
	struct folio_mapping_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_mapping_stats(m, &st), 0);
	return st;
}

/* Overwrites of uptodate cached folios take the write fast path: no
 * read, dirty bytes counted once per block, and writeback writes just
 * those blocks; a write that needs an edge block still reads it. */
static void test_write_cached(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	unsigned char *model = malloc(MIB), *buf = malloc(MIB);
	fill(model, MIB, 1);
	assert_int_equal(folio_mapping_read(m, buf, 128 * 1024, 0),
			 128 * 1024);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	uint64_t reads = test_mem_stats(fx->engine).read_requests;
	struct folio_mapping_stats st0 = map_stats(m);
	assert_int_equal(st0.dirty_bytes, 0);
	/* Sub-block pieces, some rewriting a block twice, one across two
	 * folios (60K..70K: blocks 15..17). */
	static const struct { uint32_t pos, len; } w[] = {
		{100, 10}, {200, 3000}, {8192 + 5, 1}, {61440, 10240},
		{4096 * 20 + 7, 4000}, {4096 * 20 + 100, 50},
	};
	unsigned char piece[16384];
	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
		fill(piece, w[i].len, (unsigned)(40 + i));
		assert_int_equal(folio_mapping_write(m, piece, w[i].len,
						     w[i].pos),
				 (ssize_t)w[i].len);
		memcpy(model + w[i].pos, piece, w[i].len);
	}
	/* Blocks 0, 2, 15, 16, 17, 20 dirty; nothing read. */
	assert_int_equal(test_mem_stats(fx->engine).read_requests, reads);
	struct folio_mapping_stats st = map_stats(m);
	assert_int_equal(st.dirty_bytes, 6 * 4096);
	assert_int_equal(folio_mapping_read(m, buf, 128 * 1024, 0),
			 128 * 1024);
	assert_memory_equal(buf, model, 128 * 1024);
	/* Not cached: the ordinary path reads the edge block. */
	fill(piece, 10, 99);
	assert_int_equal(folio_mapping_write(m, piece, 10, 512 * 1024 + 3), 10);
	memcpy(model + 512 * 1024 + 3, piece, 10);
	assert_int_equal(test_mem_stats(fx->engine).read_requests, reads + 1);
	assert_int_equal(map_stats(m).dirty_bytes, 7 * 4096);
	uint64_t wb0 = st.wb_bytes;
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(map_stats(m).wb_bytes - wb0, 7 * 4096);
	assert_int_equal(map_stats(m).dirty_bytes, 0);
	assert_int_equal(folio_engine_mem_peek(fx->engine, buf, MIB, 0), 0);
	assert_memory_equal(buf, model, MIB);
	free(model);
	free(buf);
}

/* A reader or writer of a folio someone holds locked waits for it (the
 * fast paths only try the lock): the reader sees what the holder wrote,
 * the writer's bytes land after the holder's. */
struct held_io {
	struct folio_mapping *m;
	bool write;
	unsigned char buf[4096];
	atomic_bool done;
	ssize_t r;
};

static void *held_io_main(void *arg)
{
	struct held_io *h = arg;
	if (h->write)
		h->r = folio_mapping_write(h->m, h->buf + 50, 100, 4096 + 50);
	else
		h->r = folio_mapping_read(h->m, h->buf, sizeof(h->buf), 4096);
	atomic_store(&h->done, true);
	return NULL;
}

static void check_held(struct folio_mapping *m, bool write)
{
	unsigned char b[64 * 1024];
	assert_int_equal(folio_mapping_read(m, b, sizeof(b), 0), sizeof(b));
	struct folio *f;
	assert_int_equal(folio_mapping_write_begin(m, 4096, 4096, &f), 4096);
	struct held_io h = {.m = m, .write = write, .done = false};
	memset(h.buf, 0x11, sizeof(h.buf));
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, held_io_main, &h), 0);
	usleep(20000);
	assert_false(atomic_load(&h.done));
	memset((unsigned char *)folio_data(f) + 4096, 0x77, 4096);
	assert_int_equal(folio_mapping_write_end(m, f, 4096, 4096), 4096);
	assert_int_equal(pthread_join(t, NULL), 0);
	unsigned char want[4096];
	memset(want, 0x77, sizeof(want));
	if (write) {
		assert_int_equal(h.r, 100);
		memset(want + 50, 0x11, 100);
		assert_int_equal(folio_mapping_read(m, b, 4096, 4096), 4096);
		assert_memory_equal(b, want, sizeof(want));
	} else {
		assert_int_equal(h.r, 4096);
		assert_memory_equal(h.buf, want, sizeof(want));
	}
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
}

static void test_read_cached_held(void **state)
{
	check_held(((struct fixture *)*state)->map, false);
}

static void test_write_cached_held(void **state)
{
	check_held(((struct fixture *)*state)->map, true);
}

static void test_truncate(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	unsigned char b[8192], z[8192] = {0};
	memset(b, 7, sizeof(b));
	assert_int_equal(folio_mapping_write(m, b, sizeof(b), 300000),
			 sizeof(b));
	assert_int_equal(folio_mapping_truncate(m, 300000 + 100), 0);
	assert_int_equal(folio_mapping_size(m), 300100);
	struct folio_mem_stats ms = test_mem_stats(fx->engine);
	assert_int_equal(ms.truncates, 1);
	assert_int_equal(ms.size, 300100);
	/* Growing exposes zeros, in the cut folio and past it. */
	assert_int_equal(folio_mapping_truncate(m, 400000), 0);
	assert_int_equal(folio_mapping_read(m, b, sizeof(b), 300000),
			 sizeof(b));
	unsigned char want[8192];
	memset(want, 7, 100);
	memset(want + 100, 0, sizeof(want) - 100);
	assert_memory_equal(b, want, sizeof(b));
	assert_int_equal(folio_mapping_read(m, b, sizeof(b), 390000),
			 sizeof(b));
	assert_memory_equal(b, z, sizeof(b));
	/* Shrink to zero drops everything. */
	assert_int_equal(folio_mapping_truncate(m, 0), 0);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.folios, 0);
	assert_int_equal(st.dirty_bytes, 0);
	assert_int_equal(folio_mapping_read(m, b, 1, 0), 0);
	/* Sync writes nothing that was truncated away. */
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mem_stats(fx->engine).size, 0);
}

static void test_invalidate(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	unsigned char b[64 * 1024];
	memset(b, 3, sizeof(b));
	assert_int_equal(folio_mapping_read(m, b, 4096, 0), 4096);
	assert_int_equal(folio_mapping_write(m, b, sizeof(b), 196608),
			 sizeof(b));
	assert_int_equal(test_mapping_stats(m).folios, 2);

	/* Clean folios go, dirty ones stay and are reported. */
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0), -EBUSY);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.folios, 1);
	assert_int_equal(st.dirty_bytes, sizeof(b));
	/* Out of range: nothing to do. */
	assert_int_equal(folio_mapping_invalidate(m, 0, 4096, 0), 0);

	/* Discarding part of a dirty folio throws away only the blocks the
	 * range wholly covers and keeps the folio. */
	assert_int_equal(folio_mapping_invalidate(m, 200704 - 100, 4096 + 200,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	st = test_mapping_stats(m);
	assert_int_equal(st.folios, 1);
	assert_int_equal(st.dirty_bytes, sizeof(b) - 4096);
	assert_int_equal(st.cached_bytes, sizeof(b) - 4096);
	/* The discarded block reads from the store again (zeros there). */
	unsigned char got[4096];
	unsigned char *want = malloc(MIB);
	fill(want, MIB, 1);
	assert_int_equal(folio_mapping_read(m, got, 4096, 200704), 4096);
	assert_memory_equal(got, want + 200704, 4096);
	free(want);
	/* Discard the whole range: all gone, and free succeeds. */
	assert_int_equal(folio_mapping_invalidate(m, 0, 0,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(test_mapping_stats(m).folios, 0);
}

static void test_free_refuses_dirty(void **state)
{
	struct fixture *fx = *state;
	unsigned char b[10] = {1};
	assert_int_equal(folio_mapping_write(fx->map, b, sizeof(b), 0), 10);
	assert_int_equal(folio_mapping_free(fx->map), -EBUSY);
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	assert_int_equal(folio_mapping_free(fx->map), 0);
	fx->map = NULL;
}

static void test_write_begin_end(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	struct folio *f;
	unsigned char *orig = malloc(MIB);
	fill(orig, MIB, 1);

	ssize_t n = folio_mapping_write_begin(m, 70000, 100000, &f);
	assert_true(n > 0);
	assert_int_equal(folio_pos(f) + folio_size(f), 70000 + (uint64_t)n);
	assert_true(folio_test_locked(f));
	/* The head edge was read and is valid. */
	unsigned char *d = folio_data(f);
	size_t off = 70000 - folio_pos(f);
	assert_memory_equal(d + (off & ~4095u), orig + (70000 & ~4095u),
			    off & 4095);
	memset(d + off, 0x5a, 50);
	/* A short copy ending mid-block in a block nobody read stops at
	 * the block start; here the block is the head, which is valid. */
	assert_int_equal(folio_mapping_write_end(m, f, 70000, 50), 50);
	unsigned char got[200];
	assert_int_equal(folio_mapping_read(m, got, 200, 69950), 200);
	assert_memory_equal(got, orig + 69950, 50);
	for (int i = 50; i < 100; i++)
		assert_int_equal(got[i], 0x5a);
	assert_memory_equal(got + 100, orig + 70050, 100);

	/* A copy that stops inside a block that was never read (a middle
	 * block) is cut back to the block boundary. */
	n = folio_mapping_write_begin(m, 131072, 4 * 4096, &f);
	assert_int_equal(n, 4 * 4096);
	memset(folio_data(f), 0x11, 4096 + 10);
	assert_int_equal(folio_mapping_write_end(m, f, 131072, 4096 + 10),
			 4096);
	assert_int_equal(folio_mapping_read(m, got, 20, 131072 + 4096), 20);
	assert_memory_equal(got, orig + 131072 + 4096 - 0, 20);

	/* write_end on a folio that is not locked is refused. */
	assert_int_equal(folio_mapping_lookup(m, 131072, &f), 0);
	assert_int_equal(folio_mapping_write_end(m, f, 131072, 1), -EINVAL);
	folio_put(f);
	/* Range outside the folio: refused, and nothing changes: the folio
	 * stays locked until a valid write_end() (copied 0 releases it). */
	n = folio_mapping_write_begin(m, 0, 10, &f);
	assert_true(n > 0);
	assert_int_equal(folio_mapping_write_end(m, f, 1 << 20, 1), -EINVAL);
	assert_true(folio_test_locked(f));
	assert_int_equal(folio_mapping_write_end(m, f, 0, 0), 0);
	assert_int_equal(folio_mapping_lookup(m, 0, &f), 0);
	assert_false(folio_test_locked(f));
	folio_put(f);
	free(orig);
}

/* write_end() commits only what write_begin() prepared: the bytes past
 * a planned range were never read, and committing them would write heap
 * garbage back (defect: begin(100, 10) then end(5000, 3192) returned
 * 3192). A folio locked with folio_lock() is not write_begin()'s. */
static void test_write_end_prepared_range(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	struct folio *f;
	unsigned char *orig = malloc(MIB);
	fill(orig, MIB, 1);
	assert_int_equal(folio_mapping_write_begin(m, 100, 10, &f), 10);
	uint64_t dirty0 = test_mapping_stats(m).dirty_bytes;
	assert_int_equal(folio_mapping_write_end(m, f, 5000, 3192), -EINVAL);
	assert_int_equal(folio_mapping_write_end(m, f, 101, 5), -EINVAL);
	assert_int_equal(folio_mapping_write_end(m, f, 100, 11), -EINVAL);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, dirty0);
	assert_true(folio_test_locked(f));
	memset((unsigned char *)folio_data(f) + 100, 0xee, 10);
	assert_int_equal(folio_mapping_write_end(m, f, 100, 10), 10);
	/* The folio is released: a second write_end() is refused. */
	assert_int_equal(folio_mapping_write_end(m, f, 100, 10), -EINVAL);
	unsigned char got[8192];
	assert_int_equal(folio_mapping_read(m, got, sizeof(got), 0),
			 sizeof(got));
	memset(orig + 100, 0xee, 10);
	assert_memory_equal(got, orig, sizeof(got));

	/* A lock taken by folio_lock() after a lookup is refused. */
	assert_int_equal(folio_mapping_lookup(m, 0, &f), 0);
	assert_int_equal(folio_lock(f), 0);
	assert_int_equal(folio_mapping_write_end(m, f, 0, 1), -EINVAL);
	assert_int_equal(folio_unlock(f), 0);
	/* Nor does a write_begin() lock survive a bare folio_unlock(). */
	struct folio *g;
	assert_int_equal(folio_mapping_write_begin(m, 0, 10, &g), 10);
	assert_ptr_equal(g, f);
	assert_int_equal(folio_unlock(g), 0);
	assert_int_equal(folio_lock(f), 0);
	assert_int_equal(folio_mapping_write_end(m, f, 0, 1), -EINVAL);
	assert_int_equal(folio_unlock(f), 0);
	folio_put(g); /* write_begin()'s reference */
	folio_put(f);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	unsigned char store[8192];
	assert_int_equal(folio_engine_mem_peek(fx->engine, store, 8192, 0), 0);
	assert_memory_equal(store, orig, sizeof(store));
	free(orig);
}

/*
 * map() extents smaller than a block split a block read into pieces.
 * When one piece fails, the others must not mark the block uptodate
 * (defect: the read copied uninitialised memory). Scattered extents keep
 * every piece its own request.
 */
static void test_read_pieces_fail(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m;
	assert_int_equal(folio_engine_mem(&e, MIB), 0);
	assert_int_equal(folio_engine_mem_set_map(e, 512, true), 0);
	unsigned char *orig = malloc(64 * 1024);
	fill(orig, 64 * 1024, 3);
	assert_int_equal(folio_engine_mem_poke(e, orig, 64 * 1024, 0), 0);
	struct folio_mapping_opts o = default_opts(e);
	o.size = 64 * 1024;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	/* The third 512-byte piece of block 1 fails. */
	struct folio_mem_fault fault = {.sz = sizeof(fault),
					.ops = FOLIO_MEM_OP_READ,
					.pos = 4096 + 1024,
					.len = 512,
					.error = -EIO};
	assert_int_equal(folio_engine_mem_inject(e, &fault), 0);
	unsigned char got[3 * 4096];
	ssize_t n = folio_mapping_read(m, got, sizeof(got), 0);
	/* Block 0 is fine, block 1 is not: the read stops there. */
	assert_true(n == -EIO || n == 4096);
	if (n > 0)
		assert_memory_equal(got, orig, (size_t)n);
	struct folio *f;
	assert_int_equal(folio_mapping_lookup(m, 4096, &f), 0);
	assert_int_equal(folio_is_uptodate(f, 4096 - folio_pos(f), 4096), 0);
	folio_put(f);
	assert_int_equal(folio_mapping_lookup(m, 0, &f), 0);
	assert_int_equal(folio_is_uptodate(f, 0, 4096), 1);
	folio_put(f);
	/* A read of the failing block alone fails, every time. */
	assert_int_equal(folio_mapping_read(m, got, 100, 4096 + 3000), -EIO);
	assert_int_equal(folio_mapping_read(m, got, 100, 4096 + 3000), -EIO);
	/* A write's edge read of that block fails the same way and marks
	 * nothing. */
	assert_int_equal(folio_mapping_write(m, got, 10, 4096 + 10), -EIO);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, 0);
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	assert_int_equal(folio_mapping_read(m, got, sizeof(got), 0),
			 sizeof(got));
	assert_memory_equal(got, orig, sizeof(got));
	free(orig);
	test_close(m, e);
}

/* A failed engine truncate changes nothing visible: the size stays and
 * so do the bytes (defect: the cache took the new size first, and growing
 * again brought back the old bytes where zeros were due). */
static void test_truncate_engine_fails(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	unsigned char *orig = malloc(MIB), got[8192];
	fill(orig, MIB, 1);
	memset(orig + 60000, 0x77, 8192);
	assert_int_equal(folio_mapping_write(m, orig + 60000, 8192, 60000),
			 8192);
	struct folio_mem_fault fault = {.sz = sizeof(fault),
					.ops = FOLIO_MEM_OP_TRUNCATE,
					.count = 1,
					.error = -EIO};
	assert_int_equal(folio_engine_mem_inject(fx->engine, &fault), 0);
	assert_int_equal(folio_mapping_truncate(m, 4096), -EIO);
	assert_int_equal(folio_mapping_size(m), MIB);
	assert_int_equal(test_mem_stats(fx->engine).size, MIB);
	assert_int_equal(folio_mapping_read(m, got, 8192, 60000), 8192);
	assert_memory_equal(got, orig + 60000, 8192);
	/* The dirty data survived the failed shrink and syncs. */
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	unsigned char *store = malloc(MIB);
	assert_int_equal(folio_engine_mem_peek(fx->engine, store, MIB, 0), 0);
	assert_memory_equal(store, orig, MIB);
	/* A failed grow changes nothing either. */
	fault.count = 1;
	assert_int_equal(folio_engine_mem_inject(fx->engine, &fault), 0);
	assert_int_equal(folio_mapping_truncate(m, 2 * MIB), -EIO);
	assert_int_equal(folio_mapping_size(m), MIB);
	/* Shrink and grow for real: zeros where the cut was. */
	assert_int_equal(folio_mapping_truncate(m, 4096), 0);
	assert_int_equal(folio_mapping_truncate(m, MIB), 0);
	assert_int_equal(folio_mapping_read(m, got, 8192, 60000), 8192);
	for (size_t i = 0; i < 8192; i++)
		assert_int_equal(got[i], 0);
	free(store);
	free(orig);
}

/* Overflowing or out-of-range invalidate ranges are -ERANGE and change
 * nothing (defect: (4096, UINT64_MAX, DISCARD) returned 0 and threw
 * away dirty data). */
static void test_invalidate_ranges(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	unsigned char b[8192];
	memset(b, 9, sizeof(b));
	assert_int_equal(folio_mapping_write(m, b, sizeof(b), 8192), 8192);
	uint64_t big = UINT64_C(1) << 63;
	struct {
		uint64_t pos, len;
	} bad[] = {{4096, UINT64_MAX}, {UINT64_MAX - 10, 100}, {big, 1},
		   {big, 0}, {(UINT64_C(1) << 62) + 1, 0},
		   {1, UINT64_C(1) << 62}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		for (unsigned fl = 0; fl <= FOLIO_INVALIDATE_DISCARD; fl++)
			assert_int_equal(folio_mapping_invalidate(
						 m, bad[i].pos, bad[i].len, fl),
					 -ERANGE);
	}
	assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0x10), -EINVAL);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, 8192);
	/* The largest valid ranges are fine. */
	assert_int_equal(folio_mapping_invalidate(m, UINT64_C(1) << 62, 0,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(folio_mapping_invalidate(m, 0, UINT64_C(1) << 62,
						  0),
			 -EBUSY);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, 8192);
}

/*
 * Discarding dirty data that reaches EOF leaves EOF where the store will
 * be once what remains is written back (defect: after discarding an
 * appended tail, sync returned 0 with the mapping's size above the
 * store's).
 */
static void test_discard_tail_size(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	unsigned char b[20000], got[20000];
	memset(b, 5, sizeof(b));
	/* Store 1 MiB; append 20000 bytes and discard them again. */
	assert_int_equal(folio_mapping_write(m, b, sizeof(b), MIB),
			 sizeof(b));
	assert_int_equal(folio_mapping_size(m), MIB + sizeof(b));
	assert_int_equal(folio_mapping_invalidate(m, MIB, 0,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(folio_mapping_size(m), MIB);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mem_stats(fx->engine).size, MIB);

	/* Discard only the end of an append: EOF goes to the range start,
	 * and what stays is written. */
	assert_int_equal(folio_mapping_write(m, b, sizeof(b), MIB),
			 sizeof(b));
	assert_int_equal(folio_mapping_invalidate(m, MIB + 10000, 10000,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(folio_mapping_size(m), MIB + 10000);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mem_stats(fx->engine).size, MIB + 10000);
	assert_int_equal(folio_engine_mem_peek(fx->engine, got, 10000, MIB),
			 0);
	assert_memory_equal(got, b, 10000);
	assert_int_equal(folio_mapping_read(m, got, sizeof(got), MIB),
			 10000);

	/* A write past EOF leaves a gap; discarding the far write pulls EOF
	 * back to the end of the dirty block before it. */
	assert_int_equal(folio_mapping_write(m, b, 100, MIB + 20000), 100);
	assert_int_equal(folio_mapping_write(m, b, 100, MIB + 300000), 100);
	assert_int_equal(folio_mapping_invalidate(m, MIB + 300000, 0,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	int64_t size = folio_mapping_size(m);
	assert_true(size >= MIB + 20100 && size <= MIB + 300000);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mem_stats(fx->engine).size, (uint64_t)size);
	assert_int_equal(folio_mapping_read(m, got, 100, MIB + 20000), 100);
	assert_memory_equal(got, b, 100);
	/* Discarding a middle range leaves EOF alone. */
	assert_int_equal(folio_mapping_write(m, b, 8192, 0), 8192);
	assert_int_equal(folio_mapping_invalidate(m, 0, 8192,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(folio_mapping_size(m), size);
}

/*
 * A dirty block that starts at a discard's range, in a folio that starts
 * below it, stays dirty (the range covers it only in part) but is cut with
 * everything past the new EOF: it must not hold EOF at the range start
 * (fuzz: after a good sync the mapping's size was above the store's).
 */
static void test_discard_block_at_range_start(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m;
	assert_int_equal(folio_engine_mem(&e, 64 * MIB), 0);
	struct folio_mapping_opts o = default_opts(e);
	o.min_folio_size = 16384;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	uint64_t pos = 45 * 4096; /* a block start, not a folio start */
	unsigned char c = 7;
	assert_int_equal(folio_mapping_write(m, &c, 1, pos), 1);
	struct folio *f;
	assert_int_equal(folio_mapping_lookup(m, pos, &f), 0);
	assert_true(folio_pos(f) < pos);
	folio_put(f);
	assert_int_equal(folio_mapping_invalidate(m, pos, 1,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(folio_mapping_size(m), 0);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mem_stats(e).size, 0);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, 0);
	test_close(m, e);
}

/*
 * Whole-folio tracking dirties a folio only up to EOF: blocks past it are
 * zeros no writeback may write, so once a discard split them from the
 * rest they stayed dirty after every good sync (fuzz).
 */
static void test_folio_dirty_stops_at_eof(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m;
	assert_int_equal(folio_engine_mem(&e, 64 * MIB), 0);
	struct folio_mapping_opts o = default_opts(e);
	o.block_size = 32768;
	o.max_folio_size = 2 * MIB;
	o.min_folio_size = 2 * MIB;
	o.flags = FOLIO_MAPPING_FOLIO_DIRTY;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	unsigned char *b = calloc(1, MIB);
	assert_non_null(b);
	assert_int_equal(folio_mapping_write(m, b, MIB, 0), MIB);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, MIB);
	assert_int_equal(folio_mapping_invalidate(m, MIB - 65536, 262144,
						  FOLIO_INVALIDATE_DISCARD),
			 0);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, 0);
	free(b);
	test_close(m, e);
}

static void test_lookup_and_folio_sizes(void **state)
{
	struct fixture *fx = *state;
	struct folio_mapping *m = fx->map;
	unsigned char *b = calloc(1, 4 * MIB);
	struct folio *f;
	assert_int_equal(folio_mapping_lookup(m, 0, &f), -ENOENT);

	/* 2 MiB at 0 gives one 2 MiB folio. */
	assert_int_equal(folio_mapping_write(m, b, 2 * MIB, 0), 2 * MIB);
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_int_equal(st.folios, 1);
	assert_int_equal(st.folios_by_shift[21 - 9], 1);
	assert_int_equal(folio_mapping_lookup(m, 12345, &f), 0);
	assert_int_equal(folio_size(f), 2 * MIB);
	folio_put(f);

	/* 128 KiB at 2 MiB + 64 KiB: the position's alignment caps the
	 * folios at 64 KiB. */
	assert_int_equal(folio_mapping_write(m, b, 128 * 1024,
					     2 * MIB + 64 * 1024),
			 128 * 1024);
	st = test_mapping_stats(m);
	assert_int_equal(st.folios_by_shift[16 - 9], 2);

	/* 128 KiB at 2 MiB would want one 128 KiB folio, but that would
	 * overlap the 64 KiB one after it: it falls back to 64 KiB. */
	assert_int_equal(folio_mapping_write(m, b, 128 * 1024, 2 * MIB),
			 128 * 1024);
	st = test_mapping_stats(m);
	assert_int_equal(st.folios_by_shift[16 - 9], 3);
	assert_int_equal(st.folios_by_shift[17 - 9], 0);
	/* Existing folios are reused whatever their size. */
	assert_int_equal(folio_mapping_write(m, b, 256 * 1024, 2 * MIB - 4096),
			 256 * 1024);
	uint64_t eof = 2 * MIB - 4096 + 256 * 1024;
	assert_int_equal(folio_mapping_size(m), (int64_t)eof);
	assert_int_equal(folio_mapping_read(m, b, 4 * MIB, 0), (ssize_t)eof);
	st = test_mapping_stats(m);
	assert_int_equal(st.cached_bytes, eof);
	assert_int_equal(st.folios_by_shift[21 - 9], 1);
	assert_int_equal(st.folios_by_shift[16 - 9], 3);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	free(b);
}

/* After writes, truncates and a sync, a new mapping over the same engine
 * reads back exactly what the old one held. */
static void test_reopen(void **state)
{
	struct fixture *fx = *state;
	unsigned char *model = calloc(1, 4 * MIB), *got = malloc(4 * MIB);
	uint64_t size = MIB;
	fill(model, MIB, 1);
	uint64_t rng = 42;
	for (int i = 0; i < 200; i++) {
		size_t len = 1 + test_rand_below(&rng, 70000);
		uint64_t pos = test_rand_below(&rng, 3 * MIB);
		unsigned char b[70000];
		memset(b, i, len);
		assert_int_equal(folio_mapping_write(fx->map, b, len, pos),
				 (ssize_t)len);
		memcpy(model + pos, b, len);
		if (pos + len > size)
			size = pos + len;
		if (i % 37 == 36) {
			uint64_t t = test_rand_below(&rng, 3 * MIB);
			assert_int_equal(folio_mapping_truncate(fx->map, t), 0);
			if (t < size)
				memset(model + t, 0, size - t);
			size = t;
		}
	}
	assert_int_equal(folio_mapping_sync(fx->map, NULL), 0);
	assert_int_equal(folio_mapping_free(fx->map), 0);
	struct folio_mapping_opts o = default_opts(fx->engine);
	o.size = size;
	assert_int_equal(folio_mapping_new(&fx->map, &o), 0);
	assert_int_equal(folio_mapping_read(fx->map, got, 4 * MIB, 0),
			 (ssize_t)size);
	assert_memory_equal(got, model, size);
	free(model);
	free(got);
}

/* The posix engine under a mapping, on a real file system. */
static void posix_roundtrip(const char *dir)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/folio-test-XXXXXX", dir);
	int fd = mkstemp(path);
	if (fd < 0) {
		printf("# skipping %s: %s\n", dir, strerror(errno));
		return;
	}
	unlink(path);
	unsigned char *data = malloc(MIB), *got = malloc(MIB);
	fill(data, MIB, 3);
	assert_int_equal(pwrite(fd, data, MIB, 0), (ssize_t)MIB);

	struct folio_engine *e;
	struct folio_mapping *m;
	assert_int_equal(folio_engine_posix(&e, fd, 0), 0);
	struct folio_mapping_opts o = default_opts(e);
	o.size = MIB;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	unsigned char b[3000];
	memset(b, 0xee, sizeof(b));
	assert_int_equal(folio_mapping_write(m, b, sizeof(b), 10000), 3000);
	memcpy(data + 10000, b, sizeof(b));
	assert_int_equal(folio_mapping_read(m, got, MIB, 0), (ssize_t)MIB);
	assert_memory_equal(got, data, MIB);
	assert_int_equal(folio_mapping_write(m, b, 100, MIB + 5000), 100);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	struct stat sb;
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, MIB + 5100);
	assert_int_equal(pread(fd, got, MIB, 0), (ssize_t)MIB);
	assert_memory_equal(got, data, MIB);
	assert_int_equal(pread(fd, got, 5100, MIB), 5100);
	for (int i = 0; i < 5000; i++)
		assert_int_equal(got[i], 0);
	assert_int_equal(got[5000], 0xee);
	assert_int_equal(folio_mapping_truncate(m, 4096), 0);
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, 4096);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	close(fd);
	free(data);
	free(got);
}

static void test_posix_files(void **state)
{
	(void)state;
	posix_roundtrip("/var/tmp");
	posix_roundtrip("/dev/shm");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_bad_input),
		cmocka_unit_test_setup_teardown(test_io_bad_input, setup_1m,
						teardown),
		cmocka_unit_test_setup_teardown(test_read_bad_input_cached, setup_1m,
						teardown),
		cmocka_unit_test_setup_teardown(test_rmw_accounting, setup_1m,
						teardown),
		cmocka_unit_test_setup_teardown(test_failed_edge_read, setup_1m,
						teardown),
		cmocka_unit_test_setup_teardown(test_read_eof_and_coalescing,
						setup_1m, teardown),
		cmocka_unit_test_setup_teardown(test_truncate, setup_empty,
						teardown),
		cmocka_unit_test_setup_teardown(test_invalidate, setup_1m,
						teardown),
		cmocka_unit_test_setup_teardown(test_free_refuses_dirty,
						setup_empty, teardown),
		cmocka_unit_test_setup_teardown(test_write_begin_end, setup_1m,
						teardown),
		cmocka_unit_test_setup_teardown(test_write_end_prepared_range,
						setup_1m, teardown),
		cmocka_unit_test(test_read_pieces_fail),
		cmocka_unit_test_setup_teardown(test_read_cached, setup_1m,
						teardown),
		cmocka_unit_test_setup_teardown(test_write_cached, setup_1m,
						teardown),
		cmocka_unit_test_setup_teardown(test_write_cached_held, setup_1m,
						teardown),
		cmocka_unit_test_setup_teardown(test_read_cached_held,
						setup_1m, teardown),
		cmocka_unit_test_setup_teardown(test_truncate_engine_fails,
						setup_1m, teardown),
		cmocka_unit_test_setup_teardown(test_invalidate_ranges,
						setup_1m, teardown),
		cmocka_unit_test_setup_teardown(test_discard_tail_size,
						setup_1m, teardown),
		cmocka_unit_test(test_discard_block_at_range_start),
		cmocka_unit_test(test_folio_dirty_stops_at_eof),
		cmocka_unit_test_setup_teardown(test_lookup_and_folio_sizes,
						setup_large, teardown),
		cmocka_unit_test_setup_teardown(test_reopen, setup_1m,
						teardown),
		cmocka_unit_test(test_posix_files),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
