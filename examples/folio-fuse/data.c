/* SPDX-License-Identifier: MIT */
/*
 * A file's data: one folio_mapping per inode over the posix engine on a
 * read-write descriptor of the backing file, every mapping in the mount's
 * pool. It is created by the first open and shared by every handle, so
 * that all of them see one cache; it outlives the handles (the cache
 * stays warm for the next open) and goes with the inode.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ff.h"

/* The descriptor the engine writes through. Never the caller's flags:
 * O_APPEND would make every pwrite() append (the engine refuses it) and
 * O_DIRECT would put alignment rules on the library's requests; both are
 * handled above the cache instead. */
static int open_data_fd(struct ff_inode *in)
{
	char path[FF_PROC_PATH_MAX];
	ff_proc_path(path, sizeof(path), in->fd);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	/* A file we may only read (no write permission, a read-only backing
	 * file system): its cache works for reads, writes fail at writeback.
	 * The kernel checked the caller's access already. */
	if (fd < 0 && (errno == EACCES || errno == EROFS || errno == ETXTBSY))
		fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int ff_data_attach(struct ff_fs *fs, struct ff_inode *in, int fd)
{
	if (in->map || in->data_fd >= 0) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	if (fd < 0) {
		fd = open_data_fd(in);
		if (fd < 0)
			return fd;
	}
	/* --passthrough: the descriptor alone, every request goes to it. */
	if (fs->opt.passthrough) {
		in->data_fd = fd;
		return 0;
	}
	struct stat st;
	int err = fstat(fd, &st) ? -errno : 0;
	struct folio_engine *engine = NULL;
	if (!err)
		err = folio_engine_posix(&engine, fd, 0);
	struct folio_mapping *map = NULL;
	if (!err) {
		struct folio_mapping_opts mo = {
			.sz = sizeof(mo),
			.block_size = fs->opt.block_size,
			.min_folio_size = fs->opt.min_folio_size,
			.max_folio_size = fs->opt.folio_size,
			.size = (uint64_t)st.st_size,
			.flags = fs->opt.folio_tracking ?
					 FOLIO_MAPPING_FOLIO_DIRTY : 0,
			.engine = engine,
			.pool = fs->pool,
		};
		err = folio_mapping_new(&map, &mo);
	}
	if (err) {
		folio_engine_free(engine);
		close(fd);
		return err;
	}
	in->data_fd = fd;
	in->engine = engine;
	in->cursor = folio_mapping_err_cursor(map);
	in->map = map;
	return 0;
}

void ff_data_add_stats(struct folio_mapping_stats *sum,
		       const struct folio_mapping_stats *st)
{
#define FF_ADD(f) sum->f += st->f;
	FF_MAPPING_COUNTERS(FF_ADD)
#undef FF_ADD
}

/*
 * Nobody else uses the inode any more. Whatever cannot be made durable
 * now never will be: say so, count it for the exit status, and drop it
 * so that the mapping can go.
 */
void ff_data_free(struct ff_fs *fs, struct ff_inode *in)
{
	struct folio_mapping *map = in->map;
	if (!map) {
		if (in->data_fd >= 0) /* --passthrough: nothing cached */
			close(in->data_fd);
		in->data_fd = -1;
		return;
	}
	int err = folio_mapping_sync(map, &in->cursor);
	struct folio_mapping_stats st = {.sz = sizeof(st)};
	if (!folio_mapping_stats(map, &st)) {
		/* Byte counts of the cache end with it: 0 once freed. */
		st.cached_bytes = st.dirty_bytes = st.unstable_bytes = 0;
		st.folios = 0;
		pthread_mutex_lock(&fs->retired_lock);
		ff_data_add_stats(&fs->retired, &st);
		pthread_mutex_unlock(&fs->retired_lock);
	}
	int busy = folio_mapping_free(map);
	if (err || busy) {
		fprintf(stderr,
			"folio-fuse: inode %" PRIu64 " (dev %" PRIu64
			"): sync failed: %s%s\n",
			(uint64_t)in->ino, (uint64_t)in->dev,
			strerror(err ? -err : -busy),
			busy ? "; its unwritten changes are lost" : "");
		atomic_fetch_add(&fs->sync_failures, 1);
	}
	if (busy) {
		(void)folio_mapping_invalidate(map, 0, 0,
					       FOLIO_INVALIDATE_DISCARD);
		(void)folio_mapping_free(map);
	}
	folio_engine_free(in->engine);
	close(in->data_fd);
	in->map = NULL;
	in->engine = NULL;
	in->data_fd = -1;
}
