/* SPDX-License-Identifier: MIT */
/*
 * The posix engine: positioned vectored I/O on a file descriptor, done
 * inside submit(). Positioned calls share no file offset, so any number of
 * threads may submit at once without a lock.
 */
#include <stdlib.h>
#include <unistd.h>

#include "engines/fd.h"

static int posix_submit(void *arg, struct folio_io *io)
{
	const struct engine_fd *f = arg;
	int ret = engine_check_io(io);
	if (ret)
		return ret;
	ret = engine_fd_submit_tail(f, io);
	if (ret)
		return ret < 0 ? ret : 0;
	folio_io_complete(io, engine_fd_rw(f->fd, f->direct, io));
	return 0;
}

static int posix_flush(void *arg)
{
	const struct engine_fd *f = arg;
	while (fdatasync(f->fd)) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

static int posix_truncate(void *arg, uint64_t size)
{
	if (size > FOLIO_MAX_POS)
		return -EINVAL;
	return engine_fd_truncate(arg, size);
}

static void posix_destroy(void *arg)
{
	engine_fd_close(arg);
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
	struct engine_fd f;
	int ret = engine_fd_open(&f, fd, flags);
	if (ret)
		return ret;
	struct engine_fd *c = malloc(sizeof(*c));
	if (!c) {
		engine_fd_close(&f);
		return -ENOMEM;
	}
	*c = f;
	ret = engine_create(out, &posix_ops, c, ENGINE_POSIX);
	if (ret) {
		engine_fd_close(c);
		free(c);
	}
	return ret;
}
