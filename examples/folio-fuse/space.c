/* SPDX-License-Identifier: MIT */
/*
 * Where a file has data: fallocate (allocate, punch a hole, zero a range)
 * and lseek SEEK_DATA/SEEK_HOLE. Both are answered by the backing file,
 * which knows nothing of what the cache holds, so the file's cached
 * changes are written there first (a sync, under the inode lock that
 * truncate and O_APPEND hold too); after a hole is punched or a range
 * zeroed the cache drops what it held of the range, or reads would see
 * the old bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "ff.h"

/* A writer racing the call can dirty a folio of the range again between
 * the sync and the invalidate, which then keeps it: sync and try again,
 * a few times (the writes are the caller's own race). */
#define FF_INVALIDATE_TRIES 8

/* In->lock held. The backing file's layout is the cache's too. */
static int write_out(struct ff_inode *in)
{
	return in->map ? folio_mapping_sync(in->map, &in->cursor) : 0;
}

/* In->lock held, after the backing file's range became zeros: no cached
 * folio of it may keep the bytes it had. */
static int forget_range(struct ff_inode *in, uint64_t off, uint64_t len)
{
	int err = -EBUSY;
	for (int i = 0; in->map && i < FF_INVALIDATE_TRIES && err == -EBUSY;
	     i++) {
		err = folio_mapping_invalidate(in->map, off, len, 0);
		if (err == -EBUSY)
			(void)write_out(in);
	}
	return in->map ? err : 0;
}

enum {
	FF_FALLOC_ALLOC = 0,
	FF_FALLOC_PUNCH = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
	FF_FALLOC_ZERO = FALLOC_FL_ZERO_RANGE,
};

static void ff_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			 off_t off, off_t len, struct fuse_file_info *fi)
{
	int op = mode & ~FALLOC_FL_KEEP_SIZE;
	if (op != FF_FALLOC_ALLOC && mode != FF_FALLOC_PUNCH &&
	    op != FF_FALLOC_ZERO) {
		/* Collapse, insert, unshare: the cache would have to move
		 * its folios; not done. */
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	struct ff_inode *in = ff_file_inode(fi);
	pthread_mutex_lock(&in->lock);
	/* Allocation changes no byte: nothing to write out first. */
	int err = op == FF_FALLOC_ALLOC ? 0 : write_out(in);
	if (!err && fallocate(in->data_fd, mode, off, len))
		err = -errno;
	uint64_t end = (uint64_t)off + (uint64_t)len;
	if (!err && op != FF_FALLOC_ALLOC)
		err = forget_range(in, (uint64_t)off, (uint64_t)len);
	/* As fallocate(2) grows the file unless told to keep its size. */
	if (!err && in->map && !(mode & FALLOC_FL_KEEP_SIZE) &&
	    end > (uint64_t)folio_mapping_size(in->map))
		err = folio_mapping_truncate(in->map, end);
	atomic_fetch_add(&in->gen, 1);
	pthread_mutex_unlock(&in->lock);
	fuse_reply_err(req, -err);
}

/* The kernel asks only for SEEK_DATA and SEEK_HOLE (it does the others
 * itself). */
static void ff_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		     struct fuse_file_info *fi)
{
	struct ff_inode *in = ff_file_inode(fi);
	pthread_mutex_lock(&in->lock);
	int err = write_out(in);
	off_t res = err ? -1 : lseek(in->data_fd, off, whence);
	if (!err && res < 0)
		err = -errno;
	pthread_mutex_unlock(&in->lock);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_lseek(req, res);
}

void ff_space_ops(struct fuse_lowlevel_ops *ops)
{
	ops->fallocate = ff_fallocate;
	ops->lseek = ff_lseek;
}
