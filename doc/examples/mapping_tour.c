/* SPDX-License-Identifier: MIT */
/*
 * mapping_tour: the mapping layer over the mem engine. Buffered write and
 * read, zero-copy write_begin/write_end, lookup, dirty ranges, truncate,
 * invalidate and statistics; then the write amplification of 4 KiB random
 * overwrites with per-block tracking versus whole-folio tracking
 * (FOLIO_MAPPING_FOLIO_DIRTY).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <folio_state.h>
#include <folio_state_mem.h>

#define KIB 1024u
#define MIB (1024u * 1024u)

#define CHECK(cond)                                                       \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr, "%s:%d: check failed: %s\n",      \
				__FILE__, __LINE__, #cond);               \
			exit(1);                                          \
		}                                                         \
	} while (0)

static struct folio_mapping *open_mapping(struct folio_engine *e,
					  uint64_t size, unsigned flags)
{
	struct folio_mapping *m;
	struct folio_mapping_opts opts = {
		.sz = sizeof(opts),
		.block_size = 4 * KIB,
		.min_folio_size = 64 * KIB,
		.max_folio_size = 64 * KIB,
		.size = size, /* of the object the engine holds */
		.flags = flags,
		.engine = e,
	};
	CHECK(folio_mapping_new(&m, &opts) == 0);
	return m;
}

/* doc:begin ranges */
/* folio_mapping_dirty_ranges() callback: print and count. */
static int show_range(uint64_t pos, uint64_t len, void *arg)
{
	unsigned *count = arg;
	printf("  dirty [%llu, %llu)\n", (unsigned long long)pos,
	       (unsigned long long)(pos + len));
	++*count;
	return 0; /* non-zero would stop the walk and be returned */
}
/* doc:end ranges */

/* doc:begin amplification */
/* Overwrite one 4 KiB block in each of 256 scattered 64 KiB folios of a
 * 64 MiB object, sync, and return bytes written back per byte written. */
static double amplification(unsigned flags)
{
	struct folio_engine *e;
	CHECK(folio_engine_mem(&e, 64 * MIB) == 0);
	struct folio_mapping *m = open_mapping(e, 64 * MIB, flags);
	static char block[4 * KIB];
	for (uint64_t i = 0; i < 256; i++) {
		uint64_t folio = i * 97 % 1024; /* 256 different folios */
		uint64_t pos = folio * 64 * KIB + i * 13 % 16 * 4 * KIB;
		CHECK(folio_mapping_write(m, block, sizeof(block), pos) ==
		      (ssize_t)sizeof(block));
	}
	CHECK(folio_mapping_sync(m, NULL) == 0);
	struct folio_mapping_stats st = {.sz = sizeof(st)};
	CHECK(folio_mapping_stats(m, &st) == 0);
	CHECK(folio_mapping_free(m) == 0);
	CHECK(folio_engine_free(e) == 0);
	return (double)st.wb_bytes / (double)st.bytes_written;
}
/* doc:end amplification */

int main(void)
{
	struct folio_engine *e;
	CHECK(folio_engine_mem(&e, 16 * MIB) == 0);
	struct folio_mapping *m = open_mapping(e, 0, 0);

	/* Buffered write and read, like pwrite(2) and pread(2). */
	char rec[100];
	memset(rec, 'r', sizeof(rec));
	CHECK(folio_mapping_write(m, rec, sizeof(rec), 1000) == 100);
	CHECK(folio_mapping_size(m) == 1100);
	char back[200];
	CHECK(folio_mapping_read(m, back, sizeof(back), 1000) == 100); /* EOF */
	CHECK(memcmp(back, rec, 100) == 0);

	/* doc:begin zerocopy */
	/* Zero-copy: format a record directly in folio memory. */
	struct folio *f;
	uint64_t pos = 200 * KIB + 10;
	ssize_t room = folio_mapping_write_begin(m, pos, 300, &f);
	CHECK(room == 300); /* the whole range lies in one folio */
	char *dst = (char *)folio_data(f) + (pos - folio_pos(f));
	int n = snprintf(dst, (size_t)room, "record written in place");
	CHECK(folio_mapping_write_end(m, f, pos, (size_t)n) == n);
	/* f is unlocked and its reference dropped: do not use it now. */
	/* doc:end zerocopy */
	CHECK(folio_mapping_read(m, back, (size_t)n, pos) == n);
	CHECK(memcmp(back, "record written in place", (size_t)n) == 0);

	/* doc:begin lookup */
	/* Inspect the cached folio holding a position. */
	struct folio *cached;
	if (folio_mapping_lookup(m, 1000, &cached) == 0) {
		printf("folio [%llu, +%zu): dirty %d, uptodate %d\n",
		       (unsigned long long)folio_pos(cached),
		       folio_size(cached), folio_is_dirty(cached, 0, 4096),
		       folio_is_uptodate(cached, 0, 4096));
		folio_put(cached);
	}
	CHECK(folio_mapping_lookup(m, 8 * MIB, &cached) == -ENOENT);
	/* doc:end lookup */

	unsigned count = 0;
	CHECK(folio_mapping_dirty_ranges(m, 0, 0, show_range, &count) == 0);
	CHECK(count == 2); /* block 0 and block 50 */

	/* Shrink: the folio past the new EOF goes, with its dirty data. */
	CHECK(folio_mapping_truncate(m, 4096) == 0);
	count = 0;
	CHECK(folio_mapping_dirty_ranges(m, 0, 0, show_range, &count) == 0);
	CHECK(count == 1);
	/* Grow: the new space reads as zeros. */
	CHECK(folio_mapping_truncate(m, 8192) == 0);
	CHECK(folio_mapping_read(m, back, 10, 5000) == 10);
	CHECK(back[0] == 0 && back[9] == 0);

	/* Invalidate keeps dirty folios unless told to discard them. */
	CHECK(folio_mapping_invalidate(m, 0, 0, 0) == -EBUSY);
	CHECK(folio_mapping_sync(m, NULL) == 0);
	CHECK(folio_mapping_invalidate(m, 0, 0, 0) == 0);

	struct folio_mapping_stats st = {.sz = sizeof(st)};
	CHECK(folio_mapping_stats(m, &st) == 0);
	CHECK(st.folios == 0 && st.dirty_bytes == 0);
	printf("written %llu, read %llu, written back %llu in %llu requests\n",
	       (unsigned long long)st.bytes_written,
	       (unsigned long long)st.bytes_read,
	       (unsigned long long)st.wb_bytes,
	       (unsigned long long)st.wb_requests);
	CHECK(folio_mapping_free(m) == 0);
	CHECK(folio_engine_free(e) == 0);

	double per_block = amplification(0);
	double per_folio = amplification(FOLIO_MAPPING_FOLIO_DIRTY);
	printf("write amplification: per-block %.2f, whole-folio %.2f\n",
	       per_block, per_folio);
	CHECK(per_block == 1.0 && per_folio == 16.0);
	return 0;
}
