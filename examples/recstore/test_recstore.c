/* SPDX-License-Identifier: MIT */
/*
 * recstore tests. Most run over a mem engine, which lets a test look at
 * the backing store directly (peek) and inject faults; the reopen tests
 * use real files in /var/tmp. Every test compares against a plain byte
 * array model of what each record must read back as.
 */
/* mkstemp(), O_CLOEXEC and friends are POSIX, not C11. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "folio_state_mem.h"
#include "recstore.h"

#define BLOCK 4096u

static uint64_t rng_state;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* ---- model ----------------------------------------------------------- */

struct model {
	unsigned char *bytes; /* nrec * rsize, zeros where never written */
	uint64_t nrec;
	size_t rsize;
	unsigned char *rec;   /* scratch record */
};

static void model_init(struct model *md, uint64_t nrec, size_t rsize)
{
	md->bytes = calloc(nrec, rsize);
	md->rec = malloc(rsize);
	assert_non_null(md->bytes);
	assert_non_null(md->rec);
	md->nrec = nrec;
	md->rsize = rsize;
}

static void model_free(struct model *md)
{
	free(md->bytes);
	free(md->rec);
}

static unsigned char *model_at(struct model *md, uint64_t id)
{
	return md->bytes + id * md->rsize;
}

/* Put random contents into record @id of the store and the model. */
static void put_random(struct recstore *rs, struct model *md, uint64_t id)
{
	for (size_t i = 0; i < md->rsize; i++)
		md->rec[i] = (unsigned char)rng();
	assert_int_equal(recstore_put(rs, id, md->rec), 0);
	memcpy(model_at(md, id), md->rec, md->rsize);
}

static void assert_store_matches(struct recstore *rs, struct model *md)
{
	for (uint64_t id = 0; id < md->nrec; id++) {
		memset(md->rec, 0xa5, md->rsize);
		assert_int_equal(recstore_get(rs, id, md->rec), 0);
		assert_memory_equal(md->rec, model_at(md, id), md->rsize);
	}
}

/* The backing store holds exactly the model (zeros past its size). */
static void assert_backing_matches(struct folio_engine *e, struct model *md)
{
	size_t len = (size_t)(md->nrec * md->rsize);
	unsigned char *buf = malloc(len);
	assert_non_null(buf);
	assert_int_equal(folio_engine_mem_peek(e, buf, len, 0), 0);
	assert_memory_equal(buf, md->bytes, len);
	free(buf);
}

static bool backing_matches(struct folio_engine *e, struct model *md)
{
	size_t len = (size_t)(md->nrec * md->rsize);
	unsigned char *buf = malloc(len);
	assert_non_null(buf);
	assert_int_equal(folio_engine_mem_peek(e, buf, len, 0), 0);
	bool same = memcmp(buf, md->bytes, len) == 0;
	free(buf);
	return same;
}

/* A store over a fresh mem engine as large as the store. */
static void mem_store(struct recstore **rs, struct folio_engine **e,
		      uint64_t nrec, size_t rsize,
		      const struct recstore_opts *opts)
{
	struct recstore_opts o = opts ? *opts : (struct recstore_opts){0};
	o.nrecords = nrec;
	assert_int_equal(folio_engine_mem(e, nrec * rsize), 0);
	assert_int_equal(recstore_open_engine(rs, *e, 0, rsize, &o), 0);
}

static void stats(struct recstore *rs, struct recstore_stats *st)
{
	assert_int_equal(recstore_stats(rs, st), 0);
}

/* ---- scan callbacks --------------------------------------------------- */

struct scan_check {
	struct model *md;
	uint64_t next_id; /* ids must come in order */
	uint64_t calls;
	uint64_t stop_at; /* return 7 at this id (UINT64_MAX: never) */
};

static int scan_cb(uint64_t id, const void *rec, void *arg)
{
	struct scan_check *sc = arg;
	assert_int_equal(id, sc->next_id);
	assert_memory_equal(rec, model_at(sc->md, id), sc->md->rsize);
	sc->next_id++;
	sc->calls++;
	return id == sc->stop_at ? 7 : 0;
}

static void assert_scan_matches(struct recstore *rs, struct model *md,
				uint64_t first, uint64_t count)
{
	struct scan_check sc = {md, first, 0, UINT64_MAX};
	assert_int_equal(recstore_scan(rs, first, count, scan_cb, &sc), 0);
	assert_int_equal(sc.calls, count);
}

/* ---- tests ------------------------------------------------------------ */

static void test_put_get_scan(void **state)
{
	(void)state;
	struct recstore *rs;
	struct folio_engine *e;
	struct model md;
	struct recstore_stats st;
	rng_state = 1;
	model_init(&md, 1000, 100);
	mem_store(&rs, &e, 1000, 100, NULL);

	/* Never written: zeros, not an error. */
	memset(md.rec, 0xff, 100);
	assert_int_equal(recstore_get(rs, 5, md.rec), 0);
	assert_memory_equal(md.rec, model_at(&md, 5), 100);

	/* 40 and 81 straddle block boundaries (4000..4099, 8100..8199). */
	const uint64_t ids[] = {0, 1, 40, 41, 81, 500, 999};
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
		put_random(rs, &md, ids[i]);
	put_random(rs, &md, 40); /* overwrite keeps the neighbours */
	assert_store_matches(rs, &md);

	assert_scan_matches(rs, &md, 0, 1000);
	assert_scan_matches(rs, &md, 990, 10);
	assert_scan_matches(rs, &md, 1000, 0);

	struct scan_check sc = {&md, 0, 0, 3};
	assert_int_equal(recstore_scan(rs, 0, 1000, scan_cb, &sc), 7);
	assert_int_equal(sc.calls, 4);

	stats(rs, &st);
	assert_int_equal(st.puts, 8);
	assert_int_equal(st.gets, 1001);
	assert_int_equal(st.nrecords, 1000);
	assert_int_equal(st.record_size, 100);
	assert_int_equal(st.cache.bytes_written, 800);

	/* Nothing reaches the engine before a checkpoint. */
	struct folio_mem_stats ms = {.sz = sizeof(ms)};
	assert_int_equal(folio_engine_mem_stats(e, &ms), 0);
	assert_int_equal(ms.write_requests, 0);
	assert_int_equal(recstore_checkpoint(rs), 0);
	assert_backing_matches(e, &md);
	/* Still served right after the checkpoint cleaned the cache. */
	assert_store_matches(rs, &md);

	assert_int_equal(recstore_close(rs), 0);
	assert_int_equal(folio_engine_free(e), 0);
	model_free(&md);
}

static void test_record_sizes(void **state)
{
	(void)state;
	static const size_t sizes[] = {1, 100, 512, 4095, 4096, 5000,
				       65535, 65536};
	static const size_t folios[] = {0, 4096, 2u << 20};
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (size_t f = 0; f < sizeof(folios) / sizeof(folios[0]); f++) {
			size_t rsize = sizes[s];
			uint64_t nrec = (256u * 1024u) / rsize + 3;
			struct recstore_opts o = {.folio_size = folios[f]};
			struct recstore *rs;
			struct folio_engine *e;
			struct model md;
			rng_state = 100 + s * 8 + f;
			model_init(&md, nrec, rsize);
			mem_store(&rs, &e, nrec, rsize, &o);
			uint64_t ids[41];
			for (int i = 0; i < 40; i++) {
				ids[i] = rng() % nrec;
				put_random(rs, &md, ids[i]);
			}
			ids[40] = nrec - 1;
			put_random(rs, &md, ids[40]);
			for (int i = 0; i < 41; i++) {
				assert_int_equal(recstore_get(rs, ids[i], md.rec), 0);
				assert_memory_equal(md.rec, model_at(&md, ids[i]),
						    rsize);
			}
			assert_scan_matches(rs, &md, 0, nrec);
			assert_int_equal(recstore_checkpoint(rs), 0);
			assert_backing_matches(e, &md);
			assert_int_equal(recstore_close(rs), 0);
			assert_int_equal(folio_engine_free(e), 0);
			model_free(&md);
		}
	}
}

static void reopen_file(enum recstore_engine kind)
{
	char path[] = "/var/tmp/test_recstore-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);

	const uint64_t nrec = 5000;
	struct recstore_opts o = {.nrecords = nrec, .engine = kind};
	struct recstore *rs;
	struct recstore_stats st;
	struct model md;
	uint64_t top = 0;
	rng_state = 7 + kind;
	model_init(&md, nrec, 100);
	assert_int_equal(recstore_open(&rs, path, 100, &o), 0);
	for (int i = 0; i < 3000; i++) {
		uint64_t id = rng() % (nrec - 100); /* leave a never-written tail */
		put_random(rs, &md, id);
		top = id > top ? id : top;
	}
	stats(rs, &st);
	/* io_uring may be unavailable here; the store then says posix. */
	assert_true(st.engine == kind || st.engine == RECSTORE_ENGINE_POSIX);
	assert_int_equal(recstore_close(rs), 0);

	struct stat sb;
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, (top + 1) * 100);

	/* Capacity 0: what the file holds, every record as it was put. */
	o.nrecords = 0;
	assert_int_equal(recstore_open(&rs, path, 100, &o), 0);
	stats(rs, &st);
	assert_int_equal(st.nrecords, top + 1);
	md.nrec = top + 1;
	assert_store_matches(rs, &md);
	assert_int_equal(recstore_close(rs), 0);

	/* Full capacity: records past the file's end read as zeros. */
	o.nrecords = nrec;
	md.nrec = nrec;
	assert_int_equal(recstore_open(&rs, path, 100, &o), 0);
	assert_scan_matches(rs, &md, 0, nrec);
	put_random(rs, &md, nrec - 1);
	assert_int_equal(recstore_close(rs), 0);
	assert_int_equal(recstore_open(&rs, path, 100, NULL), 0);
	assert_store_matches(rs, &md);
	assert_int_equal(recstore_close(rs), 0);

	assert_int_equal(unlink(path), 0);
	model_free(&md);
}

static void test_reopen_file_posix(void **state)
{
	(void)state;
	reopen_file(RECSTORE_ENGINE_POSIX);
}

static void test_reopen_file_uring(void **state)
{
	(void)state;
	reopen_file(RECSTORE_ENGINE_URING);
}

static void inject(struct folio_engine *e, unsigned ops, uint64_t count,
		   int error, size_t short_len)
{
	struct folio_mem_fault f = {
		.sz = sizeof(f),
		.ops = ops,
		.count = count,
		.error = error,
		.short_len = short_len,
	};
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
}

static void test_checkpoint_fault_then_retry(void **state)
{
	(void)state;
	struct recstore *rs;
	struct folio_engine *e;
	struct recstore_stats st;
	struct model md;
	rng_state = 3;
	model_init(&md, 2000, 100);
	mem_store(&rs, &e, 2000, 100, NULL);

	/* One failed write request. */
	for (int i = 0; i < 200; i++)
		put_random(rs, &md, rng() % 2000);
	inject(e, FOLIO_MEM_OP_WRITE, 1, -EIO, 0);
	assert_int_equal(recstore_checkpoint(rs), -EIO);
	assert_false(backing_matches(e, &md));
	stats(rs, &st);
	assert_int_equal(st.failed_checkpoints, 1);
	assert_true(st.cache.dirty_bytes > 0);
	assert_store_matches(rs, &md); /* the cache still has it all */
	assert_int_equal(recstore_checkpoint(rs), 0);
	assert_backing_matches(e, &md);
	stats(rs, &st);
	assert_int_equal(st.cache.dirty_bytes, 0);
	assert_int_equal(recstore_checkpoint(rs), 0); /* reported once */

	/* A failed flush fails the checkpoint; the next one flushes. */
	put_random(rs, &md, 1234);
	inject(e, FOLIO_MEM_OP_FLUSH, 1, -EIO, 0);
	assert_int_equal(recstore_checkpoint(rs), -EIO);
	assert_int_equal(recstore_checkpoint(rs), 0);
	assert_backing_matches(e, &md);
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);

	/* Short writes are finished within the checkpoint. */
	for (int i = 0; i < 50; i++)
		put_random(rs, &md, rng() % 2000);
	inject(e, FOLIO_MEM_OP_WRITE, 3, 0, 100);
	assert_int_equal(recstore_checkpoint(rs), 0);
	assert_backing_matches(e, &md);

	stats(rs, &st);
	assert_true(st.cache.retries > 0);
	assert_int_equal(st.failed_checkpoints, 2);
	assert_int_equal(st.checkpoints, 6);
	assert_int_equal(recstore_close(rs), 0);
	assert_int_equal(folio_engine_free(e), 0);
	model_free(&md);
}

/*
 * Every write fails until the faults are cleared: each checkpoint fails
 * (a new error each time), none loses anything. With large folios one
 * folio's dirty runs go out in several requests, each failing inline
 * (this once made the library take the put-back runs again forever; the
 * alarm turns a regression into a failure instead of a hang).
 */
static void permanent_failure(size_t folio_size)
{
	struct recstore *rs;
	struct folio_engine *e;
	struct model md;
	struct recstore_opts o = {.folio_size = folio_size};
	rng_state = 9;
	model_init(&md, 2000, 100);
	mem_store(&rs, &e, 2000, 100, &o);
	put_random(rs, &md, 0);
	assert_int_equal(recstore_checkpoint(rs), 0);
	put_random(rs, &md, 1);     /* block 0 */
	put_random(rs, &md, 100);   /* block 2: a clean block between */
	for (int i = 0; i < 20; i++)
		put_random(rs, &md, rng() % 2000);
	inject(e, FOLIO_MEM_OP_WRITE, 0, -ENOSPC, 0);
	assert_int_equal(recstore_checkpoint(rs), -ENOSPC);
	assert_int_equal(recstore_checkpoint(rs), -ENOSPC);
	assert_false(backing_matches(e, &md));
	assert_store_matches(rs, &md);
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	assert_int_equal(recstore_checkpoint(rs), 0);
	assert_backing_matches(e, &md);
	assert_int_equal(recstore_close(rs), 0);
	assert_int_equal(folio_engine_free(e), 0);
	model_free(&md);
}

static void test_permanent_failure(void **state)
{
	(void)state;
	permanent_failure(4096);
}

static void test_permanent_failure_large_folios(void **state)
{
	(void)state;
	alarm(60);
	permanent_failure(0);
	alarm(0);
}

static void test_close_keeps_unsaved_store(void **state)
{
	(void)state;
	struct recstore *rs;
	struct folio_engine *e;
	struct model md;
	struct recstore_opts o = {0};
	rng_state = 11;
	model_init(&md, 300, 100);
	mem_store(&rs, &e, 300, 100, &o);
	for (int i = 0; i < 30; i++)
		put_random(rs, &md, rng() % 300);
	inject(e, FOLIO_MEM_OP_WRITE, 0, -EIO, 0);
	assert_int_equal(recstore_close(rs), -EIO);
	/* Still open and whole. */
	assert_store_matches(rs, &md);
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	assert_int_equal(recstore_close(rs), 0);
	assert_backing_matches(e, &md);
	assert_int_equal(folio_engine_free(e), 0);

	/* Giving up unsaved puts has to be asked for. */
	mem_store(&rs, &e, 300, 100, &o);
	put_random(rs, &md, 0);
	put_random(rs, &md, 299);
	inject(e, FOLIO_MEM_OP_WRITE, 0, -EIO, 0);
	assert_int_equal(recstore_checkpoint(rs), -EIO);
	assert_int_equal(recstore_discard(rs), 0);
	unsigned char zero[100] = {0}, buf[100];
	assert_int_equal(folio_engine_mem_peek(e, buf, 100, 0), 0);
	assert_memory_equal(buf, zero, 100);
	assert_int_equal(folio_engine_free(e), 0);
	model_free(&md);
}

struct block_count {
	unsigned char *seen; /* one byte per block */
	uint64_t blocks;
};

static void count_blocks(struct block_count *bc, uint64_t pos, size_t len)
{
	for (uint64_t b = pos / BLOCK; b <= (pos + len - 1) / BLOCK; b++) {
		bc->blocks += !bc->seen[b];
		bc->seen[b] = 1;
	}
}

static void test_write_amplification(void **state)
{
	(void)state;
	const uint64_t nrec = 65536;
	const size_t rsize = 100, bytes = nrec * rsize;
	struct recstore *rs;
	struct folio_engine *e;
	struct recstore_stats st;
	struct model md;
	rng_state = 42;
	model_init(&md, nrec, rsize);
	/* An existing, full store, so every put has edge blocks to read and
	 * bytes around it that the checkpoint must leave alone. */
	for (size_t i = 0; i < bytes; i++)
		md.bytes[i] = (unsigned char)rng();
	assert_int_equal(folio_engine_mem(&e, bytes), 0);
	assert_int_equal(folio_engine_mem_poke(e, md.bytes, bytes, 0), 0);
	struct recstore_opts o = {.nrecords = nrec};
	assert_int_equal(recstore_open_engine(&rs, e, bytes, rsize, &o), 0);

	struct block_count bc = {calloc(bytes / BLOCK + 1, 1), 0};
	assert_non_null(bc.seen);
	for (int i = 0; i < 100; i++) {
		uint64_t id = rng() % nrec;
		put_random(rs, &md, id);
		count_blocks(&bc, id * rsize, rsize);
	}
	assert_int_equal(recstore_checkpoint(rs), 0);
	stats(rs, &st);
	assert_int_equal(st.cache.bytes_written, 100 * rsize);
	assert_true(st.cache.wb_bytes <= bc.blocks * BLOCK);
	struct folio_mem_stats ms = {.sz = sizeof(ms)};
	assert_int_equal(folio_engine_mem_stats(e, &ms), 0);
	assert_int_equal(ms.write_bytes, st.cache.wb_bytes);
	assert_backing_matches(e, &md);
	print_message("# 100 puts of 100 B: %llu dirty blocks, %llu bytes "
		      "written back in %llu requests\n",
		      (unsigned long long)bc.blocks,
		      (unsigned long long)st.cache.wb_bytes,
		      (unsigned long long)st.cache.wb_requests);

	free(bc.seen);
	assert_int_equal(recstore_close(rs), 0);
	assert_int_equal(folio_engine_free(e), 0);
	model_free(&md);
}

static void test_read_errors(void **state)
{
	(void)state;
	struct recstore *rs;
	struct folio_engine *e;
	struct recstore_stats st;
	unsigned char rec[100];
	memset(rec, 'x', sizeof(rec));
	assert_int_equal(folio_engine_mem(&e, 100000), 0);
	assert_int_equal(folio_engine_mem_poke(e, rec, sizeof(rec), 99900), 0);
	assert_int_equal(recstore_open_engine(&rs, e, 100000, 100, NULL), 0);
	inject(e, FOLIO_MEM_OP_READ, 0, -EIO, 0);
	assert_int_equal(recstore_get(rs, 7, rec), -EIO);
	/* A put into a block it only partly covers needs that block. */
	assert_int_equal(recstore_put(rs, 7, rec), -EIO);
	stats(rs, &st);
	assert_int_equal(st.puts, 0);
	assert_int_equal(st.cache.dirty_bytes, 0);
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	assert_int_equal(recstore_get(rs, 999, rec), 0);
	assert_int_equal(rec[0], 'x');
	assert_int_equal(recstore_close(rs), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

static int never(uint64_t id, const void *rec, void *arg)
{
	(void)id;
	(void)rec;
	(void)arg;
	return -1;
}

static void test_bad_input(void **state)
{
	(void)state;
	struct recstore *rs = NULL, *none = NULL;
	struct folio_engine *e;
	struct recstore_stats st;
	struct recstore_opts o = {.nrecords = 10};
	unsigned char rec[100] = {0};
	char path[] = "/var/tmp/test_recstore-bad-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(unlink(path), 0);

	/* Refused before anything is created. */
	assert_int_equal(recstore_open(NULL, path, 100, &o), -EINVAL);
	assert_int_equal(recstore_open(&none, NULL, 100, &o), -EINVAL);
	assert_int_equal(recstore_open(&none, path, 0, &o), -EINVAL);
	assert_int_equal(recstore_open(&none, path,
				       RECSTORE_MAX_RECORD_SIZE + 1, &o),
			 -EINVAL);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(recstore_open(&none, path, 100, NULL), -ENOENT);
	assert_int_equal(access(path, F_OK), -1);
	/* Bad geometry or capacity, found once the file is open. */
	o.folio_size = 3000;
	assert_int_equal(recstore_open(&none, path, 100, &o), -EINVAL);
	o.folio_size = 4u << 20;
	assert_int_equal(recstore_open(&none, path, 100, &o), -EINVAL);
	o.folio_size = 0;
	o.nrecords = (UINT64_C(1) << 62) / 100 + 1;
	assert_int_equal(recstore_open(&none, path, 100, &o), -EFBIG);
	o.nrecords = 0;
	assert_int_equal(recstore_open(&none, path, 100, &o), -EINVAL);
	assert_null(none);
	assert_int_equal(unlink(path), 0);

	assert_int_equal(folio_engine_mem(&e, 1000), 0);
	assert_int_equal(recstore_open_engine(&none, NULL, 0, 100, NULL),
			 -EINVAL);
	assert_int_equal(recstore_open_engine(NULL, e, 0, 100, NULL), -EINVAL);
	assert_int_equal(recstore_open_engine(&none, e, 0, 100, NULL), -EINVAL);
	assert_int_equal(recstore_open_engine(&none, e, 0, 0, NULL), -EINVAL);
	assert_null(none);
	/* A torn last record still counts: 250 bytes hold 3 records. */
	assert_int_equal(recstore_open_engine(&rs, e, 250, 100, NULL), 0);
	stats(rs, &st);
	assert_int_equal(st.nrecords, 3);

	assert_int_equal(recstore_put(NULL, 0, rec), -EINVAL);
	assert_int_equal(recstore_put(rs, 0, NULL), -EINVAL);
	assert_int_equal(recstore_put(rs, 3, rec), -ERANGE);
	assert_int_equal(recstore_put(rs, UINT64_MAX, rec), -ERANGE);
	assert_int_equal(recstore_get(NULL, 0, rec), -EINVAL);
	assert_int_equal(recstore_get(rs, 0, NULL), -EINVAL);
	assert_int_equal(recstore_get(rs, 3, rec), -ERANGE);
	assert_int_equal(recstore_scan(NULL, 0, 1, never, NULL), -EINVAL);
	assert_int_equal(recstore_scan(rs, 0, 1, NULL, NULL), -EINVAL);
	assert_int_equal(recstore_scan(rs, 0, 4, never, NULL), -ERANGE);
	assert_int_equal(recstore_scan(rs, 4, 0, never, NULL), -ERANGE);
	assert_int_equal(recstore_scan(rs, 1, UINT64_MAX, never, NULL),
			 -ERANGE);
	assert_int_equal(recstore_scan(rs, 3, 0, never, NULL), 0);
	assert_int_equal(recstore_checkpoint(NULL), -EINVAL);
	assert_int_equal(recstore_stats(NULL, &st), -EINVAL);
	assert_int_equal(recstore_stats(rs, NULL), -EINVAL);
	assert_int_equal(recstore_close(NULL), 0);
	assert_int_equal(recstore_discard(NULL), 0);

	stats(rs, &st);
	assert_int_equal(st.puts + st.gets + st.scanned, 0);
	assert_int_equal(st.cache.bytes_written, 0);
	assert_int_equal(recstore_close(rs), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_cache_limit(void **state)
{
	(void)state;
	struct recstore *rs;
	struct folio_engine *e;
	struct recstore_stats st;
	struct model md;
	struct recstore_opts o = {.cache_limit = 64u << 10};
	rng_state = 5;
	model_init(&md, 10000, 100);
	mem_store(&rs, &e, 10000, 100, &o);
	for (uint64_t id = 0; id < 10000; id++)
		put_random(rs, &md, id);
	stats(rs, &st);
	assert_true(st.cache.cached_bytes >= 10000 * 100);
	assert_int_equal(recstore_checkpoint(rs), 0);
	stats(rs, &st);
	assert_true(st.cache.cached_bytes <= o.cache_limit);
	uint64_t reads = st.cache.read_requests;
	assert_scan_matches(rs, &md, 0, 10000);
	stats(rs, &st);
	assert_true(st.cache.read_requests > reads); /* read back in */
	assert_true(st.cache.cached_bytes <= o.cache_limit);
	assert_int_equal(recstore_close(rs), 0);
	assert_int_equal(folio_engine_free(e), 0);
	model_free(&md);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_get_scan),
		cmocka_unit_test(test_record_sizes),
		cmocka_unit_test(test_reopen_file_posix),
		cmocka_unit_test(test_reopen_file_uring),
		cmocka_unit_test(test_checkpoint_fault_then_retry),
		cmocka_unit_test(test_permanent_failure),
		cmocka_unit_test(test_permanent_failure_large_folios),
		cmocka_unit_test(test_close_keeps_unsaved_store),
		cmocka_unit_test(test_write_amplification),
		cmocka_unit_test(test_read_errors),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_cache_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
