/* SPDX-License-Identifier: MIT */
/*
 * File handles and data: every read and write goes through the inode's
 * mapping. A handle carries an error cursor, as a file descriptor does in
 * the kernel, so that each handle's flush or fsync reports a writeback
 * error once, whoever's write it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "ff.h"

struct ff_file {
	struct ff_inode *in;
	int flags;              /* the open flags */
	pthread_mutex_t lock;   /* the cursor: one sync at a time */
	folio_errseq_t cursor;
};

static struct ff_file *file_of(struct fuse_file_info *fi)
{
	return (struct ff_file *)(uintptr_t)fi->fh;
}

struct ff_inode *ff_file_inode(struct fuse_file_info *fi)
{
	return file_of(fi)->in;
}

/*
 * The handle of @in for @fi, its mapping attached (over @fd when it is
 * not negative; see ff_data_attach()). O_TRUNC is done here rather than
 * left to the backing open so that the cache truncates too.
 */
static int file_new(struct ff_fs *fs, struct ff_inode *in, int fd,
		    struct fuse_file_info *fi)
{
	if (in->type != S_IFREG) {
		if (fd >= 0)
			close(fd);
		return -EINVAL;
	}
	struct ff_file *f = calloc(1, sizeof(*f));
	if (!f) {
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	pthread_mutex_lock(&in->lock);
	int err = ff_data_attach(fs, in, fd);
	if (!err && (fi->flags & O_TRUNC)) {
		err = !in->map ? (ftruncate(in->data_fd, 0) ? -errno : 0)
			       : folio_mapping_truncate(in->map, 0);
		atomic_fetch_add(&in->gen, 1);
	}
	if (!err && in->map)
		f->cursor = folio_mapping_err_cursor(in->map);
	pthread_mutex_unlock(&in->lock);
	if (err) {
		free(f);
		return err;
	}
	f->in = in;
	f->flags = fi->flags;
	pthread_mutex_init(&f->lock, NULL);
	ff_inode_open(in);
	fi->fh = (uintptr_t)f;
	/* The library is the cache: by default the kernel keeps none
	 * (every read and write comes here). --kernel-cache keeps the
	 * kernel's page cache in front, valid across opens since every
	 * change passes through us. */
	fi->direct_io = !fs->opt.kernel_cache;
	fi->keep_cache = fs->opt.kernel_cache;
	return 0;
}

static void file_free(struct ff_fs *fs, struct ff_file *f)
{
	struct ff_inode *in = f->in;
	pthread_mutex_destroy(&f->lock);
	free(f);
	ff_inode_close(fs, in);
}

static void ff_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ff_fs *fs = ff_fs(req);
	int err = file_new(fs, ff_inode_get(fs, ino), -1, fi);
	if (err)
		fuse_reply_err(req, -err);
	else if (fuse_reply_open(req, fi) == -ENOENT)
		file_free(fs, file_of(fi)); /* interrupted: no release */
}

static void ff_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi)
{
	struct ff_fs *fs = ff_fs(req);
	struct ff_inode *p = ff_inode_get(fs, parent);
	/* Read-write whatever the caller asked for: the descriptor becomes
	 * the engine's (O_TRUNC, O_APPEND and O_DIRECT are handled above
	 * the cache, see file_new() and data.c). */
	int flags = O_CREAT | O_RDWR | O_NOFOLLOW | O_CLOEXEC |
		    (fi->flags & O_EXCL);
	int fd = openat(p->fd, name, flags, mode);
	if (fd < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	ff_set_owner(req, p, name);
	struct fuse_entry_param e;
	int err = ff_do_lookup(fs, p, name, &e);
	if (err) {
		close(fd);
		fuse_reply_err(req, -err);
		return;
	}
	/* A rename between our open and the lookup could have put another
	 * file under the name: then that file's inode opens its own
	 * descriptor. */
	struct stat st;
	if (fstat(fd, &st) || st.st_dev != e.attr.st_dev ||
	    st.st_ino != e.attr.st_ino) {
		close(fd);
		fd = -1;
	}
	struct ff_inode *in = ff_inode_get(fs, e.ino);
	err = file_new(fs, in, fd, fi);
	if (err) {
		ff_inode_forget(fs, in, 1);
		fuse_reply_err(req, -err);
		return;
	}
	if (fuse_reply_create(req, &e, fi) == -ENOENT)
		file_free(fs, file_of(fi));
}

static void ff_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	char *buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	struct ff_inode *in = file_of(fi)->in;
	ssize_t n = !in->map ? pread(in->data_fd, buf, size, off)
			     : folio_mapping_read(in->map, buf, size,
						  (uint64_t)off);
	if (n < 0 && !in->map)
		n = -errno;
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_buf(req, buf, (size_t)n);
	free(buf);
}

/* --passthrough: the backing file's own size is the current one. */
static ssize_t passthrough_write(struct ff_inode *in, int flags,
				 const char *buf, size_t size, off_t off)
{
	ssize_t n;
	struct stat st;
	if (flags & O_APPEND) {
		pthread_mutex_lock(&in->lock);
		n = fstat(in->data_fd, &st) ? -1
			: pwrite(in->data_fd, buf, size, st.st_size);
		pthread_mutex_unlock(&in->lock);
	} else {
		n = pwrite(in->data_fd, buf, size, off);
	}
	return n < 0 ? -errno : n;
}

static void ff_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		     size_t size, off_t off, struct fuse_file_info *fi)
{
	struct ff_file *f = file_of(fi);
	struct ff_inode *in = f->in;
	ssize_t n;
	/* The kernel's idea of the end of file may be behind the cache's:
	 * an append goes to the cache's, and the inode lock keeps another
	 * append or a truncate from moving it meanwhile. */
	if (!in->map) {
		n = passthrough_write(in, f->flags, buf, size, off);
	} else if (f->flags & O_APPEND) {
		pthread_mutex_lock(&in->lock);
		n = folio_mapping_write(in->map, buf, size,
					(uint64_t)folio_mapping_size(in->map));
		pthread_mutex_unlock(&in->lock);
	} else {
		n = folio_mapping_write(in->map, buf, size, (uint64_t)off);
	}
	atomic_fetch_add(&in->gen, 1);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

static int file_sync(struct ff_file *f)
{
	if (!f->in->map)
		return fdatasync(f->in->data_fd) ? -errno : 0;
	pthread_mutex_lock(&f->lock);
	int err = folio_mapping_sync(f->in->map, &f->cursor);
	pthread_mutex_unlock(&f->lock);
	return err;
}

/* Every close(): like close-to-open consistency on NFS, the data written
 * through the handle is made durable and its errors reported here, the
 * last moment the caller can learn of them. A read-only handle has
 * nothing to report (a Linux close() of one never fails either), nor has
 * --passthrough, whose writes reported their errors themselves. */
static void ff_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ff_file *f = file_of(fi);
	int err = (f->flags & O_ACCMODE) == O_RDONLY || !f->in->map ? 0
			: file_sync(f);
	fuse_reply_err(req, -err);
}

static void ff_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		     struct fuse_file_info *fi)
{
	struct ff_file *f = file_of(fi);
	int err = file_sync(f);
	/* The library's flush is fdatasync(); fsync() wants the inode's
	 * metadata (times) too. */
	if (!err && !datasync && fsync(f->in->data_fd))
		err = -errno;
	fuse_reply_err(req, -err);
}

/* Release cannot fail: what is still dirty belongs to the inode, written
 * back by the pool or when the inode goes (ff_data_free()). */
static void ff_release(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	file_free(ff_fs(req), file_of(fi));
	fuse_reply_err(req, 0);
}

void ff_file_ops(struct fuse_lowlevel_ops *ops)
{
	ops->open = ff_open;
	ops->create = ff_create;
	ops->read = ff_read;
	ops->write = ff_write;
	ops->flush = ff_flush;
	ops->fsync = ff_fsync;
	ops->release = ff_release;
}
