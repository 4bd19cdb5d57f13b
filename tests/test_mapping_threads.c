/* SPDX-License-Identifier: MIT */
/*
 * Concurrency of buffered reads and writes on one mapping.
 *  - Disjoint: each thread owns a region whose edges share folios and
 *    blocks with its neighbours; it writes randomly inside it and reads it
 *    back. The final content must equal the union of the owners' models
 *    exactly.
 *  - Overlapping: threads overwrite shared 512-byte records (never
 *    straddling a folio) while readers check that no record is ever torn;
 *    at the end every record holds the last write of one of the threads,
 *    as some serial order of the writes would.
 *  - Whole folios: readers never see a folio half overwritten, while a
 *    pool reclaims folios under them.
 *  - Lookup races: lock-free lookups (lookup, read, write) racing inserts,
 *    truncates, invalidates, reclaim and tag changes (sync), with the
 *    lookups' window between finding a folio and referencing it widened
 *    by a test hook: a lookup that returned a folio whose header or data
 *    was freed would touch freed memory (ASan, valgrind), one that
 *    returned the wrong folio fails the position and content checks.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "folio_state.h"
#include "folio_state_mem.h"
#include "mapping/lookup.h"
#include "mapping/tags.h"
#include "test_util.h"

#define THREADS 4
/* Region edges at odd positions, so owners share folios and blocks. */
#define REGION (300 * 1024 + 123)

struct shared {
	struct folio_mapping *map;
	struct folio_engine *engine;
	uint64_t seed;
	unsigned iters;
	atomic_bool stop;
	atomic_int failures;
};

struct owner {
	struct shared *sh;
	int id;
	unsigned char model[REGION];
};

static void *owner_main(void *arg)
{
	struct owner *o = arg;
	struct shared *sh = o->sh;
	uint64_t rng = sh->seed * 31 + (uint64_t)o->id + 1;
	uint64_t base = (uint64_t)o->id * REGION;
	static _Thread_local unsigned char buf[REGION];

	for (unsigned i = 0; i < sh->iters; i++) {
		size_t len = 1 + test_rand_below(&rng, i % 8 ? 9000 : REGION);
		size_t off = test_rand_below(&rng, REGION - len + 1);
		if (test_rand_below(&rng, 3)) {
			for (size_t k = 0; k < len; k++)
				buf[k] = (unsigned char)test_rand(&rng);
			if (folio_mapping_write(sh->map, buf, len, base + off) !=
			    (ssize_t)len) {
				atomic_fetch_add(&sh->failures, 1);
				break;
			}
			memcpy(o->model + off, buf, len);
		} else {
			ssize_t r = folio_mapping_read(sh->map, buf, len,
						       base + off);
			/* Past the current EOF (a neighbour's region not yet
			 * written) a read is short, which is legal. */
			if (r < 0 || memcmp(buf, o->model + off, (size_t)r)) {
				atomic_fetch_add(&sh->failures, 1);
				break;
			}
		}
	}
	return NULL;
}

static void test_disjoint(void **state)
{
	(void)state;
	struct shared sh = {0};
	sh.seed = test_seed("mapping_threads_disjoint");
	sh.iters = test_iters(3000, 150);
	assert_int_equal(folio_engine_mem(&sh.engine, 64u << 20), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o),
				       .block_size = 4096,
				       .max_folio_size = 64 * 1024,
				       .engine = sh.engine};
	assert_int_equal(folio_mapping_new(&sh.map, &o), 0);
	/* The whole space starts as zeros up to its end. */
	assert_int_equal(folio_mapping_truncate(sh.map,
						(uint64_t)THREADS * REGION),
			 0);

	struct owner *owners = calloc(THREADS, sizeof(*owners));
	pthread_t tid[THREADS];
	for (int i = 0; i < THREADS; i++) {
		owners[i].sh = &sh;
		owners[i].id = i;
		assert_int_equal(pthread_create(&tid[i], NULL, owner_main,
						&owners[i]),
				 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(tid[i], NULL);
	assert_int_equal(atomic_load(&sh.failures), 0);

	unsigned char *got = malloc(REGION);
	for (int i = 0; i < THREADS; i++) {
		assert_int_equal(folio_mapping_read(sh.map, got, REGION,
						    (uint64_t)i * REGION),
				 REGION);
		assert_memory_equal(got, owners[i].model, REGION);
	}
	/* And the same after it all went through the engine. */
	assert_int_equal(folio_mapping_sync(sh.map, NULL), 0);
	for (int i = 0; i < THREADS; i++) {
		assert_int_equal(folio_engine_mem_peek(sh.engine, got, REGION,
						       (uint64_t)i * REGION),
				 0);
		assert_memory_equal(got, owners[i].model, REGION);
	}
	free(got);
	free(owners);
	assert_int_equal(folio_mapping_free(sh.map), 0);
	assert_int_equal(folio_engine_free(sh.engine), 0);
}

#define RECORD 512
#define RECORDS 512 /* 256 KiB of records */
#define WRITERS 3
#define READERS 2

struct rec_shared {
	struct shared sh;
	/* Per writer, the sequence number of its last write per record. */
	uint32_t last[WRITERS][RECORDS];
};

/* A record is RECORD bytes of (writer, seq) stamps. */
static void stamp(unsigned char *r, int writer, uint32_t seq)
{
	for (int i = 0; i < RECORD; i += 8) {
		uint32_t w = (uint32_t)writer + 1;
		memcpy(r + i, &w, 4);
		memcpy(r + i + 4, &seq, 4);
	}
}

/* 0 for a never-written (zero) record, -1 if torn, else writer + 1. */
static int record_writer(const unsigned char *r, uint32_t *seq)
{
	uint32_t w, s;
	memcpy(&w, r, 4);
	memcpy(&s, r + 4, 4);
	for (int i = 8; i < RECORD; i += 8)
		if (memcmp(r + i, r, 8))
			return -1;
	*seq = s;
	return (int)w;
}

struct rec_thread {
	struct rec_shared *rs;
	int id;
};

static void *rec_writer(void *arg)
{
	struct rec_thread *t = arg;
	struct rec_shared *rs = t->rs;
	uint64_t rng = rs->sh.seed * 7 + (uint64_t)t->id;
	unsigned char buf[4 * RECORD];
	for (uint32_t seq = 1; seq <= rs->sh.iters; seq++) {
		/* One to four consecutive records per write. */
		unsigned first = (unsigned)test_rand_below(&rng, RECORDS);
		unsigned n = 1 + (unsigned)test_rand_below(&rng, 4);
		if (first + n > RECORDS)
			n = RECORDS - first;
		for (unsigned k = 0; k < n; k++)
			stamp(buf + k * RECORD, t->id, seq);
		if (folio_mapping_write(rs->sh.map, buf, n * RECORD,
					(uint64_t)first * RECORD) !=
		    (ssize_t)(n * RECORD)) {
			atomic_fetch_add(&rs->sh.failures, 1);
			break;
		}
		for (unsigned k = 0; k < n; k++)
			rs->last[t->id][first + k] = seq;
	}
	return NULL;
}

static void *rec_reader(void *arg)
{
	struct rec_thread *t = arg;
	struct rec_shared *rs = t->rs;
	uint64_t rng = rs->sh.seed * 13 + (uint64_t)t->id;
	static _Thread_local unsigned char buf[64 * RECORD];
	while (!atomic_load(&rs->sh.stop)) {
		unsigned first = (unsigned)test_rand_below(&rng, RECORDS);
		unsigned n = 1 + (unsigned)test_rand_below(&rng, 64);
		if (first + n > RECORDS)
			n = RECORDS - first;
		ssize_t r = folio_mapping_read(rs->sh.map, buf, n * RECORD,
					       (uint64_t)first * RECORD);
		if (r != (ssize_t)(n * RECORD)) {
			atomic_fetch_add(&rs->sh.failures, 1);
			break;
		}
		for (unsigned k = 0; k < n; k++) {
			uint32_t seq;
			if (record_writer(buf + k * RECORD, &seq) < 0) {
				atomic_fetch_add(&rs->sh.failures, 1);
				return NULL;
			}
		}
	}
	return NULL;
}

static void test_overlapping(void **state)
{
	(void)state;
	struct rec_shared *rs = calloc(1, sizeof(*rs));
	rs->sh.seed = test_seed("mapping_threads_overlapping");
	rs->sh.iters = test_iters(4000, 200);
	assert_int_equal(folio_engine_mem(&rs->sh.engine, 16u << 20), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o),
				       .block_size = 512,
				       .max_folio_size = 16 * 1024,
				       .size = RECORDS * RECORD,
				       .engine = rs->sh.engine};
	assert_int_equal(folio_mapping_new(&rs->sh.map, &o), 0);

	pthread_t w[WRITERS], r[READERS];
	struct rec_thread wt[WRITERS], rt[READERS];
	for (int i = 0; i < READERS; i++) {
		rt[i] = (struct rec_thread){rs, i};
		assert_int_equal(pthread_create(&r[i], NULL, rec_reader, &rt[i]),
				 0);
	}
	for (int i = 0; i < WRITERS; i++) {
		wt[i] = (struct rec_thread){rs, i};
		assert_int_equal(pthread_create(&w[i], NULL, rec_writer, &wt[i]),
				 0);
	}
	for (int i = 0; i < WRITERS; i++)
		pthread_join(w[i], NULL);
	atomic_store(&rs->sh.stop, true);
	for (int i = 0; i < READERS; i++)
		pthread_join(r[i], NULL);
	assert_int_equal(atomic_load(&rs->sh.failures), 0);

	unsigned char *buf = malloc(RECORDS * RECORD);
	assert_int_equal(folio_mapping_read(rs->sh.map, buf, RECORDS * RECORD,
					    0),
			 RECORDS * RECORD);
	for (unsigned i = 0; i < RECORDS; i++) {
		uint32_t seq = 0;
		int who = record_writer(buf + i * RECORD, &seq);
		assert_true(who >= 0);
		if (who == 0) {
			/* Never written by anyone. */
			for (int k = 0; k < WRITERS; k++)
				assert_int_equal(rs->last[k][i], 0);
			continue;
		}
		/* It is the last write of that writer to this record. */
		assert_int_equal(seq, rs->last[who - 1][i]);
	}
	assert_int_equal(folio_mapping_sync(rs->sh.map, NULL), 0);
	free(buf);
	assert_int_equal(folio_mapping_free(rs->sh.map), 0);
	assert_int_equal(folio_engine_free(rs->sh.engine), 0);
	free(rs);
}

/*
 * Whole folios, read while they are overwritten and reclaimed: a writer
 * fills one folio at a time with one byte value, readers read whole
 * folios (mostly cached: the read fast path) and must never see two
 * values in one, while a shrinker keeps taking clean folios away so that
 * reads also find folios missing, re-read, or leaving under them.
 */
#define WF_FOLIO (64 * 1024)
#define WF_FOLIOS 32
#define WF_READERS 2

struct wf_shared {
	struct folio_mapping *map;
	struct folio_pool *pool;
	atomic_bool stop;
	atomic_int torn;
	atomic_uint reads;
};

static void *wf_reader(void *arg)
{
	struct wf_shared *w = arg;
	unsigned char *buf = malloc(WF_FOLIO);
	uint64_t rng = (uint64_t)(uintptr_t)arg ^ (uint64_t)(uintptr_t)buf;
	while (!atomic_load(&w->stop)) {
		uint64_t i = test_rand_below(&rng, WF_FOLIOS);
		if (folio_mapping_read(w->map, buf, WF_FOLIO, i * WF_FOLIO) !=
		    WF_FOLIO) {
			atomic_fetch_add(&w->torn, 1);
			continue;
		}
		for (size_t k = 1; k < WF_FOLIO; k++)
			if (buf[k] != buf[0]) {
				atomic_fetch_add(&w->torn, 1);
				break;
			}
		atomic_fetch_add(&w->reads, 1);
	}
	free(buf);
	return NULL;
}

static void *wf_shrinker(void *arg)
{
	struct wf_shared *w = arg;
	while (!atomic_load(&w->stop)) {
		folio_pool_shrink(w->pool, 4 * WF_FOLIO);
		usleep(200);
	}
	return NULL;
}

static void test_whole_folio_reads(void **state)
{
	(void)state;
	struct wf_shared w = {.stop = false};
	uint64_t seed = test_seed("mapping_threads_whole_folio");
	uint64_t rng = seed;
	struct folio_engine *e;
	assert_int_equal(folio_engine_mem(&e, 16u << 20), 0);
	struct folio_pool_opts po = {.sz = sizeof(po),
				     .budget = WF_FOLIOS * WF_FOLIO / 2,
				     .flusher_threads = 1};
	assert_int_equal(folio_pool_new(&w.pool, &po), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o),
				       .min_folio_size = WF_FOLIO,
				       .max_folio_size = WF_FOLIO,
				       .size = WF_FOLIOS * WF_FOLIO,
				       /* Writeback copies out of the folio
				        * while no writer changes it. */
				       .flags = FOLIO_MAPPING_STABLE_WRITES,
				       .engine = e,
				       .pool = w.pool};
	assert_int_equal(folio_mapping_new(&w.map, &o), 0);
	pthread_t r[WF_READERS], sh;
	for (int i = 0; i < WF_READERS; i++)
		assert_int_equal(pthread_create(&r[i], NULL, wf_reader, &w), 0);
	assert_int_equal(pthread_create(&sh, NULL, wf_shrinker, &w), 0);
	unsigned char *buf = malloc(WF_FOLIO);
	unsigned writes = test_iters(3000, 300);
	for (unsigned n = 0; n < writes; n++) {
		uint64_t i = test_rand_below(&rng, WF_FOLIOS);
		memset(buf, (int)(1 + n % 255), WF_FOLIO);
		assert_int_equal(folio_mapping_write(w.map, buf, WF_FOLIO,
						     i * WF_FOLIO),
				 WF_FOLIO);
	}
	/* Readers get some time after the last write too. */
	while (atomic_load(&w.reads) < writes / 4)
		usleep(1000);
	atomic_store(&w.stop, true);
	for (int i = 0; i < WF_READERS; i++)
		pthread_join(r[i], NULL);
	pthread_join(sh, NULL);
	if (atomic_load(&w.torn))
		fail_msg("%d torn or short whole-folio reads (seed %llu)",
			 atomic_load(&w.torn), (unsigned long long)seed);
	assert_int_equal(folio_mapping_sync(w.map, NULL), 0);
	assert_int_equal(folio_mapping_free(w.map), 0);
	assert_int_equal(folio_pool_free(w.pool), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(buf);
}

/*
 * Reads that take no lock, racing truncates that cut into the folio they
 * read (doc/design.md, "Optimistic reads"): a truncater cuts a 64 KiB
 * folio's upper quarter (zeroing it, lowering EOF) and writes it back
 * with a new value, over and over, while readers read the folio's upper
 * half. A read returns one state of the object: the half of the first
 * value with the quarter of one value, or (EOF cut) only the lower
 * quarter. Never zeros under the old EOF: those are the truncate's, read
 * with the EOF from before it.
 */
#define TR_FOLIO (64 * 1024)
#define TR_CUT (TR_FOLIO * 3 / 4)
#define TR_READERS 2
#define TR_BEYOND 32

struct tr_shared {
	struct folio_mapping *map;
	atomic_bool stop;
	atomic_int bad;
	atomic_uint reads, cut_reads;
};

/* The values a read may see, and buffers filled with each, so that a
 * reader checks with memcmp() and spends its time reading. Filled before
 * the readers start. */
static const unsigned char tr_values[3] = {0xaa, 0xbb, 0xcc};
static unsigned char tr_fill[3][TR_FOLIO / 4];

/* buf[0, TR_FOLIO / 4) is all c, one of tr_values. */
static bool tr_quarter_is(const unsigned char *buf, unsigned char c)
{
	for (int i = 0; i < 3; i++)
		if (tr_values[i] == c)
			return !memcmp(buf, tr_fill[i], sizeof(tr_fill[i]));
	return false;
}

static void *tr_reader(void *arg)
{
	struct tr_shared *t = arg;
	size_t half = TR_FOLIO / 2, quarter = TR_FOLIO / 4;
	unsigned char *buf = malloc(half);
	while (!atomic_load(&t->stop)) {
		ssize_t n = folio_mapping_read(t->map, buf, half, half);
		bool ok = tr_quarter_is(buf, 0xaa);
		if (n == (ssize_t)half)
			ok = ok && tr_quarter_is(buf + quarter, buf[quarter]);
		else if (n == (ssize_t)quarter)
			atomic_fetch_add(&t->cut_reads, 1);
		else
			ok = false;
		if (!ok)
			atomic_fetch_add(&t->bad, 1);
		atomic_fetch_add(&t->reads, 1);
	}
	free(buf);
	return NULL;
}

static void test_reads_during_truncate(void **state)
{
	(void)state;
	struct tr_shared t = {.stop = false};
	struct folio_engine *e;
	assert_int_equal(folio_engine_mem(&e, 4u << 20), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o),
				       .min_folio_size = TR_FOLIO,
				       .max_folio_size = TR_FOLIO,
				       .engine = e};
	assert_int_equal(folio_mapping_new(&t.map, &o), 0);
	unsigned char *buf = malloc(2 * TR_FOLIO);
	memset(buf, 0xaa, 2 * TR_FOLIO);
	assert_int_equal(folio_mapping_write(t.map, buf, 2 * TR_FOLIO, 0),
			 2 * TR_FOLIO);
	for (int i = 0; i < 3; i++)
		memset(tr_fill[i], tr_values[i], sizeof(tr_fill[i]));
	pthread_t r[TR_READERS];
	for (int i = 0; i < TR_READERS; i++)
		assert_int_equal(pthread_create(&r[i], NULL, tr_reader, &t), 0);
	unsigned rounds = test_iters(5000, 200);
	size_t quarter = TR_FOLIO / 4;
	for (unsigned n = 0; n < rounds; n++) {
		assert_int_equal(folio_mapping_truncate(t.map, TR_CUT), 0);
		memset(buf, n & 1 ? 0xbb : 0xcc, quarter);
		assert_int_equal(folio_mapping_write(t.map, buf, quarter,
						     TR_CUT),
				 quarter);
		/* Folios past the cut for the next truncate to remove
		 * after it cut the first: that keeps the window between
		 * its cut and its new EOF wide, where a read would find
		 * the zeros with the old EOF. */
		for (uint64_t k = 1; k <= TR_BEYOND; k++)
			assert_int_equal(folio_mapping_write(t.map, buf, 1,
							     k * TR_FOLIO),
					 1);
	}
	atomic_store(&t.stop, true);
	for (int i = 0; i < TR_READERS; i++)
		pthread_join(r[i], NULL);
	print_message("# %u reads, %u of them cut short by EOF\n",
		      atomic_load(&t.reads), atomic_load(&t.cut_reads));
	assert_int_equal(atomic_load(&t.bad), 0);
	assert_true(atomic_load(&t.reads) > 0);
	assert_int_equal(folio_mapping_sync(t.map, NULL), 0);
	assert_int_equal(folio_mapping_free(t.map), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(buf);
}

/*
 * Every writer of a folio's data or of state an optimistic reader looks
 * at moves the folio's version (doc/design.md, "Optimistic reads"): a
 * snapshot a reader took of a cached, uptodate folio is never valid after
 * a buffered write, a write_begin/write_end, a truncate cutting into it,
 * a direct write over it, an invalidate or a reclaim. Taking any of
 * those writers' version bump out (the unlock's, or the removal's) fails
 * the check after it.
 */
#define VB_FOLIO (64u * 1024)

/* A referenced, cached, wholly uptodate folio holding pos and a
 * snapshot of it. */
static struct folio *vb_snap(struct folio_mapping *m, uint64_t pos,
			     struct folio_seq *s)
{
	struct folio *f;
	assert_int_equal(folio_mapping_lookup(m, pos, &f), 0);
	assert_true(folio_read_begin(f, s));
	assert_true(folio_read_valid(f, s));
	return f;
}

static void vb_fill(struct folio_mapping *m, unsigned char *buf, int c)
{
	memset(buf, c, 2 * VB_FOLIO);
	assert_int_equal(folio_mapping_write(m, buf, 2 * VB_FOLIO, 0),
			 2 * VB_FOLIO);
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
}

static void test_writers_move_version(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_pool *pool;
	struct folio_mapping *m;
	assert_int_equal(folio_engine_mem(&e, 1u << 20), 0);
	struct folio_pool_opts po = {.sz = sizeof(po), .budget = 8 * VB_FOLIO};
	assert_int_equal(folio_pool_new(&pool, &po), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o),
				       .min_folio_size = VB_FOLIO,
				       .max_folio_size = VB_FOLIO,
				       .engine = e,
				       .pool = pool};
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	/* Aligned for the direct write (valgrind's malloc aligns to 16). */
	unsigned char *buf = aligned_alloc(4096, 2 * VB_FOLIO);
	assert_non_null(buf);
	struct folio_seq s;
	struct folio *f;

	vb_fill(m, buf, 1);
	/* A read changes nothing. */
	f = vb_snap(m, 0, &s);
	assert_int_equal(folio_mapping_read(m, buf, VB_FOLIO, 0), VB_FOLIO);
	assert_true(folio_read_valid(f, &s));
	/* A buffered write of one byte. */
	assert_int_equal(folio_mapping_write(m, "x", 1, 100), 1);
	assert_false(folio_read_valid(f, &s));
	folio_put(f);
	/* write_begin / write_end. */
	f = vb_snap(m, 0, &s);
	struct folio *wf;
	assert_int_equal(folio_mapping_write_begin(m, 200, 1, &wf), 1);
	((unsigned char *)folio_data(wf))[200] = 'y';
	assert_int_equal(folio_mapping_write_end(m, wf, 200, 1), 1);
	assert_false(folio_read_valid(f, &s));
	folio_put(f);
	/* A truncate that zeroes the tail of the second folio. */
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	f = vb_snap(m, VB_FOLIO, &s);
	assert_int_equal(folio_mapping_truncate(m, VB_FOLIO + 1000), 0);
	assert_false(folio_read_valid(f, &s));
	folio_put(f);
	/* A direct write over a cached folio. */
	vb_fill(m, buf, 2);
	f = vb_snap(m, 0, &s);
	assert_int_equal(folio_mapping_write_direct(m, buf, 4096, 0, 0), 4096);
	assert_false(folio_read_valid(f, &s));
	folio_put(f);
	/* An invalidate. */
	vb_fill(m, buf, 3);
	f = vb_snap(m, 0, &s);
	assert_int_equal(folio_mapping_invalidate(m, 0, VB_FOLIO, 0), 0);
	assert_false(folio_read_valid(f, &s));
	folio_put(f);
	/* Reclaim. A hint pin keeps the header and data to look at
	 * without making the folio busy (an optimistic reader's epoch
	 * section does the same). */
	vb_fill(m, buf, 4);
	f = vb_snap(m, VB_FOLIO, &s);
	bool pinned = folio_hint_get(f);
	folio_put(f);
	assert_true(folio_pool_shrink(pool, 16 * VB_FOLIO) > 0);
	assert_true(folio_test_removed(f));
	assert_false(folio_read_valid(f, &s));
	folio_hint_put(f, pinned);
	free(buf);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_pool_free(pool), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

#define LR_FOLIO (16u * 1024)
#define LR_FOLIOS 48u
#define LR_SIZE ((uint64_t)LR_FOLIOS * LR_FOLIO)
#define LR_LOOKERS 2

struct lr_shared {
	struct folio_mapping *map;
	struct folio_pool *pool;
	atomic_bool stop;
	atomic_int failures;
	atomic_uint lookups, hits;
	uint64_t seed;
};

static void lr_fail(struct lr_shared *s, const char *what)
{
	if (atomic_fetch_add(&s->failures, 1) < 5)
		fprintf(stderr, "lookup race: %s\n", what);
}

/* Every byte ever written at pos: a truncate or invalidate may leave 0
 * there instead, nothing else. */
static unsigned char lr_byte(uint64_t pos)
{
	return (unsigned char)(1 + (pos >> 9) % 251);
}

/* Widen the window between finding a folio and referencing it on some
 * lookups, so removers get to run inside it. */
static void lr_delay(void)
{
	static _Thread_local unsigned n;
	if (++n % 8 == 0)
		usleep(20);
	else
		sched_yield();
}

static void *lr_looker(void *arg)
{
	struct lr_shared *s = arg;
	uint64_t rng = s->seed ^ (uint64_t)(uintptr_t)&rng;
	unsigned char buf[512];
	while (!atomic_load(&s->stop)) {
		uint64_t pos = test_rand_below(&rng, LR_SIZE);
		struct folio *f;
		atomic_fetch_add(&s->lookups, 1);
		int r = folio_mapping_lookup(s->map, pos, &f);
		if (r == -ENOENT)
			continue;
		if (r) {
			lr_fail(s, "lookup failed");
			continue;
		}
		atomic_fetch_add(&s->hits, 1);
		uint64_t at = folio_pos(f);
		if (pos < at || pos - at >= folio_size(f))
			lr_fail(s, "lookup returned a folio not holding pos");
		/* Header and data are live while the reference is held
		 * (the bytes race writers by design: not under TSan, which
		 * checks the ordering of the lookups themselves). */
		if (!TEST_UNDER_TSAN) {
			volatile unsigned char *d = folio_data(f);
			(void)d[pos - at];
			(void)d[folio_size(f) - 1];
		}
		folio_put(f);
		/* The read path's own lookups (trylock fast path and the
		 * locked one) with a content check. */
		uint64_t rpos = pos & ~(uint64_t)511;
		ssize_t n = folio_mapping_read(s->map, buf, sizeof(buf), rpos);
		if (n < 0)
			lr_fail(s, "read failed");
		for (ssize_t k = 0; k < n; k++)
			if (buf[k] && buf[k] != lr_byte(rpos + (uint64_t)k)) {
				lr_fail(s, "read wrong bytes");
				break;
			}
	}
	return NULL;
}

/* Writes (inserts, dirtying: tag sets) and syncs (writeback tags set and
 * cleared). */
static void *lr_writer(void *arg)
{
	struct lr_shared *s = arg;
	uint64_t rng = s->seed * 7 + 3;
	unsigned char buf[4096];
	for (unsigned i = 0; !atomic_load(&s->stop); i++) {
		uint64_t pos = test_rand_below(&rng, LR_SIZE / 4096) * 4096;
		for (size_t k = 0; k < sizeof(buf); k++)
			buf[k] = lr_byte(pos + k);
		if (folio_mapping_write(s->map, buf, sizeof(buf), pos) !=
		    (ssize_t)sizeof(buf))
			lr_fail(s, "write failed");
		if (i % 16 == 0 && folio_mapping_sync(s->map, NULL))
			lr_fail(s, "sync failed");
	}
	return NULL;
}

/* Removals: truncates (and the growth back), invalidates, reclaim. */
static void *lr_remover(void *arg)
{
	struct lr_shared *s = arg;
	uint64_t rng = s->seed * 13 + 5;
	for (unsigned i = 0; !atomic_load(&s->stop); i++) {
		uint64_t pos = test_rand_below(&rng, LR_SIZE);
		switch (i % 4) {
		case 0:
			if (folio_mapping_truncate(s->map, pos) ||
			    folio_mapping_truncate(s->map, LR_SIZE))
				lr_fail(s, "truncate failed");
			break;
		case 1: {
			int r = folio_mapping_invalidate(s->map, pos,
							 4 * LR_FOLIO, 0);
			if (r && r != -EBUSY)
				lr_fail(s, "invalidate failed");
			break;
		}
		case 2:
			if (folio_mapping_invalidate(s->map, pos, LR_FOLIO,
						     FOLIO_INVALIDATE_DISCARD))
				lr_fail(s, "discard failed");
			break;
		default:
			if (folio_pool_shrink(s->pool, 8 * LR_FOLIO) < 0)
				lr_fail(s, "shrink failed");
			break;
		}
		usleep(100);
	}
	return NULL;
}

static void test_lookup_races(void **state)
{
	(void)state;
	struct lr_shared s = {.seed = test_seed("mapping_threads_lookup")};
	struct folio_engine *e;
	assert_int_equal(folio_engine_mem(&e, 2 * LR_SIZE), 0);
	struct folio_pool_opts po = {.sz = sizeof(po),
				     .budget = LR_SIZE / 2,
				     .flusher_threads = 1};
	assert_int_equal(folio_pool_new(&s.pool, &po), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o),
				       .min_folio_size = 4096,
				       .max_folio_size = LR_FOLIO,
				       .size = LR_SIZE,
				       /* Writes wait for writeback: no
				        * copy races a write (TSan). */
				       .flags = FOLIO_MAPPING_STABLE_WRITES,
				       .engine = e,
				       .pool = s.pool};
	assert_int_equal(folio_mapping_new(&s.map, &o), 0);
	atomic_store(&mapping_test_lookup_delay, lr_delay);
	pthread_t lk[LR_LOOKERS], wr, rm;
	for (int i = 0; i < LR_LOOKERS; i++)
		assert_int_equal(pthread_create(&lk[i], NULL, lr_looker, &s),
				 0);
	assert_int_equal(pthread_create(&wr, NULL, lr_writer, &s), 0);
	assert_int_equal(pthread_create(&rm, NULL, lr_remover, &s), 0);
	/* Enough hits (lookups that found a folio and raced removers on
	 * it), or 30 s on a machine too busy to get there. */
	unsigned want = test_iters(4000, 200);
	for (unsigned ms = 0; ms < 30000 && atomic_load(&s.hits) < want &&
			      atomic_load(&s.failures) == 0;
	     ms++)
		usleep(1000);
	atomic_store(&s.stop, true);
	for (int i = 0; i < LR_LOOKERS; i++)
		pthread_join(lk[i], NULL);
	pthread_join(wr, NULL);
	pthread_join(rm, NULL);
	atomic_store(&mapping_test_lookup_delay, NULL);
	printf("# %u lookups, %u hits\n", atomic_load(&s.lookups),
	       atomic_load(&s.hits));
	assert_int_equal(atomic_load(&s.failures), 0);
	assert_true(atomic_load(&s.hits) > 0);
	assert_int_equal(folio_mapping_sync(s.map, NULL), 0);
	assert_int_equal(folio_mapping_free(s.map), 0);
	assert_int_equal(folio_pool_free(s.pool), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

/*
 * "A lock-free tag set lost to an exclusive clear-unless": a write's
 * completion marks its folio unstable and sets the UNSTABLE tag through
 * the folio's node with no index lock (mapping_mark_unstable() ->
 * mapping_tag_set_at()), while a flush's settle clears the tag under the
 * exclusive lock unless the folio is unstable again
 * (mapping_tag_clear_unless()). A completion that made the folio
 * unstable after the clear's look and set its bit before the clear had
 * its bit cleared: the folio stayed unstable with no tag, no flush ever
 * found it again and folio_mapping_free() returned -EBUSY (seen as
 * writeback_threads' test_stable_polled_engine failing at the free).
 * The `still` callback is that completion here, run at the worst moment:
 * inside the clear, after the look.
 */
static struct {
	struct index_place at;
	unsigned calls;
	bool back; /* the state the tag stands for came back */
} race;

static bool racing_still(const struct folio *f)
{
	(void)f;
	if (race.calls++ == 0) {
		/* The completion: state first, then the lock-free bit. */
		race.back = true;
		(void)index_tag_set_fast(race.at, INDEX_TAG_UNSTABLE);
		return false; /* what the look saw */
	}
	return race.back;
}

static void test_tag_set_during_clear_unless(void **state)
{
	(void)state;
	struct folio_engine *e;
	struct folio_mapping *m;
	assert_int_equal(folio_engine_mem(&e, 1u << 20), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o),
				       .block_size = 4096,
				       .max_folio_size = 64 * 1024,
				       .engine = e};
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	unsigned char buf[4096];
	memset(buf, 0x5a, sizeof(buf));
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 0),
			 (ssize_t)sizeof(buf));
	struct folio_writeback_opts wo = {.sz = sizeof(wo),
					  .flags = FOLIO_WB_WAIT};
	assert_true(folio_mapping_writeback(m, &wo) > 0);

	uint64_t key = 0;
	struct index_hit hit;
	assert_int_equal(mapping_next_tagged_batch(m, &key, UINT64_MAX,
						   INDEX_TAG_UNSTABLE, &hit, 1),
			 1);
	struct folio *f = hit.entry;
	race.at = hit.at;
	mapping_tag_clear_unless(m, f, INDEX_TAG_UNSTABLE, racing_still);
	pthread_rwlock_rdlock(&m->index_lock);
	bool tagged = index_tag_get(&m->index, hit.first, INDEX_TAG_UNSTABLE);
	pthread_rwlock_unlock(&m->index_lock);
	assert_true(tagged);
	folio_put(f);

	/* The folio is unstable and findable: a flush settles it. */
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_disjoint),
		cmocka_unit_test(test_overlapping),
		cmocka_unit_test(test_whole_folio_reads),
		cmocka_unit_test(test_reads_during_truncate),
		cmocka_unit_test(test_writers_move_version),
		cmocka_unit_test(test_lookup_races),
		cmocka_unit_test(test_tag_set_during_clear_unless),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
