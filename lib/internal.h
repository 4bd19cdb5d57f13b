/* SPDX-License-Identifier: MIT */
/*
 * Definitions shared by the library's modules (and white-box tests). Not
 * installed.
 */
#ifndef FOLIO_INTERNAL_H
#define FOLIO_INTERNAL_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "folio_state.h"
#include "spinlock.h"

#define container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/*
 * Thread-local variables on the hot path. The default model for a shared
 * library reaches them through a __tls_get_addr() call (a third of the
 * overhead of a 1 KiB cached write); initial-exec is a plain %fs-relative
 * load. It takes a few bytes of the static TLS space that glibc keeps
 * spare for libraries loaded later with dlopen().
 */
#if defined(__GNUC__) || defined(__clang__)
#define TLS_FAST __attribute__((tls_model("initial-exec")))
#else
#define TLS_FAST
#endif

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static inline bool is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

static inline unsigned ilog2_u64(uint64_t x)
{
	return 63u - (unsigned)__builtin_clzll(x);
}

/* Largest position any object may reach; keeps pos + len from overflowing
 * and fits an int64_t/ssize_t return. */
#define FOLIO_MAX_POS (UINT64_C(1) << 62)

/*
 * The sized-struct idiom of every options, ops and stats struct (libbpf's
 * OPTS_VALID): a caller built against an older header passes a smaller sz
 * and gets defaults for the fields it lacks; a newer caller's larger
 * struct is accepted when every byte past what this library knows is
 * zero, and refused with -E2BIG otherwise, so a field the library does
 * not know is never silently ignored. Below `min` (the fields every
 * caller must have) is -EINVAL.
 */
static inline int sized_check(const void *p, size_t sz, size_t min,
			      size_t known)
{
	if (!p || sz < min)
		return -EINVAL;
	for (size_t i = known; i < sz; i++)
		if (((const unsigned char *)p)[i])
			return -E2BIG;
	return 0;
}

/* offsetof + sizeof of a member: the size a struct must have to hold it. */
#define SIZEOF_THROUGH(type, member) \
	(offsetof(type, member) + sizeof(((type *)0)->member))

/* ---- folio ---------------------------------------------------------- */

/* Folio flag bits (struct folio.flags). */
#define FOLIO_F_UPTODATE 0x01u
#define FOLIO_F_DIRTY 0x02u
#define FOLIO_F_WRITEBACK 0x04u
#define FOLIO_F_LOCKED 0x08u
#define FOLIO_F_WAITERS 0x10u  /* someone sleeps on the flags word */
#define FOLIO_F_REMOVED 0x20u  /* no longer in its mapping's index */
#define FOLIO_F_UNSTABLE 0x40u /* some block is written but not yet flushed */
#define FOLIO_F_WRITE_BEGIN 0x80u /* LOCKED was taken by write_begin() */

/*
 * Header is 64 bytes on LP64; the per-block state follows in the same
 * allocation: bits [0, N) uptodate, [N, 2N) dirty, [2N, 3N) unstable
 * (written, not yet flushed). With N == 1 there is no bitmap at all and
 * the UPTODATE/DIRTY/UNSTABLE flags are the state.
 */
struct folio {
	atomic_uint flags;
	atomic_uint refcount;
	spinlock_t state_lock;
	uint8_t size_shift;
	uint8_t block_shift;
	uint16_t nblocks_minus1; /* N - 1: N = 4096 must fit */
	uint64_t pos;
	unsigned char *data;
	/* Write I/O accounting with a bias (see writeback.c). */
	atomic_llong wb_pending;
	/* The mapping that indexes this folio (NULL for bare folios). */
	struct folio_mapping *mapping;
	/* The newest flush epoch in which a write of this folio completed
	 * (see folio_mark_unstable()); under state_lock. */
	uint64_t unstable_epoch;
	/* What write_begin() prepared: write_end() accepts nothing else.
	 * Valid while FOLIO_F_WRITE_BEGIN is set (under the folio lock). */
	uint32_t begin_off, begin_len;
	uint64_t state[];
};

static inline size_t folio_nblocks(const struct folio *f)
{
	return (size_t)f->nblocks_minus1 + 1;
}

/* folio_new() without the zero-fill: the mapping fills (or reads) every
 * byte before it marks it uptodate, and zeroing a 2 MiB folio that a write
 * is about to overwrite would double the cost of large writes. */
int folio_alloc(struct folio **out, uint64_t pos, size_t size,
		size_t block_size, bool zero);

/* folio_take_dirty() of the runs at or after byte `from` only: writeback
 * resumes behind the runs it already queued, so bytes that a failed
 * inline completion put back are left for the next pass instead of being
 * taken (and failed) again forever. */
int folio_take_dirty_from(struct folio *f, size_t from,
			  struct folio_range *runs, size_t max_runs);

/* Number of uptodate, dirty and unstable blocks (statistics). */
void folio_count_blocks(struct folio *f, size_t *uptodate, size_t *dirty,
			size_t *unstable);

/*
 * Unstable blocks: bytes a completed write put in the backing store that
 * no flush has yet made durable. They are clean, but the cache must keep
 * them until a flush that began after their write completed succeeds,
 * and make them dirty again when a flush fails. `epoch` is the mapping's
 * flush epoch read when the write completed.
 */
#define FOLIO_BECAME_UNSTABLE 4 /* internal: the folio had no unstable block */
/* Mark the blocks touched by [off, off+len) unstable. Returns
 * FOLIO_BECAME_UNSTABLE or 0. */
int folio_mark_unstable(struct folio *f, size_t off, size_t len,
			uint64_t epoch);
/* A flush that began in `epoch` succeeded: forget the unstable blocks
 * when every write behind them completed in `epoch` or earlier. Returns
 * whether the folio still has unstable blocks. */
bool folio_stabilize(struct folio *f, uint64_t epoch);
/* A flush failed: every unstable block becomes dirty again. Returns
 * FOLIO_BECAME_DIRTY when the folio was clean before, else 0. */
int folio_redirty_unstable(struct folio *f);
/* Forget the unstable state of blocks wholly inside [off, off+len) (the
 * data is gone: truncated or discarded). */
void folio_forget_unstable(struct folio *f, size_t off, size_t len);

static inline bool folio_test_unstable(const struct folio *f)
{
	return atomic_load_explicit(&((struct folio *)f)->flags,
				    memory_order_acquire) & FOLIO_F_UNSTABLE;
}

/* Flags word helpers. Waking is folded into clearing: whoever clears a bit
 * that someone may sleep on clears WAITERS with it and wakes everyone;
 * sleepers that still cannot proceed set WAITERS again. */
void folio_clear_flag_wake(struct folio *f, unsigned bit);
void folio_wait_flag_clear(struct folio *f, unsigned bit);
/* As folio_wait_flag_clear() but gives up after `timeout` (NULL: never);
 * returns whether the bit is clear. */
bool folio_wait_flag_clear_for(struct folio *f, unsigned bit,
			       const struct timespec *timeout);

/* Range checks shared by every public entry point. */
static inline int folio_check_range(const struct folio *f, size_t off,
				    size_t len)
{
	if (!f)
		return -EINVAL;
	size_t size = (size_t)1 << f->size_shift;
	if (off > size || len > size - off)
		return -ERANGE;
	return 0;
}

/* ---- engine --------------------------------------------------------- */

enum engine_kind {
	ENGINE_USER = 0,
	ENGINE_POSIX,
	ENGINE_URING,
	ENGINE_MEM,
};

struct folio_engine {
	struct folio_engine_ops ops;
	void *ctx;
	enum engine_kind kind;
	atomic_uint users; /* mappings attached */
};

/* Allocate an engine of a built-in kind (the kind lets kind-specific calls
 * such as folio_engine_mem_inject() refuse other engines). */
int engine_create(struct folio_engine **out,
		  const struct folio_engine_ops *ops, void *ctx,
		  enum engine_kind kind);

/*
 * Library-side wrapper of every request. The engine sees only `io`;
 * folio_io_complete() finds the wrapper and calls end_io.
 */
struct fs_io {
	struct folio_io io;
	void (*end_io)(struct fs_io *rq, ssize_t result);
};

/*
 * A group of requests someone waits for. Each submitted request adds one;
 * io_group_done() subtracts one and wakes the waiter at zero. The bias of
 * one held by the submitter keeps the count from reaching zero before the
 * last request is submitted.
 */
struct io_group {
	atomic_uint pending;
	atomic_int error; /* first error seen, 0 if none */
};

void io_group_init(struct io_group *g);
void io_group_add(struct io_group *g);
void io_group_done(struct io_group *g, int error);
/* Drop the submitter's bias and wait for every request, driving the
 * engine's wait() when it has one. Returns the first request error, else
 * wait()'s error, else 0. */
int io_group_wait(struct io_group *g, struct folio_engine *e);

/*
 * Sleep until done(arg), where whoever makes it true wakes the sleeper
 * that sleep(arg, timeout) puts to sleep (timeout NULL: no limit). A
 * polled engine is driven through its wait(); as wait() returns at once
 * when the engine has nothing in flight (the last request may still be
 * being built elsewhere), the loop then sleeps briefly instead of
 * spinning. Returns 0, or the first error wait() returned (the wait
 * still lasts until done(arg)).
 */
int engine_wait_until(struct folio_engine *e, bool (*done)(void *arg),
		      void (*sleep)(void *arg, const struct timespec *t),
		      void *arg);

/* How long a waiter driving a polled engine sleeps between wait() calls
 * that made no progress for it. */
#define ENGINE_POLL_BACKOFF_NS 100000

/* ---- helpers of the built-in engines -------------------------------- */

#include <string.h>
#include <sys/uio.h>

/* Sanity check of a request handed to a built-in engine: a known op, an
 * iovec array whose lengths add up to len, and a range below
 * FOLIO_MAX_POS in file and device position (so offsets fit off_t and
 * results fit ssize_t). */
static inline int engine_check_io(const struct folio_io *io)
{
	if (!io || (io->op != FOLIO_IO_READ && io->op != FOLIO_IO_WRITE) ||
	    io->iovcnt < 0 || (io->iovcnt && !io->iov) ||
	    io->pos > FOLIO_MAX_POS || io->len > FOLIO_MAX_POS - io->pos ||
	    io->dev_pos > FOLIO_MAX_POS ||
	    io->len > FOLIO_MAX_POS - io->dev_pos)
		return -EINVAL;
	size_t sum = 0;
	for (int i = 0; i < io->iovcnt; i++) {
		size_t l = io->iov[i].iov_len;
		if ((l && !io->iov[i].iov_base) || l > io->len - sum)
			return -EINVAL;
		sum += l;
	}
	return sum == io->len ? 0 : -EINVAL;
}

/* O_DIRECT rule: device position, length and every segment's base and
 * length are multiples of @align. */
static inline bool engine_io_aligned(const struct folio_io *io, size_t align)
{
	if ((io->dev_pos | io->len) & (align - 1))
		return false;
	for (int i = 0; i < io->iovcnt; i++)
		if (((uintptr_t)io->iov[i].iov_base | io->iov[i].iov_len) &
		    (align - 1))
			return false;
	return true;
}

/* Zero bytes [from, to) of the data an iovec array describes (a read that
 * met end of file). */
static inline void engine_iov_zero(const struct iovec *iov, int cnt,
				   size_t from, size_t to)
{
	size_t at = 0;
	for (int i = 0; i < cnt && at < to; i++) {
		size_t l = iov[i].iov_len, s = MAX(from, at), e = MIN(to, at + l);
		if (s < e)
			memset((char *)iov[i].iov_base + (s - at), 0, e - s);
		at += l;
	}
}

/* Describe the data of @iov from byte @skip on in at most @max entries of
 * @dst, leaving @iov untouched (it belongs to the caller). Returns the
 * number of entries used (0 when nothing is left). */
static inline int engine_iov_window(const struct iovec *iov, int cnt,
				    size_t skip, struct iovec *dst, int max)
{
	int i = 0, n = 0;
	while (i < cnt && skip >= iov[i].iov_len)
		skip -= iov[i++].iov_len;
	for (; i < cnt && n < max; i++) {
		if (iov[i].iov_len <= skip)
			continue;
		dst[n].iov_base = (char *)iov[i].iov_base + skip;
		dst[n].iov_len = iov[i].iov_len - skip;
		skip = 0;
		n++;
	}
	return n;
}

#endif
