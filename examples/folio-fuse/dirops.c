/* SPDX-License-Identifier: MIT */
/*
 * The name space: lookup and forget, the operations that create, remove
 * and rename names, readdir, statfs. All work relative to the parent's
 * O_PATH descriptor (the *at() calls), never on path strings, so a
 * rename elsewhere in the tree cannot make them act on the wrong file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "ff.h"

int ff_do_lookup(struct ff_fs *fs, struct ff_inode *parent, const char *name,
		 struct fuse_entry_param *e)
{
	*e = (struct fuse_entry_param){
		.attr_timeout = fs->timeout,
		.entry_timeout = fs->timeout,
	};
	int fd = openat(parent->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
		int err = -errno;
		close(fd);
		return err;
	}
	struct ff_inode *in = ff_inode_lookup(fs, fd, &e->attr);
	if (!in)
		return -ENOMEM;
	ff_fix_stat(in, &e->attr);
	e->ino = in == &fs->root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)in;
	return 0;
}

static void ff_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ff_fs *fs = ff_fs(req);
	struct fuse_entry_param e;
	int err = ff_do_lookup(fs, ff_inode_get(fs, parent), name, &e);
	/* Every change goes through us, so a negative entry (ino 0) can be
	 * cached like a positive one. */
	if (err == -ENOENT) {
		e = (struct fuse_entry_param){.entry_timeout = fs->timeout};
		err = 0;
	}
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_entry(req, &e);
}

static void ff_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct ff_fs *fs = ff_fs(req);
	ff_inode_forget(fs, ff_inode_get(fs, ino), nlookup);
	fuse_reply_none(req);
}

static void ff_forget_multi(fuse_req_t req, size_t count,
			    struct fuse_forget_data *forgets)
{
	struct ff_fs *fs = ff_fs(req);
	for (size_t i = 0; i < count; i++)
		ff_inode_forget(fs, ff_inode_get(fs, forgets[i].ino),
				forgets[i].nlookup);
	fuse_reply_none(req);
}

/*
 * Running as root, we would own everything created: give it to the
 * caller, as a local file system would (the group of a set-group-ID
 * directory stays). A failure leaves the file root's; the name exists
 * already, so failing the call would not undo anything.
 */
void ff_set_owner(fuse_req_t req, struct ff_inode *parent, const char *name)
{
	if (!ff_fs(req)->chown_new)
		return;
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct stat pst;
	gid_t gid = ctx->gid;
	if (!fstat(parent->fd, &pst) && (pst.st_mode & S_ISGID))
		gid = (gid_t)-1;
	(void)fchownat(parent->fd, name, ctx->uid, gid, AT_SYMLINK_NOFOLLOW);
}

/* The end of every call that made a name: @res is its result. */
static void reply_new_entry(fuse_req_t req, struct ff_inode *parent,
			    const char *name, int res)
{
	if (res < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	ff_set_owner(req, parent, name);
	struct fuse_entry_param e;
	int err = ff_do_lookup(ff_fs(req), parent, name, &e);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_entry(req, &e);
}

static void ff_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode)
{
	struct ff_inode *p = ff_inode_get(ff_fs(req), parent);
	reply_new_entry(req, p, name, mkdirat(p->fd, name, mode));
}

static void ff_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev)
{
	struct ff_inode *p = ff_inode_get(ff_fs(req), parent);
	reply_new_entry(req, p, name, mknodat(p->fd, name, mode, rdev));
}

static void ff_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name)
{
	struct ff_inode *p = ff_inode_get(ff_fs(req), parent);
	reply_new_entry(req, p, name, symlinkat(link, p->fd, name));
}

static void ff_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname)
{
	struct ff_fs *fs = ff_fs(req);
	struct ff_inode *in = ff_inode_get(fs, ino);
	struct ff_inode *p = ff_inode_get(fs, newparent);
	/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc name works for
	 * anybody but would follow a symbolic link. */
	int res = linkat(in->fd, "", p->fd, newname, AT_EMPTY_PATH);
	if (res && (errno == ENOENT || errno == EPERM) &&
	    in->type != S_IFLNK) {
		char path[FF_PROC_PATH_MAX];
		ff_proc_path(path, sizeof(path), in->fd);
		res = linkat(AT_FDCWD, path, p->fd, newname, AT_SYMLINK_FOLLOW);
	}
	if (res < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	struct fuse_entry_param e;
	int err = ff_do_lookup(fs, p, newname, &e);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_entry(req, &e);
}

static void reply_res(fuse_req_t req, int res)
{
	fuse_reply_err(req, res < 0 ? errno : 0);
}

static void ff_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ff_inode *p = ff_inode_get(ff_fs(req), parent);
	reply_res(req, unlinkat(p->fd, name, 0));
}

static void ff_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ff_inode *p = ff_inode_get(ff_fs(req), parent);
	reply_res(req, unlinkat(p->fd, name, AT_REMOVEDIR));
}

static void ff_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	struct ff_fs *fs = ff_fs(req);
	struct ff_inode *p = ff_inode_get(fs, parent);
	struct ff_inode *np = ff_inode_get(fs, newparent);
	reply_res(req, renameat2(p->fd, name, np->fd, newname, flags));
}

static void ff_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct ff_inode *in = ff_inode_get(ff_fs(req), ino);
	char buf[PATH_MAX + 1];
	ssize_t n = readlinkat(in->fd, "", buf, sizeof(buf));
	if (n < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	if ((size_t)n >= sizeof(buf)) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	buf[n] = '\0';
	fuse_reply_readlink(req, buf);
}

/* A directory handle: the stream and the entry that did not fit the
 * previous reply, so that it starts the next one. */
struct ff_dir {
	DIR *dp;
	off_t off;
	struct dirent *pending;
};

static void ff_opendir(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct ff_inode *in = ff_inode_get(ff_fs(req), ino);
	struct ff_dir *d = calloc(1, sizeof(*d));
	if (!d) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	int fd = openat(in->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d->dp = fd < 0 ? NULL : fdopendir(fd);
	if (!d->dp) {
		int err = errno;
		if (fd >= 0)
			close(fd);
		free(d);
		fuse_reply_err(req, err);
		return;
	}
	fi->fh = (uintptr_t)d;
	if (fuse_reply_open(req, fi) == -ENOENT) {
		/* Interrupted: no releasedir will come for it. */
		closedir(d->dp);
		free(d);
	}
}

static struct ff_dir *dir_of(struct fuse_file_info *fi)
{
	return (struct ff_dir *)(uintptr_t)fi->fh;
}

/* Plain readdir: the kernel looks every name up itself when it needs it;
 * the entries carry only d_ino and the type. */
static void ff_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
		       off_t off, struct fuse_file_info *fi)
{
	struct ff_dir *d = dir_of(fi);
	char *buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (off != d->off) {
		seekdir(d->dp, off);
		d->off = off;
		d->pending = NULL;
	}
	size_t used = 0;
	int err = 0;
	for (;;) {
		if (!d->pending) {
			errno = 0;
			d->pending = readdir(d->dp);
			if (!d->pending) {
				err = errno;
				break;
			}
		}
		struct stat st = {
			.st_ino = d->pending->d_ino,
			.st_mode = (mode_t)d->pending->d_type << 12,
		};
		size_t n = fuse_add_direntry(req, buf + used, size - used,
					     d->pending->d_name, &st,
					     d->pending->d_off);
		if (n > size - used)
			break;
		used += n;
		d->off = d->pending->d_off;
		d->pending = NULL;
	}
	/* An error after some entries: send those; the next call meets
	 * the error again. */
	if (err && !used)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, used);
	free(buf);
}

static void ff_releasedir(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct ff_dir *d = dir_of(fi);
	closedir(d->dp);
	free(d);
	fuse_reply_err(req, 0);
}

static void ff_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			struct fuse_file_info *fi)
{
	int fd = dirfd(dir_of(fi)->dp);
	reply_res(req, datasync ? fdatasync(fd) : fsync(fd));
}

static void ff_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;
	if (fstatvfs(ff_inode_get(ff_fs(req), ino)->fd, &sv))
		fuse_reply_err(req, errno);
	else
		fuse_reply_statfs(req, &sv);
}

/* Extended attributes are not passed through yet. Answering ENOSYS once
 * makes the kernel stop asking (it would otherwise send a GETXATTR for
 * security.capability before every write). */
static void ff_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			const char *value, size_t size, int flags)
{
	fuse_reply_err(req, ENOSYS);
}

static void ff_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	fuse_reply_err(req, ENOSYS);
}

static void ff_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	fuse_reply_err(req, ENOSYS);
}

static void ff_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, ENOSYS);
}

void ff_dir_ops(struct fuse_lowlevel_ops *ops)
{
	ops->lookup = ff_lookup;
	ops->forget = ff_forget;
	ops->forget_multi = ff_forget_multi;
	ops->getattr = ff_getattr;
	ops->setattr = ff_setattr;
	ops->mkdir = ff_mkdir;
	ops->mknod = ff_mknod;
	ops->symlink = ff_symlink;
	ops->link = ff_link;
	ops->unlink = ff_unlink;
	ops->rmdir = ff_rmdir;
	ops->rename = ff_rename;
	ops->readlink = ff_readlink;
	ops->opendir = ff_opendir;
	ops->readdir = ff_readdir;
	ops->releasedir = ff_releasedir;
	ops->fsyncdir = ff_fsyncdir;
	ops->statfs = ff_statfs;
	ops->setxattr = ff_setxattr;
	ops->getxattr = ff_getxattr;
	ops->listxattr = ff_listxattr;
	ops->removexattr = ff_removexattr;
}
