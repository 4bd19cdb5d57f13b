/* SPDX-License-Identifier: MIT */
#ifndef FOLIO_ENGINE_FD_H
#define FOLIO_ENGINE_FD_H

#include <limits.h>

#include "engines/builtin.h"

/* Most segments one preadv/pwritev call or one SQE takes (more is
 * -EINVAL). The engines cut a longer vector there and carry on with the
 * rest as after a short transfer. */
#ifdef IOV_MAX
#define ENGINE_FD_IOV_MAX IOV_MAX
#else
#define ENGINE_FD_IOV_MAX 1024
#endif

static inline int engine_fd_iov_cut(int iovcnt)
{
	return MIN(iovcnt, ENGINE_FD_IOV_MAX);
}

/* The descriptor of a file-descriptor engine. */
struct engine_fd {
	int fd;
	int tail_fd; /* for direct writes that end mid-sector, or -1 */
	bool direct; /* FOLIO_ENGINE_DIRECT was asked for, or O_DIRECT is set */
};

/* Take @fd for an engine created with @flags. It must allow positioned
 * I/O: a regular file or a block device, open for I/O (not O_PATH) and
 * without O_APPEND (pwrite() would append wherever the library asked to
 * write). Returns 0, -EBADF (not open, O_PATH) or -EINVAL (a pipe,
 * socket, directory, ... or O_APPEND). */
int engine_fd_open(struct engine_fd *f, int fd, unsigned flags);
void engine_fd_close(struct engine_fd *f);

/*
 * What one transfer of @io that returned @res (bytes, or -errno) means
 * when *@done bytes were done before it: true when the request is over,
 * with its completion result in *@result (a read that stopped at end of
 * file zero-filled up to len), else false with *@done advanced and the
 * rest still to transfer. Retrying interrupted calls is the caller's.
 */
bool engine_fd_transferred(struct folio_io *io, bool direct, size_t *done,
			   ssize_t res, ssize_t *result);

/* preadv/pwritev the whole request at dev_pos, looping on short
 * transfers and EINTR; reads that meet end of file are zero-filled.
 * Returns the bytes done (possibly short for a write) or -errno. */
ssize_t engine_fd_rw(int fd, bool direct, struct folio_io *io);

/* The same for the rest of @io once its first @done bytes (< io->len)
 * were transferred some other way. */
ssize_t engine_fd_rw_from(int fd, bool direct, struct folio_io *io,
			  size_t done);

/* Take the requests direct I/O cannot: returns 0 when @io is for f->fd
 * (anything when not direct, else aligned requests), 1 when @io was a
 * direct write that ends mid-sector and has been written and completed
 * through the tail descriptor, -EINVAL when nothing may take it. */
int engine_fd_submit_tail(const struct engine_fd *f, struct folio_io *io);

/* How far the kernel reads ahead on the block device holding @fd's file
 * (or that @fd is), in bytes: its queue's read_ahead_kb. 0 when there is
 * no such device (tmpfs, a network file system) or it cannot be read. */
uint64_t engine_fd_device_readahead(int fd);

/* fdatasync(), retried on EINTR. 0 or -errno. */
int engine_fd_datasync(int fd);

/* ftruncate(), retried on EINTR (@size <= FOLIO_MAX_POS). 0 or -errno. */
int engine_fd_truncate(const struct engine_fd *f, uint64_t size);

#endif
