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

#include "engines/fd.h"

struct posix_ctx {
	int fd;
	int tail_fd; /* for direct writes that end mid-sector */
	bool direct;
};

static int posix_submit(void *arg, struct folio_io *io)
{
	const struct posix_ctx *c = arg;
	int ret = engine_check_io(io);
	if (ret)
		return ret;
	int fd = c->fd;
	if (c->direct && !engine_io_aligned(io, FOLIO_ENGINE_DIRECT_ALIGN)) {
		if (!engine_io_direct_tail(io, FOLIO_ENGINE_DIRECT_ALIGN) ||
		    c->tail_fd < 0)
			return -EINVAL;
		fd = c->tail_fd;
	}
	folio_io_complete(io, engine_fd_rw(fd, c->direct && fd == c->fd, io));
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
	struct posix_ctx *c = arg;
	engine_tail_fd_close(c->fd, c->tail_fd);
	free(c);
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
	int fl;
	int bad = engine_fd_check(fd, &fl);
	if (bad)
		return bad;
	struct posix_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = fd;
	c->direct = (flags & FOLIO_ENGINE_DIRECT) || (fl & O_DIRECT);
	c->tail_fd = -1;
	/* Without a tail descriptor (no /proc) such writes are refused, as
	 * before; everything else works. */
	if (c->direct)
		engine_tail_fd_open(fd, fl, &c->tail_fd);
	int ret = engine_create(out, &posix_ops, c, ENGINE_POSIX);
	if (ret) {
		engine_tail_fd_close(fd, c->tail_fd);
		free(c);
	}
	return ret;
}
