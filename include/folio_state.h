/* SPDX-License-Identifier: MIT */
/*
 * libfolio-state: large folios with per-block uptodate/dirty state for
 * userspace storage engines and caches.
 *
 * Conventions that hold for every function below unless it says otherwise:
 *  - A fallible call returns 0 (or a non-negative count) on success and a
 *    negative errno on failure. errno itself is never used as a side channel.
 *  - Bad input (NULL, a range outside the object, an overflowing range, a
 *    value that is not a power of two where one is required) returns -EINVAL
 *    or -ERANGE and changes nothing.
 *  - Constructors take an out-parameter that is written only on success.
 *  - Every options, ops and stats struct starts with `size_t sz`; set it to
 *    sizeof(the struct). A caller built against an older, smaller struct
 *    gets defaults for the fields it lacks; a caller built against a newer,
 *    larger one is accepted when every byte past the struct this library
 *    knows is zero, and refused with -E2BIG otherwise (a field or callback
 *    the library does not know is never silently ignored). A sz below the
 *    struct's required fields is -EINVAL. A NULL options pointer means
 *    "all defaults".
 *  - A non-zero return from a user callback (folio_mapping_dirty_ranges)
 *    is passed back unchanged. Engine callbacks return 0 or a negative
 *    errno; a positive value from them is treated as -EIO.
 *
 * Layers, each using only the ones before it: folio -> engine -> mapping.
 * The mem engine, for tests, has its own header: folio_state_mem.h.
 *
 * Durability contract (mappings): a write is in memory only (dirty) until
 * writeback hands it to the engine; once the engine completed it, it is
 * in the backing store but *unstable* (an engine or disk may still lose
 * it) until a flush that began after that completion succeeds. The cache
 * keeps unstable blocks (invalidate and free refuse to drop them) and,
 * when a flush fails, makes every unstable block dirty again, so the next
 * sync writes it again and flushes again. folio_mapping_sync() returning 0
 * therefore means every byte written before the call is in the backing
 * store and flushed; any write, flush or wait failure on the way makes it
 * return the error instead (once per error cursor), and the data stays
 * cached until a later sync succeeds. FOLIO_MAPPING_DROP_ON_ERROR trades
 * this for Linux behaviour: failures are reported once and nothing is
 * kept for them.
 */
#ifndef FOLIO_STATE_H
#define FOLIO_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FOLIO_EXPORT __attribute__((visibility("default")))
#else
#define FOLIO_EXPORT
#endif

#define FOLIO_STATE_VERSION_MAJOR 0
#define FOLIO_STATE_VERSION_MINOR 1

/* Geometry limits. */
#define FOLIO_MIN_BLOCK_SIZE 512u
#define FOLIO_MAX_BLOCK_SIZE 65536u
#define FOLIO_MAX_SIZE (2u * 1024u * 1024u) /* largest folio (compile-time) */
#define FOLIO_DATA_ALIGN 4096u              /* folio memory alignment */

/*
 * Largest position any object may reach: every position and size the
 * library accepts is at most this, so pos + len never overflows and every
 * byte count and size fits an int64_t or ssize_t return. Mapping calls
 * refuse positions past it with -EFBIG.
 */
#define FOLIO_MAX_POS (UINT64_C(1) << 62)

/* ======================================================================
 * Layer 2: folios
 * ======================================================================
 *
 * A folio is a naturally aligned, power-of-two sized piece of one object's
 * data (`size` bytes at position `pos`, pos % size == 0), split into blocks
 * of `block_size` bytes. Each block has an uptodate bit (the memory holds
 * the object's bytes) and a dirty bit (the memory is newer than the backing
 * store). All bit changes happen under one small per-folio spinlock.
 *
 * Ranges are byte ranges inside the folio, (off, len) with off + len <=
 * size. Setting rounds outward (a partly covered block counts); clearing
 * rounds inward (only wholly covered blocks are cleared). len == 0 is a
 * no-op that succeeds.
 *
 * Thread rules: every function here may be called from any thread on a
 * folio the caller holds a reference to. State changes are atomic with
 * respect to each other. The flag predicates folio_test_*() read one atomic
 * word and take no lock.
 */
struct folio;

/* Bits returned by the folio_set_*() calls: which transition this call made.
 * Exactly one caller ever sees each transition. */
#define FOLIO_BECAME_DIRTY 1    /* folio went from no dirty block to some */
#define FOLIO_BECAME_UPTODATE 2 /* the folio's last missing block became uptodate */

/**
 * folio_new() - allocate a folio with all blocks not uptodate and clean.
 * @out:        receives the folio (reference count 1) on success.
 * @pos:        object position of the first byte; a multiple of @size,
 *              below FOLIO_MAX_POS.
 * @size:       folio size; a power of two, @block_size <= @size <= FOLIO_MAX_SIZE.
 * @block_size: a power of two, FOLIO_MIN_BLOCK_SIZE..FOLIO_MAX_BLOCK_SIZE.
 *
 * The data is aligned to at least FOLIO_DATA_ALIGN bytes and zero-filled;
 * the per-block state lives in the same allocation as the folio header.
 *
 * Return: 0; -EINVAL for a NULL @out, a bad size or block size, or a
 * misaligned @pos or one at or past FOLIO_MAX_POS; -ENOMEM.
 */
FOLIO_EXPORT int folio_new(struct folio **out, uint64_t pos, size_t size,
			   size_t block_size);

/**
 * folio_get() - take another reference. Returns @f (NULL stays NULL).
 */
FOLIO_EXPORT struct folio *folio_get(struct folio *f);

/**
 * folio_put() - drop a reference; the last one frees the folio and its
 * memory. NULL is ignored. Never call it on a folio you hold no reference to.
 */
FOLIO_EXPORT void folio_put(struct folio *f);

/** folio_data() - the folio's memory (folio_size() bytes); NULL for NULL. */
FOLIO_EXPORT void *folio_data(const struct folio *f);
/** folio_pos() - object position of byte 0 of the folio; 0 for NULL. */
FOLIO_EXPORT uint64_t folio_pos(const struct folio *f);
/** folio_size() - folio size in bytes; 0 for NULL. */
FOLIO_EXPORT size_t folio_size(const struct folio *f);
/** folio_block_size() - block size in bytes; 0 for NULL. */
FOLIO_EXPORT size_t folio_block_size(const struct folio *f);

/**
 * folio_set_uptodate() - mark the blocks touched by [off, off+len) uptodate.
 * Call it only after those bytes really hold the object's data.
 *
 * Return: a mask of FOLIO_BECAME_* bits (0 when this call made neither
 * folio-wide transition, also when it marked blocks); -EINVAL for NULL;
 * -ERANGE when the range leaves the folio or overflows.
 */
FOLIO_EXPORT int folio_set_uptodate(struct folio *f, size_t off, size_t len);

/**
 * folio_set_dirty() - mark the blocks touched by [off, off+len) dirty.
 * Return: as folio_set_uptodate().
 */
FOLIO_EXPORT int folio_set_dirty(struct folio *f, size_t off, size_t len);

/**
 * folio_set_dirty_uptodate() - the write fast path: mark the blocks touched
 * by [off, off+len) dirty and uptodate under ONE lock acquisition. When the
 * folio is already fully uptodate only the dirty bits are touched. The
 * caller must have made every touched block valid (edge blocks read or
 * zero-filled) before calling.
 *
 * Return: as folio_set_uptodate().
 */
FOLIO_EXPORT int folio_set_dirty_uptodate(struct folio *f, size_t off,
					  size_t len);

/**
 * folio_clear_dirty() - clear the dirty bit of every block wholly inside
 * [off, off+len). Partly covered blocks stay dirty.
 *
 * Return: 0; -EINVAL for NULL; -ERANGE for a bad range.
 */
FOLIO_EXPORT int folio_clear_dirty(struct folio *f, size_t off, size_t len);

/**
 * folio_clear_uptodate() - forget the contents of every block wholly inside
 * [off, off+len) that is not dirty (a dirty block is the only copy of its
 * data and keeps its uptodate bit).
 *
 * Return: 0; -EINVAL for NULL; -ERANGE for a bad range.
 */
FOLIO_EXPORT int folio_clear_uptodate(struct folio *f, size_t off, size_t len);

/**
 * folio_is_uptodate() - are all blocks touched by [off, off+len) uptodate?
 * Return: 1 yes, 0 no (len == 0 gives 1); -EINVAL / -ERANGE on bad input.
 */
FOLIO_EXPORT int folio_is_uptodate(struct folio *f, size_t off, size_t len);

/**
 * folio_is_dirty() - is any block touched by [off, off+len) dirty?
 * Return: 1 yes, 0 no (len == 0 gives 0); -EINVAL / -ERANGE on bad input.
 */
FOLIO_EXPORT int folio_is_dirty(struct folio *f, size_t off, size_t len);

/** folio_test_uptodate() - is every block uptodate? Lock-free; NULL: false. */
FOLIO_EXPORT bool folio_test_uptodate(const struct folio *f);
/** folio_test_dirty() - is any block dirty? Lock-free; NULL: false. */
FOLIO_EXPORT bool folio_test_dirty(const struct folio *f);
/** folio_test_writeback() - is write I/O in flight? Lock-free; NULL: false. */
FOLIO_EXPORT bool folio_test_writeback(const struct folio *f);
/** folio_test_locked() - is the folio locked (folio_lock)? NULL: false. */
FOLIO_EXPORT bool folio_test_locked(const struct folio *f);

/**
 * folio_next_dirty() - find the first run of dirty blocks at or after the
 * block holding *@off.
 * @off: in: where to start (bytes); out: the run's first byte (block
 *       aligned). Unchanged when there is no run.
 *
 * Return: the run length in bytes (a multiple of the block size), 0 when
 * there is none, -EINVAL for NULL, -ERANGE when *@off > folio_size().
 */
FOLIO_EXPORT ssize_t folio_next_dirty(struct folio *f, size_t *off);

/**
 * folio_next_missing() - like folio_next_dirty() for blocks that are NOT
 * uptodate (the runs a reader has to fetch).
 */
FOLIO_EXPORT ssize_t folio_next_missing(struct folio *f, size_t *off);

/** A byte range inside a folio. */
struct folio_range {
	size_t off;
	size_t len;
};

/**
 * folio_take_dirty() - under one lock acquisition, return the dirty runs of
 * the folio in offset order and clear them (what writeback does).
 * @runs:     array receiving up to @max_runs runs.
 * @max_runs: capacity of @runs; when the folio has more runs, only the first
 *            @max_runs are taken and the rest stay dirty for the next call.
 *
 * Return: the number of runs taken (0: the folio was clean); -EINVAL for a
 * NULL argument or @max_runs == 0.
 */
FOLIO_EXPORT int folio_take_dirty(struct folio *f, struct folio_range *runs,
				  size_t max_runs);

/**
 * folio_lock() - take the folio's content lock (the LOCKED flag), sleeping
 * while another thread holds it. The mapping layer holds it while it changes
 * a folio's contents or structure; users of bare folios may use it the same
 * way. Not recursive. Return: 0; -EINVAL for NULL.
 */
FOLIO_EXPORT int folio_lock(struct folio *f);
/** folio_trylock() - 1 if the lock was taken, 0 if busy, -EINVAL for NULL. */
FOLIO_EXPORT int folio_trylock(struct folio *f);
/** folio_unlock() - release the lock and wake waiters. Return: 0; -EINVAL
 * for NULL; -EPERM when the folio was not locked. */
FOLIO_EXPORT int folio_unlock(struct folio *f);

/**
 * folio_start_writeback() - set the WRITEBACK flag (write I/O is about to be
 * in flight). Return: 0; -EBUSY when already set; -EINVAL for NULL.
 */
FOLIO_EXPORT int folio_start_writeback(struct folio *f);
/** folio_end_writeback() - clear WRITEBACK and wake folio_wait_writeback()
 * callers. Return: 0; -EPERM when not set; -EINVAL for NULL. */
FOLIO_EXPORT int folio_end_writeback(struct folio *f);
/** folio_wait_writeback() - sleep until WRITEBACK is clear. 0 / -EINVAL. */
FOLIO_EXPORT int folio_wait_writeback(struct folio *f);

/* ======================================================================
 * Layer 3: engines (the I/O boundary)
 * ======================================================================
 *
 * The library never does I/O itself: it builds `struct folio_io` requests
 * whose iovecs point into folio memory and hands them to an engine's
 * submit(). The engine finishes each accepted request exactly once with
 * folio_io_complete(), from any thread, possibly before submit() returns.
 */
enum folio_io_op {
	FOLIO_IO_READ = 0,
	FOLIO_IO_WRITE = 1,
};

/* Extent flags (struct folio_extent.flags, passed on in folio_io.flags). */
#define FOLIO_EXTENT_HOLE 0x1u /* nothing allocated: reads return zeros */
#define FOLIO_EXTENT_NEW 0x2u  /* allocated but never written */

/** What the optional map() callback returns: file bytes [pos, pos+len)
 * live at device bytes [dev_pos, dev_pos+len). */
struct folio_extent {
	uint64_t pos;
	uint64_t len;
	uint64_t dev_pos;
	uint32_t flags;
};

/** One I/O request. Built by the library; the engine reads every field and
 * may use @engine_data freely until it calls folio_io_complete(). */
struct folio_io {
	enum folio_io_op op;
	uint32_t flags;       /* FOLIO_EXTENT_* of the extent it lies in */
	uint64_t pos;         /* object (file) position */
	uint64_t dev_pos;     /* device position (== pos without map()) */
	size_t len;           /* total bytes = sum of iov lengths */
	struct iovec *iov;    /* points into folio memory */
	int iovcnt;
	void *engine_data;    /* free for the engine */
};

/**
 * folio_io_complete() - finish a request the engine accepted.
 * @result: bytes transferred (may be less than io->len: a short transfer)
 *          or a negative errno.
 *
 * Callable from any thread, including inside submit() (synchronous
 * engines). After it returns the engine must not touch @io again.
 * A NULL @io is ignored.
 */
FOLIO_EXPORT void folio_io_complete(struct folio_io *io, ssize_t result);

/*
 * Engine callbacks. They may be called from any thread that uses the
 * mapping, while the library holds folio locks and mapping locks, so they
 * must not call back into the mapping (folio_io_complete() is the one
 * library call they make). A read must transfer its full length, zero-
 * filling past the end of the object: a short read completes as -EIO.
 * A write may complete short; the library resubmits the rest.
 */
struct folio_engine_ops {
	size_t sz; /* sizeof(struct folio_engine_ops) */
	/* Start @io. Return 0 when accepted (complete() will be called
	 * exactly once) or a negative errno when refused (it will not). */
	int (*submit)(void *ctx, struct folio_io *io);
	/* Durability barrier over every write completed before the call.
	 * On failure return -errno: the library then treats everything it
	 * wrote since the last successful flush as possibly lost and writes
	 * it again. Flushes of one mapping are never concurrent. */
	int (*flush)(void *ctx);
	/* Resize the backing object: bytes past @size are gone and a later
	 * grow reads zeros there. */
	int (*truncate)(void *ctx, uint64_t size);
	/* Optional: the extent holding @pos (its len may exceed @len). */
	int (*map)(void *ctx, uint64_t pos, uint64_t len,
		   struct folio_extent *ext);
	/* Optional: reap at least one completion of an in-flight request,
	 * blocking if needed; return 0 at once when nothing is in flight.
	 * May be called from several threads at once. Without it the
	 * library sleeps until the engine completes requests from its own
	 * threads. A negative return is reported by the operation that was
	 * waiting (sync returns it); the library still waits for its
	 * requests, calling wait() again after a growing pause (up to
	 * 10 ms), since they point into its memory. */
	int (*wait)(void *ctx);
	/* Optional: called once by folio_engine_free(). */
	void (*destroy)(void *ctx);
	/* Optional: the library has submitted a batch; start any requests
	 * the engine queued without starting (an io_uring engine submits
	 * its queue here). Called after every batch of submit() calls. */
	int (*unplug)(void *ctx);
};

struct folio_engine;

/**
 * folio_engine_new() - wrap user callbacks into an engine.
 * @ops: copied; submit, flush and truncate are required. @ops->sz must be
 *       at least the size of the fields up to and including truncate.
 * @ctx: passed to every callback.
 * Return: 0; -EINVAL for NULL or missing callbacks; -ENOMEM.
 */
FOLIO_EXPORT int folio_engine_new(struct folio_engine **out,
				  const struct folio_engine_ops *ops,
				  void *ctx);

/**
 * folio_engine_free() - destroy an engine (calls ops->destroy).
 * Return: 0; -EBUSY while a mapping still uses it (nothing is freed);
 * 0 for NULL.
 */
FOLIO_EXPORT int folio_engine_free(struct folio_engine *e);

/** folio_engine_ctx() - the ctx given at creation (NULL for NULL). */
FOLIO_EXPORT void *folio_engine_ctx(const struct folio_engine *e);

/* Flags of folio_engine_posix() / folio_engine_uring(). */
#define FOLIO_ENGINE_DIRECT 0x1u /* fd is O_DIRECT: requests must be aligned */
#define FOLIO_URING_COMPLETION_THREAD 0x2u /* folio_engine_uring() only: an
					    * engine thread reaps completions */

/*
 * What O_DIRECT engines require of a request: dev_pos, len and every iovec
 * base and length a multiple of this (the logical block size of common
 * devices). Folio memory is FOLIO_DATA_ALIGN aligned and block sizes are
 * multiples of 512, so requests made of whole blocks qualify. The one
 * exception writeback produces — a write cut at an end of file that is not
 * a multiple of 512, aligned except for the end of its last segment — is
 * accepted by the posix and io_uring engines and written synchronously
 * through a second, buffered descriptor of the same file (opened through
 * /proc/self/fd; where that fails such writes are refused with -EINVAL).
 */
#define FOLIO_ENGINE_DIRECT_ALIGN 512u

/**
 * folio_engine_posix() - synchronous engine over a file descriptor.
 * @out:   receives the engine on success.
 * @fd:    an open regular file or block device. It stays owned by the
 *         caller and must stay open until folio_engine_free().
 * @flags: 0 or FOLIO_ENGINE_DIRECT. An @fd opened with O_DIRECT gets the
 *         alignment checks even without the flag (fcntl(F_GETFL) tells).
 *
 * submit() does the I/O and completes the request before it returns:
 * preadv()/pwritev() at io->dev_pos, looping on short transfers and EINTR
 * (the caller's iovec array is never modified; any number of segments
 * works). A read that meets end of file zero-fills the rest and reports
 * the full length. A failure completes the request with -errno, or with
 * the bytes already transferred when there were some (a short transfer:
 * resubmitting the rest reports the error). In direct mode submit()
 * refuses with -EINVAL a request whose dev_pos, len or any iovec base or
 * length is not a multiple of FOLIO_ENGINE_DIRECT_ALIGN, except a write
 * whose only misalignment is the end of its last segment (see
 * FOLIO_ENGINE_DIRECT_ALIGN); a direct read
 * that ends past end of file is zero-filled like any other. A request
 * with an unknown op, iovecs that do not add up to len, or a range past
 * FOLIO_MAX_POS is refused with -EINVAL. flush() is fdatasync() and
 * truncate() is ftruncate() (-EINVAL past FOLIO_MAX_POS); both return -errno on failure. There
 * is no wait(): nothing is ever in flight once submit() has returned.
 *
 * Thread rules: submit, flush and truncate may run in any number of
 * threads at once (positioned I/O shares no file offset).
 *
 * Return: 0; -EINVAL for NULL @out, a negative @fd, unknown flags, or an
 * @fd that is not a regular file or block device (a pipe, socket or
 * directory) or was opened with O_APPEND (pwrite() would append wherever
 * the library asked to write); -EBADF when @fd is not open or is an O_PATH
 * descriptor; -ENOMEM.
 */
FOLIO_EXPORT int folio_engine_posix(struct folio_engine **out, int fd,
				    unsigned flags);

/**
 * folio_engine_uring() - asynchronous engine on io_uring (liburing).
 * @out:   receives the engine on success.
 * @fd:    as for folio_engine_posix(): owned by the caller, open until
 *         folio_engine_free().
 * @depth: submission queue entries, 1..4096. The kernel holds at most as
 *         many requests as the completion queue has entries (twice the
 *         rounded-up depth); the engine accepts more and keeps them until
 *         there is room.
 * @flags: FOLIO_ENGINE_DIRECT (as for posix, and also detected from @fd)
 *         and FOLIO_URING_COMPLETION_THREAD.
 *
 * submit() queues a readv/writev SQE at io->dev_pos and returns; it calls
 * io_uring_submit() only when the submission queue is full. unplug()
 * submits the queue (the library calls it after each batch of submits).
 * wait() submits anything queued, then sleeps until at least one request
 * has completed (its completion returned); it returns 0 at once when
 * nothing is in flight (requests whose completion the calling thread is
 * delivering do not count), 0 after progress, or a negative errno when
 * io_uring itself fails. Short
 * transfers are resubmitted for the rest; a read that meets end of file
 * zero-fills the rest and reports the full length; -EAGAIN, -EINTR and
 * -ECANCELED results (the kernel cancels requests of a thread that exits)
 * are retried; other errors complete the request with the error, or with
 * the bytes already transferred when there were some (a short transfer).
 * Refusals as for posix (-EINVAL), plus -ENOMEM and -ESHUTDOWN while the
 * engine is being freed. Completions are delivered by whichever thread
 * reaps them (a wait(), flush() or truncate() caller, or the completion
 * thread) and never under an engine lock, so a completion may submit.
 * flush() waits for every write submitted before it, then issues
 * IORING_OP_FSYNC with IORING_FSYNC_DATASYNC and waits for it.
 * truncate() waits for every request submitted before it, then calls
 * ftruncate().
 *
 * With FOLIO_URING_COMPLETION_THREAD an engine thread reaps completions,
 * so requests complete without anybody calling wait(); wait(), flush()
 * and truncate() then only sleep until it made progress. Requests are
 * started by unplug(), wait(), a full queue or the thread when it passes
 * by: call unplug() after a batch so they do not linger.
 *
 * folio_engine_free() waits until every accepted request has completed,
 * stops the thread and closes the ring.
 *
 * Thread rules: every callback may run in any number of threads at once,
 * including inside a completion. Do not free the engine from a completion.
 *
 * Return: 0; -EINVAL for NULL @out, a negative @fd, @depth outside
 * 1..4096, unknown flags, or an @fd posix refuses (see there); -EBADF when
 * @fd is not open or is an O_PATH descriptor; -ENOSYS when the
 * library was built without io_uring; the error of io_uring_queue_init()
 * (e.g. -ENOSYS or -EPERM where io_uring is disabled); -EAGAIN when the
 * completion thread cannot start; -ENOMEM.
 */
FOLIO_EXPORT int folio_engine_uring(struct folio_engine **out, int fd,
				    unsigned depth, unsigned flags);

/*
 * The mem engine (an in-memory backing store with fault injection, a
 * volatile write cache and power cuts, for tests) has its own header:
 * folio_state_mem.h, installed next to this one.
 */

/* ======================================================================
 * Layer 4: mappings (the cache of one object)
 * ====================================================================== */
/*
 * Thread rules for every mapping function: any number of threads may call
 * them on one mapping at once. Reads and writes of different folios run
 * in parallel; calls that touch the same folio are serialized by its lock
 * (a write of [pos, pos+len) is atomic within each folio it touches, not
 * across folios). Writeback and sync may run concurrently with reads and
 * writes; truncate and invalidate briefly exclude reads and writes.
 * folio_mapping_free() must be the last call, made when no other thread
 * uses the mapping. The exceptions are spelled out per function
 * (write_begin/write_end).
 */
struct folio_mapping;

/* struct folio_mapping_opts.flags */
#define FOLIO_MAPPING_STABLE_WRITES 0x1u /* writers wait for writeback */
#define FOLIO_MAPPING_DROP_ON_ERROR 0x2u /* failed writes are cleaned and
					  * reported once (Linux policy);
					  * default re-dirties them */
#define FOLIO_MAPPING_FOLIO_DIRTY 0x4u   /* track dirtiness per folio, not
					  * per block: a write reads the
					  * whole folio if needed and dirties
					  * all of it, as caches without
					  * per-block state do (for
					  * comparisons, and engines that
					  * must write whole folios) */

struct folio_mapping_opts {
	size_t sz;
	size_t block_size;     /* default 4096 */
	size_t min_folio_size; /* default block_size */
	size_t max_folio_size; /* default FOLIO_MAX_SIZE */
	uint64_t size;         /* current size of the backing object */
	unsigned flags;        /* FOLIO_MAPPING_* */
	struct folio_engine *engine; /* required; must outlive the mapping */
};

/**
 * folio_mapping_new() - create an empty cache over @opts->engine.
 * @out:  receives the mapping on success.
 * @opts: required; @opts->engine is required and must outlive the mapping;
 *        @opts->size is the backing object's current size (the mapping
 *        never looks at the object itself).
 * Return: 0; -EINVAL for NULL, @opts->sz too small to hold @engine, a bad
 * geometry (sizes not powers of two, block < 512 or > 64 KiB, min <
 * block, max < min or > FOLIO_MAX_SIZE, size > FOLIO_MAX_POS) or unknown flags;
 * -E2BIG for a larger @opts with non-zero unknown bytes; -ENOMEM.
 */
FOLIO_EXPORT int folio_mapping_new(struct folio_mapping **out,
				   const struct folio_mapping_opts *opts);

/**
 * folio_mapping_free() - drop every clean folio and free the mapping.
 * Call it when no other thread uses the mapping.
 * Return: 0 (also for NULL); -EBUSY when any dirty or unstable (written,
 * not yet flushed) data or I/O remains, or a folio is locked (a write_begin() without its write_end()): then
 * nothing is freed (sync first, or invalidate with FOLIO_INVALIDATE_DISCARD).
 */
FOLIO_EXPORT int folio_mapping_free(struct folio_mapping *m);

/**
 * folio_mapping_write() - buffered write of @len bytes at @pos, like
 * pwrite(2). Per folio only partly covered, not-uptodate edge blocks are
 * read (one engine request per contiguous run); blocks at or past EOF are
 * zero-filled. EOF grows to pos + written.
 * Return: bytes written (short when a later folio fails); -EINVAL for NULL
 * @m or NULL @buf with @len > 0; -EFBIG past FOLIO_MAX_POS; the engine's error (e.g.
 * -EIO) when the first folio fails, with nothing marked; -ENOMEM.
 */
FOLIO_EXPORT ssize_t folio_mapping_write(struct folio_mapping *m,
					 const void *buf, size_t len,
					 uint64_t pos);

/**
 * folio_mapping_read() - buffered read like pread(2): short at EOF, never
 * bytes beyond it. Missing blocks are read with as few engine requests as
 * the layout allows.
 * Return: bytes read (0 at/after EOF); -EINVAL for NULL @m or NULL @buf
 * with @len > 0; -EFBIG past FOLIO_MAX_POS; the engine's error (or -ENOMEM) when
 * the first byte cannot be read (a later failure gives a short count).
 */
FOLIO_EXPORT ssize_t folio_mapping_read(struct folio_mapping *m, void *buf,
					size_t len, uint64_t pos);

/**
 * folio_mapping_write_begin() - zero-copy write: find or create the folio
 * holding @pos, lock it, make the partly covered edge blocks of [pos,
 * pos+len) valid, and return it referenced and locked.
 * @folio: receives the folio. Copy into folio_data(*folio) + (pos -
 *         folio_pos(*folio)), at most the returned number of bytes.
 * Return: bytes of [pos, pos+len) inside this folio (>= 1); -EINVAL (also
 * for len == 0); -EFBIG; the engine's error.
 *
 * Until write_end() the folio stays locked. Between the two calls the
 * calling thread must not call any other function of this mapping: it
 * could wait for its own folio, or for a truncate that waits for it.
 * Other threads are unaffected (a concurrent truncate waits for the
 * write_end()). write_end() may be called from another thread.
 */
FOLIO_EXPORT ssize_t folio_mapping_write_begin(struct folio_mapping *m,
					       uint64_t pos, size_t len,
					       struct folio **folio);

/**
 * folio_mapping_write_end() - finish a write_begin(): mark @copied bytes at
 * @pos dirty and uptodate, grow EOF, unlock and drop the reference.
 * @m:      the mapping given to write_begin().
 * @folio:  the folio write_begin() returned, still locked by it.
 * @pos:    the position given to write_begin() (the range must start
 *          there: bytes before it in the folio were not made valid).
 * @copied: bytes copied from @pos, at most write_begin()'s return value
 *          (0: nothing is marked, the folio is released).
 * Return: the bytes committed: @copied, or less when a short copy ends
 * inside a block that write_begin() did not make valid (the count then
 * stops at that block's start, which may be 0). -EINVAL when @m or @folio
 * is NULL, @folio is not locked by a write_begin() on @m (a lock taken
 * with folio_lock() does not count), @pos differs from write_begin()'s or
 * @copied exceeds its count: nothing changes then, and the folio stays
 * locked and referenced until a valid write_end().
 * Thread rules: any thread, once per write_begin().
 */
FOLIO_EXPORT ssize_t folio_mapping_write_end(struct folio_mapping *m,
					     struct folio *folio,
					     uint64_t pos, size_t copied);

/**
 * folio_mapping_lookup() - the cached folio holding @pos, referenced (drop
 * it with folio_put()). Use it to inspect the folio (its state, its data
 * under folio_lock()); change a mapping's data only through the mapping's
 * write calls, which also keep its dirty index: a bare folio_set_dirty()
 * on it would never be written back.
 * Return: 0; -ENOENT when not cached; -EINVAL.
 */
FOLIO_EXPORT int folio_mapping_lookup(struct folio_mapping *m, uint64_t pos,
				      struct folio **folio);

/**
 * folio_mapping_truncate() - set the object's size. Shrinking drops folios
 * wholly past it (after their in-flight I/O ends), zeroes the tail of the
 * folio it cuts and cleans the blocks wholly past it, then calls the
 * engine's truncate(). Growing makes the new space read as zeros.
 * The engine is resized first (after writes in flight past the new size
 * ended): when its truncate() fails, the error is returned and nothing
 * changed, neither the size nor the cached bytes.
 * Return: 0; -EINVAL for NULL @m; -EFBIG past FOLIO_MAX_POS; the engine's error.
 */
FOLIO_EXPORT int folio_mapping_truncate(struct folio_mapping *m,
					uint64_t size);

#define FOLIO_INVALIDATE_DISCARD 0x1u /* also throw away dirty data */

/**
 * folio_mapping_invalidate() - drop cached folios overlapping [pos, pos+len)
 * (len 0: to the end). Waits for their writeback. Without
 * FOLIO_INVALIDATE_DISCARD folios holding dirty or unstable (written, not
 * yet flushed) data are kept; with it, dirty and unstable blocks wholly
 * inside the range are thrown away (folios only partly inside keep their
 * other blocks). When discarded dirty data reached EOF, EOF moves back to
 * what the backing store will hold once the rest is written back: the
 * larger of the store's size as the mapping knows it (opened with, grown
 * by completed writes, set by truncate) and the end of the last dirty
 * block before @pos, at most @pos; bytes past the new EOF are zeroed.
 * Return: 0; -EBUSY when folios were kept (the others are still dropped);
 * -EINVAL for NULL @m or unknown @flags; -ERANGE when @pos is past FOLIO_MAX_POS
 * or @pos + @len overflows or passes FOLIO_MAX_POS (nothing changed).
 */
FOLIO_EXPORT int folio_mapping_invalidate(struct folio_mapping *m,
					  uint64_t pos, uint64_t len,
					  unsigned flags);

/** folio_mapping_size() - current EOF; -EINVAL for NULL. */
FOLIO_EXPORT int64_t folio_mapping_size(const struct folio_mapping *m);

#define FOLIO_STATS_SHIFTS 13 /* folio sizes 512 B << 0 .. 512 B << 12 */

struct folio_mapping_stats {
	size_t sz;
	uint64_t bytes_written;  /* by the caller (write + write_end) */
	uint64_t bytes_read;     /* returned to the caller */
	uint64_t read_requests;  /* engine read requests */
	uint64_t read_bytes;
	uint64_t wb_requests;    /* engine write requests (writeback) */
	uint64_t wb_bytes;       /* bytes submitted for writeback */
	uint64_t wb_merges;      /* runs appended to an existing request */
	uint64_t map_calls;
	uint64_t retries;        /* short writes resubmitted */
	uint64_t errors;         /* errors recorded: failed engine requests
				  * and flushes, and syncs that gave up on
				  * an engine that kept writing short */
	uint64_t flushes;
	uint64_t cached_bytes;   /* uptodate bytes in the cache */
	uint64_t dirty_bytes;
	uint64_t folios;
	uint64_t folios_by_shift[FOLIO_STATS_SHIFTS];
	uint64_t unstable_bytes; /* written to the engine, not yet flushed:
				  * kept until a flush succeeds */
};

/**
 * folio_mapping_stats() - fill @st with the counters and a walk of the
 * cache (cached/dirty bytes, folios by size), honouring @st->sz: fields
 * past it are not written.
 * Return: 0; -EINVAL for NULL arguments or @st->sz < sizeof(size_t);
 * -E2BIG for a larger struct whose unknown bytes are not zero.
 */
FOLIO_EXPORT int folio_mapping_stats(struct folio_mapping *m,
				     struct folio_mapping_stats *st);

/* ---- writeback and sync ---------------------------------------------- */

/* struct folio_writeback_opts.flags */
#define FOLIO_WB_WAIT 0x1u /* data-integrity mode: wait for dirty folios
			    * already under writeback and write them too,
			    * then wait for this pass's requests and for
			    * writes other passes had in flight in the
			    * range; without it busy folios are skipped and
			    * the call returns once its requests are
			    * submitted */

struct folio_writeback_opts {
	size_t sz;
	uint64_t start;        /* first byte of the range */
	uint64_t end;          /* end of the range (exclusive); 0: no end */
	unsigned flags;        /* FOLIO_WB_* */
	uint64_t budget;       /* stop after submitting this many bytes
				* (0: no limit); whole folios are taken */
	size_t max_request;    /* bytes per request (>= the block size);
				* default 1 MiB */
	unsigned max_segments; /* iovecs per request; default 256, max 1024 */
	size_t merge_gap;      /* let up to this many bytes of clean,
				* uptodate blocks between two dirty runs of
				* a folio ride along so the runs become one
				* request; default 0 (only dirty blocks are
				* ever written) */
};

/**
 * folio_mapping_writeback() - write dirty blocks in [start, end) back.
 * Walks the folios tagged dirty in position order; for each: lock, set
 * WRITEBACK, take its dirty runs (clearing them), clamp them to EOF and
 * append them to the request being built when they continue it in file
 * and device position within the limits, else submit it and start a new
 * one. Dirty runs thus merge across folios. A failed or short write puts
 * the dirty bits of the unwritten bytes back (unless the mapping has
 * FOLIO_MAPPING_DROP_ON_ERROR) and records the error for sync().
 * @opts: NULL for defaults (everything, no waiting).
 *
 * Completed writes leave their blocks unstable until a flush (see the
 * durability contract at the top); only sync flushes.
 * Return: bytes submitted (>= 0); -EINVAL for NULL @m, a bad @opts->sz,
 * unknown flags, end < start, max_request below the mapping's block size,
 * or max_segments > 1024; -E2BIG for a larger @opts with non-zero unknown
 * bytes. Write errors are not returned here: they are reported by
 * folio_mapping_sync().
 *
 * Thread rules: may run concurrently with reads, writes and other
 * writeback passes; a folio is never under two writes at once.
 */
FOLIO_EXPORT int64_t folio_mapping_writeback(
	struct folio_mapping *m, const struct folio_writeback_opts *opts);

/** An error cursor: each cursor sees each writeback error once. */
typedef uint64_t folio_errseq_t;

/**
 * folio_mapping_err_cursor() - a cursor that will see every error recorded
 * from now on (like a file descriptor opened now). 0 for NULL.
 */
FOLIO_EXPORT folio_errseq_t folio_mapping_err_cursor(struct folio_mapping *m);

/**
 * folio_mapping_sync() - make everything written before the call durable:
 * write back all dirty data (waiting for folios already under writeback),
 * wait for all in-flight writes, flush, and report whether errors were
 * recorded since @cursor last looked: if so, the most recent one's errno
 * is returned and @cursor moves past all of them (like Linux's errseq:
 * several errors between two syncs are reported once).
 * Short writes are resubmitted within the call; data that still cannot be
 * written stays dirty (default policy) and is reported.
 * Flushes of one mapping run one at a time: a sync that arrives while
 * another thread's flush runs waits for it and then shares the next
 * flush, which began after its writes completed. A failed flush makes
 * every unstable block dirty again before its error is recorded, so no
 * later sync returns 0 until that data was written and flushed again.
 * @cursor: from folio_mapping_err_cursor(); NULL uses the mapping's own
 *          cursor, created with the mapping.
 *
 * Return: 0 means every byte written before the call is in the backing
 * store and flushed; otherwise a negative errno (an I/O error recorded
 * since the cursor last looked, or the flush's error); -EINVAL for NULL @m.
 */
FOLIO_EXPORT int folio_mapping_sync(struct folio_mapping *m,
				    folio_errseq_t *cursor);

/**
 * folio_mapping_dirty_ranges() - call @fn(pos, len, @arg) for each maximal
 * dirty byte range overlapping [start, end) (end 0: no end), merged across
 * folios, in position order, without writing or changing anything. Ranges
 * are whole blocks clamped to EOF. @fn runs with no library lock held and
 * may call any mapping function; the ranges are a snapshot that other
 * threads may change meanwhile.
 * Return: 0; the first non-zero value @fn returned (iteration stops);
 * -EINVAL for NULL @m or @fn, or end < start.
 */
FOLIO_EXPORT int folio_mapping_dirty_ranges(
	struct folio_mapping *m, uint64_t start, uint64_t end,
	int (*fn)(uint64_t pos, uint64_t len, void *arg), void *arg);

#ifdef __cplusplus
}
#endif

#endif /* FOLIO_STATE_H */
