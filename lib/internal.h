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

#include "folio_state.h"
#include "spinlock.h"

#define container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

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

/* ---- folio ---------------------------------------------------------- */

/* Folio flag bits (struct folio.flags). */
#define FOLIO_F_UPTODATE 0x01u
#define FOLIO_F_DIRTY 0x02u
#define FOLIO_F_WRITEBACK 0x04u
#define FOLIO_F_LOCKED 0x08u
#define FOLIO_F_WAITERS 0x10u  /* someone sleeps on the flags word */
#define FOLIO_F_REMOVED 0x20u  /* no longer in its mapping's index */

/*
 * Header is 48 bytes on LP64; the per-block state follows in the same
 * allocation: bits [0, N) uptodate, [N, 2N) dirty. With N == 1 there is no
 * bitmap at all and the UPTODATE/DIRTY flags are the state.
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

/* Flags word helpers. Waking is folded into clearing: whoever clears a bit
 * that someone may sleep on clears WAITERS with it and wakes everyone;
 * sleepers that still cannot proceed set WAITERS again. */
void folio_clear_flag_wake(struct folio *f, unsigned bit);
void folio_wait_flag_clear(struct folio *f, unsigned bit);

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
 * engine's wait() when it has one. Returns the first error or 0. */
int io_group_wait(struct io_group *g, struct folio_engine *e);

#endif
