/* SPDX-License-Identifier: MIT */
/*
 * --stats FILE: the pool's statistics and the mappings' counters summed
 * over every inode the mount has had (live ones and freed ones), as JSON,
 * written at unmount and on SIGUSR1. Written to FILE.tmp and renamed, so
 * that a reader never sees half a file.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff.h"

#define FF_POOL_FIELDS(X) \
	X(budget) X(dirty_background) X(dirty_limit) X(dirty_expire_ms) \
	X(flusher_threads) X(mappings) X(cached_bytes) X(dirty_bytes) \
	X(writeback_bytes) X(unstable_bytes) X(metadata_bytes) \
	X(small_bytes) X(main_bytes) X(hits) X(misses) X(ghost_hits) \
	X(reclaimed_bytes) X(reclaimed_folios) X(throttle_waits) \
	X(throttle_ns) X(memory_waits) X(memory_wait_ns) X(flusher_passes) \
	X(flusher_bytes) X(flushes)

struct sum {
	struct folio_mapping_stats st;
	uint64_t live;
};

static void add_inode(struct ff_inode *in, void *arg)
{
	struct sum *s = arg;
	struct folio_mapping_stats st = {.sz = sizeof(st)};
	/* The inode lock orders this against the first open attaching the
	 * mapping; the table lock our caller holds keeps the inode, and so
	 * its mapping, from going. */
	pthread_mutex_lock(&in->lock);
	if (in->map && !folio_mapping_stats(in->map, &st)) {
		ff_data_add_stats(&s->st, &st);
		s->live++;
	}
	pthread_mutex_unlock(&in->lock);
}

static void print_json(FILE *out, const struct folio_pool_stats *ps,
		       const struct sum *s)
{
	const char *sep = "";
	fprintf(out, "{\n  \"pool\": {");
#define FF_POOL_PRINT(f) \
	fprintf(out, "%s\n    \"" #f "\": %" PRIu64, sep, ps->f); sep = ",";
	FF_POOL_FIELDS(FF_POOL_PRINT)
#undef FF_POOL_PRINT
	fprintf(out, "\n  },\n  \"mappings\": {\n    \"live\": %" PRIu64,
		s->live);
#define FF_MAP_PRINT(f) \
	fprintf(out, ",\n    \"" #f "\": %" PRIu64, s->st.f);
	FF_MAPPING_COUNTERS(FF_MAP_PRINT)
#undef FF_MAP_PRINT
	/* Bytes submitted to writeback per byte the callers wrote. */
	double wa = s->st.bytes_written ?
			    (double)s->st.wb_bytes /
				    (double)s->st.bytes_written :
			    0.0;
	fprintf(out, ",\n    \"write_amplification\": %.4f\n  }\n}\n", wa);
}

int ff_stats_write(struct ff_fs *fs, const char *path)
{
	struct folio_pool_stats ps = {.sz = sizeof(ps)};
	if (fs->pool)
		(void)folio_pool_stats(fs->pool, &ps);
	struct sum s = {.st.sz = sizeof(s.st)};
	ff_table_lock();
	ff_inode_for_each(fs, add_inode, &s);
	ff_table_unlock();
	pthread_mutex_lock(&fs->retired_lock);
	ff_data_add_stats(&s.st, &fs->retired);
	pthread_mutex_unlock(&fs->retired_lock);

	char *tmp = NULL;
	if (asprintf(&tmp, "%s.tmp", path) < 0)
		return -ENOMEM;
	int err = 0;
	FILE *out = fopen(tmp, "w");
	if (!out) {
		err = -errno;
	} else {
		print_json(out, &ps, &s);
		if (ferror(out))
			err = -EIO;
		if (fclose(out) && !err)
			err = -errno;
		if (!err && rename(tmp, path))
			err = -errno;
		if (err)
			remove(tmp);
	}
	if (err)
		fprintf(stderr, "folio-fuse: cannot write %s: %s\n", path,
			strerror(-err));
	free(tmp);
	return err;
}
