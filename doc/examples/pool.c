/* SPDX-License-Identifier: MIT */
/*
 * Two caches in one budget: two mappings over their own mem engines share
 * a 1 MiB pool while 4 MiB are written through each and read back. The
 * pool reclaims, writes back and flushes on its own; the program only
 * checks the data and prints what the pool did.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <folio_state_mem.h>

#define FILE_SIZE (4u << 20)
#define CHECK(cond)                                                        \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, \
				#cond);                                    \
			exit(1);                                           \
		}                                                          \
	} while (0)

int main(void)
{
	/* doc:begin setup */
	struct folio_pool *pool;
	struct folio_pool_opts po = {
		.sz = sizeof(po),
		.budget = 1u << 20,  /* 1 MiB of folio data for both */
		.flusher_threads = 1, /* background writeback */
	};
	CHECK(folio_pool_new(&pool, &po) == 0);

	struct folio_engine *e[2];
	struct folio_mapping *m[2];
	for (int i = 0; i < 2; i++) {
		CHECK(folio_engine_mem(&e[i], 64u << 20) == 0);
		struct folio_mapping_opts mo = {
			.sz = sizeof(mo),
			.max_folio_size = 64u << 10, /* at most the budget */
			.engine = e[i],
			.pool = pool,
		};
		CHECK(folio_mapping_new(&m[i], &mo) == 0);
	}
	/* doc:end setup */

	unsigned char *buf = malloc(FILE_SIZE), *back = malloc(FILE_SIZE);
	CHECK(buf && back);
	for (int i = 0; i < 2; i++) {
		for (size_t k = 0; k < FILE_SIZE; k++)
			buf[k] = (unsigned char)(k * 31 + (size_t)i);
		/* Four times the budget in one call: it completes in pieces. */
		CHECK(folio_mapping_write(m[i], buf, FILE_SIZE, 0) == FILE_SIZE);
	}
	for (int i = 0; i < 2; i++) {
		for (size_t k = 0; k < FILE_SIZE; k++)
			buf[k] = (unsigned char)(k * 31 + (size_t)i);
		CHECK(folio_mapping_read(m[i], back, FILE_SIZE, 0) == FILE_SIZE);
		CHECK(memcmp(buf, back, FILE_SIZE) == 0);
	}

	/* doc:begin stats */
	struct folio_pool_stats st = {.sz = sizeof(st)};
	CHECK(folio_pool_stats(pool, &st) == 0);
	printf("cached %llu of %llu bytes, %llu reclaimed, %llu hits, "
	       "%llu misses, %llu throttled writes\n",
	       (unsigned long long)st.cached_bytes,
	       (unsigned long long)st.budget,
	       (unsigned long long)st.reclaimed_bytes,
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.throttle_waits);
	/* doc:end stats */
	CHECK(st.cached_bytes <= st.budget);

	/* doc:begin teardown */
	for (int i = 0; i < 2; i++)
		CHECK(folio_mapping_sync(m[i], NULL) == 0);
	int64_t given = folio_pool_shrink(pool, UINT64_MAX); /* all clean */
	CHECK(given >= 0);
	CHECK(folio_pool_free(pool) == -EBUSY); /* mappings still in it */
	for (int i = 0; i < 2; i++) {
		CHECK(folio_mapping_free(m[i]) == 0);
		CHECK(folio_engine_free(e[i]) == 0);
	}
	CHECK(folio_pool_free(pool) == 0);
	/* doc:end teardown */
	printf("shrink gave back %lld bytes\n", (long long)given);
	free(buf);
	free(back);
	return 0;
}
