/* SPDX-License-Identifier: MIT */
/*
 * The posix engine: positioned vectored I/O on a file descriptor, done by
 * a few engine threads (workq.c) or inside submit() (FOLIO_POSIX_INLINE).
 * Positioned calls share no file offset, so any number of threads may do
 * them at once without a lock. On an O_DIRECT descriptor a worker sends
 * the requests it finds queued together as one kernel AIO batch (aio.c).
 *
 * One copy in RAM. The library caches what it reads and writes, so the
 * kernel's copy of the same pages in its page cache is memory spent twice.
 * Unless FOLIO_POSIX_KEEP_PAGE_CACHE is given, the engine tells the kernel
 * to drop its pages (posix_fadvise DONTNEED) once the library holds the
 * data: a read range right after the read, a written range only after a
 * flush made it clean, since the kernel silently keeps dirty or
 * under-writeback pages (and DONTNEED on a dirty range would only start
 * early writeback). Reopening the file with O_DIRECT would avoid the copy
 * altogether, but without the library's own readahead a direct reader of
 * small calls loses the kernel's readahead (doc/design.md has the
 * figures); a caller who wants that passes an O_DIRECT descriptor.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/spinlock.h"
#include "engines/aio.h"
#include "engines/fd.h"
#include "engines/workq.h"

/* Written ranges a flush remembers apart: enough for the runs of a few
 * writeback passes; beyond, a new range widens the nearest one. */
#define POSIX_WR_RANGES 16

struct posix_range {
	uint64_t start, end;
};

struct posix_engine {
	struct engine_fd f;
	bool drop; /* fadvise the kernel's pages away after our I/O */
	/* What was written since the last flush began, for that flush to
	 * drop once it has cleaned it. Ranges, not one covering range: a
	 * random writer's span is the whole file, and dropping it would take
	 * kernel-cached pages the library never held (a prefilled file the
	 * library has yet to read) and turn its next reads into device
	 * reads. */
	spinlock_t wr_lock;
	int nwr;
	struct posix_range wr[POSIX_WR_RANGES];
	/* The current sequential read stream: where the last read ended and
	 * where the stream began (see read_drop_start()). Relaxed: a race
	 * only makes one drop narrower or as wide as a stream's. */
	_Atomic uint64_t rd_end, rd_stream;
	/* With workers (not inline): submit() queues, they run. */
	bool threaded;
	struct engine_workq q;
};

static void drop_range(int fd, uint64_t start, uint64_t end)
{
	/* Advice: failure (a file system without fadvise) costs only the
	 * second copy, so it is not an I/O error. */
	(void)posix_fadvise(fd, (off_t)start, (off_t)(end - start),
			    POSIX_FADV_DONTNEED);
}

/*
 * The kernel drops only the folios of its page cache that lie wholly
 * inside the range, and its readahead makes large ones (up to a PMD, 2 MiB
 * on x86-64, aligned to their size). A sequential reader's request
 * boundaries cut through them, so dropping just each request's own range
 * would leave most of a file cached (measured: 226 of 256 MiB with 1 MiB
 * reads). A read that continues the stream therefore drops from the 2 MiB
 * boundary below it (but not before the stream began: those pages are
 * ones this stream read), which catches the folio the previous request
 * left straddling. Any other read drops just its own range, so a random
 * reader takes nothing from its neighbours. The end is never rounded up:
 * the folio beyond it holds the kernel's readahead that the next request
 * is about to read, and dropping it would read it twice.
 */
#define POSIX_DROP_ALIGN ((uint64_t)2 << 20)

static uint64_t read_drop_start(struct posix_engine *p, uint64_t pos,
				uint64_t end)
{
	uint64_t stream;
	if (atomic_load_explicit(&p->rd_end, memory_order_relaxed) == pos) {
		stream = atomic_load_explicit(&p->rd_stream,
					      memory_order_relaxed);
	} else {
		stream = pos;
		atomic_store_explicit(&p->rd_stream, pos, memory_order_relaxed);
	}
	atomic_store_explicit(&p->rd_end, end, memory_order_relaxed);
	uint64_t start = pos & ~(POSIX_DROP_ALIGN - 1);
	return MIN(pos, MAX(start, stream));
}

static bool ranges_touch(const struct posix_range *r, uint64_t start,
			 uint64_t end)
{
	return start <= r->end && r->start <= end;
}

static uint64_t range_gap(const struct posix_range *r, uint64_t start,
			  uint64_t end)
{
	return start > r->end ? start - r->end
	       : r->start > end ? r->start - end
				: 0;
}

/* Record [start, end) as written; with no free slot, widen the range
 * nearest to it (the least collateral at the drop). */
static void written(struct posix_engine *p, uint64_t start, uint64_t end)
{
	spin_lock(&p->wr_lock);
	int best = -1;
	for (int i = 0; i < p->nwr; i++) {
		if (ranges_touch(&p->wr[i], start, end)) {
			best = i;
			break;
		}
		if (best < 0 || range_gap(&p->wr[i], start, end) <
					range_gap(&p->wr[best], start, end))
			best = i;
	}
	if (best >= 0 && (ranges_touch(&p->wr[best], start, end) ||
			  p->nwr == POSIX_WR_RANGES)) {
		p->wr[best].start = MIN(p->wr[best].start, start);
		p->wr[best].end = MAX(p->wr[best].end, end);
	} else {
		p->wr[p->nwr].start = start;
		p->wr[p->nwr].end = end;
		p->nwr++;
	}
	spin_unlock(&p->wr_lock);
}

static int posix_barrier(struct posix_engine *p);

/* @io was transferred with result @res: complete it. */
static void posix_finish(struct posix_engine *p, struct folio_io *io,
			 ssize_t res)
{
	/* Read before completing: the completion may free io. */
	bool rd = io->op == FOLIO_IO_READ;
	uint64_t pos = io->dev_pos, len = io->len;
	/* Before the completion: a write must be on record before anyone
	 * can learn it is done and flush for it, and whoever looks at the
	 * page cache after a read sees it dropped. A failed transfer may
	 * have left nothing to drop. */
	if (p->drop && len && res >= 0) {
		if (rd)
			drop_range(p->f.fd, read_drop_start(p, pos, pos + len),
				   pos + len);
		else
			written(p, pos, pos + len);
	}
	/* Durable: the flush runs here, after the write, before the
	 * completion, so the request needs no second round trip. A short
	 * write is not synced: it is not durable whatever the sync did. */
	int barrier = 0;
	if (engine_io_durable(io) && res == (ssize_t)len)
		barrier = posix_barrier(p);
	engine_complete(io, res, barrier);
}

/* Transfer @io (checked, not a direct tail) and complete it: inside
 * submit() inline, on a worker or in a helping wait() otherwise. */
static void posix_run(void *arg, struct folio_io *io)
{
	struct posix_engine *p = arg;
	posix_finish(p, io, engine_fd_rw(p->f.fd, p->f.direct, io));
}

/*
 * Kernel AIO, per worker thread (a worker serves one engine for its
 * life): set up at its first batch, torn down as it ends. A thread the
 * kernel gives no context (no AIO, aio-max-nr reached, a seccomp filter)
 * transfers its batches one request at a time.
 */
static _Thread_local struct engine_aio posix_aio;
static _Thread_local bool posix_aio_refused;

static void posix_worker_exit(void *arg)
{
	(void)arg;
	engine_aio_destroy(&posix_aio);
	posix_aio_refused = false;
}

/*
 * Writes a worker found queued together, on an O_DIRECT descriptor:
 * their transfers go to the kernel in one io_submit(), so the device
 * gets them at once and the worker sleeps once for all of them (one
 * pwritev() each was a system call, a device notification and a sleep
 * per request, and 16 workers kept only 16 in flight: a sync of 10^4
 * scattered blocks ran at 0.65-0.74x the kernel's). Every transfer is
 * over before the first completion runs, which the queue's drains rely
 * on (workq.c). That is why reads are not batched: a reader waits for
 * the first request of its window, which would then complete with the
 * last (cold 4 KiB reads through 8 MiB windows lost 6-11%); nor are
 * durable writes, whose barrier follows each alone.
 */
static bool posix_batchable(const struct folio_io *io)
{
	return io->op == FOLIO_IO_WRITE && !engine_io_durable(io);
}

static void posix_run_batch(void *arg, struct folio_io **ios, int n)
{
	struct posix_engine *p = arg;
	ssize_t res[WORKQ_BATCH_MAX];
	if (!posix_aio.ctx && !posix_aio_refused &&
	    engine_aio_setup(&posix_aio))
		posix_aio_refused = true;
	if (posix_aio.ctx) {
		engine_aio_transfer(&posix_aio, p->f.fd, p->f.direct, ios, n,
				    res);
	} else {
		for (int i = 0; i < n; i++)
			res[i] = engine_fd_rw(p->f.fd, p->f.direct, ios[i]);
	}
	for (int i = 0; i < n; i++)
		posix_finish(p, ios[i], res[i]);
}

static int posix_submit(void *arg, struct folio_io *io)
{
	struct posix_engine *p = arg;
	int ret = engine_check_io(io);
	if (ret)
		return ret;
	/* The rare direct tail is written here, synchronously (fd.c). */
	ret = engine_fd_submit_tail(&p->f, io);
	if (ret)
		return ret < 0 ? ret : 0;
	/* Nothing to transfer (a durable one still owes its barrier):
	 * done at once, as by the io_uring engine. */
	if (p->threaded && io->len)
		return engine_workq_submit(&p->q, io);
	posix_run(p, io);
	return 0;
}

/* fdatasync(), then drop what it made clean: flush() and the barrier of
 * a durable write (whose write is done). */
static int posix_barrier(struct posix_engine *p)
{
	struct posix_range wr[POSIX_WR_RANGES];
	int n = 0;
	if (p->drop) {
		/* Taken before fdatasync: what was written before this point
		 * is clean after it; later writes wait for the next flush. */
		spin_lock(&p->wr_lock);
		n = p->nwr;
		memcpy(wr, p->wr, (size_t)n * sizeof(wr[0]));
		p->nwr = 0;
		spin_unlock(&p->wr_lock);
	}
	int err = engine_fd_datasync(p->f.fd);
	if (err) {
		for (int i = 0; i < n; i++) /* for the retry */
			written(p, wr[i].start, wr[i].end);
		return err;
	}
	for (int i = 0; i < n; i++)
		drop_range(p->f.fd, wr[i].start, wr[i].end);
	return 0;
}

static int posix_flush(void *arg)
{
	struct posix_engine *p = arg;
	/* Writes the caller submitted are covered even before they
	 * completed, as inline and with io_uring; other threads' are
	 * covered once complete (the contract), so nothing else is waited
	 * for. */
	if (p->threaded)
		engine_workq_drain_own_writes(&p->q);
	return posix_barrier(p);
}

/*
 * A thread about to sleep for its requests runs the oldest queued one
 * itself: a sync's lone write then costs no thread switch to a worker and
 * back (1 job writing and syncing: 0.82-0.85x the kernel with the switch,
 * 0.88-0.90x inline), and a sync of many requests adds its thread to the
 * workers. What already runs on a worker completes from there.
 */
static int posix_wait(void *arg)
{
	struct posix_engine *p = arg;
	if (p->threaded && engine_workq_help(&p->q))
		return 0;
	return FOLIO_ENGINE_WAIT_IDLE;
}

static int posix_truncate(void *arg, uint64_t size)
{
	if (size > FOLIO_MAX_POS)
		return -EINVAL;
	struct posix_engine *p = arg;
	/* A read accepted before still sees the old contents (the library
	 * has none in flight here; a direct user may). */
	if (p->threaded)
		engine_workq_drain_older(&p->q);
	return engine_fd_truncate(&p->f, size);
}

static void posix_destroy(void *arg)
{
	struct posix_engine *p = arg;
	if (p->threaded)
		engine_workq_stop(&p->q);
	engine_fd_close(&p->f);
	free(p);
}

static const struct folio_engine_ops posix_ops = {
	.sz = sizeof(struct folio_engine_ops),
	.submit = posix_submit,
	.flush = posix_flush,
	.truncate = posix_truncate,
	.wait = posix_wait,
	.destroy = posix_destroy,
	.caps = FOLIO_ENGINE_CAP_DURABLE | FOLIO_ENGINE_CAP_WAITED,
};

/*
 * Workers when the caller names none. On a direct descriptor every
 * request is a device round trip, and threads keep several in flight: a
 * sync of 10^4 scattered blocks took 182, 146, 129, 147 and 153 ms with
 * 4, 8, 16, 32 and 64 threads (inline: 447 ms). On a buffered one the
 * kernel already overlaps (its readahead, its writeback at fdatasync()),
 * and threads only cost: cold sequential reads measured 0.35-0.73x of
 * inline, concurrent preadv() calls breaking up the kernel's readahead
 * stream. So: threads for direct I/O, inline otherwise (doc/design.md,
 * "The posix engine's workers"). Threads start only as requests queue
 * up, so a reader with two windows in flight has two.
 */
#define POSIX_DEFAULT_WORKERS 16
#define POSIX_FLAGS                                                        \
	(FOLIO_ENGINE_DIRECT | FOLIO_POSIX_KEEP_PAGE_CACHE |               \
	 FOLIO_POSIX_NO_AIO)

int folio_engine_posix_opts(struct folio_engine **out, int fd,
			    const struct folio_posix_opts *opts)
{
	if (!out || fd < 0)
		return -EINVAL;
	struct folio_posix_opts o = {0};
	if (opts) {
		int bad = sized_check(opts, opts->sz,
				      SIZEOF_THROUGH(struct folio_posix_opts,
						     flags),
				      sizeof(o));
		if (bad)
			return bad;
		memcpy(&o, opts, MIN(opts->sz, sizeof(o)));
	}
	if ((o.flags & ~POSIX_FLAGS) ||
	    (o.workers != FOLIO_POSIX_INLINE &&
	     (o.workers < 0 || o.workers > FOLIO_POSIX_MAX_WORKERS)))
		return -EINVAL;
	struct engine_fd f;
	int ret = engine_fd_open(&f, fd, o.flags & FOLIO_ENGINE_DIRECT);
	if (ret)
		return ret;
	int workers = o.workers ? o.workers
		      : f.direct ? POSIX_DEFAULT_WORKERS
				 : FOLIO_POSIX_INLINE;
	struct posix_engine *p = malloc(sizeof(*p));
	if (!p) {
		engine_fd_close(&f);
		return -ENOMEM;
	}
	p->f = f;
	/* An O_DIRECT descriptor bypasses the page cache already (its rare
	 * buffered tail writes, fd.c, leave one page per object): the
	 * fadvise calls would buy nothing. */
	int fl = fcntl(fd, F_GETFL);
	p->drop = !(o.flags & FOLIO_POSIX_KEEP_PAGE_CACHE);
	if (p->drop && fl >= 0 && (fl & O_DIRECT))
		p->drop = false;
	spin_init(&p->wr_lock);
	p->nwr = 0;
	atomic_init(&p->rd_end, UINT64_MAX);
	atomic_init(&p->rd_stream, 0);
	p->threaded = workers != FOLIO_POSIX_INLINE;
	if (p->threaded && engine_workq_init(&p->q, workers, posix_run, p)) {
		engine_fd_close(&p->f);
		free(p);
		return -ENOMEM;
	}
	/* Batches through kernel AIO only where the kernel queues them:
	 * on a buffered descriptor io_submit() would do each transfer
	 * before it returns. */
	if (p->threaded && fl >= 0 && (fl & O_DIRECT) &&
	    !(o.flags & FOLIO_POSIX_NO_AIO)) {
		p->q.run_batch = posix_run_batch;
		p->q.batchable = posix_batchable;
		p->q.batch_max = MIN(WORKQ_BATCH_MAX, ENGINE_AIO_BATCH);
		p->q.worker_exit = posix_worker_exit;
	}
	ret = engine_create(out, &posix_ops, p, ENGINE_POSIX);
	if (ret)
		posix_destroy(p);
	else
		(*out)->readahead_hint = engine_fd_device_readahead(p->f.fd);
	return ret;
}

int folio_engine_posix(struct folio_engine **out, int fd, unsigned flags)
{
	struct folio_posix_opts o = {.sz = sizeof(o), .flags = flags};
	return folio_engine_posix_opts(out, fd, &o);
}
