/* SPDX-License-Identifier: MIT */
/*
 * libfolio-state: large folios with per-block uptodate/dirty/unstable state
 * for userspace storage engines and caches.
 *
 * Layers, each using only the ones before it:
 *
 *   base -> alloc -> bitmap -> folio -> engine -> mapping -> pool,
 *   engines as plug-ins.
 *
 *   lib/base/     compiler, atomics, spinlock, futex, brlock, sized-struct
 *                 check (internal)
 *   lib/alloc/    the folio allocator: chunks, buddy blocks, slabs,
 *                 per-thread caches (internal)
 *   lib/bitmap/   block bitmaps (internal)
 *   lib/folio/    folio lifetime, lock, flags, per-block state
 *   lib/engine/   engine object, request and wait plumbing
 *   lib/mapping/  index, read/write, writeback, commit/flush, truncate,
 *                 errseq
 *   lib/pool/     a budget shared by mappings: reclaim, dirty control,
 *                 flusher threads
 *   lib/engines/  the built-in engines (posix, io_uring, mem and the shared
 *                 fd helpers): plug-ins that use only lib/engine/ and below
 *
 * This header has one section per public layer, in that order: folios,
 * engines (with the posix and io_uring engines), mappings, pools. The mem engine,
 * for tests, has its own header: folio_state_mem.h.
 *
 * Conventions that hold for every function below unless it says otherwise:
 *  - A fallible call returns 0 (or a non-negative count) on success and a
 *    negative errno on failure. errno itself is never used as a side channel.
 *  - Bad input (NULL, a range outside the object, an overflowing range, a
 *    value that is not a power of two where one is required) returns -EINVAL
 *    or -ERANGE (-EFBIG for a mapping range past FOLIO_MAX_POS) and changes
 *    nothing.
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
 * Every function's comment names each parameter (@name:), says under
 * "Context:" which threads may call it, which locks the caller must or
 * must not hold and whether it may sleep or do I/O (call engine
 * callbacks), and lists under "Return:" its values and every error it
 * returns. "Sleeps" means it may block until another thread acts; "the
 * state lock" is a folio's spinlock, held for a few word operations.
 * doc/check-api-doc.py checks that no parameter, Context or Return is
 * missing.
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
 * Folios (lib/folio/)
 * ======================================================================
 *
 * A folio is a naturally aligned, power-of-two sized piece of one object's
 * data (`size` bytes at position `pos`, pos % size == 0), split into blocks
 * of `block_size` bytes. Each block has an uptodate bit (the memory holds
 * the object's bytes) and a dirty bit (the memory is newer than the backing
 * store). All bit changes happen under one small per-folio spinlock, the
 * state lock; a waiter spins, yielding the CPU after a while, and never
 * sleeps on it.
 *
 * Ranges are byte ranges inside the folio, (off, len) with off + len <=
 * size. Setting rounds outward (a partly covered block counts); clearing
 * rounds inward (only wholly covered blocks are cleared). len == 0 is a
 * no-op that succeeds.
 *
 * Thread rules: every function here may be called from any thread on a
 * folio the caller holds a reference to. State changes are atomic with
 * respect to each other. The flag tests folio_test_*() read one atomic
 * word and take no lock; the range queries folio_is_*() take the state
 * lock unless the flags already answer. Only folio_lock() and
 * folio_wait_writeback() sleep. A folio that belongs to a mapping (from
 * folio_mapping_lookup() or folio_mapping_write_begin()) is managed by the
 * mapping: read its state and, under its lock, its data, but change them
 * only through mapping calls, which also keep the mapping's dirty index.
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
 * @size:       folio size; a power of two, @block_size <= @size <=
 *              FOLIO_MAX_SIZE.
 * @block_size: a power of two, FOLIO_MIN_BLOCK_SIZE..FOLIO_MAX_BLOCK_SIZE.
 *
 * The data is zero-filled and aligned to its size or FOLIO_DATA_ALIGN,
 * whichever is smaller (ready for O_DIRECT; a folio below 4 KiB shares a
 * page with others of its size, aligned to at least 512); the per-block
 * state lives in the same allocation as the folio header, so no later
 * state change needs memory.
 *
 * Context: any thread; allocates memory, takes no lock.
 * Return: 0; -EINVAL for a NULL @out, a bad @size or @block_size, or a
 * misaligned @pos or one at or past FOLIO_MAX_POS; -ENOMEM.
 */
FOLIO_EXPORT int folio_new(struct folio **out, uint64_t pos, size_t size,
			   size_t block_size);

/**
 * folio_get() - take another reference.
 * @f: a folio the caller holds a reference to, or NULL.
 *
 * Take one before handing a folio to another thread, which drops it with
 * folio_put().
 *
 * Context: any thread; one atomic operation.
 * Return: @f (NULL stays NULL), so that `x = folio_get(f)` reads naturally.
 */
FOLIO_EXPORT struct folio *folio_get(struct folio *f);

/**
 * folio_put() - drop a reference; the last one frees the folio and its
 * memory.
 * @f: a folio the caller holds a reference to; NULL is ignored.
 *
 * Every folio_new(), folio_get(), successful folio_mapping_lookup() and
 * folio_mapping_write_begin() needs exactly one put (for write_begin,
 * folio_mapping_write_end() does it). A mapping holds its own reference
 * to each folio it caches.
 *
 * Context: any thread; one atomic operation, plus free() for the last
 * reference. Never put a reference you do not hold.
 */
FOLIO_EXPORT void folio_put(struct folio *f);

/**
 * folio_data() - the folio's memory: folio_size() bytes, byte i holding
 * the object's byte folio_pos() + i.
 * @f: the folio, or NULL.
 *
 * Context: any thread, lock-free (the address never changes). Whoever may
 * change the bytes concurrently decides how they are shared: for a
 * mapping's folio, read them only under the folio lock.
 * Return: the memory; NULL for NULL.
 */
FOLIO_EXPORT void *folio_data(const struct folio *f);

/**
 * folio_pos() - object position of byte 0 of the folio.
 * @f: the folio, or NULL.
 * Context: any thread, lock-free (the geometry never changes).
 * Return: the position; 0 for NULL.
 */
FOLIO_EXPORT uint64_t folio_pos(const struct folio *f);

/**
 * folio_size() - folio size in bytes.
 * @f: the folio, or NULL.
 * Context: any thread, lock-free (the geometry never changes).
 * Return: the size; 0 for NULL.
 */
FOLIO_EXPORT size_t folio_size(const struct folio *f);

/**
 * folio_block_size() - block size in bytes, the unit of uptodate and dirty
 * tracking.
 * @f: the folio, or NULL.
 * Context: any thread, lock-free (the geometry never changes).
 * Return: the block size; 0 for NULL.
 */
FOLIO_EXPORT size_t folio_block_size(const struct folio *f);

/**
 * folio_set_uptodate() - mark the blocks touched by [@off, @off + @len)
 * uptodate.
 * @f:   the folio.
 * @off: first byte of the range, relative to the folio.
 * @len: bytes in the range; 0 does nothing.
 *
 * Call it only after those blocks really hold the object's data: setting
 * rounds outward, so a partly covered block becomes uptodate as a whole.
 *
 * Context: any thread; takes @f's state lock briefly, never sleeps.
 * Return: a mask of FOLIO_BECAME_* bits: FOLIO_BECAME_UPTODATE when this
 * call made the folio's last missing block uptodate, else 0 (also when it
 * marked blocks); -EINVAL for NULL @f; -ERANGE when the range leaves the
 * folio or overflows (nothing changed).
 */
FOLIO_EXPORT int folio_set_uptodate(struct folio *f, size_t off, size_t len);

/**
 * folio_set_dirty() - mark the blocks touched by [@off, @off + @len) dirty,
 * leaving their uptodate bits alone.
 * @f:   the folio.
 * @off: first byte of the range, relative to the folio.
 * @len: bytes in the range; 0 does nothing.
 *
 * For putting runs back after a failed write, or for blocks already known
 * to be uptodate; fresh writes use folio_set_dirty_uptodate(). A dirty
 * block is written back as it is, so it must hold valid data. On a
 * mapping's folio this bypasses the mapping's dirty index, and the block
 * would never be written back: use the mapping's write calls there.
 *
 * A mapping gives back the per-block state map of a folio of more than
 * 32 blocks while the folio is wholly uptodate and clean; the first
 * change after that allocates one again (bare folios never give theirs
 * back).
 *
 * Context: any thread; takes @f's state lock briefly, never sleeps (but
 * see above: allocating a state map may).
 * Return: FOLIO_BECAME_DIRTY when the folio had no dirty block before (the
 * moment to queue it for writeback), else 0; -EINVAL for NULL @f; -ERANGE
 * when the range leaves the folio or overflows; -ENOMEM when a state map
 * was needed and could not be had (nothing changed).
 */
FOLIO_EXPORT int folio_set_dirty(struct folio *f, size_t off, size_t len);

/**
 * folio_set_dirty_uptodate() - the write fast path: mark the blocks touched
 * by [@off, @off + @len) dirty and uptodate under ONE lock acquisition.
 * @f:   the folio.
 * @off: first byte of the range, relative to the folio.
 * @len: bytes in the range; 0 does nothing.
 *
 * When the folio is already fully uptodate only the dirty bits are
 * touched. The caller must have made every touched block valid (edge
 * blocks read or zero-filled) before calling, as the whole block becomes
 * uptodate. A state map may have to be allocated, as for
 * folio_set_dirty().
 *
 * Context: any thread; takes @f's state lock briefly, never sleeps (but
 * allocating a state map may).
 * Return: a mask of FOLIO_BECAME_DIRTY and FOLIO_BECAME_UPTODATE (either,
 * both or neither); -EINVAL for NULL @f; -ERANGE when the range leaves the
 * folio or overflows; -ENOMEM as for folio_set_dirty() (nothing changed).
 */
FOLIO_EXPORT int folio_set_dirty_uptodate(struct folio *f, size_t off,
					  size_t len);

/**
 * folio_clear_dirty() - clear the dirty bit of every block wholly inside
 * [@off, @off + @len).
 * @f:   the folio.
 * @off: first byte of the range, relative to the folio.
 * @len: bytes in the range; 0 does nothing.
 *
 * Partly covered blocks stay dirty. The DIRTY flag goes with the last
 * dirty block. To write blocks back, folio_take_dirty() finds and clears
 * in one step.
 *
 * Context: any thread; takes @f's state lock briefly, never sleeps.
 * Return: 0; -EINVAL for NULL @f; -ERANGE when the range leaves the folio
 * or overflows.
 */
FOLIO_EXPORT int folio_clear_dirty(struct folio *f, size_t off, size_t len);

/**
 * folio_clear_uptodate() - forget the contents of every block wholly inside
 * [@off, @off + @len) that is not dirty.
 * @f:   the folio.
 * @off: first byte of the range, relative to the folio.
 * @len: bytes in the range; 0 does nothing.
 *
 * A dirty block is the only copy of its data and keeps its uptodate bit.
 * A state map may have to be allocated, as for folio_set_dirty().
 *
 * Context: any thread; takes @f's state lock briefly, never sleeps (but
 * allocating a state map may).
 * Return: 0; -EINVAL for NULL @f; -ERANGE when the range leaves the folio
 * or overflows; -ENOMEM as for folio_set_dirty() (nothing changed).
 */
FOLIO_EXPORT int folio_clear_uptodate(struct folio *f, size_t off, size_t len);

/**
 * folio_is_uptodate() - is every block touched by [@off, @off + @len)
 * uptodate?
 * @f:   the folio.
 * @off: first byte of the range, relative to the folio.
 * @len: bytes in the range.
 *
 * The answer may be stale when it arrives unless nothing else changes the
 * folio meanwhile (for a mapping's folio: the caller holds its lock).
 *
 * Context: any thread; lock-free when the UPTODATE flag answers, else
 * takes @f's state lock briefly; never sleeps.
 * Return: 1 yes, 0 no (1 for @len 0); -EINVAL for NULL @f; -ERANGE when
 * the range leaves the folio or overflows. Compare with == 1: an error is
 * non-zero too.
 */
FOLIO_EXPORT int folio_is_uptodate(struct folio *f, size_t off, size_t len);

/**
 * folio_is_dirty() - is any block touched by [@off, @off + @len) dirty?
 * @f:   the folio.
 * @off: first byte of the range, relative to the folio.
 * @len: bytes in the range.
 *
 * Context: any thread; lock-free when the DIRTY flag answers, else takes
 * @f's state lock briefly; never sleeps.
 * Return: 1 yes, 0 no (0 for @len 0); -EINVAL for NULL @f; -ERANGE when
 * the range leaves the folio or overflows. Compare with == 1.
 */
FOLIO_EXPORT int folio_is_dirty(struct folio *f, size_t off, size_t len);

/**
 * folio_test_uptodate() - is every block uptodate (the UPTODATE flag)?
 * @f: the folio, or NULL.
 * Context: any thread; one atomic load, no lock. Like any unlocked read,
 * the answer describes a moment that may already have passed.
 * Return: true or false; false for NULL.
 */
FOLIO_EXPORT bool folio_test_uptodate(const struct folio *f);

/**
 * folio_test_dirty() - is any block dirty (the DIRTY flag)?
 * @f: the folio, or NULL.
 * Context: any thread; one atomic load, no lock.
 * Return: true or false; false for NULL.
 */
FOLIO_EXPORT bool folio_test_dirty(const struct folio *f);

/**
 * folio_test_writeback() - is write I/O in flight (the WRITEBACK flag)?
 * @f: the folio, or NULL.
 * Context: any thread; one atomic load, no lock.
 * Return: true or false; false for NULL.
 */
FOLIO_EXPORT bool folio_test_writeback(const struct folio *f);

/**
 * folio_test_locked() - is the content lock held (folio_lock())?
 * @f: the folio, or NULL.
 * Context: any thread; one atomic load, no lock. The lock records no
 * owner: true does not say who holds it.
 * Return: true or false; false for NULL.
 */
FOLIO_EXPORT bool folio_test_locked(const struct folio *f);

/**
 * folio_next_dirty() - find the first run of dirty blocks at or after the
 * block holding *@off, without changing anything.
 * @f:   the folio.
 * @off: in: where to start (bytes; folio_size() is allowed and finds no
 *       run); out: the run's first byte (block aligned). Unchanged when
 *       there is no run. Walk all runs by adding each run's length to it.
 *
 * Context: any thread; lock-free when the DIRTY flag says there is none,
 * else takes @f's state lock briefly; never sleeps.
 * Return: the run length in bytes (a multiple of the block size), 0 when
 * there is none; -EINVAL for NULL @f or @off; -ERANGE when *@off >
 * folio_size().
 */
FOLIO_EXPORT ssize_t folio_next_dirty(struct folio *f, size_t *off);

/**
 * folio_next_missing() - like folio_next_dirty() for blocks that are NOT
 * uptodate (the runs a reader has to fetch).
 * @f:   the folio.
 * @off: in/out, as for folio_next_dirty().
 *
 * Context: as folio_next_dirty() (lock-free when the UPTODATE flag says
 * nothing is missing).
 * Return: as folio_next_dirty().
 */
FOLIO_EXPORT ssize_t folio_next_missing(struct folio *f, size_t *off);

/** A byte range inside a folio. */
struct folio_range {
	size_t off; /* first byte, relative to the folio */
	size_t len; /* bytes */
};

/**
 * folio_take_dirty() - under one lock acquisition, return the dirty runs of
 * the folio in offset order and clear them (what writeback does).
 * @f:        the folio.
 * @runs:     array receiving up to @max_runs runs.
 * @max_runs: capacity of @runs; when the folio has more runs, only the first
 *            @max_runs are taken and the rest stay dirty for the next call.
 *
 * A block dirtied again after the call is simply dirty again. A run whose
 * write fails must be put back with folio_set_dirty(). Hold WRITEBACK
 * (folio_start_writeback()) around take and write, so two writers never
 * write the same folio at once.
 *
 * Context: any thread; takes @f's state lock once, never sleeps.
 * Return: the number of runs taken (0: the folio was clean); -EINVAL for a
 * NULL @f or @runs, or @max_runs == 0.
 */
FOLIO_EXPORT int folio_take_dirty(struct folio *f, struct folio_range *runs,
				  size_t max_runs);

/**
 * folio_lock() - take the folio's content lock (the LOCKED flag), sleeping
 * while another thread holds it.
 * @f: the folio.
 *
 * Hold it while changing a folio's contents or structure, so that two
 * writers, or a writer and a reader copying out, do not interleave. The
 * mapping layer holds it while it changes a folio; users of bare folios
 * may use it the same way. Not recursive; no owner is recorded.
 *
 * Context: any thread; sleeps (on a futex) until the lock is free. Lock
 * several folios in ascending position order, as the library does. While
 * holding the lock of a mapping's folio, call on that mapping only
 * folio_mapping_lookup(), folio_mapping_size(), folio_mapping_stats(),
 * folio_mapping_err_cursor(), folio_mapping_dirty_ranges() and the
 * write_end() of your own write_begin(): any other mapping call may wait
 * for the lock you hold, directly or through another thread.
 * Return: 0; -EINVAL for NULL @f.
 */
FOLIO_EXPORT int folio_lock(struct folio *f);

/**
 * folio_trylock() - take the content lock if it is free.
 * @f: the folio.
 * Context: any thread; never sleeps. Once taken, the rules of folio_lock()
 * apply.
 * Return: 1 when the lock was taken, 0 when it is busy; -EINVAL for NULL @f.
 */
FOLIO_EXPORT int folio_trylock(struct folio *f);

/**
 * folio_unlock() - release the content lock and wake its waiters.
 * @f: a folio locked with folio_lock() or folio_trylock().
 *
 * Do not use it on the folio folio_mapping_write_begin() returned: that
 * lock ends with folio_mapping_write_end(), which would then fail with
 * -EINVAL and leave write_begin()'s reference held.
 *
 * Context: any thread (not only the one that locked); never sleeps.
 * Return: 0; -EINVAL for NULL @f; -EPERM when @f was not locked.
 */
FOLIO_EXPORT int folio_unlock(struct folio *f);

/**
 * folio_start_writeback() - set the WRITEBACK flag: write I/O of the folio
 * is about to be in flight.
 * @f: a bare folio. A mapping sets and clears its folios' WRITEBACK itself.
 *
 * It doubles as "one writeback at a time": a second caller gets -EBUSY.
 *
 * Context: any thread; one atomic operation, never sleeps.
 * Return: 0; -EBUSY when already set; -EINVAL for NULL @f.
 */
FOLIO_EXPORT int folio_start_writeback(struct folio *f);

/**
 * folio_end_writeback() - clear WRITEBACK and wake folio_wait_writeback()
 * callers.
 * @f: a bare folio whose WRITEBACK flag the caller set.
 * Context: any thread; never sleeps.
 * Return: 0; -EPERM when WRITEBACK was not set; -EINVAL for NULL @f.
 */
FOLIO_EXPORT int folio_end_writeback(struct folio *f);

/**
 * folio_wait_writeback() - sleep until WRITEBACK is clear.
 * @f: the folio.
 *
 * A writer whose data must not change while it is being written
 * (checksums computed in flight) waits here before copying;
 * FOLIO_MAPPING_STABLE_WRITES does that inside a mapping.
 *
 * Context: any thread; sleeps (on a futex). It does not drive an engine's
 * wait(): for a mapping's folio over a polled engine (io_uring without its
 * completion thread, a mem engine in POLL mode) some other thread must be
 * reaping completions, or the sleep does not end.
 * Return: 0; -EINVAL for NULL @f.
 */
FOLIO_EXPORT int folio_wait_writeback(struct folio *f);

/* ======================================================================
 * Engines (lib/engine/; built-in engines in lib/engines/): the I/O
 * boundary
 * ======================================================================
 *
 * The library never does I/O itself: it builds `struct folio_io` requests
 * whose iovecs point into folio memory and hands them to an engine's
 * submit(). The engine finishes each accepted request exactly once with
 * folio_io_complete(), from any thread, possibly before submit() returns.
 */
enum folio_io_op {
	FOLIO_IO_READ = 0,  /* fill the iovecs from the backing store */
	FOLIO_IO_WRITE = 1, /* store the iovecs' bytes */
};

/* Extent flags (struct folio_extent.flags, passed on in folio_io.flags). */
#define FOLIO_EXTENT_HOLE 0x1u /* nothing allocated: reads return zeros */
#define FOLIO_EXTENT_NEW 0x2u  /* allocated but never written */

/** What the optional map() callback returns: file bytes [pos, pos+len)
 * live at device bytes [dev_pos, dev_pos+len). */
struct folio_extent {
	uint64_t pos;     /* first file byte; at most the position asked for */
	uint64_t len;     /* bytes; > 0 and covering the position asked for
			   * (more or fewer than the length asked for) */
	uint64_t dev_pos; /* device position of file byte pos */
	uint32_t flags;   /* FOLIO_EXTENT_* */
};

/*
 * Request flag (struct folio_io.flags, beside the FOLIO_EXTENT_* bits):
 * durable on completion. Only on writes, and only to engines that
 * advertise FOLIO_ENGINE_CAP_DURABLE. The engine writes the data, then
 * runs what flush() would (a durability barrier over every write that
 * completed before the barrier began, this one included), and completes
 * the request only after both: with io->len when the write and the
 * barrier succeeded; with a negative errno when either failed (the
 * library then treats it as a failed write AND a failed flush); with a
 * short count when the write stopped short (the bytes written are then
 * merely written, as for a plain write: the engine need not have run the
 * barrier, and the library flushes for them later). A sync uses it to hand
 * the engine "write this, then make it durable" in one asynchronous step
 * (an io_uring write with a linked fsync; doc/design.md, "Durable
 * writes").
 */
#define FOLIO_IO_DURABLE 0x100u

/*
 * Request flag (struct folio_io.flags), a hint: the submitting thread
 * waits for this request next (a sync's writes, a read the caller needs,
 * a direct transfer), calling the engine's wait() before it sleeps. An
 * engine that runs requests on its own threads and whose wait() can run
 * a queued request in the waiting thread may leave such a request queued
 * rather than wake a thread for it: it saves a wakeup and a thread switch
 * per lone request. Only to engines that advertise
 * FOLIO_ENGINE_CAP_WAITED; anything else in the engine (another thread's
 * wait, a flush, a truncate, freeing the engine) must still get the
 * request done without that waiter. Readahead and background writeback
 * never carry it: nobody waits for them yet.
 */
#define FOLIO_IO_WAITED 0x200u

/** One I/O request. Built by the library; the engine reads every field and
 * may use @engine_data freely until it calls folio_io_complete(). */
struct folio_io {
	enum folio_io_op op;
	uint32_t flags;       /* FOLIO_EXTENT_* of the extent it lies in,
			       * FOLIO_IO_DURABLE and FOLIO_IO_WAITED */
	uint64_t pos;         /* object (file) position */
	uint64_t dev_pos;     /* device position (== pos without map()) */
	size_t len;           /* total bytes = sum of iov lengths */
	struct iovec *iov;    /* points into folio memory */
	int iovcnt;           /* entries in iov; the array is the library's:
			       * do not modify it */
	void *engine_data;    /* free for the engine */
};

/**
 * folio_io_complete() - finish a request the engine accepted.
 * @io:     a request submit() accepted (returned 0 for); NULL is ignored.
 * @result: bytes transferred or a negative errno. Less than io->len is a
 *          short transfer: for a write the library writes the rest again;
 *          a short read fails the read with -EIO (engines zero-fill past
 *          the end of the object instead).
 *
 * Call it exactly once per accepted request, never for a refused one.
 * After it returns the engine must not touch @io, its iovecs or
 * engine_data again.
 *
 * Context: any thread, including inside submit() (synchronous engines),
 * inside wait() and on an engine thread. It never sleeps on I/O and never
 * calls an engine callback; it briefly takes the mapping's index lock and
 * folio state locks, and wakes the threads waiting for the request, which
 * often submit more at once (complete outside the engine's own lock when
 * you can).
 */
FOLIO_EXPORT void folio_io_complete(struct folio_io *io, ssize_t result);

/**
 * folio_io_complete_durable() - finish a FOLIO_IO_DURABLE write, telling
 * its transfer and its barrier apart.
 * @io:      a request submit() accepted; NULL is ignored.
 * @result:  the transfer's outcome, as for folio_io_complete().
 * @barrier: 0, or the negative errno of the barrier that ran after a full
 *           transfer (@result == io->len).
 *
 * A durable write whose bytes reached the store but whose barrier failed
 * is not the same as a write that failed: the store now holds the bytes
 * (and has grown to hold them), they are just not durable. Completing it
 * with folio_io_complete(io, -err) would leave the library believing the
 * store never saw them, so a later discard reaching EOF could move EOF
 * below the store's real size. With this call the bytes count as written
 * and the barrier's failure counts as a failed flush() of the engine:
 * what it may have dropped (this write's data and every other write
 * completed since the last good flush, of any mapping over the engine)
 * is made dirty again and written by the next sync, which reports
 * @barrier to every error cursor.
 *
 * With @barrier 0, with @result other than io->len (no barrier follows a
 * short or failed transfer), or on a request without FOLIO_IO_DURABLE it
 * is exactly folio_io_complete(io, @result). A positive @barrier counts
 * as -EIO. An engine that cannot tell where a durable write failed (a
 * lost connection) completes it with folio_io_complete(io, -errno): the
 * library then assumes the bytes may or may not be in the store.
 *
 * Context: as folio_io_complete(); call exactly one of the two, once.
 */
FOLIO_EXPORT void folio_io_complete_durable(struct folio_io *io,
					    ssize_t result, int barrier);

/*
 * Engine callbacks. Each gets the ctx given at creation. They may be
 * called from any thread that uses a mapping over the engine, several at
 * once, while the library holds folio locks and mapping locks, so they
 * must not call mapping functions (folio_io_complete() is the one library
 * call they make); they may sleep. A read must transfer its full length,
 * zero-filling past the end of the object: a short read completes as
 * -EIO. A write may complete short; the library resubmits the rest.
 */
struct folio_engine_ops {
	size_t sz; /* sizeof(struct folio_engine_ops) */
	/* Required. Start @io. Return 0 when accepted (complete() will be
	 * called exactly once, possibly before submit() returns) or a
	 * negative errno when refused (it will not be; the library fails the
	 * request with that error). Called by reads, writes (edge blocks) and
	 * writeback, usually with folio locks held. */
	int (*submit)(void *ctx, struct folio_io *io);
	/* Required. Durability barrier over every write completed before the
	 * call. On failure return -errno: the library then treats everything
	 * it wrote since the last successful flush as possibly lost and
	 * writes it again. Called by sync with no library lock held. Flushes
	 * of one engine are never concurrent (the library counts a failed
	 * one before it lets the next run). */
	int (*flush)(void *ctx);
	/* Required. Resize the backing object: bytes past @size are gone and
	 * a later grow reads zeros there. Called by folio_mapping_truncate(),
	 * and by sync to redo truncates a failed flush may have lost, with
	 * the mapping's io_lock held exclusively (no read, write or writeback
	 * of that mapping runs) and no write in flight past @size. */
	int (*truncate)(void *ctx, uint64_t size);
	/* Optional: fill @ext with the extent holding @pos (its len may
	 * exceed @len or fall short of it; an extent that does not hold @pos
	 * fails the request with -EIO). Called while requests are built, with
	 * folio locks held; the library asks again only for positions outside
	 * the last extent of a batch. */
	int (*map)(void *ctx, uint64_t pos, uint64_t len,
		   struct folio_extent *ext);
	/* Optional: reap at least one completion of an in-flight request,
	 * blocking if needed; return 0 at once when nothing is in flight.
	 * May be called from several threads at once, with folio locks held.
	 * Without it the library sleeps until the engine completes requests
	 * from its own threads. A negative return is reported by the
	 * operation that was waiting (sync returns it); the library still
	 * waits for its requests, calling wait() again after a growing pause
	 * (up to 10 ms), since they point into its memory. An engine whose
	 * requests all complete from its own threads may use wait() only to
	 * help (run a queued request in the waiting thread) and return
	 * FOLIO_ENGINE_WAIT_IDLE when it found nothing to do: the library
	 * then sleeps until a completion wakes it, as without wait(), but
	 * calls wait() again should none have come within 10 ms. */
	int (*wait)(void *ctx);
	/* Optional: called once by folio_engine_free(), last. */
	void (*destroy)(void *ctx);
	/* Optional: the library has submitted a batch; start any requests
	 * the engine queued without starting (an io_uring engine submits
	 * its queue here). Called after every batch of submit() calls; its
	 * return value is not used (requests it could not start must still
	 * complete, for instance from wait()). */
	int (*unplug)(void *ctx);
	/* Added later (callers whose @sz ends before it get 0): what the
	 * engine can do beyond the callbacks, FOLIO_ENGINE_CAP_* bits.
	 * Unknown bits are -EINVAL at creation. */
	uint64_t caps;
};

/* What struct folio_engine_ops.wait() may return when it reaped nothing
 * and has nothing to reap: the requests in flight complete on their own
 * (other positive values are taken as -EIO). */
#define FOLIO_ENGINE_WAIT_IDLE 1

/* struct folio_engine_ops.caps: submit() takes FOLIO_IO_DURABLE writes.
 * Without it a sync writes, waits, then calls flush(). With it, a flush()
 * that succeeds is trusted only once every durable write in flight when it
 * returned has completed (a barrier that failed meanwhile may have dropped
 * what the flush found gone): the library waits for them, calling wait()
 * when the engine has one, so they must complete through wait() or on
 * their own, not only on something the flushing thread does later. */
#define FOLIO_ENGINE_CAP_DURABLE 0x1u

/* struct folio_engine_ops.caps: submit() takes the FOLIO_IO_WAITED hint.
 * Without it requests never carry the flag. */
#define FOLIO_ENGINE_CAP_WAITED 0x2u

struct folio_engine;

/**
 * folio_engine_new() - wrap user callbacks into an engine.
 * @out: receives the engine on success.
 * @ops: copied, so it may live on the stack; submit, flush and truncate
 *       are required. @ops->sz must be at least the size of the fields up
 *       to and including truncate.
 * @ctx: passed to every callback; folio_engine_ctx() returns it.
 *
 * Context: any thread; calls no callback. On failure the caller still
 * owns @ctx.
 * Return: 0; -EINVAL for a NULL @out or @ops, an @ops->sz below truncate,
 * a missing required callback or an unknown @ops->caps bit; -E2BIG for a larger @ops whose bytes
 * past the struct this library knows are not all zero; -ENOMEM.
 */
FOLIO_EXPORT int folio_engine_new(struct folio_engine **out,
				  const struct folio_engine_ops *ops,
				  void *ctx);

/**
 * folio_engine_free() - destroy an engine: call ops->destroy, then free it.
 * @e: the engine; NULL does nothing.
 *
 * Free the mappings over @e first. The descriptor of a posix or io_uring
 * engine is not closed: it stays the caller's.
 *
 * Context: no other call on @e may run (folio_mapping_new() over it
 * included), and not from an engine callback or a completion. The
 * built-in engines' destroy waits for (io_uring, posix with workers) or
 * cancels (mem) requests still in flight, so it may sleep.
 * Return: 0 (also for NULL); -EBUSY while a mapping uses @e (nothing is
 * freed).
 */
FOLIO_EXPORT int folio_engine_free(struct folio_engine *e);

/**
 * folio_engine_ctx() - the ctx given at creation.
 * @e: the engine, or NULL.
 * Context: any thread, lock-free.
 * Return: the ctx (a built-in engine's private state); NULL for NULL.
 */
FOLIO_EXPORT void *folio_engine_ctx(const struct folio_engine *e);

/* Flags of folio_engine_posix() / folio_engine_uring(). */
#define FOLIO_ENGINE_DIRECT 0x1u /* fd is O_DIRECT: requests must be aligned */
#define FOLIO_URING_COMPLETION_THREAD 0x2u /* folio_engine_uring() only: an
					    * engine thread reaps completions */
#define FOLIO_POSIX_KEEP_PAGE_CACHE 0x4u /* folio_engine_posix() only: leave
					  * the kernel's copy of the pages
					  * cached (no fadvise DONTNEED) */
#define FOLIO_POSIX_NO_AIO 0x8u /* folio_engine_posix() only: workers on an
				 * O_DIRECT fd do one system call per
				 * request, never kernel AIO batches */

/*
 * What O_DIRECT engines require of a request: dev_pos, len and every iovec
 * base and length a multiple of this (the logical block size of common
 * devices). Folio memory is aligned to its size up to FOLIO_DATA_ALIGN
 * (so to 512 at least) and block sizes are multiples of 512, so requests
 * made of whole blocks qualify. The one
 * exception writeback produces — a write cut at an end of file that is not
 * a multiple of 512, aligned except for the end of its last segment — is
 * accepted by the posix and io_uring engines and written synchronously
 * through a second, buffered descriptor of the same file (opened through
 * /proc/self/fd; where that fails such writes are refused with -EINVAL).
 */
#define FOLIO_ENGINE_DIRECT_ALIGN 512u

/**
 * folio_engine_posix() - engine over a file descriptor: positioned system
 * calls, run by a few engine threads (the default) or inside submit().
 * @out:   receives the engine on success.
 * @fd:    an open regular file or block device. It stays owned by the
 *         caller and must stay open until folio_engine_free().
 * @flags: 0, or FOLIO_ENGINE_DIRECT, FOLIO_POSIX_KEEP_PAGE_CACHE and/or
 *         FOLIO_POSIX_NO_AIO (see Workers below). An
 *         @fd opened with O_DIRECT gets the alignment checks even without
 *         FOLIO_ENGINE_DIRECT (fcntl(F_GETFL) tells).
 *
 * The same as folio_engine_posix_opts() with opts->flags = @flags and
 * the default number of workers (below).
 *
 * The I/O of a request: preadv()/pwritev() at io->dev_pos, looping on
 * short transfers and EINTR
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
 * with an unknown op, flags other than FOLIO_EXTENT_* and FOLIO_IO_DURABLE
 * (or FOLIO_IO_DURABLE on a read), iovecs that do not add up to len, or a
 * range past FOLIO_MAX_POS is refused with -EINVAL. The engine takes
 * durable writes (FOLIO_ENGINE_CAP_DURABLE): after a full write, the
 * engine runs flush() before it completes the request (its error is the
 * result); a short or failed write runs none. flush() is fdatasync(): it
 * covers every write that completed before the call; with workers it
 * first waits for the writes the calling thread submitted that are still
 * queued or running (so those are covered too, as inline), and for no
 * other thread's. truncate() is ftruncate() (-EINVAL past
 * FOLIO_MAX_POS); with workers it first waits until every request
 * accepted before it has completed (a read submitted earlier still sees
 * the old contents). Both return -errno on failure. wait() only helps:
 * requests complete on their own, and a thread waiting for some runs the
 * oldest still-queued request itself (completing it in that thread),
 * or, with none queued, returns FOLIO_ENGINE_WAIT_IDLE and the library
 * sleeps until its requests complete.
 *
 * Workers (the default in direct mode: up to 16; see
 * folio_posix_opts.workers): submit() queues
 * the request and returns; engine threads, started when requests find
 * none idle (so at most as many as requests were in flight at once, and
 * none before the first request), take them in submission order, do the
 * I/O (and a durable write's fdatasync()) and complete them, so a
 * request completes on an engine thread (or in a waiting thread's
 * wait()), possibly before submit() returned. On a descriptor opened with
 * O_DIRECT a worker that finds several writes queued (not durable ones)
 * takes up to 64 of them and transfers them as one batch of kernel AIO
 * (io_submit(), then io_getevents(); what the kernel refuses or does
 * short is finished with pwritev(), so results are as above), and
 * completes them once the whole batch is over: the device gets them
 * together, as from the kernel's own writeback. Reads go one at a time,
 * each completing as soon as it is done. FOLIO_POSIX_NO_AIO keeps to one
 * system call per request; where the kernel has no AIO for the engine
 * (ENOSYS, the aio-max-nr limit, a seccomp filter) that is what happens
 * anyway. A request with nothing to transfer completes inside submit()
 * (a durable one after its fdatasync()). submit() then also fails with
 * -ESHUTDOWN while the engine is
 * being freed, and -ENOMEM when the queue cannot grow. Where no thread
 * can be started at all, requests run inside submit() as inline.
 * folio_engine_free() lets the threads run every request accepted (new
 * ones, also from completions, are refused with -ESHUTDOWN meanwhile),
 * waits until their completions returned and joins the threads. A
 * child of fork() has no workers: it must not use an engine of its
 * parent that has started them (create its own).
 *
 * Inline (the default on a buffered descriptor, whose I/O the kernel's
 * readahead and writeback already overlap; or FOLIO_POSIX_INLINE):
 * submit() does the I/O and completes the request before it returns;
 * nothing is ever in flight once submit() has returned, and the engine
 * starts no thread.
 *
 * One copy in RAM: the library caches what it reads and writes, so by
 * default the engine asks the kernel to drop its own copy from the page
 * cache (posix_fadvise(POSIX_FADV_DONTNEED)): the range of each read right
 * after it is read, and every range written since the previous flush once
 * a flush (fdatasync()) has made it clean; dirty pages cannot be dropped,
 * so written data stays in the kernel's cache until the next flush. Only
 * what the library read or wrote goes, and of that only the kernel's pages
 * and folios wholly inside it (a read continuing a sequential stream also
 * takes the large readahead folio the previous one cut, from the 2 MiB
 * boundary below it); pages mapped by some process stay. The cost is that data the library evicts must
 * come from the device again instead of from the kernel's cache, one extra
 * system call per read and per flush, and that other readers of the file
 * (other processes, or the caller's own read() calls) lose the pages too:
 * pass FOLIO_POSIX_KEEP_PAGE_CACHE for files shared that way, or to have
 * the kernel's cache as a second level behind a small library cache. An
 * @fd opened with O_DIRECT bypasses the kernel's cache already and gets no
 * fadvise calls (its buffered tail writes leave one page per object).
 * doc/design.md ("One copy in RAM") has the measured trade-off.
 *
 * Context: creation from any thread (fcntl() and fstat() on @fd; in
 * direct mode an open() of /proc/self/fd/@fd). The engine's submit, flush
 * and truncate may run in any number of threads at once (positioned I/O
 * shares no file offset), also inside a completion; inline, each sleeps
 * in its system calls; with workers, submit() only takes a short lock
 * (and starts a thread when none is idle), flush() and truncate() sleep.
 * Do not free the engine from a completion.
 * Return: 0; -EINVAL for NULL @out, a negative @fd, unknown flags, or an
 * @fd that is not a regular file or block device (a pipe, socket or
 * directory) or was opened with O_APPEND (pwrite() would append wherever
 * the library asked to write); -EBADF when @fd is not open or is an O_PATH
 * descriptor; -ENOMEM.
 */
FOLIO_EXPORT int folio_engine_posix(struct folio_engine **out, int fd,
				    unsigned flags);

/* folio_posix_opts.workers: no engine thread, I/O inside submit(). */
#define FOLIO_POSIX_INLINE (-1)
/* Most workers one posix engine may have. */
#define FOLIO_POSIX_MAX_WORKERS 64

/** Options of folio_engine_posix_opts(). Zero-initialize, set sz. */
struct folio_posix_opts {
	size_t sz;      /* sizeof(struct folio_posix_opts) */
	unsigned flags; /* as folio_engine_posix()'s @flags */
	int workers;    /* 0: the default, measured best (doc/design.md):
			 * up to 16 threads in direct mode (an O_DIRECT
			 * @fd or FOLIO_ENGINE_DIRECT), inline otherwise;
			 * FOLIO_POSIX_INLINE: none, I/O inside submit();
			 * 1..FOLIO_POSIX_MAX_WORKERS: at most that many
			 * engine threads doing the I/O */
};

/**
 * folio_engine_posix_opts() - folio_engine_posix() with options.
 * @out:  receives the engine on success.
 * @fd:   as for folio_engine_posix().
 * @opts: NULL for the defaults; else @opts->sz must cover @flags, and a
 *        larger struct must be zero past the fields this library knows.
 *
 * The engine is the one folio_engine_posix() describes, with
 * @opts->workers engine threads at most (or inline).
 * Context: as folio_engine_posix().
 * Return: as folio_engine_posix(), plus -EINVAL for an @opts->sz too
 * small, an unknown flag or a @workers value outside the ones above, and
 * -E2BIG for a larger @opts with non-zero bytes past this library's.
 */
FOLIO_EXPORT int folio_engine_posix_opts(struct folio_engine **out, int fd,
					 const struct folio_posix_opts *opts);

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
 * The engine has up to 16 rings and a thread always uses the same one
 * (threads beyond 16 share them), so concurrent submitters and syncers
 * take no common lock. submit() queues a readv/writev SQE at io->dev_pos
 * on the calling thread's ring and returns; it calls io_uring_submit()
 * only when the submission queue is full. It never sleeps: once the ring
 * holds as many requests as its completion queue has entries, a request
 * waits in the engine, and submit() then hands the queue to the kernel
 * and delivers the completions already there (from the calling thread,
 * before it returns) to let waiting requests in, so that a caller that
 * submits thousands keeps the device busy before it waits (not while
 * the thread delivers completions of that ring). unplug() submits the calling
 * thread's queue (the library calls it after each batch of submits).
 * wait() submits the calling thread's queue, then sleeps until at least
 * one request of its ring has completed (its completion returned); when
 * the calling thread has nothing in flight it completes what is ready on
 * the other rings without sleeping (requests whose submitter does not
 * wait) and returns 0 (requests whose completion the calling thread is
 * delivering do not count); a negative errno when io_uring itself fails.
 * Short
 * transfers are resubmitted for the rest; a read that meets end of file
 * zero-fills the rest and reports the full length; -EAGAIN, -EINTR and
 * -ECANCELED results (the kernel cancels requests of a thread that exits)
 * are retried; other errors complete the request with the error, or with
 * the bytes already transferred when there were some (a short transfer).
 * Refusals as for posix (-EINVAL), plus -ENOMEM and -ESHUTDOWN while the
 * engine is being freed. A FOLIO_IO_DURABLE write (the engine sets
 * FOLIO_ENGINE_CAP_DURABLE) goes in as the writev SQE linked
 * (IOSQE_IO_LINK) to an IORING_FSYNC_DATASYNC fsync in the same
 * submission, two SQEs and two CQEs (a depth-1 ring, whose SQ holds one,
 * sends the fsync after the write completed); a short or failed write
 * cancels the fsync, the rest goes in again with a new one, and a request
 * that ends short or failed is completed so, without a barrier; a
 * cancelled or interrupted fsync alone is retried; a failed fsync is the
 * request's result. Completions are delivered by whichever thread
 * reaps them (a wait(), flush() or truncate() caller, or the completion
 * thread) and never under an engine lock, so a completion may submit.
 * flush() waits for every write the calling thread submitted before it,
 * then calls fdatasync(): it covers the writes of other threads that
 * completed before the call, not those still in flight. truncate() waits
 * for every request the calling thread submitted before it, then calls
 * ftruncate().
 *
 * With FOLIO_URING_COMPLETION_THREAD the engine has one ring, and an
 * engine thread reaps its completions, so requests complete without
 * anybody calling wait(); wait(), flush() and truncate() then only sleep
 * until it made progress. Requests are
 * started by unplug(), wait(), a full queue or the thread when it passes
 * by: call unplug() after a batch so they do not linger.
 *
 * folio_engine_free() waits until every accepted request has completed,
 * stops the thread and closes the ring.
 *
 * Context: creation from any thread (it sets up a ring and may start a
 * thread). Every callback may run in any number of threads at once,
 * including inside a completion; wait(), flush() and truncate() sleep. Do
 * not free the engine from a completion.
 * Return: 0; -EINVAL for NULL @out, a negative @fd, @depth outside
 * 1..4096, unknown flags, or an @fd posix refuses (see there); -EBADF when
 * @fd is not open or is an O_PATH descriptor; -ENOSYS when the
 * library was built without io_uring (arguments are still checked, the
 * descriptor is not); the error of io_uring_queue_init() (e.g. -ENOSYS or
 * -EPERM where io_uring is disabled); -EAGAIN when the completion thread
 * cannot start; -ENOMEM.
 */
FOLIO_EXPORT int folio_engine_uring(struct folio_engine **out, int fd,
				    unsigned depth, unsigned flags);

/*
 * The mem engine (an in-memory backing store with fault injection, a
 * volatile write cache and power cuts, for tests) has its own header:
 * folio_state_mem.h, installed next to this one.
 */

/* ======================================================================
 * Mappings (lib/mapping/): the cache of one object
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
 * (write_begin/write_end, the error cursor of sync).
 *
 * Locks, outermost first: the mapping's io_lock (shared by reads, writes
 * and writeback; exclusive for truncate, invalidate and free), folio
 * locks in ascending position order, the index lock, folio state locks.
 * The only one a caller holds across calls is a folio lock; while holding
 * one of a mapping's folios, call on that mapping only what folio_lock()
 * lists.
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
#define FOLIO_MAPPING_NO_READAHEAD 0x8u  /* no automatic readahead of
					  * sequential readers;
					  * folio_mapping_readahead() still
					  * works */
#define FOLIO_MAPPING_DIRECT_EXCLUSIVE 0x10u /* every direct write takes the
					  * exclusive path and asks map():
					  * no extent cache (for comparisons,
					  * and engines that move written
					  * data, see
					  * folio_mapping_write_direct()) */

/* Largest struct folio_mapping_opts.readahead_max. */
#define FOLIO_MAPPING_MAX_READAHEAD ((size_t)256 << 20)

struct folio_pool; /* a memory budget shared by mappings (layer 5) */

struct folio_mapping_opts {
	size_t sz;             /* sizeof(struct folio_mapping_opts) */
	size_t block_size;     /* default 4096 */
	size_t min_folio_size; /* default block_size */
	size_t max_folio_size; /* default FOLIO_MAX_SIZE */
	uint64_t size;         /* current size of the backing object */
	unsigned flags;        /* FOLIO_MAPPING_* */
	struct folio_engine *engine; /* required; must outlive the mapping */
	/* Added later (callers whose @sz ends before it get NULL): the pool
	 * whose budget holds this mapping's folios; NULL: unbounded. Must
	 * outlive the mapping. */
	struct folio_pool *pool;
	/* Added later (callers whose @sz ends before it get the default):
	 * the largest readahead window in bytes, a multiple of the block
	 * size up to FOLIO_MAPPING_MAX_READAHEAD; 0: 2 MiB, or as far as
	 * the kernel reads ahead on the device of a posix or io_uring
	 * engine's file when that is more (its queue's read_ahead_kb). */
	size_t readahead_max;
};

/**
 * folio_mapping_new() - create an empty cache over @opts->engine.
 * @out:  receives the mapping on success.
 * @opts: required; @opts->engine is required and must outlive the mapping;
 *        @opts->size is the backing object's current size (the mapping
 *        never looks at the object itself); @opts->pool, when set, makes
 *        the mapping's folios count against that pool's budget (see
 *        folio_pool_new()) and must outlive the mapping.
 *
 * The mapping's own error cursor (folio_mapping_sync() with a NULL
 * cursor) starts here.
 *
 * Context: any thread; allocates, calls no engine callback. From now on
 * folio_engine_free() refuses the engine until folio_mapping_free(), and
 * folio_pool_free() the pool.
 * Return: 0; -EINVAL for NULL, @opts->sz too small to hold @engine, a bad
 * geometry (sizes not powers of two, block < 512 or > 64 KiB, min <
 * block, max < min or > FOLIO_MAX_SIZE, size > FOLIO_MAX_POS), a
 * @opts->readahead_max that is not a multiple of the block size or is
 * above FOLIO_MAPPING_MAX_READAHEAD, or unknown flags; -ERANGE when @opts->pool's budget is smaller than the mapping's
 * max folio size (nothing changed); -E2BIG for a larger @opts with
 * non-zero unknown bytes; -ENOMEM.
 */
FOLIO_EXPORT int folio_mapping_new(struct folio_mapping **out,
				   const struct folio_mapping_opts *opts);

/**
 * folio_mapping_free() - drop every clean folio and free the mapping.
 * @m: the mapping; NULL does nothing.
 *
 * It neither writes back nor flushes: sync first. References the caller
 * still holds to its folios stay valid (the folios just leave the
 * mapping). A mapping in a pool gives its folios' charge back to the pool
 * and leaves it.
 *
 * Context: the last call on @m, made when no other thread uses it; first
 * waits for readahead reads in flight (driving a polled engine), then for
 * the pool's own threads to stop using @m (a flusher finishes
 * its request), then takes io_lock exclusively, does no I/O. When no folio is busy but a
 * completion is still finishing (a sync that just returned may have been
 * woken before its last completion returned), it yields until that
 * completion is done. A folio the caller holds locked makes it -EBUSY.
 * Return: 0 (also for NULL); -EBUSY when any folio holds dirty or unstable
 * (written, not yet flushed) data, is under writeback, or is locked (a
 * write_begin() without its write_end()): then nothing is freed (sync
 * first, or invalidate with FOLIO_INVALIDATE_DISCARD).
 */
FOLIO_EXPORT int folio_mapping_free(struct folio_mapping *m);

/**
 * folio_mapping_write() - buffered write of @len bytes at @pos, like
 * pwrite(2).
 * @m:   the mapping.
 * @buf: the bytes to write (may be NULL when @len is 0).
 * @len: bytes to write.
 * @pos: object position of the first byte.
 *
 * Per folio only partly covered, not-uptodate edge blocks are read (one
 * engine request per contiguous run); blocks at or past EOF are
 * zero-filled. EOF grows to pos + written. Nothing is durable before a
 * sync returns 0.
 *
 * In a pool, a write may wait: for room (the pool reclaims, writes back,
 * flushes) and, above the pool's dirty limit, for writeback (throttling).
 * It waits between two folios holding no lock, so a truncate or
 * invalidate of the mapping may then come between two of its folios (a
 * write is atomic per folio, not across folios, in any case).
 *
 * Context: any thread, concurrently with other calls on @m; takes io_lock
 * shared and each folio's lock in turn; sleeps and does I/O (edge reads;
 * with FOLIO_MAPPING_STABLE_WRITES, waiting for the folio's writeback; in
 * a pool, writeback and flushes of any of its mappings).
 * The caller must hold no lock of a folio of @m.
 * Return: bytes written (short when a later folio fails; the bytes counted
 * are in the cache); -EINVAL for NULL @m or NULL @buf with @len > 0;
 * -EFBIG when [@pos, @pos + @len) reaches past FOLIO_MAX_POS or @pos is
 * FOLIO_MAX_POS (nothing written); when the first folio fails, with
 * nothing marked: -ENOMEM (also when the mapping's pool is full and
 * nothing in it can be cleaned or freed, see folio_pool_new()), or the
 * error of its edge read (the engine's
 * result such as -EIO, a submit() refusal, a map() error, -EIO for a
 * short read, or the error of the engine's wait()).
 */
FOLIO_EXPORT ssize_t folio_mapping_write(struct folio_mapping *m,
					 const void *buf, size_t len,
					 uint64_t pos);

/**
 * folio_mapping_read() - buffered read like pread(2): short at EOF, never
 * bytes beyond it.
 * @m:   the mapping.
 * @buf: receives the bytes (may be NULL when @len is 0).
 * @len: bytes wanted.
 * @pos: object position of the first byte.
 *
 * Missing blocks are read with as few engine requests as the layout
 * allows (runs merge across folios) and stay cached. A read that
 * continues a sequential stream (contiguous with, or at the same stride
 * as, one of a few recent reads) also starts readahead: the window
 * beyond it is read into large folios without waiting, and reaching a
 * marked folio of it starts the next, twice as large up to
 * @readahead_max (see folio_mapping_readahead() for what readahead
 * never does). Random reads never start readahead;
 * FOLIO_MAPPING_NO_READAHEAD turns it off. A read sees every
 * write that returned before it started, durable or not. In a pool a read
 * larger than the room it finds goes in pieces, waiting for room between
 * them like a write (a truncate in between shortens it to the new EOF).
 *
 * Context: any thread, concurrently with other calls on @m; takes io_lock
 * shared and locks up to 64 folios at a time in ascending position order
 * (waiting for a folio that readahead still reads drives a polled
 * engine's wait()); sleeps and does I/O (in a pool, also for room, as a
 * write does). The caller must hold no lock of a folio of @m.
 * Return: bytes read (0 at/after EOF; short when a later part cannot be
 * read); -EINVAL for NULL @m or NULL @buf with @len > 0; -EFBIG as for
 * folio_mapping_write(); when the first byte cannot be read: the error of
 * its read (as for folio_mapping_write()) or -ENOMEM.
 */
FOLIO_EXPORT ssize_t folio_mapping_read(struct folio_mapping *m, void *buf,
					size_t len, uint64_t pos);

/* ---- direct I/O ------------------------------------------------------ */

/* folio_mapping_write_direct() flags */
#define FOLIO_DIRECT_DSYNC 0x1u /* durable before the call returns, like
				 * O_DSYNC: FOLIO_IO_DURABLE requests when
				 * the engine takes them, else the write and
				 * then a flush */

/**
 * folio_mapping_write_direct() - write @len bytes at @pos straight from
 * @buf to the engine, like pwrite(2) on an O_DIRECT descriptor: no folio
 * holds them, the engine's requests point into @buf.
 * @m:     the mapping.
 * @buf:   the bytes; its address a multiple of FOLIO_ENGINE_DIRECT_ALIGN
 *         (what O_DIRECT engines require of memory, whatever the engine:
 *         aligned_alloc(FOLIO_ENGINE_DIRECT_ALIGN, ...) or folio memory
 *         qualifies). May be NULL when @len is 0.
 * @len:   bytes, a multiple of the mapping's block size.
 * @pos:   object position, a multiple of the block size.
 * @flags: 0 or FOLIO_DIRECT_DSYNC.
 *
 * One engine request per extent of the range (one in all without map()),
 * submitted together, then waited for.
 *
 * Coherence with the cache: before the I/O, every cached folio the range
 * touches is locked in turn, its writeback waited for, and its blocks
 * inside the range are superseded: dirty and unstable data there is
 * dropped unwritten (the direct write replaces it), cached copies are
 * dropped (no longer uptodate). After the I/O the range's clean blocks
 * are dropped again, so that a buffered read that raced in and read the
 * old bytes cannot leave them cached; a block a buffered write dirtied
 * meanwhile is kept (the two writes raced: the buffered one, written
 * back later, wins). Blocks outside the range keep their state. Buffered
 * reads and writes that start after the call returned see its bytes.
 * Overlapping concurrent direct writes may interleave per block, as
 * O_DIRECT writes do on ext4 and XFS.
 *
 * The fast path: an overwrite, [@pos, @pos + @len) inside both EOF and
 * the store's known size and, when the engine has map(), inside extents
 * the mapping's extent cache holds as written, takes io_lock shared and
 * calls no map(), changes no size, creates no folio: direct overwrites of
 * one mapping run in parallel with each other and with buffered I/O. The
 * extent cache is filled by the exclusive path's map() calls (written
 * extents, and unwritten ones once written) and forgotten past a
 * truncate's size, a discarding invalidate's new EOF and a failed
 * flush's redone truncate. It trusts that a written extent stays where
 * map() said until then: engines that move written data (copy on
 * write) need FOLIO_MAPPING_DIRECT_EXCLUSIVE. Everything else (growing
 * EOF, holes, unwritten extents, a cold cache) takes io_lock exclusively,
 * asks map() (which may allocate), writes, then grows EOF and the store's
 * size by what was written.
 *
 * Durability: as for buffered writes, the bytes are unstable until a
 * flush covers them: folio_mapping_sync() always flushes, so once a sync
 * that began after the call returned 0 they are durable. No copy is kept:
 * a flush that fails after the call returned may lose them, and that
 * sync (and every error cursor) reports it, but nothing writes them
 * again. With FOLIO_DIRECT_DSYNC they are durable when the call returns
 * with the full count; when the durable write's barrier fails (a failed
 * flush of the engine), the buffered bytes of @m that were written back
 * but not yet flushed are dirty again when the call returns, as after
 * any failed flush. A flush of the engine that fails while the write
 * is in flight (any mapping's) may have dropped it: the call then fails
 * with -EIO. A truncate of @m that no flush has made durable yet, to a
 * size below the range's end, is flushed first (a failed flush redoes
 * truncates by cutting the store there, which would cut this write's
 * bytes, and nothing could write them again).
 *
 * Context: any thread, concurrently with any other call on @m; takes
 * io_lock (shared or exclusive, see above), then each cached folio of the
 * range in turn; sleeps, does I/O (and a flush with FOLIO_DIRECT_DSYNC or
 * after such a truncate).
 * The caller must hold no lock of a folio of @m.
 * Return: bytes written: @len, or fewer when the engine wrote short or a
 * later extent's request failed (its error is recorded); -EINVAL for NULL
 * @m, NULL @buf with @len > 0, unknown @flags, or @pos, @len or @buf not
 * aligned as above (nothing changed); -EFBIG as for folio_mapping_write();
 * -EIO while the store's tail is stale after a failed flush whose redo
 * failed (the range reaches past it; the next sync retries the redo);
 * when a pending truncate (see above) could not be flushed in 8 tries:
 * the last flush's error, or -EAGAIN when truncates kept coming;
 * when no byte was written: the request's error (a map() or submit()
 * error, the engine's result), -EIO for a flush failure while in flight,
 * the barrier's or flush's error with FOLIO_DIRECT_DSYNC. Every failure
 * after the cache was touched is recorded for the error cursors.
 */
FOLIO_EXPORT ssize_t folio_mapping_write_direct(struct folio_mapping *m,
						const void *buf, size_t len,
						uint64_t pos, unsigned flags);

/**
 * folio_mapping_read_direct() - read into @buf straight from the engine,
 * like pread(2) on an O_DIRECT descriptor: short at EOF.
 * @m:   the mapping.
 * @buf: receives the bytes; aligned as for folio_mapping_write_direct().
 * @len: bytes, a multiple of the block size.
 * @pos: object position, a multiple of the block size.
 *
 * Dirty data the range covers is written back first (a writeback pass
 * over the range that waits, as folio_mapping_writeback() with
 * FOLIO_WB_WAIT), so the store holds every write that completed before
 * the call; blocks still dirty after the read (their writeback failed)
 * are then copied from the cache into @buf, so the result is what a
 * buffered read would return. The cache is not filled. Holes (map())
 * read as zeros without I/O, and so do bytes where the store is known
 * stale (see folio_mapping_read()). Bytes of @buf between EOF and the
 * end of the block holding it are zeroed; past that @buf is not written.
 *
 * Context: any thread, concurrently with any other call on @m; the
 * writeback pass, then io_lock shared for the reads; sleeps, does I/O.
 * The caller must hold no lock of a folio of @m.
 * Return: bytes read, min(@len, EOF - @pos), 0 at or past EOF; -EINVAL as
 * for folio_mapping_write_direct(); -EFBIG likewise; a request's or
 * map()'s error, -EIO for a short read.
 */
FOLIO_EXPORT ssize_t folio_mapping_read_direct(struct folio_mapping *m,
					       void *buf, size_t len,
					       uint64_t pos);

/**
 * folio_mapping_readahead() - start reading [@pos, @pos + @len) into the
 * cache without waiting for it, like posix_fadvise(POSIX_FADV_WILLNEED).
 * @m:   the mapping.
 * @pos: object position of the first byte.
 * @len: bytes wanted soon; 0 does nothing.
 *
 * The range is clamped to EOF and read in pieces of up to the mapping's
 * @readahead_max, into folios as large as alignment and max folio size
 * allow, with as few engine requests as the layout allows; it works with
 * FOLIO_MAPPING_NO_READAHEAD too. Readahead never waits and never
 * touches data it need not: it creates missing folios and fills the
 * missing blocks of clean folios it can lock at once; dirty folios,
 * folios under writeback and folios another thread holds locked are
 * skipped. In a pool it takes only room that is free or reclaimable at
 * once and stops where there is none (readahead folios enter the pool's
 * probationary queue, so unread ones go first). The folios stay locked
 * until their read completes (a reader of one waits for it); a failed
 * read marks nothing, so a later read reads those bytes itself and gets
 * them or the error.
 *
 * Context: any thread, concurrently with other calls on @m; takes io_lock
 * shared and only trylocks folio locks; allocates and submits engine
 * requests (a synchronous engine completes them before the call
 * returns). The caller must hold no lock of a folio of @m.
 * Return: 0 (also when the range lies past EOF or the pool has no room);
 * -EINVAL for NULL @m or a range reaching past FOLIO_MAX_POS; -ENOMEM
 * when nothing could be started for lack of memory.
 */
FOLIO_EXPORT int folio_mapping_readahead(struct folio_mapping *m,
					 uint64_t pos, uint64_t len);

/**
 * folio_mapping_write_begin() - zero-copy write: find or create the folio
 * holding @pos, lock it, make the partly covered edge blocks of [pos,
 * pos+len) valid, and return it referenced and locked.
 * @m:     the mapping.
 * @pos:   object position of the first byte to write.
 * @len:   bytes the caller means to write (> 0); only the part inside this
 *         folio is prepared.
 * @folio: receives the folio. Copy into folio_data(*folio) + (pos -
 *         folio_pos(*folio)), at most the returned number of bytes.
 *
 * Until write_end() the folio stays locked. Between the two calls the
 * calling thread must not call any other function of this mapping except
 * those folio_lock() lists, nor any function of another mapping of the
 * same pool: it could wait for its own folio, or for a truncate or a
 * pool's writeback that waits for it. In a pool, write_begin() may wait
 * for room and for dirty throttling like a write, before it locks
 * anything. Other threads are unaffected (a concurrent
 * truncate waits for the write_end()). write_end() may be called from
 * another thread.
 *
 * Context: any thread; takes io_lock shared (dropped before returning)
 * and the folio's lock (kept); sleeps and does I/O (edge reads; with
 * FOLIO_MAPPING_STABLE_WRITES, waiting for writeback). The caller must
 * hold no lock of a folio of @m.
 * Return: bytes of [pos, pos+len) inside this folio (>= 1); -EINVAL for
 * NULL @m or @folio, or @len 0; -EFBIG as for folio_mapping_write();
 * -ENOMEM; the edge read's error, as for folio_mapping_write().
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
 *
 * Context: any thread, once per write_begin(); never sleeps on I/O (it
 * may wait briefly for the index lock).
 * Return: the bytes committed: @copied, or less when a short copy ends
 * inside a block that write_begin() did not make valid (the count then
 * stops at that block's start, which may be 0). -EINVAL when @m or @folio
 * is NULL, @folio is not locked by a write_begin() on @m (a lock taken
 * with folio_lock() does not count), @pos differs from write_begin()'s or
 * @copied exceeds its count: nothing changes then, and the folio stays
 * locked and referenced until a valid write_end().
 */
FOLIO_EXPORT ssize_t folio_mapping_write_end(struct folio_mapping *m,
					     struct folio *folio,
					     uint64_t pos, size_t copied);

/**
 * folio_mapping_lookup() - the cached folio holding @pos, referenced (drop
 * it with folio_put()).
 * @m:     the mapping.
 * @pos:   object position.
 * @folio: receives the folio on success.
 *
 * Use it to inspect the folio (its state, its data under folio_lock());
 * change a mapping's data only through the mapping's write calls, which
 * also keep its dirty index: a bare folio_set_dirty() on it would never
 * be written back.
 *
 * Context: any thread, also while holding a folio lock of @m; takes the
 * index lock shared; never creates a folio, never sleeps on I/O.
 * Return: 0; -ENOENT when no folio caches @pos (also for @pos at or past
 * FOLIO_MAX_POS); -EINVAL for NULL @m or @folio.
 */
FOLIO_EXPORT int folio_mapping_lookup(struct folio_mapping *m, uint64_t pos,
				      struct folio **folio);

/**
 * folio_mapping_truncate() - set the object's size, in the backing store
 * and in the cache.
 * @m:    the mapping.
 * @size: the new size, at most FOLIO_MAX_POS.
 *
 * The engine is resized first (when shrinking, after writes in flight
 * past the new size ended): when its truncate() fails, the error is
 * returned and nothing changed, neither the size nor the cached bytes.
 * Only then does shrinking drop folios wholly past @size (their dirty
 * data too, as in a file; after their in-flight I/O ends), zero the tail
 * of the folio @size cuts and clean its blocks wholly past it. Growing
 * makes the new space read as zeros. The current size calls no engine.
 * Like a write, the resize is unstable until a flush covers it: a failed
 * flush redoes it (see folio_mapping_sync()).
 *
 * Context: any thread; takes io_lock exclusively (waiting for reads,
 * writes, writeback passes and invalidates of @m to leave; they wait for
 * it), then waits for readahead reads in flight, then locks each folio
 * past @size; sleeps and does I/O (the engine's truncate()). The caller must hold no lock of a folio of @m.
 * Return: 0; -EINVAL for NULL @m; -EFBIG for @size past FOLIO_MAX_POS; the
 * error of the engine's truncate() (a positive value: -EIO).
 */
FOLIO_EXPORT int folio_mapping_truncate(struct folio_mapping *m,
					uint64_t size);

#define FOLIO_INVALIDATE_DISCARD 0x1u /* also throw away dirty data */

/**
 * folio_mapping_invalidate() - drop cached folios overlapping [pos, pos+len)
 * (len 0: to the end), to release memory or to make the next reads fetch
 * the store's data.
 * @m:     the mapping.
 * @pos:   first byte of the range.
 * @len:   bytes in the range; 0 means up to FOLIO_MAX_POS.
 * @flags: 0 or FOLIO_INVALIDATE_DISCARD.
 *
 * Without FOLIO_INVALIDATE_DISCARD folios holding dirty or unstable
 * (written, not yet flushed) data are kept; with it, dirty and unstable
 * blocks wholly inside the range are thrown away (folios only partly
 * inside keep their other blocks). When discarded dirty data reached EOF,
 * EOF moves back to what the backing store will hold once the rest is
 * written back: the larger of the store's size as the mapping knows it
 * (opened with, grown by completed writes, set by truncate) and the end of
 * the last dirty block before @pos, at most @pos; bytes past the new EOF
 * are zeroed. The store itself is not changed.
 *
 * Context: any thread; takes io_lock exclusively (as truncate), waits for
 * readahead reads in flight, takes each folio's lock, and waits for their
 * writeback; sleeps, and calls no engine
 * callback but wait(). The caller must hold no lock of a folio of @m.
 * Return: 0; -EBUSY when, without FOLIO_INVALIDATE_DISCARD, folios were
 * kept (the others are still dropped; with it the call returns 0 even
 * when partly covered folios stay); -EINVAL for NULL @m or unknown
 * @flags; -ERANGE when @pos is past FOLIO_MAX_POS or @pos + @len
 * overflows or passes FOLIO_MAX_POS (nothing changed).
 */
FOLIO_EXPORT int folio_mapping_invalidate(struct folio_mapping *m,
					  uint64_t pos, uint64_t len,
					  unsigned flags);

/**
 * folio_mapping_size() - current EOF: the size given at creation, grown by
 * writes, set by truncate (and moved back by a discarding invalidate).
 * @m: the mapping.
 * Context: any thread, lock-free.
 * Return: the size (>= 0); -EINVAL for NULL @m.
 */
FOLIO_EXPORT int64_t folio_mapping_size(const struct folio_mapping *m);

#define FOLIO_STATS_SHIFTS 13 /* folio sizes 512 B << 0 .. 512 B << 12 */

struct folio_mapping_stats {
	size_t sz;               /* sizeof(struct folio_mapping_stats) */
	uint64_t bytes_written;  /* by the caller (write + write_end) */
	uint64_t bytes_read;     /* returned to the caller */
	uint64_t read_requests;  /* engine read requests that succeeded */
	uint64_t read_bytes;     /* bytes those requests read */
	uint64_t wb_requests;    /* engine write requests (writeback) */
	uint64_t wb_bytes;       /* bytes submitted for writeback */
	uint64_t wb_merges;      /* runs appended to an existing request */
	uint64_t map_calls;      /* calls of the engine's map() */
	uint64_t retries;        /* short writes resubmitted */
	uint64_t errors;         /* errors recorded: failed engine requests
				  * and flushes, failed wait() calls, and
				  * syncs that gave up on an engine that
				  * kept writing short */
	uint64_t flushes;        /* calls of the engine's flush() */
	uint64_t cached_bytes;   /* uptodate bytes in the cache */
	uint64_t dirty_bytes;    /* dirty bytes in the cache */
	uint64_t folios;         /* folios in the cache */
	uint64_t folios_by_shift[FOLIO_STATS_SHIFTS]; /* [k]: folios of
				  * 512 << k bytes */
	uint64_t unstable_bytes; /* written to the engine, not yet flushed:
				  * kept until a flush succeeds */
	/* Added later (a smaller @sz does not get them). */
	uint64_t readahead_bytes;  /* bytes readahead read (also counted in
				    * read_bytes) */
	uint64_t readahead_hits;   /* folios readahead brought in that a
				    * read then used (first use only) */
	uint64_t readahead_wasted; /* bytes of such folios that left the
				    * cache unread (evicted, truncated,
				    * invalidated) */
	/* Added later (a smaller @sz does not get them): direct I/O. */
	uint64_t direct_writes;      /* folio_mapping_write_direct() calls
				      * that did I/O */
	uint64_t direct_fast_writes; /* of those, overwrites under io_lock
				      * shared with no map() call */
	uint64_t direct_reads;       /* folio_mapping_read_direct() calls
				      * that did I/O */
	uint64_t direct_map_calls;   /* map() calls made by direct I/O (also
				      * counted in map_calls) */
	uint64_t direct_exclusive;   /* direct writes that took io_lock
				      * exclusively */
};

/**
 * folio_mapping_stats() - fill @st with the counters and a walk of the
 * cache (cached/dirty/unstable bytes, folios by size).
 * @m:  the mapping.
 * @st: receives the statistics, honouring @st->sz: fields past it are not
 *      written.
 *
 * Write amplification is wb_bytes / bytes_written.
 *
 * Context: any thread, also while holding a folio lock of @m; takes the
 * index lock shared and each folio's state lock briefly; no I/O. The
 * counters are read one at a time, so they need not agree exactly.
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
	size_t sz;             /* sizeof(struct folio_writeback_opts) */
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
 * @m:    the mapping.
 * @opts: range, mode and request limits; NULL for defaults (everything,
 *        no waiting).
 *
 * Walks the folios tagged dirty in position order; for each: lock, set
 * WRITEBACK, take its dirty runs (clearing them), clamp them to EOF and
 * append them to the request being built when they continue it in file
 * and device position within the limits, else submit it and start a new
 * one. Dirty runs thus merge across folios. A failed or short write puts
 * the dirty bits of the unwritten bytes back (unless the mapping has
 * FOLIO_MAPPING_DROP_ON_ERROR) and records the error for sync().
 * Completed writes leave their blocks unstable until a flush (see the
 * durability contract at the top); only sync flushes.
 *
 * Context: any thread; may run concurrently with reads, writes and other
 * writeback passes (a folio is never under two writes at once). Takes
 * io_lock shared and one folio lock at a time; submits I/O and may sleep
 * on a folio lock; with FOLIO_WB_WAIT it also sleeps until its writes and
 * those it waits for completed, driving a polled engine's wait() (a
 * failing wait() is recorded for sync). The caller must hold no lock of a
 * folio of @m.
 * Return: bytes submitted (>= 0); -EINVAL for NULL @m, a bad @opts->sz,
 * unknown flags, end < start, max_request below the mapping's block size,
 * or max_segments > 1024; -E2BIG for a larger @opts with non-zero unknown
 * bytes. Write errors are not returned here: they are reported by
 * folio_mapping_sync().
 */
FOLIO_EXPORT int64_t folio_mapping_writeback(
	struct folio_mapping *m, const struct folio_writeback_opts *opts);

/** An error cursor: each cursor sees each writeback error once. A plain
 * value, owned by its observer. */
typedef uint64_t folio_errseq_t;

/**
 * folio_mapping_err_cursor() - a cursor that will see every error recorded
 * from now on (like a file descriptor opened now).
 * @m: the mapping, or NULL.
 *
 * Keep one per observer (a checkpointer, a replication stream) and pass
 * its address to folio_mapping_sync(). Copying it makes a second observer
 * at the same point.
 *
 * Context: any thread, lock-free.
 * Return: the cursor; 0 for NULL.
 */
FOLIO_EXPORT folio_errseq_t folio_mapping_err_cursor(struct folio_mapping *m);

/**
 * folio_mapping_sync() - make everything written before the call durable:
 * write back all dirty data (waiting for folios already under writeback),
 * wait for all in-flight writes, flush, and report whether errors were
 * recorded since @cursor last looked.
 * @m:      the mapping.
 * @cursor: from folio_mapping_err_cursor(); it moves past every error it
 *          reports. NULL uses the mapping's own cursor, created with the
 *          mapping.
 *
 * If errors were recorded, the most recent one's errno is returned and
 * @cursor moves past all of them (like Linux's errseq: several errors
 * between two syncs are reported once).
 * Short writes are resubmitted within the call; data that still cannot be
 * written stays dirty (default policy) and is reported.
 * Flushes of one mapping run one at a time: a sync that arrives while
 * another thread's flush runs waits for it and then shares the next
 * flush, which began after its writes completed. A failed flush makes
 * every unstable block dirty again before its error is recorded, so no
 * later sync returns 0 until that data was written and flushed again; a
 * truncate no flush has covered yet is redone first.
 *
 * Context: any thread, concurrently with any call on @m but free; sleeps
 * and does I/O: writeback passes as with FOLIO_WB_WAIT, one engine flush
 * (or a wait for another thread's), and after a failed flush the redo of
 * pending truncates with io_lock held exclusively. The caller must hold no
 * lock of a folio of @m. A cursor is plain memory: two threads must not
 * pass the same one at once, and that includes the mapping's own cursor
 * (NULL).
 * Return: 0 means every byte written before the call is in the backing
 * store and flushed; otherwise the negative errno of the latest error
 * recorded since the cursor last looked (a failed or refused write, a
 * map() or allocation failure in writeback, a failing wait(), -EIO for an
 * engine that kept writing short, the flush's or a redone truncate's
 * error); -EINVAL for NULL @m.
 */
FOLIO_EXPORT int folio_mapping_sync(struct folio_mapping *m,
				    folio_errseq_t *cursor);

/**
 * folio_mapping_dirty_ranges() - call @fn(pos, len, @arg) for each maximal
 * dirty byte range overlapping [start, end), without writing or changing
 * anything.
 * @m:     the mapping.
 * @start: first byte of the range.
 * @end:   end of the range (exclusive); 0: no end.
 * @fn:    called for each range, merged across folios, in position order;
 *         ranges are whole blocks clamped to EOF. Returning non-zero stops
 *         the walk.
 * @arg:   passed to @fn.
 *
 * The ranges are a snapshot that other threads may change meanwhile.
 *
 * Context: any thread, also while holding a folio lock of @m; takes the
 * index lock shared and folio state locks briefly between calls of @fn,
 * which runs with no library lock held (only a reference to the folio
 * being walked), so @fn may call any mapping function; no I/O.
 * Return: 0; the first non-zero value @fn returned (iteration stops);
 * -EINVAL for NULL @m or @fn, or end < start.
 */
FOLIO_EXPORT int folio_mapping_dirty_ranges(
	struct folio_mapping *m, uint64_t start, uint64_t end,
	int (*fn)(uint64_t pos, uint64_t len, void *arg), void *arg);

/* ======================================================================
 * Layer 5: pools (a memory budget shared by mappings)
 * ======================================================================
 *
 * A pool holds the folios of any number of mappings (each with its own
 * engine, joined with folio_mapping_opts.pool) within one budget of folio
 * data bytes. The budget counts every folio a member mapping holds, in
 * any state (a folio counts its whole size from creation until it leaves
 * its mapping); headers, bitmaps and the pool's own tables are reported
 * apart, as metadata.
 *
 * Room: a new folio that does not fit reclaims clean, stable (written
 * and flushed, see the durability contract at the top), unlocked and
 * unreferenced folios of any member, chosen by S3-FIFO (Yang et al.,
 * SOSP 2023): new folios enter a small probationary queue (a tenth of
 * the budget); one found again by a later lookup moves to the main queue
 * when it reaches the end, the others are evicted and remembered as
 * ghosts, and a ghost that misses again enters the main queue directly;
 * main-queue folios that were found again go round again. A hit only
 * raises a 2-bit count in the folio; a reader or writer moving through a
 * folio in small steps counts once, so a one-pass scan stays in the small
 * queue and does not push out the main queue. A folio a thread holds
 * from folio_mapping_lookup() is referenced and never reclaimed; the
 * folio a thread merely used last is not held that way.
 *
 * When nothing is reclaimable, the writer (or reader) that needs room
 * writes back dirty data itself (oldest first), flushes the engines
 * holding unstable data, waits for write completions, and retries: a
 * budget it can wait for never makes a write fail, and a single write
 * larger than the budget completes, in pieces. Only when nothing in the
 * pool can be cleaned or freed (every folio locked or referenced, or its
 * writes keep failing) does the call give up with -ENOMEM.
 *
 * Dirty data (dirty plus under writeback): above @dirty_background the
 * flusher threads write back, a mapping at a time, round robin, oldest
 * dirty data first, in position order within a mapping, one request
 * (1 MiB) per turn; above @dirty_limit writers wait, woken as writes
 * complete, until it is below again. Without flusher threads a throttled
 * writer writes back itself, down to halfway between the thresholds.
 * Data dirty for longer than @dirty_expire_ms is written back by the
 * flushers whatever the amount (mapping by mapping: a mapping whose
 * first dirty byte since it was last clean is that old is written whole).
 * Flushers also flush engines when unstable data reaches
 * @dirty_background or room is wanted. Errors of writes and flushes the
 * pool started are recorded like any others and reported by the
 * mapping's next folio_mapping_sync().
 *
 * Thread rules: every pool function may be called from any thread at
 * any time, concurrently with anything done to its mappings, except
 * folio_pool_free(), which must be the last call.
 */
struct folio_pool;

#define FOLIO_POOL_MAX_FLUSHERS 64u
#define FOLIO_POOL_MAX_EXPIRE_MS 86400000u /* one day */

struct folio_pool_opts {
	size_t sz;
	uint64_t budget;           /* required: bytes of folio data */
	uint64_t dirty_background; /* 0: budget / 10 (or dirty_limit / 2
				    * when that is not below it) */
	uint64_t dirty_limit;      /* 0: budget / 5 */
	unsigned dirty_expire_ms;  /* 0: 30000 */
	unsigned flusher_threads;  /* 0: none, writers write back */
	unsigned flags;            /* none defined yet: 0 */
};

/**
 * folio_pool_new() - create a pool.
 * @out:  receives the pool on success.
 * @opts: required (@budget has no default). Zero fields take the
 *        defaults listed in struct folio_pool_opts.
 *
 * Flusher threads start at once and wake when dirty data passes
 * @dirty_background, and at least every @dirty_expire_ms / 2 (at least
 * every 10 ms, at most every second) to look for expired data.
 *
 * Context: any thread; allocates memory and starts the flusher threads.
 * Return: 0; -EINVAL for NULL @out or @opts, @opts->sz smaller than the
 * fields through @budget, @budget 0 or unknown @flags; -ERANGE for a
 * @budget below FOLIO_MIN_BLOCK_SIZE or above FOLIO_MAX_POS, @dirty_limit above
 * @budget, @dirty_background above the (default or given) limit,
 * @dirty_expire_ms above FOLIO_POOL_MAX_EXPIRE_MS or @flusher_threads
 * above FOLIO_POOL_MAX_FLUSHERS; -E2BIG for a larger @opts with non-zero
 * unknown bytes; -ENOMEM; the error of pthread_create(), negated, when a
 * flusher cannot start. Nothing is created on error.
 */
FOLIO_EXPORT int folio_pool_new(struct folio_pool **out,
				const struct folio_pool_opts *opts);

/**
 * folio_pool_free() - stop the flushers and free the pool.
 * @p: the pool (NULL is accepted).
 *
 * Context: the last call on the pool, when no other thread uses it;
 * joins the flusher threads (each finishes the request it is writing).
 * Return: 0 (also for NULL); -EBUSY while a mapping still uses it
 * (nothing changed: free the mappings first).
 */
FOLIO_EXPORT int folio_pool_free(struct folio_pool *p);

struct folio_pool_stats {
	size_t sz;
	/* The settings in force (defaults applied). */
	uint64_t budget, dirty_background, dirty_limit, dirty_expire_ms;
	uint64_t flusher_threads;
	uint64_t mappings;         /* member mappings */
	uint64_t cached_bytes;     /* folio data charged to the budget */
	uint64_t dirty_bytes;      /* dirty blocks (not those only under
				    * writeback) */
	uint64_t writeback_bytes;  /* bytes of write requests in flight */
	uint64_t unstable_bytes;   /* written, not yet flushed */
	uint64_t metadata_bytes;   /* folio headers and bitmaps, index
				    * nodes, the pool's queues and ghosts;
				    * the per-block bitmaps of folios of
				    * more than 32 blocks, kept outside
				    * their headers while not wholly
				    * uptodate and clean, for the whole
				    * process */
	uint64_t small_bytes, main_bytes; /* the two S3-FIFO queues */
	uint64_t hits;             /* folio lookups of reads and writes
				    * that found the folio */
	uint64_t misses;           /* ... that allocated it */
	uint64_t ghost_hits;       /* misses on recently evicted keys */
	uint64_t reclaimed_bytes, reclaimed_folios;
	uint64_t throttle_waits;   /* writers that waited above the limit */
	uint64_t throttle_ns;      /* time they waited, in total */
	uint64_t memory_waits;     /* calls that waited for room */
	uint64_t memory_wait_ns;
	uint64_t flusher_passes;   /* flusher steps (one request each) */
	uint64_t flusher_bytes;    /* bytes the flushers submitted */
	uint64_t flushes;          /* engine flushes the pool started */
	/* Added later (smaller @sz: not filled). Free folio memory (data
	 * and headers) held in the library's per-thread caches, for the
	 * whole process, not this pool: outside every budget, like
	 * metadata_bytes; about 64 KiB per data size class in use per
	 * thread at most. */
	uint64_t thread_cache_bytes;
	/* Added later. The library allocator's own resident pages, for the
	 * whole process: the headers describing each 2 MiB chunk of folio
	 * memory (4 to 12 KiB a chunk of small blocks), the unused rest of pages that hold small
	 * objects (folio headers among them), free folio memory that keeps
	 * its pages for reuse (at most about 2 MiB inside chunks in use;
	 * wholly free 2 MiB regions: two for good, any others until they
	 * have gone unused for a second). Outside every budget, like
	 * metadata_bytes, which counts objects, not the pages they sit in.
	 * cached_bytes + metadata_bytes + thread_cache_bytes +
	 * allocator_bytes is what the library's memory costs in RSS when
	 * this pool is the process's only one. */
	uint64_t allocator_bytes;
};

/**
 * folio_pool_stats() - the pool's byte counts, settings and counters.
 * @p:  the pool.
 * @st: receives them, honouring @st->sz (fields past it are not written).
 *
 * The byte counts are exact whenever no operation is running: each is
 * the sum over the member mappings (dirty_bytes and unstable_bytes that
 * of their folio_mapping_stats() fields, cached_bytes the sizes of their
 * folios); while operations run they may be a moment behind.
 *
 * Context: any thread, any time; takes the pool's lock and each member's
 * index lock shared, briefly; no I/O.
 * Return: 0; -EINVAL for NULL arguments or @st->sz < sizeof(size_t);
 * -E2BIG for a larger struct whose unknown bytes are not zero.
 */
FOLIO_EXPORT int folio_pool_stats(struct folio_pool *p,
				  struct folio_pool_stats *st);

/**
 * folio_pool_shrink() - give memory back now (e.g. on a memory-pressure
 * signal).
 * @p:     the pool.
 * @bytes: how much to give back.
 *
 * Reclaims clean, stable, unused folios of the pool's mappings, by the
 * same policy as reclaim for room, until @bytes were given back. When
 * unstable data keeps it short, the engines holding it are flushed (then
 * it is reclaimable); dirty data is not written for it. Whole folios go,
 * so the last one may take the count past @bytes. Then the library's
 * allocator gives the kernel the pages of its free memory (the calling
 * thread's cache of free folios included), so RSS drops at once.
 *
 * Context: any thread, any time, holding no write_begin() folio of the
 * pool's mappings; may run engine flushes and madvise().
 * Return: the bytes given back (0 for @bytes 0); -EINVAL for NULL @p.
 */
FOLIO_EXPORT int64_t folio_pool_shrink(struct folio_pool *p, uint64_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* FOLIO_STATE_H */
