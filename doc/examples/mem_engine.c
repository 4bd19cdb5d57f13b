/* SPDX-License-Identifier: MIT */
/*
 * mem_engine: the in-memory engine as a test double. Set up backing data
 * with poke, check it with peek, complete requests asynchronously (POLL
 * and THREAD modes), scatter extents with a map, and count everything.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <folio_state.h>
#include <folio_state_mem.h>

#define CHECK(cond)                                                       \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr, "%s:%d: check failed: %s\n",      \
				__FILE__, __LINE__, #cond);               \
			exit(1);                                          \
		}                                                         \
	} while (0)

static void roundtrip(struct folio_engine *e, unsigned char *data, size_t len)
{
	struct folio_mapping *m;
	struct folio_mem_stats ms = {.sz = sizeof(ms)};
	CHECK(folio_engine_mem_stats(e, &ms) == 0);
	struct folio_mapping_opts opts = {
		.sz = sizeof(opts),
		.max_folio_size = 32768,
		.size = ms.size, /* whatever the store holds already */
		.engine = e,
	};
	CHECK(folio_mapping_new(&m, &opts) == 0);
	for (size_t i = 0; i < len; i++)
		data[i] = (unsigned char)(data[i] * 5 + 1);
	CHECK(folio_mapping_write(m, data, len, 0) == (ssize_t)len);
	CHECK(folio_mapping_sync(m, NULL) == 0);
	CHECK(folio_mapping_invalidate(m, 0, 0, 0) == 0);
	unsigned char *back = malloc(len);
	CHECK(back && folio_mapping_read(m, back, len, 0) == (ssize_t)len);
	CHECK(memcmp(back, data, len) == 0);
	CHECK(folio_engine_mem_peek(e, back, len, 0) == 0);
	CHECK(memcmp(back, data, len) == 0);
	free(back);
	CHECK(folio_mapping_free(m) == 0);
}

int main(void)
{
	static unsigned char data[256 * 1024];
	struct folio_engine *e;
	CHECK(folio_engine_mem(&e, 1 << 20) == 0);

	/* doc:begin map */
	/* Scatter 8 KiB extents (set before any data or mapping exists):
	 * contiguous file runs are no longer contiguous on the "device", and
	 * the engine fails any request whose dev_pos disagrees with it. */
	CHECK(folio_engine_mem_set_map(e, 8192, true) == 0);
	/* doc:end map */

	/* doc:begin poke */
	/* Prepare backing data directly (not counted, never faulted). */
	memset(data, 7, sizeof(data));
	CHECK(folio_engine_mem_poke(e, data, sizeof(data), 0) == 0);
	/* doc:end poke */

	roundtrip(e, data, sizeof(data));

	/* doc:begin modes */
	/* Complete requests later, in a pseudo-random order: from wait()
	 * (POLL), or from an engine thread (THREAD). Same seed, same run. */
	CHECK(folio_engine_mem_set_mode(e, FOLIO_MEM_POLL, 42) == 0);
	roundtrip(e, data, sizeof(data));
	CHECK(folio_engine_mem_set_mode(e, FOLIO_MEM_THREAD, 42) == 0);
	roundtrip(e, data, sizeof(data));
	CHECK(folio_engine_mem_set_mode(e, FOLIO_MEM_SYNC, 0) == 0);
	/* doc:end modes */

	/* doc:begin stats */
	struct folio_mem_stats ms = {.sz = sizeof(ms)};
	CHECK(folio_engine_mem_stats(e, &ms) == 0);
	printf("mem engine: %llu write requests (%llu bytes), %llu reads, "
	       "%llu flushes, %llu map calls, size %llu\n",
	       (unsigned long long)ms.write_requests,
	       (unsigned long long)ms.write_bytes,
	       (unsigned long long)ms.read_requests,
	       (unsigned long long)ms.flushes,
	       (unsigned long long)ms.map_calls,
	       (unsigned long long)ms.size);
	CHECK(ms.misdirected == 0 && ms.inflight == 0 && ms.flushes == 3);
	/* doc:end stats */

	/* Faults apply to a file range and a number of matches. */
	struct folio_mem_fault fault = {
		.sz = sizeof(fault),
		.ops = FOLIO_MEM_OP_WRITE | FOLIO_MEM_OP_READ,
		.pos = 4096,
		.len = 1,
		.skip = 1,   /* the first matching request goes through */
		.count = 1,  /* the second one fails */
		.error = -EIO,
	};
	CHECK(folio_engine_mem_inject(e, &fault) == 0);
	fault.short_len = 1; /* error and short_len together: refused */
	CHECK(folio_engine_mem_inject(e, &fault) == -EINVAL);
	CHECK(folio_engine_mem_clear_faults(e) == 0);

	/* The map can change only while the store is empty. */
	CHECK(folio_engine_mem_set_map(e, 0, false) == -EBUSY);
	CHECK(folio_engine_free(e) == 0);
	return 0;
}
