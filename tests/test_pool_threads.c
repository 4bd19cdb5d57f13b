/* SPDX-License-Identifier: MIT */
/*
 * Threads on a pool much smaller than its mappings' data: writers (one
 * per mapping, so its final content is known), readers of every mapping,
 * a truncater racing the writer of one mapping, a thread that shrinks the
 * pool and checks its budget, a thread that creates, fills and frees
 * mappings of its own, and the pool's flusher threads, all at once.
 * Reclaim takes folios of any mapping from whichever thread needs room,
 * holding that thread's io_lock shared and folio locks, while truncates
 * and frees take locks exclusively: a lock-order mistake hangs here (the
 * test runs under a watchdog), a reclaim of a folio someone uses shows as
 * a torn or stale record.
 *
 * Data: 512-byte records at 512-byte positions, never across a folio
 * (folios are at least 4 KiB and aligned), each holding its own
 * position, the mapping's number and a version, repeated. Writes cover
 * whole records, so every record a reader sees is zero (never written,
 * or cut) or whole and at its own position. At the end every owned
 * mapping holds exactly its writer's last versions, in the cache and,
 * after a sync, in the store; the pool's counts are exact again.
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
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "folio_state.h"
#include "folio_state_mem.h"
#include "test_util.h"

/* A write into a folio under writeback re-dirties it and the engine may
 * copy either version: a race by design, which TSan reports, so under
 * TSan every mapping waits for writeback instead. */
#define RACY_FLAGS (TEST_UNDER_TSAN ? FOLIO_MAPPING_STABLE_WRITES : 0u)

#define REC 512u
#define NREC 1024u /* records per mapping: 512 KiB */
#define SPAN (NREC * REC)
#define NOWN 3     /* mappings with one writer each */
#define NMAP (NOWN + 1) /* the last one: writer and truncater race */
#define BUDGET (512u * 1024u)
#define MAX_RECS 48u

struct shared {
	struct folio_pool *p;
	struct folio_engine *e[NMAP];
	struct folio_mapping *m[NMAP];
	uint32_t version[NOWN][NREC]; /* writers' models */
	uint64_t seed;
	unsigned iters;
	atomic_int writers_left;
	atomic_bool stop;
	atomic_int failures;
	char why[256];
	pthread_mutex_t why_lock;
};

static void failed(struct shared *sh, const char *fmt, ...)
{
	pthread_mutex_lock(&sh->why_lock);
	if (!atomic_load(&sh->failures)) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(sh->why, sizeof(sh->why), fmt, ap);
		va_end(ap);
	}
	atomic_fetch_add(&sh->failures, 1);
	pthread_mutex_unlock(&sh->why_lock);
}

static void make_record(unsigned char *r, unsigned mi, uint32_t rec,
			uint32_t version)
{
	uint32_t w[4] = {rec, mi, version, rec ^ version ^ 0x5a5a5a5au};
	for (unsigned i = 0; i < REC; i += sizeof(w))
		memcpy(r + i, w, sizeof(w));
}

/* 0: zeros; 1: a whole record of its own position; -1: torn/stale. */
static int check_record(const unsigned char *r, unsigned mi, uint32_t rec,
			uint32_t *version)
{
	static const unsigned char zero[REC];
	if (!memcmp(r, zero, REC))
		return 0;
	uint32_t w[4];
	memcpy(w, r, sizeof(w));
	if (w[0] != rec || w[1] != mi || w[3] != (rec ^ w[2] ^ 0x5a5a5a5au))
		return -1;
	for (unsigned i = sizeof(w); i < REC; i += sizeof(w))
		if (memcmp(r + i, w, sizeof(w)))
			return -1;
	*version = w[2];
	return 1;
}

struct worker {
	struct shared *sh;
	unsigned id;
	pthread_t t;
};

static void *writer_main(void *arg)
{
	struct worker *wk = arg;
	struct shared *sh = wk->sh;
	unsigned mi = wk->id;
	uint64_t rng = sh->seed * 31 + mi + 1;
	static _Thread_local unsigned char buf[MAX_RECS * REC];
	uint32_t next = 1;
	for (unsigned i = 0; i < sh->iters && !atomic_load(&sh->failures);
	     i++) {
		uint32_t n = 1 + (uint32_t)test_rand_below(&rng, MAX_RECS);
		uint32_t first = (uint32_t)test_rand_below(&rng, NREC - n + 1);
		uint32_t v = next++;
		for (uint32_t k = 0; k < n; k++)
			make_record(buf + k * REC, mi, first + k, v);
		ssize_t r = folio_mapping_write(sh->m[mi], buf, n * REC,
						(uint64_t)first * REC);
		if (r != (ssize_t)(n * REC)) {
			failed(sh, "writer %u: write returned %zd", mi, r);
			break;
		}
		if (mi < NOWN)
			for (uint32_t k = 0; k < n; k++)
				sh->version[mi][first + k] = v;
		if (test_rand_below(&rng, 50) == 0 &&
		    folio_mapping_sync(sh->m[mi], NULL))
			failed(sh, "writer %u: sync failed", mi);
	}
	atomic_fetch_sub(&sh->writers_left, 1);
	return NULL;
}

static void *reader_main(void *arg)
{
	struct worker *wk = arg;
	struct shared *sh = wk->sh;
	uint64_t rng = sh->seed * 77 + wk->id;
	static _Thread_local unsigned char buf[MAX_RECS * 2 * REC];
	while (atomic_load(&sh->writers_left) > 0 &&
	       !atomic_load(&sh->failures)) {
		unsigned mi = (unsigned)test_rand_below(&rng, NMAP);
		uint32_t n = 1 + (uint32_t)test_rand_below(&rng, 2 * MAX_RECS);
		uint32_t first = (uint32_t)test_rand_below(&rng, NREC - n + 1);
		ssize_t r = folio_mapping_read(sh->m[mi], buf, n * REC,
					       (uint64_t)first * REC);
		if (r < 0) {
			failed(sh, "reader: read of mapping %u: %zd", mi, r);
			break;
		}
		/* EOF moves with writes and truncates: whole records only. */
		for (uint32_t k = 0; k < (uint32_t)r / REC; k++) {
			uint32_t v;
			if (check_record(buf + k * REC, mi, first + k,
					 &v) < 0) {
				failed(sh, "reader: mapping %u record %u torn "
					   "or misplaced", mi, first + k);
				break;
			}
		}
	}
	return NULL;
}

/* Cuts the raced mapping at record boundaries and grows it back. */
static void *truncater_main(void *arg)
{
	struct worker *wk = arg;
	struct shared *sh = wk->sh;
	uint64_t rng = sh->seed * 13 + 5;
	while (atomic_load(&sh->writers_left) > 0 &&
	       !atomic_load(&sh->failures)) {
		uint64_t size = test_rand_below(&rng, NREC + 1) * REC;
		if (folio_mapping_truncate(sh->m[NOWN], size))
			failed(sh, "truncater: truncate failed");
		usleep(200);
	}
	return NULL;
}

static uint64_t pool_cached(struct folio_pool *p)
{
	struct folio_pool_stats st = {.sz = sizeof(st)};
	if (folio_pool_stats(p, &st))
		return UINT64_MAX;
	return st.cached_bytes;
}

/* Shrinks now and then, and checks the budget all the time. */
static void *shrinker_main(void *arg)
{
	struct worker *wk = arg;
	struct shared *sh = wk->sh;
	uint64_t rng = sh->seed * 19 + 3;
	while (atomic_load(&sh->writers_left) > 0 &&
	       !atomic_load(&sh->failures)) {
		uint64_t c = pool_cached(sh->p);
		if (c > BUDGET)
			failed(sh, "pool holds %llu bytes, budget %u",
			       (unsigned long long)c, BUDGET);
		if (test_rand_below(&rng, 4) == 0 &&
		    folio_pool_shrink(sh->p, test_rand_below(&rng, BUDGET)) < 0)
			failed(sh, "shrink failed");
		usleep(300);
	}
	return NULL;
}

/* Mappings that come and go while the others reclaim from them. */
static void *churn_main(void *arg)
{
	struct worker *wk = arg;
	struct shared *sh = wk->sh;
	static _Thread_local unsigned char buf[64 * 1024];
	unsigned round = 0;
	while (atomic_load(&sh->writers_left) > 0 &&
	       !atomic_load(&sh->failures)) {
		struct folio_engine *e;
		struct folio_mapping *m;
		if (folio_engine_mem(&e, 1u << 20)) {
			failed(sh, "churn: engine");
			break;
		}
		struct folio_mapping_opts mo = {.sz = sizeof(mo),
						.max_folio_size = 16384,
						.flags = RACY_FLAGS,
						.engine = e, .pool = sh->p};
		if (folio_mapping_new(&m, &mo)) {
			failed(sh, "churn: mapping");
			folio_engine_free(e);
			break;
		}
		memset(buf, (int)(round++ & 0xff) | 1, sizeof(buf));
		for (unsigned k = 0; k < 4; k++)
			if (folio_mapping_write(m, buf, sizeof(buf),
						k * sizeof(buf)) !=
			    (ssize_t)sizeof(buf))
				failed(sh, "churn: write");
		if (folio_mapping_sync(m, NULL))
			failed(sh, "churn: sync");
		/* Clean and flushed: free must not see it busy, whatever
		 * the reclaimers and flushers do to it meanwhile. */
		int r = folio_mapping_free(m);
		if (r)
			failed(sh, "churn: free returned %d", r);
		if (folio_engine_free(e))
			failed(sh, "churn: engine busy");
	}
	return NULL;
}

static void check_final(struct shared *sh)
{
	static unsigned char buf[SPAN], want[REC];
	for (unsigned mi = 0; mi < NMAP; mi++) {
		assert_int_equal(folio_mapping_sync(sh->m[mi], NULL), 0);
		int64_t size = folio_mapping_size(sh->m[mi]);
		assert_true(size >= 0 && size <= (int64_t)SPAN);
		/* Through the cache, and then straight from the store. */
		for (int pass = 0; pass < 2; pass++) {
			memset(buf, 0xee, sizeof(buf));
			if (pass == 0)
				assert_int_equal(folio_mapping_read(sh->m[mi],
								    buf, SPAN,
								    0),
						 size);
			else
				assert_int_equal(folio_engine_mem_peek(
							 sh->e[mi], buf,
							 (size_t)size, 0),
						 0);
			for (uint32_t k = 0; k < (uint32_t)size / REC; k++) {
				uint32_t v = 0;
				int c = check_record(buf + k * REC, mi, k, &v);
				if (mi == NOWN) {
					assert_true(c >= 0);
					continue;
				}
				uint32_t model = sh->version[mi][k];
				if (!model) {
					assert_int_equal(c, 0);
					continue;
				}
				make_record(want, mi, k, model);
				if (memcmp(buf + k * REC, want, REC))
					fail_msg("mapping %u record %u: %s has "
						 "version %u, writer wrote %u",
						 mi, k,
						 pass ? "store" : "cache",
						 c > 0 ? v : 0, model);
			}
		}
	}
	/* Exact counts once nothing runs. */
	struct folio_pool_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_pool_stats(sh->p, &st), 0);
	uint64_t cached = 0, unstable = 0;
	for (unsigned mi = 0; mi < NMAP; mi++) {
		struct folio_mapping_stats ms = test_mapping_stats(sh->m[mi]);
		for (unsigned k = 0; k < FOLIO_STATS_SHIFTS; k++)
			cached += ms.folios_by_shift[k] << (9 + k);
		unstable += ms.unstable_bytes;
		assert_int_equal(ms.dirty_bytes, 0);
	}
	assert_int_equal(st.cached_bytes, cached);
	assert_int_equal(st.dirty_bytes, 0);
	assert_int_equal(st.writeback_bytes, 0);
	assert_int_equal(st.unstable_bytes, unstable);
	assert_true(st.cached_bytes <= BUDGET);
	printf("# %llu hits, %llu misses, %llu ghost hits, %llu reclaimed, "
	       "%llu throttled (%.1f ms), %llu memory waits, %llu flusher "
	       "passes, %llu pool flushes\n",
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.ghost_hits,
	       (unsigned long long)st.reclaimed_bytes,
	       (unsigned long long)st.throttle_waits,
	       (double)st.throttle_ns / 1e6,
	       (unsigned long long)st.memory_waits,
	       (unsigned long long)st.flusher_passes,
	       (unsigned long long)st.flushes);
}

static void run(unsigned flushers, enum folio_mem_mode mode)
{
	struct shared *sh = calloc(1, sizeof(*sh));
	assert_non_null(sh);
	pthread_mutex_init(&sh->why_lock, NULL);
	sh->seed = test_seed("pool_threads");
	sh->iters = test_iters(5000, 150);
	struct folio_pool_opts po = {.sz = sizeof(po), .budget = BUDGET,
				     .dirty_expire_ms = 50,
				     .flusher_threads = flushers};
	assert_int_equal(folio_pool_new(&sh->p, &po), 0);
	for (unsigned mi = 0; mi < NMAP; mi++) {
		assert_int_equal(folio_engine_mem(&sh->e[mi], 16u << 20), 0);
		enum folio_mem_mode mm = mi % 2 ? mode : FOLIO_MEM_SYNC;
		assert_int_equal(folio_engine_mem_set_mode(sh->e[mi], mm,
							   sh->seed + mi),
				 0);
		struct folio_mapping_opts mo = {
			.sz = sizeof(mo), .block_size = mi % 2 ? 512 : 4096,
			.max_folio_size = (size_t)16384 << (mi % 3),
			.flags = mi % 2 ? FOLIO_MAPPING_STABLE_WRITES
					: RACY_FLAGS,
			.engine = sh->e[mi], .pool = sh->p};
		assert_int_equal(folio_mapping_new(&sh->m[mi], &mo), 0);
	}
	enum { READERS = 2 };
	struct worker w[NMAP + READERS + 3];
	unsigned nw = 0;
	atomic_store(&sh->writers_left, NMAP);
	for (unsigned mi = 0; mi < NMAP; mi++, nw++) {
		w[nw] = (struct worker){sh, mi, 0};
		assert_int_equal(pthread_create(&w[nw].t, NULL, writer_main,
						&w[nw]),
				 0);
	}
	for (unsigned r = 0; r < READERS; r++, nw++) {
		w[nw] = (struct worker){sh, r, 0};
		assert_int_equal(pthread_create(&w[nw].t, NULL, reader_main,
						&w[nw]),
				 0);
	}
	void *(*others[])(void *) = {truncater_main, shrinker_main,
				     churn_main};
	for (unsigned i = 0; i < 3; i++, nw++) {
		w[nw] = (struct worker){sh, i, 0};
		assert_int_equal(pthread_create(&w[nw].t, NULL, others[i],
						&w[nw]),
				 0);
	}
	/* A watchdog: a lock-order mistake would hang the joins. */
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (atomic_load(&sh->writers_left) > 0) {
		usleep(10000);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 240) {
			fprintf(stderr, "pool_threads: no progress for 240 s "
					"(deadlock?)\n");
			abort();
		}
	}
	for (unsigned i = 0; i < nw; i++)
		assert_int_equal(pthread_join(w[i].t, NULL), 0);
	if (atomic_load(&sh->failures))
		fail_msg("%d failures; first: %s", atomic_load(&sh->failures),
			 sh->why);
	for (unsigned mi = 0; mi < NMAP; mi++)
		assert_int_equal(folio_engine_mem_set_mode(sh->e[mi],
							   FOLIO_MEM_SYNC, 1),
				 0);
	check_final(sh);
	for (unsigned mi = 0; mi < NMAP; mi++)
		test_close(sh->m[mi], sh->e[mi]);
	assert_int_equal(folio_pool_free(sh->p), 0);
	pthread_mutex_destroy(&sh->why_lock);
	free(sh);
}

static void test_threads_no_flushers(void **state)
{
	(void)state;
	run(0, FOLIO_MEM_THREAD);
}

static void test_threads_flushers(void **state)
{
	(void)state;
	run(2, FOLIO_MEM_POLL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_threads_no_flushers),
		cmocka_unit_test(test_threads_flushers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
