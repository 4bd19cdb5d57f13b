/* SPDX-License-Identifier: MIT */
/*
 * Engine requests as the mapping builds and tracks them (request.c).
 */
#ifndef FOLIO_MAPPING_REQUEST_H
#define FOLIO_MAPPING_REQUEST_H

#include "mapping/mapping.h"

/* Request limits when the caller sets none. */
#define RQ_DEFAULT_MAX_BYTES ((size_t)1 << 20)
#define RQ_DEFAULT_MAX_SEGS 256u

struct rq_seg {
	struct folio *folio;
	struct index_place at; /* where the folio sits (writeback) */
	size_t off;
	size_t len;
};

/* A request as the mapping tracks it. */
struct mapping_io {
	struct engine_io base;
	struct folio_mapping *m;
	struct io_group *group; /* woken at completion, or NULL */
	struct mapping_io *next; /* the builder's list of submitted requests */
	ssize_t result;
	/* The engine's flush_failures when a write was submitted: a flush
	 * failing while it is in flight may have dropped its data. */
	uint64_t flush_failures;
	unsigned nsegs;
	unsigned cap;      /* room in iov[] and segs[] */
	unsigned max_segs; /* the builder's limit */
	struct rq_seg *segs;
	struct iovec iov[];
};

/* Last extent returned by the engine's map(), so consecutive runs inside
 * one extent cost no callback. */
struct map_cache {
	bool valid;
	struct folio_extent ext;
};

struct rq_builder {
	struct folio_mapping *m;
	enum folio_io_op op;
	size_t max_bytes;
	unsigned max_segs;
	size_t merge_gap;
	void (*end_io)(struct engine_io *rq, ssize_t result);
	struct io_group *group;
	struct map_cache map;
	/* Where the folio being added sits in the index (writeback: its
	 * completion changes tags through it), else unset. */
	struct index_place at;
	struct mapping_io *cur;
	/* FOLIO_IO_WAITED (or 0 when the engine does not take it) on every
	 * request: the caller waits for the group right after the batch
	 * (rqb_set_waited()). */
	uint32_t waited;
	/* Submitted requests, when the caller keeps them (reads): it walks
	 * and frees them after the group completes. */
	bool keep;
	struct mapping_io *submitted;
	uint64_t submitted_bytes;
	unsigned submitted_count;
	uint64_t added; /* bytes of folio runs queued for I/O so far */
	int error; /* first submission or map error */
};

void rqb_init(struct rq_builder *b, struct folio_mapping *m,
	      enum folio_io_op op, struct io_group *group,
	      void (*end_io)(struct engine_io *, ssize_t));

/* The caller waits for the builder's group right after it finished the
 * batch, calling the engine's wait(): tell an engine that takes the hint
 * (FOLIO_IO_WAITED) that it may leave a lone request for that wait(). */
static inline void rqb_set_waited(struct rq_builder *b)
{
	b->waited = engine_waited_flag(b->m->engine);
}

/*
 * Add folio bytes [off, off+len) to the request being built, starting a
 * new request when the run is not contiguous with it in file and device
 * position or would break a limit. For reads, runs in a hole extent are
 * zero-filled in place and need no I/O. Returns 0 or a negative errno
 * (map() failure, -ENOMEM); on error the run was not added.
 */
int rqb_add(struct rq_builder *b, struct folio *f, size_t off, size_t len);

/* Submit the request being built, if any. */
void rqb_submit(struct rq_builder *b);

/* Finish the batch (submit + unplug the engine). */
void rqb_finish(struct rq_builder *b);

void mapping_io_free(struct mapping_io *io);

/* Resolve pos through the engine's map() (identity without one). On
 * return [pos, pos + *avail) is device-contiguous at *dev with *flags. */
int mapping_map_extent(struct folio_mapping *m, struct map_cache *mc,
		       uint64_t pos, uint64_t len, uint64_t *dev,
		       uint64_t *avail, uint32_t *flags);

#endif
