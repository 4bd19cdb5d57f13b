/* SPDX-License-Identifier: MIT */
/*
 * The mem engine's private definitions, shared by its files:
 *   mem.c           the engine callbacks, the data path, the public calls
 *                   that configure it (map, stats, peek/poke)
 *   store.c         the sparse chunk store and the map's geometry
 *   volatile.c      the volatile write cache (an ordered log over the
 *                   durable store), flush and power cuts
 *   fault.c         fault rules
 *   sched.c         the pseudo-random generator, held requests, the
 *                   completion thread, wait() and mode switches
 *
 * One mutex (mem_ctx.lock) guards everything. Completion callbacks run
 * without it: the library may submit from a completion, and that submit
 * takes the lock. Functions below whose name ends in _locked need the caller
 * to hold it; the others take it themselves.
 */
#ifndef FOLIO_ENGINE_MEM_H
#define FOLIO_ENGINE_MEM_H

#include <pthread.h>

#include "folio_state_mem.h"
#include "engines/builtin.h"

/*
 * Sparse storage indexed by device position: a top table of leaves, each
 * leaf a table of 64 KiB chunks. Memory follows the data written, so a
 * 2^40 capacity costs only the top table (4096 pointers) until used.
 */
#define MEM_CHUNK_SHIFT 16
#define MEM_CHUNK_SIZE ((size_t)1 << MEM_CHUNK_SHIFT)
#define MEM_LEAF_SHIFT 12
#define MEM_LEAF_ENTRIES ((size_t)1 << MEM_LEAF_SHIFT)
#define MEM_LEAF_SPAN_SHIFT (MEM_CHUNK_SHIFT + MEM_LEAF_SHIFT)

#define MEM_MAX_RULES 64
/* sizeof(struct folio_mem_fault) before the flags field was added. */
#define MEM_FAULT_SZ_V0 SIZEOF_THROUGH(struct folio_mem_fault, short_len)
#define MEM_MAX_ERRNO 4095

struct mem_leaf {
	size_t used; /* chunks allocated in this leaf */
	unsigned char *chunk[MEM_LEAF_ENTRIES];
};

struct mem_rule {
	struct folio_mem_fault f;
	uint64_t seen; /* matching calls so far */
};

/* A request waiting for completion and the outcome fixed at submit time:
 * bytes to move, or a negative errno. */
struct mem_held {
	struct folio_io *io;
	ssize_t plan;
	uint64_t power_gen; /* mem_ctx.power_gen at submit: a power cut since
			     * then means the request never lands */
	int barrier;    /* set by mem_perform_locked(): a durable write's
			 * failed barrier after its full transfer */
	int applied_error; /* FOLIO_MEM_FAULT_APPLIED: transfer in full,
			    * then complete with this error */
};

/* One entry of the volatile log: a completed write (data follows) or a
 * truncate, in file positions, in completion order. */
struct mem_log {
	struct mem_log *next;
	bool truncate;
	uint64_t pos;  /* write: file position; truncate: the new size */
	size_t len;    /* write: bytes of data[] */
	unsigned char data[];
};

struct mem_ctx {
	pthread_mutex_t lock;
	pthread_cond_t work_cv;     /* completion thread: work or stop */
	pthread_cond_t progress_cv; /* completions finished, mode switched */

	uint64_t capacity;
	uint64_t size;  /* what reads see: durable size with the log applied */
	uint64_t dsize; /* durable size (equals size while the log is empty) */
	struct mem_leaf **top;
	size_t ntop;
	uint64_t mem_bytes;

	/* The volatile write cache. */
	bool volatile_on;
	bool powered_off;
	uint64_t power_gen; /* power cuts so far */
	struct mem_log *log_head, **log_tail;
	uint64_t log_bytes, log_ops;

	uint64_t extent_size; /* 0: no map */
	bool scatter;
	struct folio_engine *engine;

	struct mem_rule rules[MEM_MAX_RULES];
	unsigned nrules;

	enum folio_mem_mode mode;
	uint64_t rng;
	struct mem_held *held;
	size_t nheld, held_cap;
	uint64_t inflight;    /* accepted, completion not yet returned */
	uint64_t inflight_writes; /* the writes among them */
	unsigned completing;  /* requests taken out whose callback runs */
	uint64_t completions; /* progress counter for waiters */
	bool switching;
	bool closing;

	pthread_t thread;
	bool thread_running;
	bool thread_stop;

	struct folio_mem_stats st;
};

/* The context of a mem engine, or NULL for NULL or another kind. */
struct mem_ctx *mem_of(struct folio_engine *e);

/* ---- mem.c -------------------------------------------------------- */

/* Move the data of a held request as its plan says (lock held); the plan
 * becomes the completion result, with the barrier's outcome beside it. */
void mem_perform_locked(struct mem_ctx *c, struct mem_held *h);

/* ---- store.c ------------------------------------------------------- */

/* Device bytes the store must be able to hold for a map. */
uint64_t mem_dev_limit(uint64_t capacity, uint64_t extent_size,
		       bool scatter);
int mem_store_reserve(struct mem_ctx *c, uint64_t limit);
void mem_store_read(struct mem_ctx *c, uint64_t dev, void *buf, size_t len);
/* Returns the bytes stored: less than @len only when memory ran out. */
size_t mem_store_write(struct mem_ctx *c, uint64_t dev, const void *buf,
		       size_t len);
void mem_store_free(struct mem_ctx *c);

uint64_t mem_map_dev(const struct mem_ctx *c, uint64_t pos);
/* Does io go where the map says? */
bool mem_directed(const struct mem_ctx *c, const struct folio_io *io);

/* Durable bytes at file positions [pos, pos+len) into buf (zeros past
 * the durable size), through the map. */
void mem_durable_read_locked(struct mem_ctx *c, uint64_t pos, void *buf,
			     size_t len);
/* Write durable bytes at file positions, growing the durable size; on
 * -ENOMEM nothing past the old durable size is left behind. */
int mem_durable_write_locked(struct mem_ctx *c, uint64_t pos, const void *buf,
			     size_t len);
/* Shrink (zeroing and freeing what lies past) or grow the durable size. */
void mem_durable_resize_locked(struct mem_ctx *c, uint64_t size);

/* ---- volatile.c ---------------------------------------------------- */

/* Log a completed write of the first @n bytes of @io's data, or a
 * truncate. -ENOMEM changes nothing. */
int mem_log_write_locked(struct mem_ctx *c, const struct folio_io *io,
			 size_t n);
int mem_log_truncate_locked(struct mem_ctx *c, uint64_t size);
/* Lay the log over bytes [pos, pos+len) of what a read got from the
 * durable store. */
void mem_log_overlay_locked(struct mem_ctx *c, uint64_t pos,
			    const struct iovec *iov, int iovcnt, size_t len);
/* Make the log durable in order. 0, or -ENOMEM with the
 * entries not yet applied still logged. */
int mem_log_apply_locked(struct mem_ctx *c);
/* Discard the log: reads see the durable store again. */
void mem_log_discard_locked(struct mem_ctx *c);
void mem_log_free(struct mem_ctx *c);

/* ---- fault.c ------------------------------------------------------- */

/* The rule that fires on this call, or NULL. */
const struct folio_mem_fault *mem_fault_check_locked(struct mem_ctx *c,
						     unsigned opbit,
						     const struct folio_io *io);

/* ---- sched.c ------------------------------------------------------- */

void mem_seed(struct mem_ctx *c, uint64_t seed);
/* Room for one more held request; -ENOMEM. */
int mem_held_reserve_locked(struct mem_ctx *c);
/* Complete every held request with @err (lock held on entry, released on
 * return). */
void mem_fail_held(struct mem_ctx *c, ssize_t err);
/* Deliver one completion decided under the lock, then account for it. */
void mem_deliver_one(struct mem_ctx *c, const struct mem_held *h);
int mem_wait(void *arg);
void mem_stop_thread(struct mem_ctx *c);
void *mem_thread_main(void *arg);

#endif
