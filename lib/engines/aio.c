/* SPDX-License-Identifier: MIT */
/*
 * Kernel AIO for the posix engine's batches (aio.h). Called through
 * syscall(): glibc has no wrappers, and libaio would be a dependency for
 * three system calls.
 *
 * On an O_DIRECT descriptor the kernel queues the transfers and returns
 * from io_submit() (the block layer sends the batch to the device with one
 * notification), and io_getevents() collects them as they finish. Where a
 * file system has to block (a write that allocates, or extends the file)
 * io_submit() does that transfer before it returns: slower, never wrong.
 */
#include <linux/aio_abi.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "engines/aio.h"
#include "engines/fd.h"

atomic_ulong engine_aio_batches;
atomic_bool engine_aio_refuse;

int engine_aio_setup(struct engine_aio *a)
{
	if (atomic_load_explicit(&engine_aio_refuse, memory_order_relaxed))
		return -EAGAIN;
	aio_context_t ctx = 0;
	if (syscall(SYS_io_setup, ENGINE_AIO_BATCH, &ctx))
		return -errno;
	a->ctx = (unsigned long)ctx;
	return 0;
}

void engine_aio_destroy(struct engine_aio *a)
{
	if (a->ctx)
		(void)syscall(SYS_io_destroy, (aio_context_t)a->ctx);
	a->ctx = 0;
}

/* What to do with one finished transfer of ios[i]: its outcome, or the
 * rest done here (short, or interrupted before it moved anything). */
static ssize_t settle(int fd, bool direct, struct folio_io *io, long long r)
{
	if (r == -EINTR || r == -EAGAIN)
		return engine_fd_rw(fd, direct, io);
	size_t done = 0;
	ssize_t result;
	if (engine_fd_transferred(io, direct, &done, (ssize_t)r, &result))
		return result;
	return engine_fd_rw_from(fd, direct, io, done);
}

void engine_aio_transfer(struct engine_aio *a, int fd, bool direct,
			 struct folio_io **ios, int n, ssize_t *res)
{
	struct iocb cb[ENGINE_AIO_BATCH], *cbp[ENGINE_AIO_BATCH];
	aio_context_t ctx = (aio_context_t)a->ctx;
	for (int i = 0; i < n; i++) {
		struct folio_io *io = ios[i];
		memset(&cb[i], 0, sizeof(cb[i]));
		cb[i].aio_data = (__u64)i;
		cb[i].aio_lio_opcode = io->op == FOLIO_IO_READ
					       ? IOCB_CMD_PREADV
					       : IOCB_CMD_PWRITEV;
		cb[i].aio_fildes = (__u32)fd;
		cb[i].aio_buf = (__u64)(uintptr_t)io->iov;
		/* A longer vector goes as far as it can and the rest as
		 * after a short transfer. */
		cb[i].aio_nbytes = (__u64)engine_fd_iov_cut(io->iovcnt);
		cb[i].aio_offset = (__s64)io->dev_pos;
		cbp[i] = &cb[i];
	}
	int sent = 0, pending = 0;
	while (sent < n) {
		long k = syscall(SYS_io_submit, ctx, (long)(n - sent),
				 &cbp[sent]);
		if (k > 0) {
			if (!pending)
				atomic_fetch_add_explicit(&engine_aio_batches,
							  1,
							  memory_order_relaxed);
			sent += (int)k;
			pending += (int)k;
		} else if (k < 0 && errno == EINTR) {
			continue;
		} else {
			/* Refused (out of kernel resources, or this one
			 * request): it goes without AIO, the rest may not. */
			res[sent] = engine_fd_rw(fd, direct, ios[sent]);
			sent++;
		}
	}
	struct io_event ev[ENGINE_AIO_BATCH];
	while (pending) {
		long got = syscall(SYS_io_getevents, ctx, 1L, (long)pending,
				   ev, NULL);
		if (got < 0) {
			/* EINTR; anything else would be a bug in the
			 * context, and the transfers still point at the
			 * caller's memory: wait for them all the same. */
			if (errno != EINTR) {
				struct timespec ts = {0, 1000000};
				nanosleep(&ts, NULL);
			}
			continue;
		}
		for (long j = 0; j < got; j++) {
			int i = (int)ev[j].data;
			res[i] = settle(fd, direct, ios[i], ev[j].res);
		}
		pending -= (int)got;
	}
}
