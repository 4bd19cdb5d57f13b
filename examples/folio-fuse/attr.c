/* SPDX-License-Identifier: MIT */
/*
 * Attributes: the backing inode's, except the size of a file that has a
 * mapping, which is the cache's (writes not yet written back count).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "ff.h"

/* An O_PATH descriptor cannot be read, written, truncated or chmod()ed;
 * its /proc/self/fd name can, with the permissions of the inode. */
void ff_proc_path(char *buf, size_t len, int fd)
{
	snprintf(buf, len, "/proc/self/fd/%d", fd);
}

void ff_fix_stat(struct ff_inode *in, struct stat *st)
{
	pthread_mutex_lock(&in->lock);
	if (in->map) {
		int64_t size = folio_mapping_size(in->map);
		/* Programs that look for holes (cp, tar) take a file with
		 * fewer blocks than bytes for sparse; cached data not yet
		 * written back has no blocks below us yet. */
		blkcnt_t blocks = (blkcnt_t)((size + 511) / 512);
		if (size > st->st_size && st->st_blocks < blocks)
			st->st_blocks = blocks;
		st->st_size = size;
	}
	pthread_mutex_unlock(&in->lock);
}

int ff_stat(struct ff_inode *in, struct stat *st)
{
	if (fstatat(in->fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
		return -errno;
	ff_fix_stat(in, st);
	return 0;
}

void ff_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ff_fs *fs = ff_fs(req);
	struct stat st;
	int err = ff_stat(ff_inode_get(fs, ino), &st);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_attr(req, &st, fs->timeout);
}

static int set_size(struct ff_inode *in, off_t size)
{
	if (in->type != S_IFREG)
		return -EINVAL;
	int err = 0;
	pthread_mutex_lock(&in->lock);
	if (in->map) {
		err = folio_mapping_truncate(in->map, (uint64_t)size);
		atomic_fetch_add(&in->gen, 1);
	} else {
		char path[FF_PROC_PATH_MAX];
		ff_proc_path(path, sizeof(path), in->fd);
		err = truncate(path, size) ? -errno : 0;
	}
	pthread_mutex_unlock(&in->lock);
	return err;
}

static int set_times(struct ff_inode *in, const struct stat *attr,
		     int to_set)
{
	struct timespec tv[2] = {{.tv_nsec = UTIME_OMIT},
				 {.tv_nsec = UTIME_OMIT}};
	if (to_set & FUSE_SET_ATTR_ATIME_NOW)
		tv[0].tv_nsec = UTIME_NOW;
	else if (to_set & FUSE_SET_ATTR_ATIME)
		tv[0] = attr->st_atim;
	if (to_set & FUSE_SET_ATTR_MTIME_NOW)
		tv[1].tv_nsec = UTIME_NOW;
	else if (to_set & FUSE_SET_ATTR_MTIME)
		tv[1] = attr->st_mtim;

	/* Cached writes reach the backing file later and would move its
	 * mtime past the one set here (tar and cp -p set it after writing
	 * the data): write them now. A failure is not this call's: the data
	 * stays dirty and the handles' flush or fsync report it. */
	pthread_mutex_lock(&in->lock);
	if (in->map)
		(void)folio_mapping_sync(in->map, &in->cursor);
	pthread_mutex_unlock(&in->lock);

	if (in->type == S_IFLNK)
		return utimensat(in->fd, "", tv, AT_EMPTY_PATH) ? -errno : 0;
	char path[FF_PROC_PATH_MAX];
	ff_proc_path(path, sizeof(path), in->fd);
	return utimensat(AT_FDCWD, path, tv, 0) ? -errno : 0;
}

void ff_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		int to_set, struct fuse_file_info *fi)
{
	struct ff_fs *fs = ff_fs(req);
	struct ff_inode *in = ff_inode_get(fs, ino);
	char path[FF_PROC_PATH_MAX];
	ff_proc_path(path, sizeof(path), in->fd);
	int err = 0;

	if ((to_set & FUSE_SET_ATTR_MODE) && chmod(path, attr->st_mode))
		err = -errno;
	if (!err && (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
		uid_t uid = to_set & FUSE_SET_ATTR_UID ? attr->st_uid
						       : (uid_t)-1;
		gid_t gid = to_set & FUSE_SET_ATTR_GID ? attr->st_gid
						       : (gid_t)-1;
		if (fchownat(in->fd, "", uid, gid,
			     AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
			err = -errno;
	}
	if (!err && (to_set & FUSE_SET_ATTR_SIZE))
		err = set_size(in, attr->st_size);
	if (!err && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
			       FUSE_SET_ATTR_ATIME_NOW |
			       FUSE_SET_ATTR_MTIME_NOW)))
		err = set_times(in, attr, to_set);

	struct stat st;
	if (!err)
		err = ff_stat(in, &st);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_attr(req, &st, fs->timeout);
}
