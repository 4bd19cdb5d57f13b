/* SPDX-License-Identifier: MIT */
/*
 * Kernel AIO (io_setup/io_submit/io_getevents) for a batch of requests on
 * an O_DIRECT descriptor: one system call hands the whole batch to the
 * device, where one pwritev() per request pays a system call, a device
 * notification and a sleep each. The posix engine's workers use it for
 * what they find queued together (posix.c).
 */
#ifndef FOLIO_ENGINES_AIO_H
#define FOLIO_ENGINES_AIO_H

#include <stdatomic.h>

#include "engines/builtin.h"

/* Most requests one batch transfers (the context's depth). */
#define ENGINE_AIO_BATCH 64

/* Batches engine_aio_transfer() handed to the kernel (at least one
 * request each), process-wide: how the tests tell that a path used AIO. */
extern atomic_ulong engine_aio_batches;

/* Tests set it to make engine_aio_setup() fail with -EAGAIN, as a
 * kernel past its aio-max-nr does. */
extern atomic_bool engine_aio_refuse;

struct engine_aio {
	unsigned long ctx; /* the kernel's aio_context_t; 0 when none */
};

/* Set up a context for ENGINE_AIO_BATCH requests. 0 or -errno (-ENOSYS
 * without kernel AIO, -EAGAIN past the system's aio-max-nr, -EPERM under
 * a filter): the caller then does without. */
int engine_aio_setup(struct engine_aio *a);

/* Tear it down (nothing may be in flight: engine_aio_transfer() returns
 * only once its batch is over). No-op on one that was never set up. */
void engine_aio_destroy(struct engine_aio *a);

/*
 * Transfer @n (<= ENGINE_AIO_BATCH) requests on @fd, each a read or a
 * write of at least one byte, and put each one's outcome in res[i] as
 * engine_fd_rw() would (bytes, a short write's bytes, or -errno). Returns
 * once every one is over; completes none of them. What the kernel does
 * not take in the batch (a refused submission), does short or interrupts
 * is finished with preadv/pwritev, so the outcome is the same as
 * transferring each request alone.
 */
void engine_aio_transfer(struct engine_aio *a, int fd, bool direct,
			 struct folio_io **ios, int n, ssize_t *res);

#endif
