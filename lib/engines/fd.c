/* SPDX-License-Identifier: MIT */
/*
 * What the file-descriptor engines (posix, io_uring) share: a synchronous
 * vectored I/O loop, and the buffered descriptor that carries the one
 * kind of write O_DIRECT cannot take.
 *
 * Writeback clamps the last run of an object to its size, so when the
 * size is not a multiple of the device's sector the final write ends
 * mid-sector, and an O_DIRECT descriptor refuses it. Such a write goes
 * through a second, buffered descriptor of the same file instead: the
 * kernel keeps the page cache coherent with direct I/O of the same range,
 * and flush (fdatasync of the inode) covers both.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

#include "engines/fd.h"

static int fd_check(int fd, int *fl)
{
	int flags = fcntl(fd, F_GETFL);
	if (flags < 0 || (flags & O_PATH))
		return -EBADF;
	struct stat st;
	if (fstat(fd, &st))
		return -EBADF;
	if ((!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) ||
	    (flags & O_APPEND))
		return -EINVAL;
	*fl = flags;
	return 0;
}

/* Segments copied per call once a request has to be resumed mid-way (after
 * a short transfer): the caller's array is never modified. */
#define FD_IOV_WINDOW 64

bool engine_fd_transferred(struct folio_io *io, bool direct, size_t *done,
			   ssize_t res, ssize_t *result)
{
	bool rd = io->op == FOLIO_IO_READ;
	if (res < 0) {
		*result = *done ? (ssize_t)*done : res;
		return true;
	}
	if (res == 0 && !rd) {
		/* A write that moves nothing would loop forever. */
		*result = *done ? (ssize_t)*done : -EIO;
		return true;
	}
	*done += (size_t)res;
	if (*done >= io->len) {
		*result = (ssize_t)io->len;
		return true;
	}
	/* A read that gets nothing met end of file. So did a direct read
	 * that stops short: the rest cannot be asked for from an unaligned
	 * position, and is past EOF. */
	if (rd && (!res ||
		   (direct && (*done & (FOLIO_ENGINE_DIRECT_ALIGN - 1))))) {
		engine_iov_zero(io->iov, io->iovcnt, *done, io->len);
		*result = (ssize_t)io->len;
		return true;
	}
	return false;
}

ssize_t engine_fd_rw(int fd, bool direct, struct folio_io *io)
{
	return engine_fd_rw_from(fd, direct, io, 0);
}

ssize_t engine_fd_rw_from(int fd, bool direct, struct folio_io *io,
			  size_t done)
{
	struct iovec window[FD_IOV_WINDOW];
	bool rd = io->op == FOLIO_IO_READ;
	ssize_t result = (ssize_t)done;
	while (done < io->len) {
		const struct iovec *v = io->iov;
		int n = engine_fd_iov_cut(io->iovcnt);
		if (done) {
			v = window;
			n = engine_iov_window(io->iov, io->iovcnt, done, window,
					      FD_IOV_WINDOW);
		}
		off_t off = (off_t)(io->dev_pos + done);
		ssize_t r = rd ? preadv(fd, v, n, off) : pwritev(fd, v, n, off);
		if (r < 0 && errno == EINTR)
			continue;
		if (engine_fd_transferred(io, direct, &done, r < 0 ? -errno : r,
					  &result))
			break;
	}
	return result;
}

/* The descriptor for direct writes that end mid-sector: @fd itself when
 * it is not O_DIRECT (@fl: its F_GETFL flags), else a new buffered
 * descriptor of the same file. 0 / -errno (*tail_fd is then -1). */
static int tail_fd_open(int fd, int fl, int *tail_fd)
{
	*tail_fd = -1;
	if (!(fl & O_DIRECT)) {
		/* Only the alignment checks were asked for: the descriptor
		 * itself takes any write. */
		*tail_fd = fd;
		return 0;
	}
	char path[40];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	int b = open(path, (fl & O_ACCMODE) | O_CLOEXEC);
	if (b < 0)
		return -errno;
	*tail_fd = b;
	return 0;
}

int engine_fd_open(struct engine_fd *f, int fd, unsigned flags)
{
	int fl;
	int bad = fd_check(fd, &fl);
	if (bad)
		return bad;
	f->fd = fd;
	f->direct = (flags & FOLIO_ENGINE_DIRECT) || (fl & O_DIRECT);
	f->tail_fd = -1;
	/* Without a tail descriptor (no /proc) such writes are refused;
	 * everything else works. */
	if (f->direct)
		tail_fd_open(fd, fl, &f->tail_fd);
	return 0;
}

void engine_fd_close(struct engine_fd *f)
{
	if (f->tail_fd >= 0 && f->tail_fd != f->fd)
		close(f->tail_fd);
	f->tail_fd = -1;
}

/* Is @io a write that is aligned except for the length of its last
 * segment, i.e. a run that writeback cut at an unaligned end of file? */
static bool io_direct_tail(const struct folio_io *io, size_t align)
{
	if (io->op != FOLIO_IO_WRITE || (io->dev_pos & (align - 1)))
		return false;
	for (int i = 0; i < io->iovcnt; i++) {
		if ((uintptr_t)io->iov[i].iov_base & (align - 1))
			return false;
		if ((io->iov[i].iov_len & (align - 1)) && i != io->iovcnt - 1)
			return false;
	}
	return true;
}

int engine_fd_submit_tail(const struct engine_fd *f, struct folio_io *io)
{
	if (!f->direct || engine_io_aligned(io, FOLIO_ENGINE_DIRECT_ALIGN))
		return 0;
	if (!io_direct_tail(io, FOLIO_ENGINE_DIRECT_ALIGN) || f->tail_fd < 0)
		return -EINVAL;
	/* Rare (the last run of an object whose size is not a multiple of
	 * a sector): done synchronously, buffered; a durable one is synced
	 * through the same descriptor (either syncs the file's data). */
	ssize_t res = engine_fd_rw(f->tail_fd, false, io);
	int barrier = 0;
	if (engine_io_durable(io) && res == (ssize_t)io->len)
		barrier = engine_fd_datasync(f->tail_fd);
	engine_complete(io, res, barrier);
	return 1;
}

/* A queue attribute of block device `dev` as a number, -1 when there is
 * none. A partition has no queue of its own: its disk's is one level up
 * in sysfs (the kernel resolves ".." after the symlink /sys/dev/block/
 * M:m points through). */
static long long sysfs_queue_number(dev_t dev, const char *attr)
{
	const char *const where[] = {"", "../"};
	for (unsigned i = 0; i < 2; i++) {
		char path[96];
		snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/%squeue/%s",
			 major(dev), minor(dev), where[i], attr);
		FILE *fp = fopen(path, "re");
		if (!fp)
			continue;
		long long v = -1;
		if (fscanf(fp, "%lld", &v) != 1)
			v = -1;
		fclose(fp);
		return v;
	}
	return -1;
}

uint64_t engine_fd_device_readahead(int fd)
{
	struct stat st;
	if (fstat(fd, &st))
		return 0;
	dev_t dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
	if (!S_ISBLK(st.st_mode) && !S_ISREG(st.st_mode))
		return 0;
	long long kb = sysfs_queue_number(dev, "read_ahead_kb");
	return kb > 0 ? (uint64_t)kb << 10 : 0;
}

int engine_fd_datasync(int fd)
{
	while (fdatasync(fd)) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

int engine_fd_truncate(const struct engine_fd *f, uint64_t size)
{
	while (ftruncate(f->fd, (off_t)size)) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}
