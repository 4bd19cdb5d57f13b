/* SPDX-License-Identifier: MIT */
/*
 * The posix engine: positioned vectored I/O on a file descriptor, done
 * inside submit(). Positioned calls share no file offset, so any number of
 * threads may submit at once without a lock.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

/* Segments copied per call once a request has to be resumed mid-way (after
 * a short transfer) or has more segments than one call accepts. */
#define POSIX_IOV_WINDOW 64

struct posix_ctx {
	int fd;
	bool direct;
};

static ssize_t posix_rw(const struct posix_ctx *c, struct folio_io *io)
{
	struct iovec window[POSIX_IOV_WINDOW];
	bool rd = io->op == FOLIO_IO_READ;
	size_t done = 0;
	while (done < io->len) {
		const struct iovec *v = io->iov;
		int n = io->iovcnt;
		if (done || n > IOV_MAX) {
			v = window;
			n = engine_iov_window(io->iov, io->iovcnt, done, window,
					      POSIX_IOV_WINDOW);
		}
		off_t off = (off_t)(io->dev_pos + done);
		ssize_t r = rd ? preadv(c->fd, v, n, off)
			       : pwritev(c->fd, v, n, off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int err = -errno;
			return done ? (ssize_t)done : err;
		}
		if (r == 0) {
			if (rd)
				break; /* end of file */
			/* A write that moves nothing would loop forever. */
			return done ? (ssize_t)done : -EIO;
		}
		done += (size_t)r;
		/* A direct read stops short at end of file; the rest cannot
		 * be asked for from an unaligned position, and is past EOF. */
		if (rd && c->direct && (done & (FOLIO_ENGINE_DIRECT_ALIGN - 1)))
			break;
	}
	if (rd && done < io->len) {
		engine_iov_zero(io->iov, io->iovcnt, done, io->len);
		done = io->len;
	}
	return (ssize_t)done;
}

static int posix_submit(void *arg, struct folio_io *io)
{
	const struct posix_ctx *c = arg;
	int ret = engine_check_io(io);
	if (ret)
		return ret;
	if (c->direct && !engine_io_aligned(io, FOLIO_ENGINE_DIRECT_ALIGN))
		return -EINVAL;
	folio_io_complete(io, posix_rw(c, io));
	return 0;
}

static int posix_flush(void *arg)
{
	const struct posix_ctx *c = arg;
	while (fdatasync(c->fd)) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

static int posix_truncate(void *arg, uint64_t size)
{
	const struct posix_ctx *c = arg;
	if (size > FOLIO_MAX_POS)
		return -EINVAL;
	while (ftruncate(c->fd, (off_t)size)) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

static void posix_destroy(void *arg)
{
	free(arg);
}

static const struct folio_engine_ops posix_ops = {
	.sz = sizeof(struct folio_engine_ops),
	.submit = posix_submit,
	.flush = posix_flush,
	.truncate = posix_truncate,
	.destroy = posix_destroy,
};

int folio_engine_posix(struct folio_engine **out, int fd, unsigned flags)
{
	if (!out || fd < 0 || (flags & ~FOLIO_ENGINE_DIRECT))
		return -EINVAL;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -EBADF;
	struct posix_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = fd;
	c->direct = (flags & FOLIO_ENGINE_DIRECT) || (fl & O_DIRECT);
	int ret = engine_create(out, &posix_ops, c, ENGINE_POSIX);
	if (ret)
		free(c);
	return ret;
}
